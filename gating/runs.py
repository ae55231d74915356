"""What a decision records in MLflow: the run's parameters, tags and artifacts.

One builder per kind of decision: :func:`evaluation_run` for the gate's own
evaluation (per-task rows, the decision with its evidence, a comparison plot
and the candidate's manifest) and :func:`ruling_run` for an override or a
canary verdict. :class:`gating.records.Registry` writes them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from gating.records import REASON_CODES, comparison_png, json_bytes
from gating.rule import Decision
from gating.settings import GateSettings
from gating.suites import Suite
from learner.store import AdapterStore, StoredAdapter


@dataclass(frozen=True)
class Run:
    """One MLflow run, as ``Registry.log_run`` takes it."""

    name: str
    params: dict[str, Any]
    metrics: dict[str, float]
    tags: dict[str, str]
    artifacts: dict[str, bytes]


def decision_tags(
    decision: str, reasons: list[dict[str, str]], action: str, actor: str, candidate: str, champion: str
) -> dict[str, str]:
    return {
        "gate.decision": decision,
        "gate.reasons": "; ".join(r["message"] for r in reasons) or "all checks passed",
        REASON_CODES: ",".join(r["code"] for r in reasons),
        "gate.action": action,
        "gate.actor": actor,
        "gate.candidate": candidate,
        "gate.champion": champion,
    }


def manifest(store: AdapterStore, stored: StoredAdapter) -> bytes:
    """The ``adapter/manifest.json`` artifact: the manifest and where the store keeps the adapter."""
    return json_bytes(asdict(stored.manifest) | {"store": str(store.root), "path": str(stored.path)})


def evaluation_run(
    settings: GateSettings,
    suites: list[Suite],
    store: AdapterStore,
    decision_id: str,
    candidate: StoredAdapter,
    champion: str,
    decision: Decision,
    metrics: dict[str, float],
    raw: dict[str, list],
) -> Run:
    """The gate's evaluation of ``candidate`` against ``champion`` (a version, or ``base``)."""
    s = settings
    params = {
        "candidate": candidate.version,
        "candidate.content_hash": candidate.manifest.content_hash,
        "champion": champion,
        "seed": s.gate_seed,
        "sequential": s.sequential,
        "round_tasks": s.round_tasks,
        "sequential_min_tasks": s.sequential_min_tasks,
        "max_tasks_per_suite": s.max_tasks_per_suite,
        **{f"max_tasks.{x.name}": len(x.tasks) for x in suites},
        "concurrency": s.concurrency,
        **{f"suite.{x.name}": x.key for x in suites},
        **{f"suite.{x.name}.seed": x.config.source.get("seed") for x in suites},
        **{f"rule.{k}": v for k, v in asdict(s.rule()).items()},
    }
    rows = [
        {"policy": key.split("/")[0], "suite": key.split("/")[1], **row}
        for key, results in sorted(raw.items())
        for row in results
    ]
    artifacts = {
        "per_task.jsonl": "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode(),
        "decision.json": json_bytes(decision.to_json() | {"decision_id": decision_id, "metrics": metrics}),
        "comparison.png": comparison_png(
            {k: v for k, v in metrics.items() if _plotted(k)},
            {k.removeprefix("champion."): v for k, v in metrics.items() if k.startswith("champion.")},
            f"{candidate.version} vs {champion}: {decision.decision}",
        ),
        "adapter/manifest.json": manifest(store, candidate),
    }
    reasons = [asdict(r) for r in decision.reasons]
    tags = decision_tags(decision.decision, reasons, "evaluate", "gate", candidate.version, champion)
    return Run(f"gate-{candidate.version}-vs-{champion}", params, metrics, tags, artifacts)


@dataclass(frozen=True)
class Ruling:
    """A decision made outside the gate's own evaluation: a reviewer's override, or the canary's verdict."""

    action: str
    version: str
    stored: StoredAdapter | None  # None for the base model
    decision: str
    actor: str
    reasons: list[dict[str, str]]
    metrics: dict[str, float]
    override: bool = False


def ruling_run(store: AdapterStore, r: Ruling, champion: str) -> Run:
    """The MLflow run of a ruling on ``r.version`` while ``champion`` is champion."""
    params = {"version": r.version, "action": r.action, "actor": r.actor, "champion": champion}
    tags = decision_tags(r.decision, r.reasons, r.action, r.actor, r.version, champion)
    tags["gate.reasons"] = "; ".join(x["message"] for x in r.reasons)
    if r.override:
        tags["gate.override"] = "true"
    decision = {"decision": r.decision, "action": r.action, "reasons": r.reasons, "metrics": r.metrics}
    artifacts = {"decision.json": json_bytes(decision)}
    if r.stored is not None:
        artifacts["adapter/manifest.json"] = manifest(store, r.stored)
    return Run(f"gate-{r.action}-{r.version}", params, r.metrics, tags, artifacts)


def _plotted(metric: str) -> bool:
    return not metric.startswith(
        ("champion.", "drift.", "target.gain", "target.tasks", "target.sequential", "gate.")
    ) and not metric.endswith(".change")
