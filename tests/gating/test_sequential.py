"""The sequential gate's statistics: coverage at every time at once, numbers by hand, early stopping."""

import math

import numpy as np
import pytest

from gating.rule import lower_bound, upper_bound
from gating.sequential import (
    first_stop,
    guard_power,
    lower_bounds,
    power_table,
    rounds,
    sequential_noninferiority,
    sequential_target,
    simulate_diffs,
    task_order,
    upper_bounds,
)

LOG20 = math.log(20.0)  # log(1/α) at α = 0.05


def psi(bet):
    return (-math.log(1.0 - bet) - bet) / 4.0


def pass_at_1(rng, runs, n_tasks, champion_range, gain, samples=3):
    """Paired pass@1 differences over ``samples`` independent completions; the true mean is ``gain``."""
    p = rng.uniform(*champion_range, size=(runs, n_tasks, 1))
    champion = (rng.random((runs, n_tasks, samples)) < p).mean(axis=-1)
    candidate = (rng.random((runs, n_tasks, samples)) < p + gain).mean(axis=-1)
    return candidate - champion


def difference_of_bernoullis(rng, shape):
    return (rng.random(shape) < 0.6).astype(float) - (rng.random(shape) < 0.5), 0.1


def heterogeneous_pass_at_1(rng, shape):
    return pass_at_1(rng, shape[0], shape[1], (0.2, 0.8), -0.1, samples=3)[..., :], -0.1


def rare_wins(rng, shape):
    return (rng.random(shape) < 0.05).astype(float), 0.05


def continuous_skewed(rng, shape):
    return 2.0 * rng.beta(2.0, 5.0, size=shape) - 1.0, 2.0 * 2.0 / 7.0 - 1.0


def near_the_floor(rng, shape):
    return np.where(rng.random(shape) < 0.9, -1.0, 1.0), -0.8


@pytest.mark.parametrize(
    "draw", [difference_of_bernoullis, heterogeneous_pass_at_1, rare_wins, continuous_skewed, near_the_floor]
)
def test_the_bounds_hold_at_every_time_at_once(draw):
    alpha, runs, n = 0.1, 400, 200
    diffs_R_T, mean = draw(np.random.default_rng(7), (runs, n))
    slack = 3.0 * math.sqrt(alpha * (1 - alpha) / runs)
    ever_above_R = (lower_bounds(diffs_R_T, alpha) >= mean).any(axis=1)
    ever_below_R = (upper_bounds(diffs_R_T, alpha) <= mean).any(axis=1)
    assert ever_above_R.mean() <= alpha + slack
    assert ever_below_R.mean() <= alpha + slack


def test_the_coverage_check_catches_a_bound_that_is_only_valid_at_one_fixed_time():
    alpha, runs, n = 0.1, 400, 200
    diffs_R_T, mean = difference_of_bernoullis(np.random.default_rng(7), (runs, n))
    t_T = np.arange(1, n + 1)
    mean_R_T = np.cumsum(diffs_R_T, axis=1) / t_T
    sd_R_T = np.sqrt(np.maximum(np.cumsum(diffs_R_T**2, axis=1) / t_T - mean_R_T**2, 0.0))
    normal_lower_R_T = mean_R_T - 1.2816 * sd_R_T / np.sqrt(t_T)  # one-sided 90 % at each t alone
    assert (normal_lower_R_T[:, 1:] >= mean).any(axis=1).mean() > 3 * alpha


