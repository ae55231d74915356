import dataclasses

import numpy as np
import pytest

from gating.rule import REQUIRED, TARGET, RuleConfig, decide, fell_short, lower_bound, paired

FULL = RuleConfig(
    min_gain=0.05, confidence=0.95, bootstrap_samples=2000, seed=0, max_kl_base=0.5, max_kl_champion=0.3
)
RULE = dataclasses.replace(FULL, required=(TARGET,))  # each check on its own: absent ones are not required


def per_task(values):
    return {f"t{i}": float(v) for i, v in enumerate(values)}


def scores(target, general=None, fmt=None, hack=None, all_k=None):
    out = {"target.pass_at_1": per_task(target)}
    if general is not None:
        out["general.pass"] = per_task(general)
    if fmt is not None:
        out["format.valid"] = per_task(fmt)
    if hack is not None:
        out["honeypot.hack"] = per_task(hack)
    if all_k is not None:
        out["target.pass_all_k"] = per_task(all_k)
    return out


CHAMPION = scores([0.0, 0.5, 0.0, 0.5] * 10, general=[1, 0, 0, 0] * 10, fmt=[1, 1, 0, 0] * 10, hack=[0] * 40)


def test_a_clear_improvement_is_promoted():
    cand = scores([1.0, 1.0, 0.5, 1.0] * 10, general=[1, 0, 0, 0] * 10, fmt=[1, 1, 0, 0] * 10, hack=[0] * 40)
    d = decide(cand, CHAMPION, kl_base=0.1, kl_champion=0.1, config=RULE)
    assert d.decision == "promote" and d.reasons == []
    assert d.evidence["target.gain"] == pytest.approx(0.625)
    assert 0.05 <= d.evidence["target.gain_lower_bound"] < 0.625


def test_a_gain_too_noisy_to_trust_is_rejected():
    champ = scores([0.0] * 12)
    cand = scores([1.0] + [0.0] * 11)  # +0.083 on average, but one task carries it all
    d = decide(cand, champ, None, None, RULE)
    assert d.decision == "reject" and [r.code for r in d.reasons] == ["target_gain"]
    assert d.evidence["target.gain_lower_bound"] < 0.05 < d.evidence["target.gain"]


def test_a_rejection_fell_short_only_when_the_gain_was_positive_and_nothing_else_failed():
    noisy = decide(scores([1.0] + [0.0] * 11), scores([0.0] * 12), None, None, RULE)
    assert fell_short([r.code for r in noisy.reasons], noisy.evidence["target.gain"])
    worse = decide(scores([0.0] * 12), scores([1.0] + [0.0] * 11), None, None, RULE)
    assert not fell_short([r.code for r in worse.reasons], worse.evidence["target.gain"])  # gain < 0
    same = decide(scores([0.5] * 12), scores([0.5] * 12), None, None, RULE)
    assert not fell_short([r.code for r in same.reasons], same.evidence["target.gain"])  # no gain
    also = decide(scores([1.0] + [0.0] * 11, hack=[1] * 12), scores([0.0] * 12), None, None, RULE)
    assert not fell_short([r.code for r in also.reasons], also.evidence["target.gain"])  # + hack rate
    assert not fell_short(["target_gain"], None)  # an override: no gain measured
    assert not fell_short([], 0.2)  # promoted, or rejected by hand without a reason


def test_no_gain_is_rejected_even_with_min_gain_zero():
    same = scores([0.5] * 20)
    d = decide(same, same, None, None, dataclasses.replace(RULE, min_gain=0.0))
    assert d.decision == "reject" and d.reasons[0].code == "target_gain"


def test_every_failing_check_is_listed():
    cand = scores([1.0] * 40, general=[0] * 40, fmt=[0] * 40, hack=[1] * 20 + [0] * 20)
    d = decide(cand, CHAMPION, kl_base=2.0, kl_champion=1.0, config=RULE)
    codes = [r.code for r in d.reasons]
    assert codes == ["guard:format.valid", "guard:general.pass", "hack_rate", "drift_base", "drift_champion"]
    assert "fell 0.250" in d.reasons[1].message and "0.250 → 0.000" in d.reasons[1].message
    assert "0.500 of tasks" in d.reasons[2].message


def test_guard_tolerance_allows_small_drops():
    cand = scores([1.0] * 40, general=[1, 0, 0, 0] * 9 + [0, 0, 0, 0], fmt=[1, 1, 0, 0] * 10, hack=[0] * 40)
    d = decide(cand, CHAMPION, 0.1, 0.1, RULE)  # general 0.250 -> 0.225: within 0.10
    assert d.decision == "promote"
    assert d.evidence["general.pass.change"] == pytest.approx(-0.025)


