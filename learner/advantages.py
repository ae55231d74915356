"""Advantages for traffic with one rollout per task, from the signals each session really has.

A reward is a sum of components (``RewardedSession.components``), grouped here
into **signals** that a session either has or lacks:

* ``outcome``: tests, the all-pass bonus and verifiers (absent until an outcome arrives);
* ``feedback``: a user's verdict (absent when nobody judged the session);
* ``cost``: tokens and tool calls (always present);
* ``conduct``: format and hack penalties and any other component (always present: absent means 0);
* ``reward``: the scalar reward of a record that has no components.

A missing signal is missing, never a zero: a session is compared with others
only on the signals it has. For each signal it has, the baseline is

* the group mean: sessions of one micro-batch that share ``(tenant, task_id)``,
  when at least ``min_group_size`` of them have that signal;
* else the running mean of its task family within its tenant (an exponentially
  weighted mean and variance per signal, as it was before this micro-batch),
  once it has seen ``min_count`` values;
* else none: the signal contributes nothing yet.

    A = Σ_signals (value − baseline) / max(scale, std_floor)

where the scale is the root mean square of the group's centred sums (group) or
the square root of the family's variances of the signals used (running). A
signal whose values are all equal therefore contributes 0, whatever other
sessions lack. Advantages are clipped to ±``clip``; a negative one is then
multiplied by ``negative_weight`` (1: the policy gradient; 0: learn only from
what went better than expected, i.e. filtered behaviour cloning).

The family is ``Session.task_family`` when set, else ``metadata["task_family"]``,
else the ``task_id`` without a trailing number or hex digest
(``calc-17`` → ``calc``, ``calculator-3f9a0c1d2b4e5f60`` → ``calculator``), else
``default``. At most ``max_baselines`` (family, signal) statistics are kept, the
least recently updated dropped first.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ingest.contract import RewardedSession, Session

SIGNALS = {
    "outcome": ("tests", "tests_all_pass", "verifiers"),
    "feedback": ("feedback",),
    "cost": ("cost",),
}
ALWAYS = ("cost", "conduct")  # signals every session has (an absent component is a 0)
_SIGNAL_OF = {component: signal for signal, components in SIGNALS.items() for component in components}


def signals(rs: RewardedSession) -> dict[str, float]:
    """The signals a rewarded session has, each the sum of its components; a record that gives only
    a scalar reward has that one signal."""
    if not rs.components:
        return {"reward": rs.reward}
    out = {name: 0.0 for name in ALWAYS}
    for component, value in rs.components.items():
        signal = _SIGNAL_OF.get(component, "conduct")
        out[signal] = out.get(signal, 0.0) + value
    return out


@dataclass(frozen=True)
class AdvantageParams:
    baseline_decay: float = 0.95
    min_count: int = 4
    std_floor: float = 0.1
    clip: float = 5.0
    min_group_size: int = 2
    negative_weight: float = 1.0
    max_baselines: int = 4096


def _weighted(value: float, params: AdvantageParams) -> float:
    return value * params.negative_weight if value < 0 else value


@dataclass(frozen=True)
class FamilyStats:
    count: int = 0
    mean: float = 0.0
    var: float = 0.0


Baselines = dict[str, FamilyStats]  # "tenant/family#signal" → statistics, least recently updated first


@dataclass(frozen=True)
class Scored:
    """A fresh session's signals and where it belongs."""

    tenant: str
    task_id: str | None
    family: str
    signals: dict[str, float]


@dataclass(frozen=True)
class Advantage:
    value: float
    baselines: dict[str, float] = field(default_factory=dict)  # per signal: the value subtracted
    scale: float = 1.0  # the value the sum of differences was divided by
    source: str = "warmup"  # "group", "running" or "warmup" (no baseline yet: value 0)

    @classmethod
    def of(cls, data: Mapping) -> Advantage:
        """From its ledger form (an entry written before signals has a scalar ``baseline``)."""
        known = {k: v for k, v in data.items() if k in ("value", "baselines", "scale", "source")}
        return cls(**known)


_SUFFIX = re.compile(r"(?:[-_.:/]*[0-9]+|[-_.:/]+[0-9a-fA-F]{6,})$")


