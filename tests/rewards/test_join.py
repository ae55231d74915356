"""The join state machine, without Kafka: emissions, amendments, orphans, offsets, restarts."""

import json
import random

import pytest

from ingest import topics
from ingest.examples import example_feedback, example_outcome, example_session
from rewards.join import Emitted, JoinRules, Partition

S, F, OUT = topics.SESSIONS, topics.FEEDBACK, topics.OUTCOMES
SEC = 1000


def rules(**changes) -> JoinRules:
    base = dict(join_wait_s=10, amend_window_s=60, orphan_ttl_s=30, expect_feedback=True, expect_outcome=True)
    return JoinRules(**{**base, **changes})


def session(sid: str, outcome: bool = True, feedback: bool = False, tenant: str = "acme"):
    return example_session(
        session_id=sid,
        tenant=tenant,
        outcome=example_outcome(sid, tenant, outcome_id=f"o-{sid}") if outcome else None,
        feedback=example_feedback(sid, tenant, feedback_id=f"fi-{sid}") if feedback else None,
    )


def test_expected_signals_in_emit_revision_0_at_once():
    part = Partition(0, rules())
    part.add_session(0, 1 * SEC, session("a", outcome=True, feedback=False), now_ms=1 * SEC)
    assert part.ready() == []  # feedback is expected too
    part.add_feedback(0, 2 * SEC, example_feedback("a", feedback_id="f1"), now_ms=2 * SEC)
    (emission,) = part.ready()
    assert emission.revision == 0
    assert [f.feedback_id for f in emission.feedback] == ["f1"]
    assert emission.emitted == Emitted(0, frozenset({"f1"}), frozenset({"o-a"}))
    assert part.sweep(now_ms=100 * SEC) == ([], [])  # nothing more is due


def test_the_wait_expires_and_a_later_signal_amends():
    part = Partition(0, rules(), now_ms=0)
    part.add_session(0, 1 * SEC, session("a"), now_ms=1 * SEC)
    assert part.ready() == []
    assert part.sweep(now_ms=10 * SEC) == ([], [])  # wait ends at 11 s
    (first,), _ = part.sweep(now_ms=11 * SEC)
    assert (first.revision, first.feedback) == (0, ())
    part.add_feedback(0, 20 * SEC, example_feedback("a", feedback_id="f1"), now_ms=20 * SEC)
    (amended,) = part.ready()
    assert amended.revision == 1
    assert amended.emitted.feedback_ids == {"f1"} and amended.emitted.outcome_ids == {"o-a"}
    part.add_outcome(1, 21 * SEC, example_outcome("a", outcome_id="o2"), now_ms=21 * SEC)
    (again,) = part.ready()
    assert again.revision == 2 and [o.outcome_id for o in again.outcomes] == ["o2"]


def test_no_expectations_emit_on_arrival():
    part = Partition(0, rules(expect_feedback=False, expect_outcome=False))
    part.add_session(0, 0, session("a", outcome=False), now_ms=0)
    assert [e.revision for e in part.ready()] == [0]


def test_a_signal_before_its_session_waits_for_it():
    part = Partition(0, rules())
    part.add_feedback(0, 1 * SEC, example_feedback("a", feedback_id="f1"), now_ms=1 * SEC)
    assert part.ready() == [] and part.counts() == (0, 1, 0)
    part.add_session(0, 2 * SEC, session("a"), now_ms=2 * SEC)
    (emission,) = part.ready()
    assert emission.emitted.feedback_ids == {"f1"} and part.counts() == (1, 0, 0)


def test_an_orphan_expires_to_a_dead_letter_with_its_reason():
    part = Partition(0, rules(orphan_ttl_s=30))
    feedback = example_feedback("ghost", feedback_id="f1")
    part.add_feedback(0, 1 * SEC, feedback, now_ms=1 * SEC)
    assert part.sweep(now_ms=30 * SEC) == ([], [])
    _, (rejection,) = part.sweep(now_ms=31 * SEC)
    assert rejection.kind == "orphan_expired"
    assert "no session ghost arrived within orphan_ttl_s=30" in rejection.reason
    assert rejection.payload == feedback.to_json() and rejection.session_id == "ghost"
    assert part.counts() == (0, 0, 0)


def test_a_signal_after_the_join_closed_is_a_late_dead_letter():
    part = Partition(0, rules(join_wait_s=10, amend_window_s=60, orphan_ttl_s=30))
    part.add_session(0, 0, session("a", feedback=True), now_ms=0)
    assert [e.revision for e in part.ready()] == [0]
    part.sweep(now_ms=70 * SEC)  # closes at 10 + 60 s
    assert part.counts() == (0, 0, 1)
    part.add_feedback(0, 71 * SEC, example_feedback("a", feedback_id="f-late"), now_ms=71 * SEC)
    assert part.ready() == []
    emissions, (rejection,) = part.sweep(now_ms=101 * SEC)
    assert emissions == [] and rejection.kind == "late_signal"
    assert "arrived after its join closed (amend_window_s=60)" in rejection.reason


