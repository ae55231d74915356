"""The sequential gate's statistics: coverage at every time at once, numbers by hand, early stopping."""

import math

import numpy as np
import pytest

from gating.rule import lower_bound, upper_bound
from gating.sequential import (
    BET_CAP,
    FUTILE,
    GRID,
    conditional_power,
    first_stop,
    guard_power,
    lower_bounds,
    power_table,
    rounds,
    sequential_noninferiority,
    sequential_target,
    simulate_diffs,
    target_power,
    task_order,
    upper_bounds,
)

LOG20 = math.log(20.0)  # log(1/α) at α = 0.05


def on_grid(m):
    """``m`` rounded down to the grid of means the bound is read on."""
    return GRID[np.less_equal(GRID, m + 1e-12)].max(initial=0.0)


def bet(var_before, t, alpha=0.05):
    return math.sqrt(2 * math.log(1 / alpha) / (var_before * t * math.log(1 + t)))


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


def test_identical_scores_by_hand():
    # d ≡ 0: x ≡ 1/2, so μ̂ stays 1/2 and σ̂²_{t−1} = 1/(4t); where the plug-in bet exceeds the
    # cap c/m every factor is 1 + c (1/(2m) − 1), so K_t(m) = (1 + c (1/(2m) − 1))^t and the means
    # ruled out at α = 0.05 are those below m*_t = 1 / (2 (1 + (20^(1/t) − 1) / c))
    lower = lower_bounds(np.zeros(60), 0.05)
    for t in range(1, 61):
        m_star = 1 / (2 * (1 + (20 ** (1 / t) - 1) / BET_CAP))
        if bet(1 / (4 * t), t) >= BET_CAP / m_star:  # capped at m*: the closed form holds
            assert lower[t - 1] == pytest.approx(2 * on_grid(m_star) - 1, abs=1e-12)
        else:  # smaller bets, less capital: the bound is at most that
            assert lower[t - 1] <= 2 * m_star - 1
    assert bet(1 / 20, 5) >= BET_CAP / (1 / (2 * (1 + (20**0.2 - 1) / BET_CAP)))  # from t = 5 on
    assert lower[37] == pytest.approx(-0.100, abs=1e-9) and lower[36] < -0.100


def test_a_plain_loop_over_the_formula_gives_the_same_bounds():
    alpha = 0.05
    diffs = np.random.default_rng(3).choice(
        [-1.0, -0.5, 0.0, 0.5, 1.0], p=[0.05, 0.1, 0.4, 0.25, 0.2], size=40
    )

    def loop_lower(ds):
        mean, var, best = 0.5, 0.25, 0.0
        sum_sq = sum_x = 0.0
        log_capital = {m: 0.0 for m in GRID}
        out = []
        for t, d in enumerate(ds, start=1):
            x = (d + 1) / 2
            plug_in = math.sqrt(2 * math.log(1 / alpha) / (var * t * math.log(1 + t)))
            for m in GRID:
                log_capital[m] += math.log(1 + min(plug_in, BET_CAP / m) * (x - m))
            ruled_out = 0.0
            for m in GRID:  # from the smallest mean up, while each is ruled out
                if log_capital[m] < math.log(1 / alpha):
                    break
                ruled_out = m
            sum_x += x
            mean = (0.5 + sum_x) / (t + 1)
            sum_sq += (x - mean) ** 2
            var = (0.25 + sum_sq) / (t + 1)
            best = max(best, ruled_out)
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
    assert np.median([o.tasks_used for o in better]) <= 24
    much_better = outcomes(pass_at_1(rng, 30, 48, (0.0, 0.1), 0.8))
    assert all(o.decision == "promote" for o in much_better)
    assert np.median([o.tasks_used for o in much_better]) <= 12
    assert all(o.lower >= 0.05 for o in much_better)
    assert "anytime lower bound" in much_better[0].reason


