import json
import multiprocessing

import pytest

from gating.decisions import DecisionLog, Entry, LogError, State, fallback, next_state, past_champions


def record(log: DecisionLog, version: str, action: str, decision: str, i: int = 0) -> Entry:
    with log.locked() as entries:
        state = entries[-1].state if entries else State()
        return log.append(
            Entry(
                decision_id=f"d-{len(entries)}-{i}",
                version=version,
                action=action,
                decision=decision,
                actor="gate" if action == "evaluate" else "alice",
                reasons=[],
                champion_before=state.champion,
                state=next_state(entries, version, action, decision),
                content_hash=None if version == "base" else f"sha256:{version}",
                run_id="r",
            )
        )


def test_entries_round_trip_and_carry_the_state_they_lead_to(tmp_path):
    log = DecisionLog(tmp_path / "decisions.jsonl")
    assert log.state() == State() and log.entries() == []
    record(log, "v1", "evaluate", "reject")
    assert log.state() == State(champion=None, challenger="v1")
    record(log, "v2", "evaluate", "promote")
    assert log.state() == State(champion="v2", challenger=None)
    again = DecisionLog(tmp_path / "decisions.jsonl")
    assert [e.version for e in again.entries()] == ["v1", "v2"]
    assert again.latest_for("v2", "evaluate").champion_before is None
    assert again.find("d-1-0").version == "v2"
    line = json.loads((tmp_path / "decisions.jsonl").read_text().splitlines()[1])
    assert line["at"].endswith("Z") and line["state"] == {"champion": "v2", "challenger": None}


def test_a_torn_last_line_is_ignored_then_cut_before_the_next_append(tmp_path):
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path)
    record(log, "v1", "evaluate", "promote")
    with path.open("a") as fh:
        fh.write('{"decision_id": "d-torn", "version": "v2", "act')
    assert [e.version for e in log.entries()] == ["v1"]
    record(log, "v3", "evaluate", "promote")
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x) for x in lines)
    assert log.state().champion == "v3"


def test_manual_reject_of_the_champion_hands_back_to_the_one_it_replaced(tmp_path):
    log = DecisionLog(tmp_path / "d.jsonl")
    record(log, "v1", "evaluate", "promote")
    record(log, "v2", "evaluate", "promote")
    record(log, "v3", "evaluate", "reject")
    assert log.state() == State("v2", "v3")
    record(log, "v3", "reject", "reject")
    assert log.state() == State("v2", None)
    record(log, "v2", "reject", "reject")
    assert log.state() == State("v1", None)
    record(log, "v1", "reject", "reject")
    assert log.state() == State(None, None)


def test_fallback_skips_champions_rejected_since(tmp_path):
    log = DecisionLog(tmp_path / "d.jsonl")
    record(log, "v1", "evaluate", "promote")
    record(log, "v2", "evaluate", "promote")
    record(log, "v3", "approve", "promote")
    record(log, "v2", "reject", "reject")  # v2 is not champion: only marked rejected
    assert log.state().champion == "v3"
    assert fallback(log.entries(), "v3") == "v1"
    record(log, "v3", "reject", "reject")
    assert log.state().champion == "v1"


def test_rollback_and_approve(tmp_path):
    log = DecisionLog(tmp_path / "d.jsonl")
    record(log, "v1", "evaluate", "promote")
    record(log, "v2", "evaluate", "reject")
    record(log, "v2", "approve", "promote")
    assert log.state() == State("v2", None)
    assert past_champions(log.entries()) == {"base", "v1", "v2"}
    record(log, "v1", "rollback", "promote")
    assert log.state() == State("v1", None)
    record(log, "base", "rollback", "promote")
    assert log.state() == State(None, None)


def _append_many(path, worker):
    log = DecisionLog(path)
    for i in range(20):
        record(log, f"v{worker}", "evaluate", "reject", i)


def test_concurrent_writers_never_interleave_lines(tmp_path):
    path = tmp_path / "d.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(path, w)) for w in range(1, 4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    lines = path.read_text().splitlines()
    assert len(lines) == 60 and len({json.loads(x)["decision_id"] for x in lines}) == 60


def test_a_promotion_on_trial_is_confirmed_or_rolled_back_to_the_champion_before_it(tmp_path):
    entries: list[Entry] = []

    def add(version, action, decision, canary=False):
        state = entries[-1].state if entries else State()
        after = next_state(entries, version, action, decision, canary)
        entries.append(
            Entry(f"d{len(entries)}", version, action, decision, "gate", [], state.champion, after)
        )
        return after

    assert add("v1", "evaluate", "promote") == State("v1", None, None)  # no canary asked for
    assert add("v2", "evaluate", "promote", canary=True) == State("v2", None, "v2")
    assert add("v3", "evaluate", "reject") == State("v2", "v3", "v2")  # still on trial
    assert add("v2", "canary", "promote") == State("v2", "v3", None)  # confirmed
    assert add("v4", "approve", "promote", canary=True) == State("v4", None, "v4")
    assert add("v2", "rollback", "promote") == State("v2", None, None)  # the judge rolled v4 back
    with pytest.raises(LogError, match="not on trial"):
        next_state(entries, "v4", "canary", "promote")
    assert add("v5", "evaluate", "promote", canary=True) == State("v5", None, "v5")
    with pytest.raises(LogError, match="ends in promote"):
        next_state(entries, "v5", "canary", "reject")
    assert add("v5", "reject", "reject") == State("v2", None, None)  # rejected by hand: the trial ends
    log = DecisionLog(tmp_path / "decisions.jsonl")
    for entry in entries:
        log.append(entry)
    assert [e.state for e in log.entries()] == [e.state for e in entries]
    lines = [json.loads(line) for line in log.path.read_text().splitlines()]
    assert lines[1]["state"]["canary"] == "v2" and "canary" not in lines[0]["state"]
