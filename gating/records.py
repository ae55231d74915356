"""MLflow records: one run per evaluation or override, model versions, and aliases.

Each candidate becomes a version of the registered model (tags
``adapter_version``, ``content_hash``; source: the run's ``adapter/`` artifact,
which names the adapter store entry). Aliases ``champion``, ``challenger`` and
``canary`` (the champion while it is on trial) follow the decision log: :meth:`Registry.reconcile` sets them from the log's
last state, so re-running it after a crash converges. Runs are found again by
their ``gate.decision_id`` tag, so a re-run never logs one decision twice.

With a decision key, the champion's version also carries ``gate.signature``: an
HMAC-SHA256 of a :class:`Statement` binding the decision that made it champion
to the registered model, the version number, the adapter version and its
content hash. The serving controller, holding the same key, serves only what
such a signature vouches for. Only the champion is signed (a former champion's
signature is removed once the alias has left it); while the base model is
champion, the registered model itself carries the signature of the decision
that made it so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

from gating.decisions import BASE, Entry, State

DECISION_ID = "gate.decision_id"
DECISION = "gate.decision"
ACTION = "gate.action"
REASON_CODES = "gate.reason_codes"  # the failed checks' codes, comma-separated (gating.rule.Reason)
TARGET_GAIN = "gate.target_gain"  # the target's mean paired gain over the champion, when measured
SIGNATURE = "gate.signature"
MAX_TAG_CHARS = 4000
KEY_MIN_BYTES = 32
PROMOTING = {("evaluate", "promote"), ("approve", "promote"), ("rollback", "promote")}


# --- decision signatures ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Statement:
    """What a gate signature vouches for: this decision of the log, on this registered version."""

    registered_model: str
    model_version: str  # the registry's version number; "" for the base model
    adapter_version: str  # vN, or "base"
    content_hash: str  # the adapter's content hash; "" for the base model
    decision_id: str
    action: str
    decision: str

    def canonical(self) -> bytes:
        fields = ["ratchet.gate.decision/1", *dataclasses.astuple(self)]
        return json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode()

    @property
    def promotes(self) -> bool:
        """Whether the decision makes its version champion (for the base model: a rollback to it, or
        the rejection of the only champion there was, which hands the title back to the base model)."""
        if self.adapter_version == BASE:
            return (self.action, self.decision) in {("rollback", "promote"), ("reject", "reject")}
        return (self.action, self.decision) in PROMOTING

    @classmethod
    def of(
        cls, tags: dict[str, str], registered_model: str, model_version: str, adapter_version: str,
        content_hash: str,
    ) -> Statement:  # fmt: skip
        """The statement that a version's (or the registered model's) decision tags claim."""
        decision = (tags.get(DECISION_ID, ""), tags.get(ACTION, ""), tags.get(DECISION, ""))
        return cls(registered_model, model_version, adapter_version, content_hash, *decision)


def sign(key: bytes, statement: Statement) -> str:
    return "hmac-sha256:" + hmac.new(key, statement.canonical(), hashlib.sha256).hexdigest()


def signed(key: bytes, statement: Statement, signature: str | None) -> bool:
    return bool(signature) and hmac.compare_digest(sign(key, statement), signature)


def read_decision_key(path: Path) -> bytes:
    """The key in ``path`` (surrounding whitespace stripped); at least 32 bytes."""
    try:
        key = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ValueError(f"decision_key_file {path}: cannot read it ({exc.strerror})") from None
    if len(key) < KEY_MIN_BYTES:
        raise ValueError(
            f"decision_key_file {path}: the key has {len(key)} bytes, it needs at least {KEY_MIN_BYTES} "
            f"(e.g. `openssl rand -hex 32 > {path}`)"
        )
    return key


def create_decision_key(path: Path) -> Path:
    """A new random key at ``path`` (mode 0600), unless a file is there already."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.exists():
        return path
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, path)  # whole or not at all; a key another process made meanwhile wins
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path