def test_a_clearly_worse_candidate_is_rejected_before_the_suite_ends():
    worse = outcomes(pass_at_1(np.random.default_rng(12), 30, 48, (0.4, 0.8), -0.3))
    assert sum(o.decision == "reject" for o in worse) >= 25
    assert not any(o.decision == "promote" for o in worse)
    assert np.median([o.tasks_used for o in worse]) <= 24
    assert all(o.upper < 0.05 for o in worse if o.decision == "reject")


def test_a_close_call_uses_every_task_and_leaves_the_decision_to_the_full_suite_rule():
    close = outcomes(pass_at_1(np.random.default_rng(13), 30, 48, (0.2, 0.7), 0.05))
    undecided = [o for o in close if o.decision == "continue"]
    assert len(undecided) >= 24 and all(o.tasks_used == 48 for o in undecided)
    assert all(o.lower < 0.05 <= o.upper for o in undecided)
    assert "straddle" in undecided[0].reason
    # a gain exactly at min_gain: a verdict either way is a mistake, each side at most α
    diffs_R_T = pass_at_1(np.random.default_rng(5), 2000, 48, (0.2, 0.7), 0.05)
    step_R, _ = first_stop(diffs_R_T, 0.05, 0.05, min_tasks=8)
    assert (step_R > 0).mean() <= 0.05 and (step_R < 0).mean() <= 0.05


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
    # d ≡ 0 (see test_identical_scores_by_hand): L_t(d) = 2 m*_t − 1 ≥ −0.10 first at t = 38
    assert math.ceil(LOG20 / math.log(1 + BET_CAP * 0.10 / 0.90)) == 38
    same = sequential_noninferiority(np.zeros(60), margin=0.10, alpha=0.05, min_tasks=1)
    assert (same.decision, same.tasks_used) == ("pass", 38)
    assert same.lower == pytest.approx(-0.10) and same.upper == pytest.approx(0.10)
    short = sequential_noninferiority(np.zeros(37), margin=0.10, alpha=0.05, min_tasks=1)
    assert (short.decision, short.tasks_used) == ("continue", 37)
    late = sequential_noninferiority(np.zeros(60), margin=0.10, alpha=0.05, min_tasks=45)
    assert (late.decision, late.tasks_used) == ("pass", 45)
    in_rounds = sequential_noninferiority(np.zeros(60), margin=0.10, alpha=0.05, min_tasks=1, round_size=25)
    assert (in_rounds.decision, in_rounds.tasks_used) == ("pass", 50)


def test_the_guard_fails_a_collapse_as_soon_as_the_bound_shows_it():
    # d ≡ −1: the upper bound is −L of x' ≡ 1, whose plug-in bets stay above the cap c/m near
    # m = 0.55, so K_t(m) = (1 + c (1/m − 1))^t: m*_t = 1 / (1 + (20^(1/t) − 1) / c), U(d) = 1 − 2 m*_t
    def upper(t):
        return 1 - 2 * on_grid(1 / (1 + (20 ** (1 / t) - 1) / BET_CAP))

    first = next(t for t in range(1, 48) if upper(t) < -0.10)
    assert first == 7
    collapse = sequential_noninferiority(-np.ones(48), margin=0.10, alpha=0.05, min_tasks=1)
    assert (collapse.decision, collapse.tasks_used) == ("fail", 7)
    assert collapse.upper == pytest.approx(upper(7))
    assert "worse by more than the margin" in collapse.reason
    waits = sequential_noninferiority(-np.ones(48), margin=0.10, alpha=0.05, min_tasks=20)
    assert (waits.decision, waits.tasks_used) == ("fail", 20)