def test_three_observations_by_hand():
    # d = −1, +1, 0 → x = 0, 1, 1/2; α = 0.95 so that the third bet is below the cap c = 1/2
    alpha = 0.95
    a = math.log(1 / alpha)
    # t = 1: μ̂₀ = 1/2, σ̂²₀ = 1/4
    bet1 = min(math.sqrt(2 * a / (0.25 * 1 * math.log(2))), 0.5)
    v1 = 4 * (0.0 - 0.5) ** 2
    mean1 = (0.5 + 0.0) / 2  # 1/4
    var1 = (0.25 + (0.0 - mean1) ** 2) / 2  # 5/32
    # t = 2
    bet2 = min(math.sqrt(2 * a / (var1 * 2 * math.log(3))), 0.5)
    v2 = 4 * (1.0 - mean1) ** 2  # 9/4
    mean2 = (0.5 + 0.0 + 1.0) / 3  # 1/2
    var2 = (0.25 + (0.0 - mean1) ** 2 + (1.0 - mean2) ** 2) / 3  # 3/16
    # t = 3
    bet3 = min(math.sqrt(2 * a / (var2 * 3 * math.log(4))), 0.5)
    v3 = 4 * (0.5 - mean2) ** 2  # 0
    assert (bet1, bet2) == (0.5, 0.5) and bet3 == pytest.approx(0.36271, abs=1e-5)

    lower1 = (bet1 * 0.0 - a - v1 * psi(bet1)) / bet1
    lower2 = (bet1 * 0.0 + bet2 * 1.0 - a - v1 * psi(bet1) - v2 * psi(bet2)) / (bet1 + bet2)
    lower3 = (bet2 * 1.0 + bet3 * 0.5 - a - v1 * psi(bet1) - v2 * psi(bet2) - v3 * psi(bet3)) / (
        bet1 + bet2 + bet3
    )
    assert lower1 < 0 < lower2 < lower3
    expected = [-1.0, 2 * lower2 - 1, 2 * lower3 - 1]  # clipped at x = 0, then mapped back to d
    assert lower_bounds(np.array([-1.0, 1.0, 0.0]), alpha) == pytest.approx(expected, abs=1e-12)
    assert expected[1:] == pytest.approx([-0.41645, -0.30561], abs=1e-5)


def test_a_plain_loop_over_the_formula_gives_the_same_bounds():
    alpha = 0.05
    diffs = np.random.default_rng(3).choice(
        [-1.0, -0.5, 0.0, 0.5, 1.0], p=[0.05, 0.1, 0.4, 0.25, 0.2], size=80
    )

    def loop_lower(ds):
        mean, var, best = 0.5, 0.25, 0.0
        sum_bet = sum_bet_x = sum_penalty = sum_sq = sum_x = 0.0
        out = []
        for t, d in enumerate(ds, start=1):
            x = (d + 1) / 2
            bet = min(math.sqrt(2 * math.log(1 / alpha) / (var * t * math.log(1 + t))), 0.5)
            sum_bet += bet
            sum_bet_x += bet * x
            sum_penalty += 4 * (x - mean) ** 2 * psi(bet)
            sum_x += x
            mean = (0.5 + sum_x) / (t + 1)
            sum_sq += (x - mean) ** 2
            var = (0.25 + sum_sq) / (t + 1)
            best = max(best, (sum_bet_x - math.log(1 / alpha) - sum_penalty) / sum_bet)
            out.append(2 * best - 1)
        return out

    assert lower_bounds(diffs, alpha) == pytest.approx(loop_lower(diffs), abs=1e-12)
    assert upper_bounds(diffs, alpha) == pytest.approx([-v for v in loop_lower(-diffs)], abs=1e-12)
    assert lower_bounds(diffs, alpha)[-1] > -0.2  # past the early, trivial stretch


def test_the_running_bound_never_decreases_and_the_sides_mirror_each_other():
    diffs_R_T = pass_at_1(np.random.default_rng(5), 50, 150, (0.2, 0.8), 0.1)
    lower_R_T, upper_R_T = lower_bounds(diffs_R_T, 0.05), upper_bounds(diffs_R_T, 0.05)
    assert np.all(np.diff(lower_R_T, axis=1) >= 0) and np.all(np.diff(upper_R_T, axis=1) <= 0)
    assert np.array_equal(upper_R_T, -lower_bounds(-diffs_R_T, 0.05))
    assert np.all(lower_R_T >= -1.0) and np.all(upper_R_T <= 1.0)
    assert np.all(lower_R_T[:, -1] < upper_R_T[:, -1])
    assert np.array_equal(lower_R_T[7], lower_bounds(diffs_R_T[7], 0.05))  # rows are independent runs


def outcomes(diffs_R_T, min_gain=0.05):
    return [sequential_target(d, min_gain=min_gain, alpha=0.05, min_tasks=8) for d in diffs_R_T]


