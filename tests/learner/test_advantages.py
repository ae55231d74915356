"""Advantages: group and running baselines per signal, families of real task ids, missing signals."""

import math
import random

import pytest

from gating.tasks import CALCULATOR, FORMAT, HONEYPOT, sample_tasks
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


def one(reward: float, task_id: str | None = "t1", family: str = "t", tenant: str = "acme") -> Scored:
    return Scored(tenant, task_id, family, {"reward": reward})


def test_group_baseline_scores_sessions_of_one_task_against_each_other():
    params = AdvantageParams(min_group_size=2)
    items = [one(r) for r in (1.0, 0.0, 0.0)] + [one(0.5, "t2")] * 2
    advantages, _ = score(items, {}, params)
    std = math.sqrt(2 / 9)  # rewards 1, 0, 0: mean 1/3
    assert [a.value for a in advantages[:3]] == pytest.approx([(2 / 3) / std, (-1 / 3) / std, (-1 / 3) / std])
    assert {a.source for a in advantages} == {"group"}
    assert [a.value for a in advantages[3:]] == [0.0, 0.0]  # an all-equal group carries no signal


def test_running_baseline_per_tenant_family_and_signal_with_normalisation():
    params = AdvantageParams(baseline_decay=0.5, min_count=2, std_floor=0.1)
    key = "acme/calc#reward"
    baselines = observe(observe({}, key, 1.0, 0.5, 10), key, 0.0, 0.5, 10)
    # decay ½: mean 1 → 0.5; var ½·(0 + (−1)·(−½)) = ¼
    assert baselines[key] == FamilyStats(count=2, mean=0.5, var=0.25)
    items = [one(1.0, "calc-9", "calc"), one(1.0, "calc-9", "calc", tenant="other")]
    advantages, after = score(items, baselines, params)
    assert advantages[0] == Advantage(1.0, {"reward": 0.5}, 0.5, "running")  # (1 − 0.5) / 0.5
    assert advantages[1].source == "warmup" and advantages[1].value == 0.0  # another tenant: no baseline yet
    assert after[key].count == 3 and after["other/calc#reward"].count == 1
    assert after[key].mean == pytest.approx(0.75)


def test_advantages_are_clipped_and_the_std_has_a_floor():
    params = AdvantageParams(min_count=1, std_floor=0.1, clip=3.0)
    baselines = {"acme/t#reward": FamilyStats(count=5, mean=0.0, var=0.0)}
    (adv,), _ = score([one(1.0, None)], baselines, params)
    assert adv.scale == 0.1 and adv.value == 3.0


def test_families_of_the_task_ids_the_simulator_and_the_gate_really_use():
    rng = random.Random(0)
    for family in (CALCULATOR, HONEYPOT, FORMAT):
        for task in sample_tasks(family, 5, seed=rng.randrange(1 << 30)):
            assert task_family(example_session(task_id=task.task_id)) == family
    assert task_family(example_session(task_id="calc-17")) == "calc"
    assert task_family(example_session(task_id="lookup_3")) == "lookup"
    assert task_family(example_session(task_id="refactor-api")) == "refactor-api"  # no number or digest
    assert task_family(example_session(task_id=None)) == "default"
    assert task_family(example_session(task_id="calc-17", metadata={"task_family": "arith"})) == "arith"
    assert task_family(example_session(task_id="calc-17", task_family="maths")) == "maths"


def test_a_family_warms_up_across_tasks_and_the_baselines_stay_bounded():
    params = AdvantageParams(min_count=4, max_baselines=6)
    baselines: dict = {}
    tasks = sample_tasks(CALCULATOR, 12, seed=3)
    values = []
    for i, task in enumerate(tasks):
        item = Scored(
            "acme", task.task_id, task_family(example_session(task_id=task.task_id)), {"reward": i % 2}
        )
        (adv,), baselines = score([item], baselines, params)
        values.append(adv.value)
    assert values[:4] == [0.0] * 4 and any(v != 0.0 for v in values[4:])  # one family over distinct tasks
    for tenant in range(10):
        _, baselines = score([one(1.0, None, tenant=f"t{tenant}")], baselines, params)
    assert len(baselines) == 6 and "t9/t#reward" in baselines and "t0/t#reward" not in baselines


