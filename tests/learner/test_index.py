"""The de-duplication and amendment index is bounded by the staleness bound and rebuilt from the ledger."""

import time

from learner.advantages import AdvantageParams
from learner.batching import Limits, plan
from learner.checkpoint import Ledger
from learner.consumer import Consumed
from learner.index import SessionIndex
from learner.loop import ledger_entry
from tests.learner.conftest import rewarded

PARAMS = AdvantageParams(min_count=1)


def step(index: SessionIndex, ledger: Ledger, batch, offset: int, now: float, parent: str | None = None):
    """Plan one micro-batch against the index, write its ledger lines and remember them (as the loop does)."""
    limits = Limits(parent, frozenset({"v1", "v2", "v3", "v4", "v5", "v6", "v7"}), 2, 4096, 3600.0, now)
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
    index = SessionIndex(max_staleness=2, max_staleness_s=3600.0)
    now = time.time()
    group = [rewarded(f"s{i}", float(i % 2), task_id="t0") for i in range(4)]
    assert step(index, ledger, group, 0, now) == ["trained"] * 4
    assert step(index, ledger, [group[0], rewarded("s1", 0.0, task_id="t0", revision=1)], 4, now) == [
        "duplicate",
        "amended",
    ]
    assert len(index) == 4 and index.live_from() == 0

    later = now + 3601.0  # every session above is older than max_staleness_s now
    assert index.evict(later, 0) == 4 and len(index) == 0
    assert index.live_from() == ledger.path.stat().st_size  # a restart reads nothing before here
    again = [group[0], rewarded("s1", 0.0, task_id="t0", revision=2)]
    assert step(index, ledger, again, 6, later) == ["stale", "stale"]  # not duplicate/amended, not trained


def test_sessions_behind_the_version_bound_are_forgotten(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    index = SessionIndex(max_staleness=2, max_staleness_s=3600.0)
    now = time.time()
    old = [rewarded(f"o{i}", float(i % 2), task_id="t0", version="v1") for i in range(2)]
    new = [rewarded(f"n{i}", float(i % 2), task_id="t1", version="v3") for i in range(2)]
    step(index, ledger, old, 0, now, parent="v1")
    step(index, ledger, new, 2, now, parent="v3")
    assert index.evict(now, 3) == 0  # v1 is 2 versions behind v3: within the bound
    assert index.evict(now, 4) == 2 and index.view(["o0", "o1"]) == ({}, set())
    assert set(index.view(["n0", "n1"])[0]) == {"n0", "n1"}
    assert step(index, ledger, [old[0]], 4, now, parent="v4") == ["stale"]


def test_the_index_rebuilt_from_live_from_equals_the_live_one(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    index = SessionIndex(max_staleness=2, max_staleness_s=3600.0)
    now = time.time()
    ids = []
    for b in range(6):
        batch = [rewarded(f"b{b}-{i}", float(i % 2), task_id=f"t{b}", version=f"v{b + 1}") for i in range(3)]
        ids += [rs.session_id for rs in batch]
        step(index, ledger, batch, 3 * b, now, parent=f"v{b + 1}")
        index.evict(now, b + 1)
    assert len(index) == 9  # the last three versions' sessions
    start, end = index.live_from(), ledger.path.stat().st_size
    assert 0 < start < end
    rebuilt = SessionIndex.rebuild(ledger.path, start, end, 2, 3600.0)
    rebuilt.evict(now, 6)
    assert rebuilt.view(ids) == index.view(ids) and len(rebuilt) == len(index)
    assert rebuilt.live_from() == start
