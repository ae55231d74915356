"""The sequential gate's statistics: anytime-valid bounds on a mean paired gain, and when to stop.

The gate scores the candidate and the champion on the same tasks, task after
task in an order fixed before any score is seen (``task_order``); each task
gives a paired difference d_i = candidate_i − champion_i in [−1, 1]. After
every round (``rounds``) it asks ``sequential_target`` or
``sequential_noninferiority`` whether the evidence so far already settles the
question; if not, it scores the next round. A "continue" after the last round
leaves the decision to the full-suite rule (``gating.rule``).

The bound is the one-sided betting confidence sequence of Waudby-Smith &
Ramdas, "Estimating means of bounded random variables by betting" (JRSS-B
2024, arXiv:2010.09686: the capital process of Section 4 with its predictable
plug-in bets, one side of "hedged capital"), on x_i = (d_i + 1) / 2 in [0, 1].
For every candidate mean m in (0, 1) a bettor stakes λ_t(m) on x_t > m::

    μ̂_t  = (1/2 + Σ_{i≤t} x_i) / (t + 1)                      μ̂_0 = 1/2
    σ̂²_t = (1/4 + Σ_{i≤t} (x_i − μ̂_i)²) / (t + 1)             σ̂²_0 = 1/4
    λ̇_t  = sqrt(2 log(1/α) / (σ̂²_{t−1} · t · log(1 + t)))
    λ_t(m) = min(λ̇_t, c / m)
    K_t(m) = Π_{i≤t} (1 + λ_i(m) (x_i − m))

and m is ruled out once K_t(m) ≥ 1/α. Each factor falls as m grows, so the ruled-out
means are an interval (0, L_t]: L_t is the lower bound (``betting_lower``, on a grid
of ``GRID`` means, rounded down to it).

Why it holds: λ_t(m) depends only on x_1..x_{t−1}, and 1 + λ_t(m)(x_t − m) ≥ 1 − c > 0,
so at m = μ, when E[x_t | x_1..x_{t−1}] = μ, K_t(μ) is a nonnegative martingale with
K_0 = 1. By Ville's inequality P(∃t: K_t(μ) ≥ 1/α) ≤ α, so P(∃t: L_t ≥ μ) ≤ α: the
bound may be read after every task and the gate may stop on it whenever it likes.
The running maximum max_{s≤t} L_s (the running intersection) therefore holds too.
``lower_bounds`` returns it mapped back to d (2 L − 1); ``upper_bounds`` applies the
same to −d. Validity needs a constant conditional mean: the tasks are draws from one
task distribution (the quantity bounded is the mean gain over that distribution, as
for the bootstrap) and are taken in an order that does not depend on their scores,
hence a seeded shuffle fixed in advance.

The cost of the cap c: with no noise at all (x ≡ 1/2, every bet at its cap c/m)
K_t(m) = (1 + c (1/(2m) − 1))^t, so a lower bound at distance G below the mean
difference (in units of d) needs log(1/α) / log(1 + c G / (1 − G)) tasks: identical
scores rule out a drop of 0.10 after 38 tasks at α = 0.05 and c = 3/4. The empirical-Bernstein
bound of the same paper (its Theorem 2) needed 120 for that: its bets do not grow
with the distance from m, and its penalty term grows with them.

Splitting α between the two sides: each side is run at level α, not α/2.
A wrong promotion needs μ < min_gain ≤ L_t for some t (probability ≤ α); a
wrong rejection needs U_t < min_gain ≤ μ (probability ≤ α); for any one true
μ only one of the two mistakes is possible, so P(wrong decision) ≤ α. The
reported [lower, upper] is thus a 1 − 2α band, not a 1 − α one. A "continue"
that falls back to the full-suite rule adds that rule's own error.

Stopping for futility (``conditional_power``): the anytime upper bound is slow to
rule a gain out (a candidate 0.10 worse than the champion keeps it above a
required +0.02 for ~40 of 48 tasks), while the full-suite rule needs far more
than a true gain of ``min_gain`` to promote: its lower bound after all n tasks
must reach it. So after t < n tasks the gate may also ask how likely that rule
still is to promote, granting the candidate an optimistic true gain for the
rest: the one-sided 1 − α upper bound from the tasks so far (plain, not
anytime), μ⁺ = d̄_t + z s_t / √t, with the spread s_t of the tasks so far
(regularised as the bets' variance is, s²_t = (1 + Σ (d_i − d̄_t)²) / (t + 1)).
With the full rule's bound approximated as d̄_n − z s / √n, it promotes when
the remaining n − t tasks average at least

    r = (n (min_gain + z s_t / √n) − t d̄_t) / (n − t)

and their mean is about N(μ⁺, s²_t / (n − t)), so the conditional power is
1 − Φ((r − μ⁺) √(n − t) / s_t). Below ``futility_power`` the gate rejects then.
Such a stop only ever rejects, so it cannot make a wrong promotion more likely;
its price is power, which ``target_power`` simulates (at 0.2, in the demo's
setting, it loses at most 2 points of the full suite's promotion rate at any
true gain and scores 44 % fewer tasks for a tie).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from gating.rule import lower_bound

BET_CAP = 0.75  # c: the largest share of capital staked, as c / m (the paper suggests 1/2 or 3/4)
GRID = np.arange(1, 1000) / 1000  # the means m the bound is read on: it is rounded down to them
_CHUNK = 4_000_000  # grid cells (runs x tasks x means) computed at once
FUTILE = -2  # ``first_stop``'s step for a stop for futility


@dataclass(frozen=True)
class Outcome:
    decision: str  # target: promote | reject | continue; guard: pass | fail | continue
    tasks_used: int  # the tasks scored when the decision was read
    change: float  # mean paired difference over those tasks
    lower: float  # anytime-valid lower bound of the mean difference (level α) after them
    upper: float  # anytime-valid upper bound (level α)
    reason: str
    # the full-suite rule's chance to promote from here, granting an optimistic gain for the rest
    # (``conditional_power``); None when not asked (futility off, or no task left)
    power: float | None = None


@dataclass(frozen=True)
class TargetPower:
    change: float  # true mean gain of the target
    n_tasks: int
    promote_rate: float  # share of simulated runs promoted (by the bound or by the full-suite rule)
    futile_rate: float  # share stopped for futility
    mean_tasks: float  # tasks scored before the decision


@dataclass(frozen=True)
class GuardPower:
    change: float  # true mean change of the guarded metric
    n_tasks: int
    pass_rate: float  # share of simulated runs the guard passed
    fail_rate: float
    mean_tasks: float  # tasks scored before the guard stopped (all of them on "continue")


def task_order(task_ids: Sequence[str], seed: int) -> list[str]:
    """The order tasks are scored in: a seeded shuffle of the sorted ids, fixed before any score."""
    ids = sorted(task_ids)
    return [ids[i] for i in np.random.default_rng(seed).permutation(len(ids))]


def rounds(n_tasks: int, round_size: int) -> list[tuple[int, int]]:
    """(start, stop) of each round over the first ``n_tasks`` of the order; the last may be short."""
    if round_size < 1:
        raise ValueError(f"round_size must be at least 1, got {round_size}")
    return [(start, min(start + round_size, n_tasks)) for start in range(0, n_tasks, round_size)]


def betting_lower(x_T: np.ndarray, alpha: float) -> np.ndarray:
    """L_t of the betting confidence sequence for the mean of x in [0, 1], along the last axis.

    Each L_t on its own, not intersected over time: the largest mean of ``GRID`` at or below
    which every mean is ruled out after t observations (0 when none is).
    """
    x_R_T = np.atleast_2d(np.asarray(x_T, dtype=float))
    runs, n = x_R_T.shape
    t_T = np.arange(1, n + 1)
    log_inv_alpha = math.log(1.0 / alpha)

    mean_R_T = (0.5 + np.cumsum(x_R_T, axis=-1)) / (t_T + 1)
    var_R_T = (0.25 + np.cumsum((x_R_T - mean_R_T) ** 2, axis=-1)) / (t_T + 1)
    prev_var_R_T = np.concatenate([np.full((runs, 1), 0.25), var_R_T[:, :-1]], axis=-1)
    bet_R_T = np.sqrt(2.0 * log_inv_alpha / (prev_var_R_T * t_T * np.log1p(t_T)))

    cap_M = BET_CAP / GRID
    lower_R_T = np.empty((runs, n))
    step = max(1, _CHUNK // max(1, n * len(GRID)))
    for start in range(0, runs, step):
        rows = slice(start, start + step)
        bet_r_T_M = np.minimum(bet_R_T[rows, :, None], cap_M)
        log_capital_r_T_M = np.cumsum(np.log1p(bet_r_T_M * (x_R_T[rows, :, None] - GRID)), axis=1)
        kept_r_T_M = log_capital_r_T_M < log_inv_alpha  # means not ruled out
        first_kept_r_T = np.where(kept_r_T_M.any(axis=-1), kept_r_T_M.argmax(axis=-1), len(GRID))
        lower_R_T[rows] = np.where(first_kept_r_T > 0, GRID[np.maximum(first_kept_r_T - 1, 0)], 0.0)
    return lower_R_T.reshape(np.shape(x_T))


def lower_bounds(diffs_T: np.ndarray, alpha: float) -> np.ndarray:
    """Anytime-valid lower bound of the mean of paired differences in [−1, 1] after each one.

    The running maximum over time of the betting bound, at least −1; works along the last axis,
    so a [runs, T] array gives every run's sequence at once.
    """
    diffs_T = _checked(diffs_T, alpha)
    if diffs_T.shape[-1] == 0:
        return diffs_T.copy()
    lower_x_T = np.maximum.accumulate(betting_lower((diffs_T + 1.0) / 2.0, alpha), axis=-1)
    return 2.0 * lower_x_T - 1.0


def upper_bounds(diffs_T: np.ndarray, alpha: float) -> np.ndarray:
    """Anytime-valid upper bound after each difference: the lower bound of −d, negated."""
    return -lower_bounds(-np.asarray(diffs_T, dtype=float), alpha)


def sequential_target(
    diffs_in_order: np.ndarray,
    min_gain: float,
    alpha: float,
    min_tasks: int,
    round_size: int = 1,
    total_tasks: int | None = None,
    futility_power: float = 0.0,
) -> Outcome:
    """Promote once the gain's lower bound reaches ``min_gain``; reject once its upper bound is below it,
    or (``futility_power`` > 0) once the full-suite rule's conditional power falls below that.

    The decision is read at the end of each round (``round_size`` tasks) from ``min_tasks`` tasks on.
    Should both bounds decide at the same look (they have crossed, which valid bounds rarely do) it
    rejects. ``total_tasks``: the suite's size, when ``diffs_in_order`` holds only the tasks scored
    so far (default: their number). "continue" after the last task hands the decision to the
    full-suite rule.
    """
    diffs_T = _checked(diffs_in_order, alpha)
    n = len(diffs_T) if total_tasks is None else total_tasks
    if n < len(diffs_T):
        raise ValueError(f"total_tasks ({n}) is less than the {len(diffs_T)} differences given")
    step, t, lower, upper = _read(diffs_T, min_gain, alpha, min_tasks, round_size, n, futility_power)
    change = float(diffs_T[:t].mean()) if t else float("nan")
    power = (
        float(conditional_power(diffs_T[:t], n, min_gain, alpha)[-1])
        if futility_power > 0 and 0 < t < n
        else None
    )
    level = f"{1 - alpha:.0%}"
    if step == FUTILE:
        decision = "reject"
        reason = (
            f"gain {change:+.3f} over the first {t} of {n} tasks: even at its optimistic {level} bound "
            f"for the rest, the full suite would reach the required {min_gain:+.3f} with probability "
            f"{power:.2f}, under {futility_power:.2f}: stopped for futility"
        )
    elif step > 0:
        decision = "promote"
        reason = (
            f"gain {change:+.3f} over the first {t} of {n} tasks has a {level} anytime lower bound "
            f"of {lower:+.3f}, at least the required {min_gain:+.3f}"
        )
    elif step < 0:
        decision = "reject"
        reason = (
            f"gain {change:+.3f} over the first {t} of {n} tasks has a {level} anytime upper bound "
            f"of {upper:+.3f}, below the required {min_gain:+.3f}: it cannot reach it"
        )
    else:
        decision = "continue"
        reason = _undecided(t, n, min_tasks, change, lower, upper, f"the required gain {min_gain:+.3f}")
    return Outcome(decision, t, change, lower, upper, reason, power)


def sequential_noninferiority(
    diffs_in_order: np.ndarray,
    margin: float,
    alpha: float,
    min_tasks: int,
    round_size: int = 1,
    unit: str = "tasks",
) -> Outcome:
    """Pass a guard once the change's lower bound is at least −``margin``; fail once its upper bound is below.

    Pass: the candidate is shown to be no worse than the champion by more than ``margin``.
    Fail: it is shown to be worse by more than ``margin``. Looks and ties as in ``sequential_target``.
    """
    diffs_T = _checked(diffs_in_order, alpha)
    step, t, lower, upper = _read(diffs_T, -margin, alpha, min_tasks, round_size)
    change = float(diffs_T[:t].mean()) if t else float("nan")
    n = len(diffs_T)
    level = f"{1 - alpha:.0%}"
    if step > 0:
        decision = "pass"
        reason = (
            f"change {change:+.3f} over the first {t} of {n} {unit} has a {level} anytime lower bound "
            f"of {lower:+.3f}: not worse by more than the margin {margin:.3f}"
        )
    elif step < 0:
        decision = "fail"
        reason = (
            f"change {change:+.3f} over the first {t} of {n} {unit} has a {level} anytime upper bound "
            f"of {upper:+.3f}: worse by more than the margin {margin:.3f}"
        )
    else:
        decision = "continue"
        reason = _undecided(t, n, min_tasks, change, lower, upper, f"the margin −{margin:.3f}", unit)
    return Outcome(decision, t, change, lower, upper, reason)


def first_stop(
    diffs_R_T: np.ndarray,
    threshold: float,
    alpha: float,
    min_tasks: int,
    round_size: int = 1,
    total_tasks: int | None = None,
    futility_power: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """For each run (row): +1 if the lower bound reached ``threshold`` first, −1 if the upper bound fell
    below it first (or both at once), ``FUTILE`` if the conditional power of the full suite of
    ``total_tasks`` fell below ``futility_power`` first (never at the suite's last task), 0 if none
    of these by the end; and the tasks used when it stopped.

    The looks are the ends of the rounds that have at least ``min_tasks`` tasks.
    """
    diffs_R_T = _checked(diffs_R_T, alpha)
    runs, n = diffs_R_T.shape
    total = n if total_tasks is None else total_tasks
    looks_L = np.array([stop for _, stop in rounds(n, round_size) if stop >= min_tasks], dtype=int)
    if len(looks_L) == 0:
        return np.zeros(runs, dtype=int), np.full(runs, n)
    up_R_L = lower_bounds(diffs_R_T, alpha)[:, looks_L - 1] >= threshold
    down_R_L = upper_bounds(diffs_R_T, alpha)[:, looks_L - 1] < threshold
    futile_R_L = np.zeros_like(up_R_L)
    if futility_power > 0:
        futile_R_L = (
            conditional_power(diffs_R_T, total, threshold, alpha)[:, looks_L - 1] < futility_power
        ) & (looks_L < total)
    hit_R_L = up_R_L | down_R_L | futile_R_L
    first_R = np.where(hit_R_L.any(axis=1), hit_R_L.argmax(axis=1), len(looks_L) - 1)
    row_R = np.arange(runs)
    step_R = np.select(
        [down_R_L[row_R, first_R], up_R_L[row_R, first_R], futile_R_L[row_R, first_R]], [-1, 1, FUTILE], 0
    )
    return step_R, np.where(step_R != 0, looks_L[first_R], n)


def conditional_power(diffs_T: np.ndarray, total_tasks: int, min_gain: float, alpha: float) -> np.ndarray:
    """After each of the first t tasks (along the last axis): the chance that the full-suite rule,
    after all ``total_tasks``, finds a lower bound of at least ``min_gain``, if the rest gain
    μ⁺ = d̄_t + z s_t / √t on average (the module's docstring gives the formula). 1 at the last task
    and beyond, where nothing is left to project."""
    d_R_T = np.atleast_2d(np.asarray(diffs_T, dtype=float))
    n = d_R_T.shape[-1]
    if total_tasks < n:
        raise ValueError(f"total_tasks ({total_tasks}) is less than the {n} differences given")
    z = NormalDist().inv_cdf(1.0 - alpha)
    t_T = np.arange(1, n + 1)
    mean_R_T = np.cumsum(d_R_T, axis=-1) / t_T
    squares_R_T = np.maximum(np.cumsum(d_R_T**2, axis=-1) - t_T * mean_R_T**2, 0.0)
    s_R_T = np.sqrt((1.0 + squares_R_T) / (t_T + 1))
    optimistic_R_T = mean_R_T + z * s_R_T / np.sqrt(t_T)
    rest_T = np.maximum(total_tasks - t_T, 1)
    needed_R_T = (total_tasks * (min_gain + z * s_R_T / math.sqrt(total_tasks)) - t_T * mean_R_T) / rest_T
    score_R_T = (needed_R_T - optimistic_R_T) * np.sqrt(rest_T) / s_R_T
    power_R_T = 0.5 * np.vectorize(math.erfc, otypes=[float])(score_R_T / math.sqrt(2.0))
    power_R_T = np.where(t_T < total_tasks, power_R_T, 1.0)
    return power_R_T.reshape(np.shape(diffs_T))


def target_power(
    change: float,
    min_gain: float,
    n_tasks: int,
    alpha: float = 0.05,
    min_tasks: int = 16,
    round_size: int = 8,
    futility_power: float = 0.0,
    samples: int = 3,
    pass_range: tuple[float, float] = (0.2, 0.6),
    runs: int = 2000,
    seed: int = 0,
    bootstrap_samples: int = 1000,
) -> TargetPower:
    """How often the target is promoted, by the sequential bound or by the full-suite bootstrap when
    the rounds leave it undecided, and how many tasks it scores, by simulation."""
    rng = np.random.default_rng(seed)
    diffs_R_T = simulate_diffs(rng, runs, n_tasks, change, samples, pass_range)
    step_R, used_R = first_stop(diffs_R_T, min_gain, alpha, min_tasks, round_size, n_tasks, futility_power)
    full_R = np.array(
        [
            step == 0 and lower_bound(d, 1.0 - alpha, bootstrap_samples, i) >= min_gain
            for i, (d, step) in enumerate(zip(diffs_R_T, step_R, strict=True))
        ]
    )
    return TargetPower(
        change=change,
        n_tasks=n_tasks,
        promote_rate=float(np.mean((step_R > 0) | full_R)),
        futile_rate=float(np.mean(step_R == FUTILE)),
        mean_tasks=float(used_R.mean()),
    )


def simulate_diffs(
    rng: np.random.Generator,
    runs: int,
    n_tasks: int,
    change: float,
    samples: int = 1,
    pass_range: tuple[float, float] = (0.2, 0.8),
    coupling: float = 0.0,
) -> np.ndarray:
    """Paired differences [runs, n_tasks] of a metric scored as pass@1 over ``samples`` completions.

    Each task has its own champion pass probability p ~ U(pass_range) and candidate p + ``change``,
    so the true mean change is exactly ``change``. Each candidate sample reuses the champion's
    uniform draw with probability ``coupling`` (0: independent; 1: as alike as the two rates allow,
    as for greedy decoding of two close policies).
    """
    low, high = pass_range
    if not (low + change >= 0.0 and high + change <= 1.0 and 0.0 <= low <= high <= 1.0):
        raise ValueError(f"pass_range {pass_range} shifted by {change:+.3f} leaves [0, 1]")
    p_R_T = rng.uniform(low, high, size=(runs, n_tasks))
    u_R_T_K = rng.random((runs, n_tasks, samples))
    fresh_R_T_K = rng.random((runs, n_tasks, samples))
    shared_R_T_K = rng.random((runs, n_tasks, samples)) < coupling
    candidate_u_R_T_K = np.where(shared_R_T_K, u_R_T_K, fresh_R_T_K)
    champion_R_T = (u_R_T_K < p_R_T[..., None]).mean(axis=-1)
    candidate_R_T = (candidate_u_R_T_K < (p_R_T + change)[..., None]).mean(axis=-1)
    return candidate_R_T - champion_R_T


def guard_power(
    change: float,
    margin: float,
    n_tasks: int,
    alpha: float = 0.05,
    min_tasks: int = 8,
    round_size: int = 1,
    samples: int = 1,
    pass_range: tuple[float, float] = (0.2, 0.8),
    coupling: float = 0.0,
    runs: int = 2000,
    seed: int = 0,
) -> GuardPower:
    """How often ``sequential_noninferiority`` passes and fails, and how many tasks it scores, by simulation."""
    rng = np.random.default_rng(seed)
    diffs_R_T = simulate_diffs(rng, runs, n_tasks, change, samples, pass_range, coupling)
    step_R, used_R = first_stop(diffs_R_T, -margin, alpha, min_tasks, round_size)
    return GuardPower(
        change=change,
        n_tasks=n_tasks,
        pass_rate=float(np.mean(step_R > 0)),
        fail_rate=float(np.mean(step_R < 0)),
        mean_tasks=float(used_R.mean()),
    )


def power_table(
    changes: Sequence[float], task_counts: Sequence[int], margin: float, **simulation
) -> list[GuardPower]:
    """``guard_power`` for every true change and number of tasks (keyword arguments pass through)."""
    return [guard_power(change, margin, n, **simulation) for change in changes for n in task_counts]


def _read(
    diffs_T: np.ndarray,
    threshold: float,
    alpha: float,
    min_tasks: int,
    round_size: int,
    total_tasks: int | None = None,
    futility_power: float = 0.0,
) -> tuple[int, int, float, float]:
    """The decision step, the tasks used, and the bounds after them, for one sequence."""
    if len(diffs_T) == 0:
        return 0, 0, -1.0, 1.0
    step_R, used_R = first_stop(
        diffs_T[None, :], threshold, alpha, min_tasks, round_size, total_tasks, futility_power
    )
    t = int(used_R[0])
    lower = float(lower_bounds(diffs_T, alpha)[t - 1])
    upper = float(upper_bounds(diffs_T, alpha)[t - 1])
    return int(step_R[0]), t, lower, upper


def _undecided(
    t: int, n: int, min_tasks: int, change: float, lower: float, upper: float, what: str, unit: str = "tasks"
) -> str:
    if t < min_tasks:
        return f"only {t} {unit}, fewer than the {min_tasks} needed before a sequential decision"
    return (
        f"change {change:+.3f} over all {t} of {n} {unit}: the anytime bounds [{lower:+.3f}, {upper:+.3f}] "
        f"still straddle {what}"
    )


def _checked(diffs: np.ndarray, alpha: float) -> np.ndarray:
    diffs = np.asarray(diffs, dtype=float)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if diffs.size and not (np.all(diffs >= -1.0) and np.all(diffs <= 1.0)):
        raise ValueError("paired differences must lie in [-1, 1]")
    return diffs