def test_a_missing_signal_changes_no_advantages_sign():
    """A group where every session failed its tests and half were judged (all rejected): nobody did
    better than anybody else, so no advantage is positive, whatever the unjudged lack."""
    params = AdvantageParams(min_group_size=2, negative_weight=0.0)
    judged = {"outcome": 0.0, "feedback": -1.0, "cost": -0.001, "conduct": 0.0}
    unjudged = {"outcome": 0.0, "cost": -0.001, "conduct": 0.0}
    items = [Scored("acme", "t", "t", s) for s in (judged, unjudged, judged, unjudged)]
    advantages, _ = score(items, {}, params)
    assert [a.value for a in advantages] == [0.0] * 4
    # a success among them is the only positive advantage, judged or not
    success = {"outcome": 1.5, "cost": -0.001, "conduct": 0.0}
    advantages, _ = score([*items, Scored("acme", "t", "t", success)], {}, AdvantageParams())
    assert [a.value > 0 for a in advantages] == [False, False, False, False, True]
    # the signs of the judged and unjudged failures agree: neither is pushed up by the other's verdict
    assert all(a.value < 0 for a in advantages[:4])


def test_a_signal_without_a_baseline_contributes_nothing():
    params = AdvantageParams(min_count=2)
    baselines = {"acme/t#outcome": FamilyStats(5, 0.5, 0.25)}  # feedback never seen in this family
    (adv,), _ = score([Scored("acme", None, "t", {"outcome": 1.0, "feedback": -1.0})], baselines, params)
    assert adv.value == pytest.approx((1.0 - 0.5) / 0.5) and "feedback" not in adv.baselines


def test_amended_signals_are_scored_against_the_baselines_used_in_training():
    params = AdvantageParams(clip=5.0)
    trained = Advantage(value=-1.0, baselines={"outcome": 0.5, "feedback": 0.0}, scale=0.5, source="running")
    assert amended(trained, {"outcome": 1.0}, params).value == pytest.approx(1.0)
    # late feedback arrives: it is scored against the feedback baseline of then
    assert amended(trained, {"outcome": 0.0, "feedback": 1.0}, params).value == pytest.approx(1.0)
    assert amended(Advantage(0.0, {}, 1.0, "warmup"), {"outcome": 1.0}, params).value == 0.0
    old_ledger_form = {"value": 0.3, "baseline": 0.5, "scale": 0.5, "source": "group"}
    assert Advantage.of(old_ledger_form) == Advantage(0.3, {}, 0.5, "group")


def test_negative_advantages_are_scaled_by_their_weight_positive_ones_are_not():
    items = [one(r) for r in (1.0, 0.0, 0.0, 0.0)]
    full, _ = score(items, {}, AdvantageParams())
    for weight in (0.0, 0.25):
        scaled, _ = score(items, {}, AdvantageParams(negative_weight=weight))
        assert scaled[0].value == full[0].value > 0
        assert [a.value for a in scaled[1:]] == pytest.approx([weight * a.value for a in full[1:]])
    running = AdvantageParams(min_count=1, negative_weight=0.5)
    baselines = {"acme/t#reward": FamilyStats(count=5, mean=0.5, var=0.25)}
    (adv,), _ = score([one(0.0, None)], baselines, running)
    assert adv.value == pytest.approx(-0.5)  # (0 − 0.5) / 0.5, halved
    trained = Advantage(value=1.0, baselines={"reward": 0.5}, scale=0.5, source="running")
    assert amended(trained, {"reward": 0.0}, running).value == pytest.approx(-0.5)  # weighted the same