def test_the_guard_cannot_decide_a_noisy_tie_in_48_tasks():
    # every task a full win or a full loss: a mean of 0 with the largest spread there is
    noisy = sequential_noninferiority(np.tile([1.0, -1.0], 24), margin=0.10, alpha=0.05, min_tasks=1)
    assert (noisy.decision, noisy.tasks_used) == ("continue", 48)
    assert noisy.lower < -0.25 and noisy.upper > 0.25
    few = sequential_noninferiority(np.zeros(5), margin=0.10, alpha=0.05, min_tasks=8)
    assert few.decision == "continue" and "fewer than the 8" in few.reason


def test_first_stop_reads_each_run_at_the_ends_of_rounds():
    runs_R_T = np.stack([np.zeros(130), -np.ones(130), np.tile([1.0, -1.0], 65)])
    step_R, used_R = first_stop(runs_R_T, -0.10, 0.05, min_tasks=1, round_size=10)
    assert step_R.tolist() == [1, -1, 0] and used_R.tolist() == [40, 10, 130]


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
    # identical policies scored identically: passes exactly at 38 tasks, never at 37
    assert guard_power(0.0, 0.10, 38, coupling=1.0, min_tasks=1, runs=50).pass_rate == 1.0
    assert guard_power(0.0, 0.10, 37, coupling=1.0, min_tasks=1, runs=50).pass_rate == 0.0
    # a candidate exactly at the margin passes at most α of the time
    at_margin = guard_power(-0.10, 0.10, 300, samples=1, coupling=0.9, runs=400)
    assert at_margin.pass_rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)
    rows = power_table([0.0, -0.15], [12, 48], 0.10, runs=200)
    assert [(r.change, r.n_tasks) for r in rows] == [(0.0, 12), (0.0, 48), (-0.15, 12), (-0.15, 48)]
    assert all(r.pass_rate + r.fail_rate <= 1.0 and 8 <= r.mean_tasks <= r.n_tasks for r in rows)


def normal_cdf(x):
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def test_conditional_power_by_hand():
    # four tasks of 12: +1, 0, 0, -1. d̄ = 0, Σ(d − d̄)² = 2, s² = (1 + 2) / 5, z = 1.6449 (α = 0.05)
    d = np.array([1.0, 0.0, 0.0, -1.0])
    z = 1.6448536269514722
    s = math.sqrt(3 / 5)
    optimistic = 0.0 + z * s / 2  # the rest's mean granted: the plain one-sided bound after 4 tasks
    needed = (12 * (0.05 + z * s / math.sqrt(12)) - 4 * 0.0) / 8  # what the other 8 must average
    expected = 1 - normal_cdf((needed - optimistic) * math.sqrt(8) / s)
    power = conditional_power(d, 12, 0.05, 0.05)
    assert power[3] == pytest.approx(expected, rel=1e-9)
    # by hand: s = 0.775, granted 0.637, needed 12 (0.05 + 0.368) / 8 = 0.627: just under even odds
    assert power[3] == pytest.approx(0.515, abs=0.001)
    # each prefix the same way, by a plain loop
    for t in range(1, 5):
        head = d[:t]
        mean = head.mean()
        s_t = math.sqrt((1 + ((head - mean) ** 2).sum()) / (t + 1))
        need = (12 * (0.05 + z * s_t / math.sqrt(12)) - t * mean) / (12 - t)
        grant = mean + z * s_t / math.sqrt(t)
        assert power[t - 1] == pytest.approx(
            1 - normal_cdf((need - grant) * math.sqrt(12 - t) / s_t), rel=1e-9
        )
    # nothing left to project at the suite's last task; rows are runs
    assert conditional_power(np.zeros((2, 12)), 12, 0.05, 0.05)[:, -1].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError):
        conditional_power(d, 3, 0.05, 0.05)