def test_a_clearly_better_candidate_is_promoted_before_the_suite_ends():
    rng = np.random.default_rng(11)
    better = outcomes(pass_at_1(rng, 30, 48, (0.1, 0.5), 0.4))
    assert sum(o.decision == "promote" for o in better) >= 25
    assert not any(o.decision == "reject" for o in better)
    assert all(o.tasks_used < 48 for o in better if o.decision == "promote")
    assert np.median([o.tasks_used for o in better]) <= 40
    much_better = outcomes(pass_at_1(rng, 30, 48, (0.0, 0.1), 0.8))
    assert all(o.decision == "promote" for o in much_better)
    assert np.median([o.tasks_used for o in much_better]) <= 24
    assert all(o.lower >= 0.05 for o in much_better)
    assert "anytime lower bound" in much_better[0].reason


def test_a_clearly_worse_candidate_is_rejected_before_the_suite_ends():
    worse = outcomes(pass_at_1(np.random.default_rng(12), 30, 48, (0.4, 0.8), -0.3))
    assert sum(o.decision == "reject" for o in worse) >= 25
    assert not any(o.decision == "promote" for o in worse)
    assert np.median([o.tasks_used for o in worse]) <= 40
    assert all(o.upper < 0.05 for o in worse if o.decision == "reject")


def test_a_close_call_uses_every_task_and_leaves_the_decision_to_the_full_suite_rule():
    close = outcomes(pass_at_1(np.random.default_rng(13), 30, 48, (0.2, 0.7), 0.05))
    assert all(o.decision == "continue" and o.tasks_used == 48 for o in close)
    assert all(o.lower < 0.05 <= o.upper for o in close)
    assert "straddle" in close[0].reason


def test_the_sequential_gate_never_contradicts_a_clear_full_suite_bootstrap():
    rng = np.random.default_rng(21)
    gains = rng.uniform(-0.3, 0.5, size=200)
    clear_promote = clear_reject = 0
    for i, gain in enumerate(gains):
        diffs = pass_at_1(rng, 1, 48, (0.3, 0.5), gain)[0]
        outcome = sequential_target(diffs, min_gain=0.05, alpha=0.05, min_tasks=8)
        if lower_bound(diffs, 0.95, 1000, i) >= 0.05 + 0.1:
            clear_promote += 1
            assert outcome.decision != "reject"
        elif upper_bound(diffs, 0.95, 1000, i) < 0.05 - 0.1:
            clear_reject += 1
            assert outcome.decision != "promote"
    assert clear_promote >= 40 and clear_reject >= 40


def test_the_guard_passes_exactly_when_the_cap_on_the_bets_allows():
    # d ≡ 0: x ≡ 1/2, so μ̂ stays 1/2, every v is 0, every bet is capped at 1/2, and
    # L(x) = 1/2 − log(1/α) / (t/2), i.e. L(d) = −4 log(20) / t: first ≥ −0.10 at t = 120
    assert math.ceil(4 * LOG20 / 0.10) == 120
    same = sequential_noninferiority(np.zeros(130), margin=0.10, alpha=0.05, min_tasks=1)
    assert (same.decision, same.tasks_used) == ("pass", 120)
    assert same.lower == pytest.approx(-4 * LOG20 / 120) and same.upper == pytest.approx(4 * LOG20 / 120)
    short = sequential_noninferiority(np.zeros(119), margin=0.10, alpha=0.05, min_tasks=1)
    assert (short.decision, short.tasks_used) == ("continue", 119)
    late = sequential_noninferiority(np.zeros(130), margin=0.10, alpha=0.05, min_tasks=125)
    assert (late.decision, late.tasks_used) == ("pass", 125)
    in_rounds = sequential_noninferiority(np.zeros(130), margin=0.10, alpha=0.05, min_tasks=1, round_size=25)
    assert (in_rounds.decision, in_rounds.tasks_used) == ("pass", 125)


