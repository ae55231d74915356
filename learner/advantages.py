"""Advantages for traffic with one rollout per task.

* Group baseline: sessions of one micro-batch that share ``(tenant, task_id)``
  (at least ``min_group_size`` of them) are scored against each other:
  A = (r − mean_group) / max(std_group, std_floor); an all-equal group gives 0.
* Running baseline: every other session is scored against an exponentially
  weighted mean and variance of the rewards of its task family within its
  tenant, as they were before this micro-batch:
  A = (r − mean_family) / max(std_family, std_floor). Until a family has seen
  ``min_count`` rewards its single sessions get A = 0 (no baseline yet).

The family is ``metadata["task_family"]`` when a session carries it, else the
``task_id`` without its trailing number (``calc-17`` → ``calc``), else
``default``. Every fresh reward updates its family's statistics once, after
the batch is scored. Advantages are clipped to ±``clip``; a negative one is
then multiplied by ``negative_weight`` (1: plain policy gradient; 0: learn only
from what went better than expected, which keeps a small model from pushing
probability onto junk tokens while it is taught away from its failures).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, replace

from ingest.contract import Session


@dataclass(frozen=True)
class AdvantageParams:
    baseline_decay: float = 0.95
    min_count: int = 4
    std_floor: float = 0.1
    clip: float = 5.0
    min_group_size: int = 2
    negative_weight: float = 1.0


def _weighted(value: float, params: AdvantageParams) -> float:
    return value * params.negative_weight if value < 0 else value


@dataclass(frozen=True)
class FamilyStats:
    count: int = 0
    mean: float = 0.0
    var: float = 0.0


Baselines = dict[str, FamilyStats]


@dataclass(frozen=True)
class Scored:
    """A fresh session's reward and where it belongs."""

    tenant: str
    task_id: str | None
    family: str
    reward: float


@dataclass(frozen=True)
class Advantage:
    value: float
    baseline: float  # the value subtracted from the reward
    scale: float  # the value the difference was divided by
    source: str  # "group", "running" or "warmup" (no baseline yet: value 0)


_TRAILING_NUMBER = re.compile(r"[-_.:/]*[0-9]+$")


def task_family(session: Session) -> str:
    if "task_family" in session.metadata:
        return session.metadata["task_family"]
    if session.task_id:
        return _TRAILING_NUMBER.sub("", session.task_id) or session.task_id
    return "default"


def family_key(tenant: str, family: str) -> str:
    return f"{tenant}/{family}"


def observe(baselines: Baselines, key: str, reward: float, decay: float) -> Baselines:
    """The statistics after one more reward (bias-free for the first one)."""
    old = baselines.get(key, FamilyStats())
    if old.count == 0:
        new = FamilyStats(count=1, mean=reward, var=0.0)
    else:
        diff = reward - old.mean
        step = (1.0 - decay) * diff
        new = FamilyStats(count=old.count + 1, mean=old.mean + step, var=decay * (old.var + diff * step))
    return {**baselines, key: new}


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
    advantages: list[Advantage | None] = [None] * len(items)
    for members in groups.values():
        if len(members) < params.min_group_size:
            continue
        rewards = [items[i].reward for i in members]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        scale = max(std, params.std_floor)
        for i in members:
            advantages[i] = Advantage(
                _weighted(_clip((items[i].reward - mean) / scale, params.clip), params), mean, scale, "group"
            )
    for i, item in enumerate(items):
        if advantages[i] is not None:
            continue
        stats = baselines.get(family_key(item.tenant, item.family), FamilyStats())
        scale = max(math.sqrt(stats.var), params.std_floor)
        if stats.count < params.min_count:
            advantages[i] = Advantage(0.0, stats.mean, scale, "warmup")
        else:
            advantages[i] = Advantage(
                _weighted(_clip((item.reward - stats.mean) / scale, params.clip), params),
                stats.mean,
                scale,
                "running",
            )
    for item in items:
        baselines = observe(
            baselines, family_key(item.tenant, item.family), item.reward, params.baseline_decay
        )
    return [a for a in advantages if a is not None], baselines


def amended(previous: Advantage, new_reward: float, params: AdvantageParams) -> Advantage:
    """The advantage a revised reward would have had, against the baseline and scale used in training."""
    if previous.source == "warmup":
        return previous
    value = _weighted(_clip((new_reward - previous.baseline) / previous.scale, params.clip), params)
    return replace(previous, value=value)