def test_a_tie_is_rejected_for_futility_before_the_suite_ends_and_a_winner_is_not():
    tie = pass_at_1(np.random.default_rng(31), 30, 48, (0.2, 0.6), 0.0)
    plain = [sequential_target(d, 0.02, 0.05, 16, 8) for d in tie]
    futile = [sequential_target(d, 0.02, 0.05, 16, 8, futility_power=0.2) for d in tie]
    assert sum(o.decision == "continue" for o in plain) >= 25  # the bound alone leaves ties to the end
    stopped = [o for o in futile if o.decision == "reject" and o.tasks_used < 48]
    assert len(stopped) >= 20 and np.median([o.tasks_used for o in futile]) <= 32
    assert all(o.power < 0.2 for o in stopped if "futility" in o.reason)
    assert "stopped for futility" in next(o.reason for o in stopped if "futility" in o.reason)
    assert not any(
        o.decision == "promote" and p.decision != "promote" for o, p in zip(futile, plain, strict=True)
    )
    winner = pass_at_1(np.random.default_rng(32), 30, 48, (0.1, 0.5), 0.4)
    assert not any(
        sequential_target(d, 0.02, 0.05, 16, 8, futility_power=0.2).decision == "reject" for d in winner
    )


def test_futility_is_read_only_at_the_looks_and_never_at_the_last_task():
    d = np.array([0.0, -1.0 / 3.0] * 24)  # a mild loser: -1/6 a task
    step, used = first_stop(d[None, :16], 0.02, 0.05, 16, 8, total_tasks=16, futility_power=0.99)
    assert step[0] != FUTILE  # the last task of the suite: the full-suite rule decides
    step, used = first_stop(d[None, :], 0.02, 0.05, 16, 8, futility_power=0.2)
    assert (step[0], used[0]) == (FUTILE, 16)  # the first look: the bound says nothing yet, futile
    verdict = sequential_target(d[:16], 0.02, 0.05, 16, 8, total_tasks=48, futility_power=0.2)
    assert verdict.decision == "reject" and verdict.tasks_used == 16
    assert verdict.upper >= 0.02  # the anytime bound alone would go on
    assert "16 of 48" in verdict.reason and verdict.power < 1e-6
    off = sequential_target(d[:16], 0.02, 0.05, 16, 8, total_tasks=48)
    assert off.decision == "continue" and off.power is None
    tie = sequential_target(np.zeros(16), 0.02, 0.05, 16, 8, total_tasks=48, futility_power=0.2)
    assert tie.decision == "continue" and 0.2 < tie.power < 0.5  # 16 identical scores: not yet futile
    with pytest.raises(ValueError):
        sequential_target(d, 0.02, 0.05, 16, 8, total_tasks=40)


def test_futility_never_contradicts_a_clear_full_suite_bootstrap():
    rng = np.random.default_rng(21)
    gains = rng.uniform(-0.3, 0.5, size=200)
    clear_promote = 0
    for i, gain in enumerate(gains):
        diffs = pass_at_1(rng, 1, 48, (0.3, 0.5), gain)[0]
        outcome = sequential_target(diffs, 0.05, 0.05, 16, 8, futility_power=0.2)
        if lower_bound(diffs, 0.95, 1000, i) >= 0.05 + 0.1:
            clear_promote += 1
            assert outcome.decision != "reject", (i, outcome.reason)
    assert clear_promote >= 40


def test_target_power_futility_costs_little_power_and_saves_tasks_on_a_tie():
    for change in (0.0, 0.1, 0.15):
        plain = target_power(change, 0.02, 48, runs=400, bootstrap_samples=500)
        futile = target_power(change, 0.02, 48, futility_power=0.2, runs=400, bootstrap_samples=500)
        assert plain.futile_rate == 0.0 and futile.futile_rate > 0.0
        # the same simulated runs: a stop for futility can only take promotions away
        assert futile.promote_rate <= plain.promote_rate <= futile.promote_rate + 0.04
        assert futile.mean_tasks < plain.mean_tasks
    tie = target_power(0.0, 0.02, 48, futility_power=0.2, runs=400, bootstrap_samples=500)
    assert tie.mean_tasks <= 32 and tie.promote_rate <= 0.05
