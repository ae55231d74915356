import math

import pytest

from ingest.examples import example_session
from learner.advantages import (
    Advantage,
    AdvantageParams,
    FamilyStats,
    Scored,
    amended,
    observe,
    score,
    task_family,
)


def test_group_baseline_scores_sessions_of_one_task_against_each_other():
    params = AdvantageParams(min_group_size=2)
    items = [Scored("acme", "t1", "t", r) for r in (1.0, 0.0, 0.0)] + [Scored("acme", "t2", "t", 0.5)] * 2
    advantages, _ = score(items, {}, params)
    std = math.sqrt(2 / 9)  # rewards 1, 0, 0: mean 1/3
    assert [a.value for a in advantages[:3]] == pytest.approx([(2 / 3) / std, (-1 / 3) / std, (-1 / 3) / std])
    assert {a.source for a in advantages} == {"group"}
    assert [a.value for a in advantages[3:]] == [0.0, 0.0]  # an all-equal group carries no signal


def test_running_baseline_per_tenant_and_family_with_normalisation():
    params = AdvantageParams(baseline_decay=0.5, min_count=2, std_floor=0.1)
    baselines = observe(observe({}, "acme/calc", 1.0, 0.5), "acme/calc", 0.0, 0.5)
    # decay ½: mean 1 → 0.5; var ½·(0 + (−1)·(−½)) = ¼
    assert baselines["acme/calc"] == FamilyStats(count=2, mean=0.5, var=0.25)
    items = [Scored("acme", "calc-9", "calc", 1.0), Scored("other", "calc-9", "calc", 1.0)]
    advantages, after = score(items, baselines, params)
    assert advantages[0] == Advantage(1.0, 0.5, 0.5, "running")  # (1 − 0.5) / 0.5
    assert advantages[1].source == "warmup" and advantages[1].value == 0.0  # another tenant: no baseline yet
    assert after["acme/calc"].count == 3 and after["other/calc"].count == 1
    assert after["acme/calc"].mean == pytest.approx(0.75)


def test_advantages_are_clipped_and_the_std_has_a_floor():
    params = AdvantageParams(min_count=1, std_floor=0.1, clip=3.0)
    baselines = {"acme/t": FamilyStats(count=5, mean=0.0, var=0.0)}
    (adv,), _ = score([Scored("acme", None, "t", 1.0)], baselines, params)
    assert adv.scale == 0.1 and adv.value == 3.0


def test_task_family():
    assert task_family(example_session(task_id="calc-17")) == "calc"
    assert task_family(example_session(task_id="lookup_3")) == "lookup"
    assert task_family(example_session(task_id=None)) == "default"
    assert task_family(example_session(task_id="calc-17", metadata={"task_family": "arith"})) == "arith"


def test_amended_reward_is_scored_against_the_baseline_used_in_training():
    params = AdvantageParams(clip=5.0)
    trained = Advantage(value=-1.0, baseline=0.5, scale=0.5, source="running")
    assert amended(trained, 1.0, params) == Advantage(1.0, 0.5, 0.5, "running")
    assert amended(Advantage(0.0, 0.0, 1.0, "warmup"), 1.0, params).value == 0.0


def test_negative_advantages_are_scaled_by_their_weight_positive_ones_are_not():
    items = [Scored("acme", "t1", "t", r) for r in (1.0, 0.0, 0.0, 0.0)]
    full, _ = score(items, {}, AdvantageParams())
    for weight in (0.0, 0.25):
        scaled, _ = score(items, {}, AdvantageParams(negative_weight=weight))
        assert scaled[0].value == full[0].value > 0
        assert [a.value for a in scaled[1:]] == pytest.approx([weight * a.value for a in full[1:]])
    running = AdvantageParams(min_count=1, negative_weight=0.5)
    baselines = {"acme/t": FamilyStats(count=5, mean=0.5, var=0.25)}
    (adv,), _ = score([Scored("acme", None, "t", 0.0)], baselines, running)
    assert adv.value == pytest.approx(-0.5)  # (0 − 0.5) / 0.5, halved
    trained = Advantage(value=1.0, baseline=0.5, scale=0.5, source="running")
    assert amended(trained, 0.0, running).value == pytest.approx(-0.5)  # an amendment is weighted the same
