import json
import multiprocessing

from gating.decisions import DecisionLog, Entry, State, fallback, next_state, past_champions


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