def test_duplicates_change_nothing():
    part = Partition(0, rules())
    part.add_session(0, 0, session("a", feedback=True), now_ms=0)
    assert len(part.ready()) == 1
    part.add_session(1, 1, session("a", feedback=True), now_ms=1)
    part.add_feedback(0, 2, example_feedback("a", feedback_id="fi-a"), now_ms=2)  # same id as in-line
    part.add_outcome(0, 3, example_outcome("a", outcome_id="o-a"), now_ms=3)
    assert part.ready() == []
    assert part.committable() == {S: 0, F: 1, OUT: 1}  # the duplicates are not held


def test_tenant_mismatch_is_rejected():
    part = Partition(0, rules())
    part.add_outcome(0, 0, example_outcome("a", tenant="other", outcome_id="o-x"), now_ms=0)
    (rejection,) = part.add_session(0, 1, session("a", tenant="acme", outcome=False), now_ms=1)
    assert rejection.kind == "tenant_mismatch" and "tenant 'other'" in rejection.reason
    (rejection,) = part.add_feedback(0, 2, example_feedback("a", tenant="evil", feedback_id="f1"), now_ms=2)
    assert rejection.kind == "tenant_mismatch"


def test_committable_offsets_stay_at_the_oldest_open_join():
    part = Partition(0, rules(join_wait_s=1, amend_window_s=5))
    part.add_session(10, 0, session("a", feedback=True), now_ms=0)
    part.add_session(11, 3 * SEC, session("b", feedback=True), now_ms=3 * SEC)
    part.add_feedback(20, 4 * SEC, example_feedback("b", feedback_id="f1"), now_ms=4 * SEC)
    part.ready()
    assert part.committable() == {S: 10, F: 20}  # outcomes never read: no offset for it
    part.sweep(now_ms=6 * SEC)  # "a" closes at 6 s
    assert part.committable() == {S: 11, F: 20}
    part.sweep(now_ms=9 * SEC)  # "b" closes at 9 s
    assert part.committable() == {S: 12, F: 21}


def test_floor_is_the_rewarded_end_when_the_oldest_join_opened():
    part = Partition(0, rules(join_wait_s=1, amend_window_s=5, orphan_ttl_s=2), rewarded_end=100)
    part.add_session(0, 0, session("a", feedback=True), now_ms=0)
    part.ready()
    part.produced(100)
    part.add_session(1, 1 * SEC, session("b", feedback=True), now_ms=1 * SEC)
    part.produced(101)
    assert part.floor() == 100
    part.sweep(now_ms=6 * SEC)  # "a" closes but is remembered (a replay may still re-read it) ...
    assert part.floor() == 100
    part.sweep(now_ms=8 * SEC)  # ... until orphan_ttl_s later
    assert part.floor() == 101


def test_clock_follows_busy_topics_then_the_wall_clock():
    part = Partition(0, rules(clock_idle_s=2), now_ms=1000 * SEC)
    assert part.clock(1001 * SEC) == 0  # nothing read yet: the replay has not begun
    part.add_session(0, 500 * SEC, session("a"), now_ms=1001 * SEC)
    part.add_feedback(0, 400 * SEC, example_feedback("x"), now_ms=1001 * SEC)
    assert part.clock(1002 * SEC) == 400 * SEC  # the slowest busy topic
    assert part.clock(1004 * SEC) == 1004 * SEC  # everything quiet: the wall clock


def test_an_emitted_session_is_kept_as_bytes_and_parsed_again_to_amend():
    part = Partition(0, rules())
    original = session("a", feedback=True)
    part.add_session(0, 0, original, now_ms=0, raw=original.to_json())
    (first,) = part.ready()
    assert first.session == original
    assert part.joins["a"].session.parsed is None and part.joins["a"].session.raw == original.to_json()
    part.add_feedback(0, 1, example_feedback("a", feedback_id="f2"), now_ms=1)
    (amended,) = part.ready()
    assert amended.session == original and amended.revision == 1


def test_a_replayed_join_waits_for_the_signals_of_its_last_revision():
    history = {"a": (Emitted(1, frozenset({"f1"}), frozenset({"o-a"})), 7, 0)}
    part = Partition(0, rules(), rewarded_end=50, history=history)
    assert part.floor() == 7
    part.add_session(0, 0, session("a"), now_ms=0)
    part.add_outcome(0, 1, example_outcome("a", outcome_id="o2"), now_ms=1)
    assert part.ready() == []  # f1 is not re-read yet: no amendment without it
    part.add_feedback(0, 2, example_feedback("a", feedback_id="f1"), now_ms=2)
    (emission,) = part.ready()
    assert emission.revision == 2
    assert emission.emitted == Emitted(2, frozenset({"f1"}), frozenset({"o-a", "o2"}))


# --- restarts: crash at random moments, replay from the committed offsets -----------------------