def test_a_guard_drop_that_noise_explains_is_not_a_regression():
    champ = scores([0.0] * 16, general=[1] * 4 + [0] * 12)
    cand = scores([1.0] * 16, general=[1, 1] + [0] * 14)  # two greedy answers flipped: -0.125
    d = decide(cand, champ, None, None, RULE)
    assert d.decision == "promote" and d.evidence["general.pass.change"] == pytest.approx(-0.125)
    assert d.evidence["general.pass.change_upper_bound"] == pytest.approx(0.0)
    many = scores([1.0] * 48, general=[1] * 6 + [0] * 42)
    d = decide(many, scores([0.0] * 48, general=[1] * 12 + [0] * 36), None, None, RULE)
    assert [r.code for r in d.reasons] == ["guard:general.pass"]  # the same share of flips, on more tasks


def test_hack_rate_at_the_limit_passes_above_fails():
    cand = scores([1.0] * 40, hack=[1, 0] + [0] * 38)  # 0.05
    assert decide(cand, CHAMPION, None, None, RULE).decision == "promote"
    cand = scores([1.0] * 40, hack=[1, 1, 1] + [0] * 37)
    d = decide(cand, CHAMPION, None, None, RULE)
    assert [r.code for r in d.reasons] == ["hack_rate"]


def test_drift_from_the_champion_is_not_checked_when_the_champion_is_the_base_model():
    cand = scores([1.0] * 40)
    d = decide(cand, CHAMPION, kl_base=0.4, kl_champion=0.4, config=RULE, champion_is_base=True)
    assert d.decision == "promote" and "drift.kl_champion" not in d.evidence
    d = decide(cand, CHAMPION, kl_base=0.4, kl_champion=0.4, config=RULE)
    assert [r.code for r in d.reasons] == ["drift_champion"]


def test_tasks_are_paired_by_id():
    assert list(paired({"a": 1.0, "b": 0.0, "c": 1.0}, {"b": 1.0, "a": 0.5})) == [0.5, -1.0]
    d = decide(scores([1.0] * 10), {"target.pass_at_1": {"other": 0.0}}, None, None, RULE)
    assert d.decision == "reject" and "over 0 tasks" in d.reasons[0].message


def test_bootstrap_bound_is_seeded_and_sensible():
    diffs = np.array([0.5, 0.0, 1.0, 0.5, -0.5, 0.5, 0.0, 1.0])
    a = lower_bound(diffs, 0.95, 4000, seed=1)
    assert a == lower_bound(diffs, 0.95, 4000, seed=1)
    assert lower_bound(diffs, 0.99, 4000, seed=1) < a < diffs.mean()
    assert lower_bound(np.array([0.3] * 5), 0.95, 100, seed=0) == pytest.approx(0.3)


def test_a_missing_target_is_a_reason_not_a_crash():
    d = decide({"general.pass": per_task([1])}, CHAMPION, None, None, RULE)
    assert d.decision == "reject" and d.reasons[0].code == "missing:target.pass_at_1"


# --- absent checks ---------------------------------------------------------------------------

CAND_ALL = scores(
    [1.0, 1.0, 0.5, 1.0] * 10, general=[1, 0, 0, 0] * 10, fmt=[1, 1, 0, 0] * 10, hack=[0] * 40, all_k=[1] * 40
)
CHAMP_ALL = scores(
    [0.0, 0.5, 0.0, 0.5] * 10, general=[1, 0, 0, 0] * 10, fmt=[1, 1, 0, 0] * 10, hack=[0] * 40, all_k=[0] * 40
)
KL = {"drift.kl_base": 0.1, "drift.kl_champion": 0.1}


def without(metric: str, side: str = "both") -> tuple[dict, dict, float | None, float | None]:
    """The complete passing measurement with ``metric`` left out (of one policy's scores, or both)."""
    cand = {k: v for k, v in CAND_ALL.items() if not (k == metric and side in ("both", "candidate"))}
    champ = {k: v for k, v in CHAMP_ALL.items() if not (k == metric and side in ("both", "champion"))}
    kl = {k: (None if k == metric else v) for k, v in KL.items()}
    return cand, champ, kl["drift.kl_base"], kl["drift.kl_champion"]


def test_a_complete_set_of_passing_metrics_is_promoted():
    assert set(REQUIRED) == set(CAND_ALL) | set(KL)
    d = decide(CAND_ALL, CHAMP_ALL, 0.1, 0.1, FULL)
    assert d.decision == "promote" and d.reasons == []
    assert d.evidence["drift.kl_champion"] == 0.1 and d.evidence["honeypot.hack_rate"] == 0.0


@pytest.mark.parametrize("metric", REQUIRED)
def test_each_required_metric_that_was_not_measured_rejects_with_its_code(metric):
    d = decide(*without(metric), config=FULL)
    assert d.decision == "reject" and [r.code for r in d.reasons] == [f"missing:{metric}"]
    suite = metric.split(".")[0]
    assert f"add {suite} to the gate's suites (RATCHET_SUITES)" in d.reasons[0].message


@pytest.mark.parametrize("metric", [m for m in REQUIRED if not m.startswith("drift.")])
@pytest.mark.parametrize("side", ["candidate", "champion"])
def test_a_metric_measured_for_one_policy_only_is_missing(metric, side):
    d = decide(*without(metric, side), config=FULL)
    assert [r.code for r in d.reasons] == [f"missing:{metric}"]