def task_family(session: Session) -> str:
    if session.task_family:
        return session.task_family
    if "task_family" in session.metadata:
        return session.metadata["task_family"]
    if session.task_id:
        return _SUFFIX.sub("", session.task_id) or session.task_id
    return "default"


def scored(rs: RewardedSession) -> Scored:
    return Scored(rs.tenant, rs.session.task_id, task_family(rs.session), signals(rs))


def family_key(tenant: str, family: str, signal: str) -> str:
    return f"{tenant}/{family}#{signal}"


def observe(baselines: Baselines, key: str, value: float, decay: float, limit: int) -> Baselines:
    """The statistics after one more value (bias-free for the first one), ``key`` now the most recent."""
    old = baselines.get(key, FamilyStats())
    if old.count == 0:
        new = FamilyStats(count=1, mean=value, var=0.0)
    else:
        diff = value - old.mean
        step = (1.0 - decay) * diff
        new = FamilyStats(count=old.count + 1, mean=old.mean + step, var=decay * (old.var + diff * step))
    out = {k: v for k, v in baselines.items() if k != key}
    out[key] = new
    while len(out) > limit:
        del out[next(iter(out))]
    return out


def _clip(value: float, bound: float) -> float:
    return max(-bound, min(bound, value))


def score(
    items: list[Scored], baselines: Baselines, params: AdvantageParams
) -> tuple[list[Advantage], Baselines]:
    """Advantages for one micro-batch of fresh sessions, and the baselines after it."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        if item.task_id is not None:
            groups[(item.tenant, item.task_id)].append(i)
    group_of: dict[int, list[int]] = {}
    group_means: dict[int, dict[str, float]] = {}
    for members in groups.values():
        if len(members) < params.min_group_size:
            continue
        by_signal: dict[str, list[float]] = defaultdict(list)
        for m in members:
            for name, value in items[m].signals.items():
                by_signal[name].append(value)
        means = {n: sum(v) / len(v) for n, v in by_signal.items() if len(v) >= params.min_group_size}
        for m in members:
            group_of[m], group_means[m] = members, means

    chosen: list[dict[str, float]] = []  # per item: the baseline of each signal it could be scored on
    diffs: list[dict[str, float]] = []
    for i, item in enumerate(items):
        group = group_means.get(i, {})
        base: dict[str, float] = {}
        for name in sorted({*SIGNALS, *ALWAYS, *item.signals}):
            stats = baselines.get(family_key(item.tenant, item.family, name), FamilyStats())
            if name in group:
                base[name] = group[name]
            elif stats.count >= params.min_count:
                base[name] = stats.mean
        chosen.append(base)
        diffs.append({n: v - base[n] for n, v in item.signals.items() if n in base})

    advantages: list[Advantage] = []
    for i, item in enumerate(items):
        if not diffs[i]:
            advantages.append(Advantage(0.0, chosen[i], 1.0, "warmup"))
            continue
        if i in group_of:
            sums = [sum(diffs[m].values()) for m in group_of[i]]
            scale, source = math.sqrt(sum(d * d for d in sums) / len(sums)), "group"
        else:
            keys = [family_key(item.tenant, item.family, n) for n in diffs[i]]
            scale, source = math.sqrt(sum(baselines[k].var for k in keys)), "running"
        scale = max(scale, params.std_floor)
        value = _weighted(_clip(sum(diffs[i].values()) / scale, params.clip), params)
        advantages.append(Advantage(value, chosen[i], scale, source))

    for item in items:
        for name, value in item.signals.items():
            key = family_key(item.tenant, item.family, name)
            baselines = observe(baselines, key, value, params.baseline_decay, params.max_baselines)
    return advantages, baselines


def amended(previous: Advantage, new_signals: Mapping[str, float], params: AdvantageParams) -> Advantage:
    """The advantage revised signals would have had, against the baselines and scale used in training;
    a signal without a baseline then (a family still warming up) contributes nothing."""
    diffs = [v - previous.baselines[n] for n, v in new_signals.items() if n in previous.baselines]
    if not diffs:
        return replace(previous, value=0.0)
    value = _weighted(_clip(sum(diffs) / previous.scale, params.clip), params)
    return replace(previous, value=value)