def recorded_entries(entries: list[Entry], champion: str | None) -> dict[str, Entry]:
    """Per adapter version, the log entry its registry tags record: its latest, except that the
    champion records the promotion that made it champion (a later forced re-evaluation may have
    rejected it before a rejected successor handed the title back to it)."""
    out: dict[str, Entry] = {}
    granted: Entry | None = None
    for entry in entries:
        if not (entry.content_hash and entry.run_id):
            continue
        out[entry.version] = entry
        if entry.version == champion and (entry.action, entry.decision) in PROMOTING:
            granted = entry
    if granted is not None:
        out[granted.version] = granted
    return out


def base_grant(entries: list[Entry]) -> Entry | None:
    """The latest entry that handed the title from a version to the base model (None: it never had to)."""
    for entry in reversed(entries):
        if entry.state.champion is None and entry.champion_before is not None:
            return entry
    return None


def _client(url: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=url, registry_uri=url)


class Registry:
    def __init__(
        self, mlflow_url: str, registered_model: str, experiment: str, decision_key: bytes | None = None
    ):
        self.client = _client(mlflow_url)
        self.model = registered_model
        self.experiment_name = experiment
        self.key = decision_key  # None: nothing is signed
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
        """Make aliases, version decision tags and the champion's signature match the log; idempotent.

        The champion is signed before the alias moves to it, and other signatures are removed only
        after it moved, so the alias never rests on an unsigned version the log made champion."""
        self._ensure_model()
        model = self.client.get_registered_model(self.model)
        current = model.aliases
        wanted: dict[str, str | None] = {
            "champion": state.champion,
            "challenger": state.challenger,
            "canary": state.canary,  # the champion while it is on trial: the controller splits traffic
        }
        recorded = recorded_entries(entries, state.champion)
        numbers = {
            version: self.ensure_version(version, recorded[version].content_hash, recorded[version].run_id)
            for version in wanted.values()
            if version is not None
        }
        base = base_grant(entries) if state.champion is None else None
        if state.champion is not None:
            champion = self.client.get_model_version(self.model, numbers[state.champion])
            self._record(champion, recorded[state.champion], sign_it=True)
        elif base is not None and self.key is not None:
            statement = Statement(self.model, "", BASE, "", base.decision_id, base.action, base.decision)
            tags = {DECISION_ID: base.decision_id, ACTION: base.action, DECISION: base.decision}
            for key, value in (tags | {SIGNATURE: sign(self.key, statement)}).items():
                if model.tags.get(key) != value:
                    self.client.set_registered_model_tag(self.model, key, value)
        for alias, version in wanted.items():
            if version is None:
                if alias in current:
                    self.client.delete_registered_model_alias(self.model, alias)
            elif current.get(alias) != numbers[version]:
                self.client.set_registered_model_alias(self.model, alias, numbers[version])
        for version, entry in recorded.items():
            found = self.model_version(version, entry.content_hash) if version != state.champion else None
            if found:
                self._record(found, entry, sign_it=False)
        signed_number = numbers.get(state.champion) if state.champion is not None else None
        for found in self.client.search_model_versions(f"name = '{self.model}'"):
            if SIGNATURE in found.tags and found.version != signed_number:
                self.client.delete_model_version_tag(self.model, found.version, SIGNATURE)
        if (base is None or self.key is None) and SIGNATURE in model.tags:
            self.client.delete_registered_model_tag(self.model, SIGNATURE)
        return wanted

    def _record(self, found, entry: Entry, sign_it: bool) -> None:
        """Set the version's decision tags from ``entry`` (and sign them, with a key)."""
        tags = {DECISION: entry.decision, ACTION: entry.action, DECISION_ID: entry.decision_id}
        tags[REASON_CODES] = ",".join(r["code"] for r in entry.reasons)
        if "target.gain" in entry.metrics:
            tags[TARGET_GAIN] = repr(float(entry.metrics["target.gain"]))
        if sign_it and self.key is not None:
            statement = Statement.of(tags, self.model, found.version, entry.version, entry.content_hash)
            tags[SIGNATURE] = sign(self.key, statement)
        for key, value in tags.items():
            if found.tags.get(key) != value:
                self.client.set_model_version_tag(self.model, found.version, key, value)


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