def make_inputs(rng: random.Random, n_sessions: int):
    """Sessions over ~60 s, each with 0-2 late signals within 20 s (some before the session)."""
    logs = {S: [], F: [], OUT: []}
    signals = {}
    for i in range(n_sessions):
        sid = f"s{i}"
        t = rng.randrange(0, 60_000)
        inline = rng.random() < 0.5
        logs[S].append((t, session(sid, outcome=inline)))
        signals[sid] = {("outcome", f"o-{sid}")} if inline else set()
        for j in range(rng.choice([0, 1, 2])):
            ts = max(0, t + rng.randrange(-3_000, 20_000))
            if rng.random() < 0.5:
                logs[F].append((ts, example_feedback(sid, feedback_id=f"f{j}-{sid}")))
                signals[sid].add(("feedback", f"f{j}-{sid}"))
            else:
                logs[OUT].append((ts, example_outcome(sid, outcome_id=f"o{j}-{sid}")))
                signals[sid].add(("outcome", f"o{j}-{sid}"))
    for log in logs.values():
        log.sort(key=lambda item: item[0])
    return logs, signals


def run_with_crashes(seed: int, n_sessions: int = 80, crashes: int = 4):
    rng = random.Random(seed)
    jr = rules(join_wait_s=5, amend_window_s=30, orphan_ttl_s=20, clock_idle_s=1)
    logs, signals = make_inputs(rng, n_sessions)
    rewarded: list = []  # what the worker produced: (session_id, Emitted, ts) or None for a marker
    committed, floor = {}, 0
    now = 0
    crash_steps = sorted(rng.sample(range(50, 900), crashes))
    rejections = []
    while True:
        # Assignment: a marker, then the history from the committed floor up to it.
        rewarded.append(None)
        history = {}
        for offset in range(floor, len(rewarded)):
            if rewarded[offset] is not None:
                sid, emitted, ts = rewarded[offset]
                if sid not in history or history[sid][0].revision < emitted.revision:
                    history[sid] = (emitted, offset, ts)
        part = Partition(0, jr, rewarded_end=len(rewarded), history=history, now_ms=now)
        position = {t: committed.get(t, 0) for t in logs}
        crash_at = crash_steps.pop(0) if crash_steps else None
        step = 0
        while True:
            step += 1
            now += 100
            for topic in rng.sample(list(logs), 3):  # topics read in a random interleaving
                for _ in range(rng.randrange(0, 8)):
                    if position[topic] >= len(logs[topic]) or logs[topic][position[topic]][0] > now:
                        break
                    ts, record = logs[topic][position[topic]]
                    if topic == S:
                        rejections += part.add_session(position[topic], ts, record, now, raw=record.to_json())
                    else:
                        add = part.add_feedback if topic == F else part.add_outcome
                        rejections += add(position[topic], ts, record, now)
                    position[topic] += 1
            emissions, rejected = part.sweep(now)
            rejections += rejected
            for e in emissions:
                rewarded.append((e.session.session_id, e.emitted, now))
                part.produced(len(rewarded) - 1)
            if step == crash_at:
                now += rng.randrange(
                    0, 15_000
                )  # killed: nothing since the last commit survives; down a while
                break
            if step % 7 == 0:
                committed.update(part.committable())
                floor = part.floor()
            if crash_at is None and now > 200_000:
                return rewarded, signals, rejections


@pytest.mark.parametrize("seed", range(20))
def test_crashes_never_duplicate_or_lose_a_revision(seed):
    rewarded, signals, rejections = run_with_crashes(seed)
    assert rejections == []  # every signal came within its windows
    by_session: dict[str, list[Emitted]] = {}
    for entry in rewarded:
        if entry is not None:
            by_session.setdefault(entry[0], []).append(entry[1])
    assert set(by_session) == set(signals)  # none lost
    for sid, revisions in by_session.items():
        assert [e.revision for e in revisions] == list(range(len(revisions))), sid  # each revision once
        for before, after in zip(revisions, revisions[1:], strict=False):
            assert before.signals < after.signals, sid  # an amendment adds signals, never loses one
        assert revisions[-1].signals == signals[sid], sid  # the last revision has every signal


def test_an_amendment_carries_the_same_session_as_revision_0():
    """Kept as JSON between revisions, a session whose JSON omitted created_at (it defaults to the
    time of parsing) is kept serialised, so every revision embeds the same session."""
    from ingest.contract import Session, parse

    whole = session("a", outcome=True).model_dump(mode="json")
    whole.pop("created_at")
    raw = json.dumps(whole).encode()
    part = Partition(0, rules(expect_feedback=False), now_ms=0)
    part.add_session(0, 0, parse(Session, raw), now_ms=0, raw=raw)
    (first,) = part.ready()
    part.add_feedback(0, SEC, example_feedback("a", feedback_id="f1"), now_ms=SEC)
    (amendment,) = part.ready()
    assert amendment.revision == 1
    assert amendment.session == first.session
    assert parse(Session, amendment.session_json) == first.session
    assert first.session_json != raw  # serialised again, with the created_at it was given


def test_a_stamped_session_is_kept_as_it_was_ingested():
    raw = b" " + session("a", outcome=True).to_json()
    part = Partition(0, rules(expect_feedback=False), now_ms=0)
    from ingest.contract import Session, parse

    part.add_session(0, 0, parse(Session, raw), now_ms=0, raw=raw)
    (first,) = part.ready()
    assert first.session_json == raw