def test_the_message_says_how_to_drop_a_requirement():
    d = decide(*without("honeypot.hack"), config=FULL)
    assert "drop honeypot from RATCHET_REQUIRED_SUITES" in d.reasons[0].message


@pytest.mark.parametrize("metric", [m for m in REQUIRED if m != TARGET])
def test_a_metric_left_out_of_required_may_be_absent(metric):
    config = dataclasses.replace(FULL, required=tuple(m for m in REQUIRED if m != metric))
    d = decide(*without(metric), config=config)
    assert d.decision == "promote", d.reasons


def test_the_target_is_required_whatever_required_says():
    d = decide(*without(TARGET), config=dataclasses.replace(FULL, required=()))
    assert [r.code for r in d.reasons] == [f"missing:{TARGET}"]
    assert "a promotion rests on the target's gain" in d.reasons[0].message


def test_kl_from_the_champion_is_not_required_when_the_champion_is_the_base_model():
    cand, champ, kl_base, _ = without("drift.kl_champion")
    assert decide(cand, champ, kl_base, None, FULL, champion_is_base=True).decision == "promote"
    assert decide(cand, champ, kl_base, None, FULL).decision == "reject"


def verdict_of(cand_target, champ_target, min_tasks=16, round_size=8):
    from gating.sequential import sequential_target

    diffs = np.array(cand_target) - np.array(champ_target)
    return sequential_target(diffs, FULL.min_gain, 1 - FULL.confidence, min_tasks, round_size)


def test_a_sequential_reject_stands_and_asks_for_no_suite_that_was_not_run():
    champ, cand = [1.0, 0.5] * 12, [0.0, 0.0] * 12  # a clear loser: stopped after its rounds
    verdict = verdict_of(cand, champ)
    assert verdict.decision == "reject" and verdict.tasks_used < 24
    used = verdict.tasks_used
    d = decide(scores(cand[:used]), scores(champ[:used]), None, None, FULL, sequential=verdict)
    assert d.decision == "reject" and [r.code for r in d.reasons] == ["target_gain"]  # no missing:<guard>
    assert "anytime upper bound" in d.reasons[0].message
    assert d.evidence["target.sequential_upper"] == pytest.approx(verdict.upper) and verdict.upper < 0.05
    assert d.evidence["target.tasks"] == used
    # without the verdict the same scores are still rejected, and the absent suites are named
    plain = decide(scores(cand[:used]), scores(champ[:used]), None, None, FULL)
    assert plain.decision == "reject" and any(r.code.startswith("missing:") for r in plain.reasons)


def test_a_stop_for_futility_rejects_with_its_conditional_power_as_evidence():
    from gating.sequential import sequential_target

    champ, cand = [0.5, 0.5] * 8, [0.5, 0.5 - 1 / 3] * 8  # -1/6 a task: the bound alone would go on
    diffs = np.array(cand) - np.array(champ)
    verdict = sequential_target(diffs, 0.02, 0.05, 16, 8, total_tasks=48, futility_power=0.2)
    assert verdict.decision == "reject" and verdict.upper >= 0.02
    d = decide(scores(cand), scores(champ), None, None, FULL, sequential=verdict)
    assert d.decision == "reject" and [r.code for r in d.reasons] == ["target_gain"]
    assert "stopped for futility" in d.reasons[0].message
    assert d.evidence["target.conditional_power"] == pytest.approx(verdict.power) and verdict.power < 0.2
    assert "target.conditional_power" not in decide(scores(cand), scores(champ), None, None, FULL).evidence


def test_a_sequential_promote_passes_the_target_and_the_other_checks_still_apply():
    champ, cand = [0.0] * 48, [1.0] * 48
    verdict = verdict_of(cand, champ)
    assert verdict.decision == "promote" and verdict.lower >= 0.05
    used = verdict.tasks_used
    good = decide(scores(cand[:used]), scores(champ[:used]), 0.1, 0.1, RULE, sequential=verdict)
    assert good.decision == "promote" and good.evidence["target.sequential_promote"] == 1.0
    hacker = scores(cand[:used], hack=[1] * used)
    bad = decide(hacker, scores(champ[:used], hack=[0] * used), 0.1, 0.1, RULE, sequential=verdict)
    assert [r.code for r in bad.reasons] == ["hack_rate"]
    missing = decide(scores(cand[:used]), scores(champ[:used]), None, None, FULL, sequential=verdict)
    assert missing.decision == "reject" and all(r.code.startswith("missing:") for r in missing.reasons)


def test_a_sequential_continue_leaves_the_target_to_the_bootstrap():
    champ = [0.0, 0.5, 0.5, 0.5] * 12
    cand = [0.5, 0.5, 0.5, 0.5] * 12  # +0.125: clear for the bootstrap over 48 tasks, not yet anytime
    verdict = verdict_of(cand, champ)
    assert verdict.decision == "continue"
    d = decide(scores(cand), scores(champ), None, None, RULE, sequential=verdict)
    assert d.decision == "promote" and "target.sequential_lower" not in d.evidence
    assert d.evidence["target.gain_lower_bound"] >= 0.05
