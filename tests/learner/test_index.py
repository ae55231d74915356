"""The de-duplication and amendment index is bounded by the time bound and rebuilt from the ledger."""

import time
from datetime import UTC, datetime

from learner.advantages import AdvantageParams
from learner.batching import Limits, plan
from learner.checkpoint import Ledger
from learner.consumer import Consumed
from learner.index import SessionIndex
from learner.loop import ledger_entry
from tests.learner.conftest import rewarded

PARAMS = AdvantageParams(min_count=1)


def step(index: SessionIndex, ledger: Ledger, batch, offset: int, now: float, head: str | None = None):
    """Plan one micro-batch against the index, write its ledger lines and remember them (as the loop does)."""
    limits = Limits(head, frozenset({"v1", "v2", "v3", "v4", "v5", "v6", "v7"}), 2, 4096, 3600.0, now)
    trained, seen = index.view(rs.session_id for rs in batch)
    result = plan(batch, trained, seen, {}, limits, PARAMS)
    records = [Consumed(0, offset + i, b"") for i in range(len(batch))]
    entries = [
        ledger_entry(r, o, 1 if result.train else None) for r, o in zip(records, result.outcomes, strict=True)
    ]
    start = ledger.path.stat().st_size
    index.remember(entries, start, ledger.append(entries))
    return [o.kind for o in result.outcomes]


def test_stale_sessions_are_forgotten_and_their_records_are_still_never_trained(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    index = SessionIndex(max_staleness_s=3600.0)
    now = time.time()
    group = [rewarded(f"s{i}", float(i % 2), task_id="t0") for i in range(4)]
    assert step(index, ledger, group, 0, now) == ["trained"] * 4
    assert step(index, ledger, [group[0], rewarded("s1", 0.0, task_id="t0", revision=1)], 4, now) == [
        "duplicate",
        "amended",
    ]
    assert len(index) == 4 and index.live_from() == 0

    later = now + 3601.0  # every session above is older than max_staleness_s now
    assert index.evict(later) == 4 and len(index) == 0
    assert index.live_from() == ledger.path.stat().st_size  # a restart reads nothing before here
    again = [group[0], rewarded("s1", 0.0, task_id="t0", revision=2)]
    assert step(index, ledger, again, 6, later) == ["stale", "stale"]  # not duplicate/amended, not trained


def test_sessions_beyond_the_version_bound_are_remembered_for_when_the_head_comes_back(tmp_path):
    """Versions from the head is no bound on memory: after a rebase on the champion, a session that
    was too many versions behind is close again, and a late revision of one already trained is an
    amendment (its update is corrected), not a fresh session trained a second time."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    index = SessionIndex(max_staleness_s=3600.0)
    now = time.time()
    old = [rewarded(f"o{i}", float(i % 2), task_id="t0", version="v1") for i in range(2)]
    assert step(index, ledger, old, 0, now, head="v1") == ["trained", "trained"]
    late = rewarded("o1", 0.0, task_id="t0", version="v1", revision=1)
    assert step(index, ledger, [late], 2, now, head="v4") == ["stale"]  # v4 is 3 versions from v1
    assert index.evict(now) == 0 and set(index.view(["o0", "o1"])[0]) == {"o0", "o1"}
    later = rewarded("o1", 0.0, task_id="t0", version="v1", revision=2)
    assert step(index, ledger, [later, old[0]], 3, now, head="v1") == ["amended", "duplicate"]


def created(rs, at: float):
    return rs.model_copy(
        update={"session": rs.session.model_copy(update={"created_at": datetime.fromtimestamp(at, UTC)})}
    )


def test_the_index_rebuilt_from_live_from_equals_the_live_one(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    index = SessionIndex(max_staleness_s=3600.0)
    now = time.time()
    ids, forgotten = [], 0
    for b in range(6):  # one batch every 1000 s: at the end the first two are over an hour old
        at = now - 5400.0 + 1000.0 * b
        batch = [created(rewarded(f"b{b}-{i}", float(i % 2), task_id=f"t{b}"), at) for i in range(3)]
        ids += [rs.session_id for rs in batch]
        step(index, ledger, batch, 3 * b, at + 1.0)
        forgotten += index.evict(at + 1.0)
    forgotten += index.evict(now)
    assert forgotten == 6 and len(index) == 12 and index.view(ids[:6]) == ({}, set())
    start, end = index.live_from(), ledger.path.stat().st_size
    assert 0 < start < end
    rebuilt = SessionIndex.rebuild(ledger.path, start, end, 3600.0)
    rebuilt.evict(now)
    assert rebuilt.view(ids) == index.view(ids) and len(rebuilt) == len(index)
    assert rebuilt.live_from() == start