def test_the_guard_fails_a_collapse_as_soon_as_the_bound_shows_it():
    # d ≡ −1: the upper bound is −L of x' ≡ 1, where μ̂_{t−1} = 1 − 1/(2t), so v_t = 1/t², and the
    # bets are capped at 1/2: U(d) = −1 + 4 (log 20 + ψ(1/2) Σ_{i≤t} 1/i²) / t
    def upper(t):
        return -1 + 4 * (LOG20 + psi(0.5) * sum(1 / i**2 for i in range(1, t + 1))) / t

    first = next(t for t in range(1, 48) if upper(t) < -0.10)
    assert first == 14
    collapse = sequential_noninferiority(-np.ones(48), margin=0.10, alpha=0.05, min_tasks=1)
    assert (collapse.decision, collapse.tasks_used) == ("fail", 14)
    assert collapse.upper == pytest.approx(upper(14))
    assert "worse by more than the margin" in collapse.reason
    waits = sequential_noninferiority(-np.ones(48), margin=0.10, alpha=0.05, min_tasks=20)
    assert (waits.decision, waits.tasks_used) == ("fail", 20)


def test_the_guard_cannot_decide_a_noisy_tie_in_48_tasks():
    # 48 tasks: the bounds are at least 4 log(20) / 48 ≈ 0.25 from the (weighted) mean change of 0
    noisy = sequential_noninferiority(np.tile([1.0, -1.0], 24), margin=0.10, alpha=0.05, min_tasks=1)
    assert (noisy.decision, noisy.tasks_used) == ("continue", 48)
    assert noisy.lower < -0.10 - 0.25 + 0.1 and noisy.upper > -0.10
    few = sequential_noninferiority(np.zeros(5), margin=0.10, alpha=0.05, min_tasks=8)
    assert few.decision == "continue" and "fewer than the 8" in few.reason


def test_first_stop_reads_each_run_at_the_ends_of_rounds():
    runs_R_T = np.stack([np.zeros(130), -np.ones(130), np.tile([1.0, -1.0], 65)])
    step_R, used_R = first_stop(runs_R_T, -0.10, 0.05, min_tasks=1, round_size=10)
    assert step_R.tolist() == [1, -1, 0] and used_R.tolist() == [120, 20, 130]


def test_rounds_and_task_order():
    assert rounds(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert rounds(8, 4) == [(0, 4), (4, 8)] and rounds(0, 4) == []
    with pytest.raises(ValueError):
        rounds(8, 0)
    ids = [f"t{i}" for i in range(20)]
    order = task_order(ids, seed=3)
    assert sorted(order) == sorted(ids) and order != sorted(ids)
    assert task_order(list(reversed(ids)), seed=3) == order  # depends on the seed, not the input order
    assert task_order(ids, seed=4) != order


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        lower_bounds(np.array([0.5, 1.5]), 0.05)
    with pytest.raises(ValueError):
        sequential_target(np.zeros(10), 0.05, alpha=1.0, min_tasks=1)


def test_the_simulated_scores_have_the_requested_mean_change():
    rng = np.random.default_rng(0)
    for change, coupling in [(0.0, 0.0), (-0.15, 0.0), (-0.15, 0.9), (0.1, 1.0)]:
        diffs = simulate_diffs(rng, 400, 100, change, samples=3, coupling=coupling)
        assert diffs.mean() == pytest.approx(change, abs=4 * diffs.std() / math.sqrt(diffs.size))
    with pytest.raises(ValueError):
        simulate_diffs(rng, 1, 1, -0.3, pass_range=(0.2, 0.8))


def test_guard_power_rates_and_tasks():
    # identical policies scored identically: passes exactly at 120 tasks, never at 119
    assert guard_power(0.0, 0.10, 120, coupling=1.0, min_tasks=1, runs=50).pass_rate == 1.0
    assert guard_power(0.0, 0.10, 119, coupling=1.0, min_tasks=1, runs=50).pass_rate == 0.0
    # a candidate exactly at the margin passes at most α of the time
    at_margin = guard_power(-0.10, 0.10, 300, samples=1, coupling=0.9, runs=400)
    assert at_margin.pass_rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)
    rows = power_table([0.0, -0.15], [12, 48], 0.10, runs=200)
    assert [(r.change, r.n_tasks) for r in rows] == [(0.0, 12), (0.0, 48), (-0.15, 12), (-0.15, 48)]
    assert all(r.pass_rate + r.fail_rate <= 1.0 and 8 <= r.mean_tasks <= r.n_tasks for r in rows)
