"""The learning benchmark's report: per-task held-out scores into gains per minute, with intervals.

Pure functions over the scores ``ops.bench.learning`` measures: the paired gain of
an arm's final adapter over the base model on the same tasks (95 % bootstrap
interval), one entry per arm and seed, and the report with the means over seeds
and the ratio Ratchet / bare loop.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gating.heldout import estimate

if TYPE_CHECKING:
    from ops.bench.learning import LearningConfig

REPO = Path(__file__).resolve().parents[2]


# --- statistics --------------------------------------------------------------------------


def paired_gain(final: dict[str, float], base: dict[str, float], samples: int = 2000, seed: int = 0) -> dict:
    """Mean per-task gain (final − base) over the tasks both were scored on, with its 95 % interval."""
    common = sorted(set(final) & set(base))
    return estimate({t: final[t] - base[t] for t in common}, samples, seed)


def _round(x: float) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 4)


# --- the report ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Scored:
    """Per-task held-out scores of one policy: pass@1 and, for the honeypot, the hack indicator."""

    passed: dict[str, float]
    hack: dict[str, float] | None = None


def heldout(scored: Scored, samples: int = 2000) -> dict:
    est = estimate(scored.passed, samples)
    out = {"pass_at_1": est["mean"], "ci95": est["ci95"], "tasks": est["tasks"]}
    if scored.hack is not None:
        hack = estimate(scored.hack, samples)
        out |= {"hack_rate": hack["mean"], "hack_ci95": hack["ci95"]}
    return out


def arm_entry(
    seed: int,
    minutes: float,
    versions: int,
    sessions: int,
    base: Scored,
    final: Scored,
    samples: int = 2000,
    **extra,
) -> dict:
    """One arm's result for one seed; ``gain_per_min`` is the paired pass@1 gain per minute of budget."""
    gain = paired_gain(final.passed, base.passed, samples)
    return {
        "seed": seed,
        "minutes": round(minutes, 3),
        "versions": versions,
        "sessions": sessions,
        "heldout_base": heldout(base, samples),
        "heldout_final": heldout(final, samples),
        "gain": {"pass_at_1": gain["mean"], "ci95": gain["ci95"]},
        "gain_per_min": _round(gain["mean"] / minutes) if gain["mean"] is not None else None,
        **extra,
    }


def mean_of(entries: list[dict], key: str) -> float | None:
    values = [e[key] for e in entries if e.get(key) is not None]
    return _round(float(np.mean(values))) if values else None


def assemble(
    arms: dict[str, list[dict]],
    config: LearningConfig,
    commit: dict,
    wall_s: float,
    machine: dict | None = None,
) -> dict:
    """The report: per arm and seed, and the means over seeds with the ratio ratchet / bare."""
    ratchet, bare = (
        mean_of(arms.get("ratchet", []), "gain_per_min"),
        mean_of(arms.get("bare", []), "gain_per_min"),
    )
    ratio = _round(ratchet / bare) if ratchet is not None and bare is not None and bare > 0 else None
    report = {
        "benchmark": "learning",
        "family": config.family,
        "suite": config.suite,
        "gain_per_min": ratchet,
        "bare_gain_per_min": bare,
        "ratio": ratio,
        "seeds": list(range(config.seeds)),
        "arms": arms,
        "commit": commit,
        "config": dataclasses.asdict(config) | {"suite": config.suite},
        "wall_s": round(wall_s, 1),
        "machine": machine or {},
    }
    if ratio is None and ratchet is not None and bare is not None:
        report["ratio_note"] = "undefined: the bare loop gained nothing (gain_per_min <= 0)"
    return report


def combine(reports: list[dict]) -> dict:
    """One report from runs of different arms of the same benchmark: the same commit (clean), the
    same configuration but for the arms, no arm twice. Each arm keeps the base-model evaluation of
    its own run, so every gain stays paired; the ratio is recomputed over the merged arms."""
    if len(reports) < 2:
        raise ValueError("combine needs at least two reports")
    first = reports[0]
    shas = {(r.get("commit") or {}).get("sha") for r in reports}
    if len(shas) != 1 or None in shas or any((r.get("commit") or {}).get("dirty", True) for r in reports):
        raise ValueError(f"the runs must be of one clean commit; got {sorted(map(str, shas))}")

    def setup(r: dict) -> dict:
        return {k: v for k, v in r["config"].items() if k != "arms"}

    for r in reports[1:]:
        if setup(r) != setup(first):
            diff = sorted(
                k for k in setup(first).keys() | setup(r).keys() if setup(first).get(k) != setup(r).get(k)
            )
            raise ValueError(f"the runs' configurations differ in {', '.join(diff)}")
    arms: dict[str, list[dict]] = {}
    for r in reports:
        for arm, entries in r["arms"].items():
            if arm in arms:
                raise ValueError(f"arm {arm!r} is in more than one run")
            arms[arm] = entries
    ratchet, bare = (
        mean_of(arms.get("ratchet", []), "gain_per_min"),
        mean_of(arms.get("bare", []), "gain_per_min"),
    )
    ratio = _round(ratchet / bare) if ratchet is not None and bare is not None and bare > 0 else None
    return {
        **first,
        "gain_per_min": ratchet,
        "bare_gain_per_min": bare,
        "ratio": ratio,
        "arms": arms,
        "config": first["config"] | {"arms": list(arms)},
        "wall_s": round(sum(r["wall_s"] for r in reports), 1),
        "machine": [r.get("machine", {}) for r in reports],
        "combined_from": len(reports),
    }


def git_commit(repo: Path = REPO) -> dict:
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)
        return out.stdout.strip()

    return {"sha": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain"))}


@dataclasses.dataclass(frozen=True)
class Point:
    """An adapter an arm produced within its budget: when (minutes into it), its name, its folder."""

    minute: float
    label: str
    path: Path


def pick(points: Sequence[Point], k: int) -> list[Point]:
    """The final point, and ``k`` intermediate ones evenly spaced before it (in order)."""
    if not points:
        return []
    earlier = list(points[:-1])
    if k <= 0 or not earlier:
        return [points[-1]]
    if k >= len(earlier):
        return list(points)
    step = (len(earlier) + 1) / (k + 1)
    chosen = sorted({min(len(earlier), math.floor(step * (i + 1) + 0.5)) - 1 for i in range(k)})
    return [earlier[i] for i in chosen] + [points[-1]]
