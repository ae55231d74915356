"""rewards.metrics: the worker's counters, moved once per batch, say what per-record counting said."""

import random

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from rewards.metrics import REWARD_BUCKETS, LoopHistogram, Metrics


@pytest.mark.parametrize("buckets", [REWARD_BUCKETS, (0.25, 0.5, 1.0, 2.5)])
def test_the_lock_free_histogram_exposes_what_prometheus_histogram_does(buckets):
    rng = random.Random(7)
    values = [rng.uniform(-4, 4) for _ in range(500)] + [float(b) for b in buckets] + [-9.0, 9.0]
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    loop = LoopHistogram("ratchet_test_reward", "Scalar reward", buckets, registry=ours)
    reference = Histogram("ratchet_test_reward", "Scalar reward", buckets=buckets, registry=theirs)
    for v in values:
        loop.observe(v)
        reference.observe(v)

    def samples(registry):
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect()
            for s in family.samples
            if not s.name.endswith("_created")
        }

    got, want = samples(ours), samples(theirs)
    # buckets, +Inf, count, and the sum when no bound is negative
    assert got.keys() == want.keys() and len(got) == len(buckets) + 2 + (min(buckets) >= 0)
    for key, value in want.items():
        assert abs(got[key] - value) < 1e-9, key
    assert b'ratchet_test_reward_bucket{le="0.5"}' in generate_latest(ours)


def test_a_batch_of_rewarded_records_counts_each_revision_reward_and_flag():
    m = Metrics()
    m.rewarded([(0, 1.0, []), (0, -1.0, ["test_tampering"]), (1, 0.5, []), (4, 0.0, ["test_tampering", "x"])])
    m.rewarded([(2, 2.0, [])])
    assert [m.value("ratchet_rewards_rewarded_total", revision=r) for r in ("0", "1", "2", "3+")] == [
        2,
        1,
        1,
        1,
    ]
    assert m.value("ratchet_rewards_amendments_total") == 3
    assert m.value("ratchet_rewards_flags_total", kind="test_tampering") == 2
    assert m.value("ratchet_rewards_flags_total", kind="x") == 1
    assert m.value("ratchet_rewards_reward_count") == 5
    assert m.value("ratchet_rewards_reward_bucket", le="0.0") == 2  # -1.0 and 0.0: a bound is inclusive
