"""MLflow records: one run per evaluation or override, model versions, and aliases.

Each candidate becomes a version of the registered model (tags
``adapter_version``, ``content_hash``; source: the run's ``adapter/`` artifact,
which names the adapter store entry). Aliases ``champion`` and ``challenger``
follow the decision log: :meth:`Registry.reconcile` sets them from the log's
last state, so re-running it after a crash converges. Runs are found again by
their ``gate.decision_id`` tag, so a re-run never logs one decision twice.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from gating.decisions import Entry, State

DECISION_ID = "gate.decision_id"
MAX_TAG_CHARS = 4000


def _client(url: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=url, registry_uri=url)


class Registry:
    def __init__(self, mlflow_url: str, registered_model: str, experiment: str):
        self.client = _client(mlflow_url)
        self.model = registered_model
        self.experiment_name = experiment
        self._experiment_id: str | None = None

    @property
    def experiment_id(self) -> str:
        if self._experiment_id is None:
            found = self.client.get_experiment_by_name(self.experiment_name)
            self._experiment_id = (
                found.experiment_id if found else self.client.create_experiment(self.experiment_name)
            )
        return self._experiment_id

    # --- runs ------------------------------------------------------------------------------

    def finished_run(self, decision_id: str) -> str | None:
        """The finished run logged for ``decision_id``; unfinished leftovers of a crash are deleted."""
        runs = self.client.search_runs(
            [self.experiment_id], f"tags.`{DECISION_ID}` = '{decision_id}'", max_results=10
        )
        done = [r for r in runs if r.info.status == "FINISHED"]
        for run in runs:
            if run.info.status != "FINISHED":
                self.client.delete_run(run.info.run_id)
        return done[0].info.run_id if done else None

    def log_run(
        self,
        decision_id: str,
        run_name: str,
        params: dict[str, Any],
        metrics: dict[str, float],
        tags: dict[str, str],
        artifacts: dict[str, bytes],
    ) -> str:
        """A finished run with everything given; reuses the run already finished for ``decision_id``."""
        existing = self.finished_run(decision_id)
        if existing:
            return existing
        tags = {k: str(v)[:MAX_TAG_CHARS] for k, v in tags.items()} | {DECISION_ID: decision_id}
        run = self.client.create_run(self.experiment_id, tags=tags, run_name=run_name)
        run_id = run.info.run_id
        from mlflow.entities import Metric, Param

        stamp = int(run.info.start_time)
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), stamp, 0) for k, v in sorted(metrics.items()) if v == v],
            params=[Param(k, str(v)[:6000]) for k, v in sorted(params.items())],
        )
        with tempfile.TemporaryDirectory() as tmp:
            for rel, data in artifacts.items():
                path = Path(tmp) / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            self.client.log_artifacts(run_id, tmp)
        self.client.set_terminated(run_id, "FINISHED")
        return run_id

    def run(self, run_id: str):
        return self.client.get_run(run_id)

    # --- model versions and aliases -----------------------------------------------------------

    def _ensure_model(self) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_registered_model(self.model)
        except MlflowException:
            try:
                self.client.create_registered_model(
                    self.model, description="Ratchet's policy: LoRA adapters over the base model."
                )
            except MlflowException:
                self.client.get_registered_model(self.model)  # created meanwhile by another process

    def model_version(self, adapter_version: str, content_hash: str | None = None):
        self._ensure_model()
        found = self.client.search_model_versions(
            f"name = '{self.model}' and tags.adapter_version = '{adapter_version}'"
        )
        found = [v for v in found if content_hash is None or v.tags.get("content_hash") == content_hash]
        return min(found, key=lambda v: int(v.version)) if found else None

    def ensure_version(self, adapter_version: str, content_hash: str, run_id: str) -> str:
        """The registered model version of an adapter version, created on first sight."""
        found = self.model_version(adapter_version, content_hash)
        if found:
            return found.version
        source = f"{self.run(run_id).info.artifact_uri}/adapter"
        created = self.client.create_model_version(
            self.model,
            source=source,
            run_id=run_id,
            tags={"adapter_version": adapter_version, "content_hash": content_hash},
            description=f"adapter {adapter_version} from the adapter store",
        )
        return created.version

    def aliases(self) -> dict[str, str]:
        """alias -> adapter version (e.g. ``{"champion": "v3"}``)."""
        self._ensure_model()
        out = {}
        for alias, number in self.client.get_registered_model(self.model).aliases.items():
            out[alias] = self.client.get_model_version(self.model, number).tags.get("adapter_version", "")
        return out

    def reconcile(self, state: State, entries: list[Entry]) -> dict[str, str | None]:
        """Make aliases (and version decision tags) match the log; idempotent."""
        self._ensure_model()
        current = self.client.get_registered_model(self.model).aliases
        wanted: dict[str, str | None] = {"champion": state.champion, "challenger": state.challenger}
        latest: dict[str, Entry] = {}
        for entry in entries:
            if entry.content_hash and entry.run_id:
                latest[entry.version] = entry
        for alias, version in wanted.items():
            if version is None:
                if alias in current:
                    self.client.delete_registered_model_alias(self.model, alias)
                continue
            entry = latest[version]
            number = self.ensure_version(version, entry.content_hash, entry.run_id)
            if current.get(alias) != number:
                self.client.set_registered_model_alias(self.model, alias, number)
        for version, entry in latest.items():
            found = self.model_version(version, entry.content_hash)
            if found and found.tags.get("gate.decision_id") != entry.decision_id:
                for key, value in {
                    "gate.decision": entry.decision,
                    "gate.action": entry.action,
                    "gate.decision_id": entry.decision_id,
                }.items():
                    self.client.set_model_version_tag(self.model, found.version, key, value)
        return wanted


def comparison_png(candidate: dict[str, float], champion: dict[str, float], title: str) -> bytes:
    """Bars of each summary metric, candidate beside champion."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(set(candidate) | set(champion))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(names)), 4.0))
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], [champion.get(n, 0.0) for n in names], width=0.4, label="champion")
    ax.bar([x + 0.2 for x in xs], [candidate.get(n, 0.0) for n in names], width=0.4, label="candidate")
    ax.set_xticks(list(xs), names, rotation=30, ha="right", fontsize=8)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, default=str) + "\n").encode()
