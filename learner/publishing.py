"""The learner's publishing window: the updates since the last published version, and publishing them.

A window opens with the first update after a publish. Its sums (outcome counts,
staleness histogram, loss components) and the last update's MLflow record live
in ``LearnerState.window``, so they are checkpointed with the weights; MLflow is
written only after the checkpoint, idempotently (:mod:`learner.tracking`): a
window's run is found by its ``window_key`` tag (derived from the checkpointed
window) before one is created, and each update's metrics carry the update
number as step and a timestamp kept in the checkpoint.

A version is published only from the newest checkpoint, when
``publish_every_updates`` updates or ``publish_every_s`` seconds have passed
since the last one, and records that checkpoint in its data window, so a
restart never publishes the same state twice (:meth:`Publisher.settle`). The
AdamW state it was published with is kept beside it (the latest few), for a
rebase on it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from ingest.durable import replacing
from learner.batching import Outcome
from learner.checkpoint import Checkpoint, LearnerState
from learner.settings import LearnerSettings
from learner.store import BASE, AdapterStore, StoredAdapter
from learner.tracking import WindowTracker


def updates_in(version: StoredAdapter | None) -> int:
    """The learner's update count when ``version`` was published (0 for none: nothing published)."""
    return version.manifest.data_window.get("updates", 0) if version else 0


def optimizer_snapshot(state_dir: Path, checkpoint_number: int) -> Path:
    """Where the AdamW state of a version published from checkpoint ``checkpoint_number`` is kept."""
    return Path(state_dir) / "published" / f"ckpt-{checkpoint_number:08d}.optimizer.pt"


class Publisher:
    def __init__(
        self,
        settings: LearnerSettings,
        store: AdapterStore,
        progress: Callable[[str], None],
        crash_point: Callable[[str], None],
    ):
        self.settings, self.store, self.progress, self.crash_point = settings, store, progress, crash_point
        self.tracker = WindowTracker(settings.mlflow_url, settings.mlflow_experiment)

    def account(self, state: LearnerState, outcomes: list[Outcome], metrics: dict[str, float] | None) -> None:
        """Add a micro-batch to the window's sums, and the update's MLflow record to the window: both
        go into the checkpoint, and MLflow is written only after it (:meth:`track`)."""
        window = state.window
        counts = window.setdefault("counts", {})
        for o in outcomes:
            counts[o.kind] = counts.get(o.kind, 0) + 1
        if metrics is None:
            return
        if not window.get("opened_at"):
            window["opened_at"] = time.time()
            window["first_update"] = state.updates
            origin = f"{self.settings.learner_group}|{self.settings.rewarded_topic}|{state.updates}|"
            origin += ",".join(f"{p}:{o}" for p, o in sorted(state.offsets.items()))
            window["key"] = hashlib.sha256(origin.encode()).hexdigest()[:32]
        staleness = window.setdefault("staleness", {})
        stale_values = [o.staleness for o in outcomes if o.trained() is not None and o.staleness is not None]
        for value in stale_values:
            staleness[str(value)] = staleness.get(str(value), 0) + 1
        sums = window.setdefault("sums", {})
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + value
        window["updates"] = window.get("updates", 0) + 1
        step_metrics = dict(metrics)
        if stale_values:
            step_metrics["staleness_mean"] = sum(stale_values) / len(stale_values)
            step_metrics["staleness_max"] = float(max(stale_values))
        window["last"] = {
            "step": state.updates,
            "timestamp_ms": int(time.time() * 1000),
            "metrics": step_metrics,
        }

    def window_run(self, state: LearnerState) -> str | None:
        """The current window's MLflow run: the one already made for its key, else a new one."""
        window = state.window
        if not window.get("key"):
            return None
        if not window.get("run_id"):
            window["run_id"] = self.tracker.open(
                window["key"],
                dataclasses.asdict(self.settings),
                {
                    "window": f"after-update-{window['first_update'] - 1}",
                    "learner_group": self.settings.learner_group,
                },
            )
        return window["run_id"]

    def track(self, state: LearnerState) -> None:
        """Write the checkpointed update's MLflow record (again, after a restart: MLflow keeps one)."""
        last = state.window.get("last")
        if last is None:
            return
        self.tracker.log(self.window_run(state), last["step"], last["metrics"], last["timestamp_ms"])
        self.crash_point("tracked")

    def published_updates(self) -> int:
        """The update count of the newest published version (0 before the first)."""
        return updates_in(self.store.latest())

    def due(self, state: LearnerState, ckpt: Checkpoint | None) -> bool:
        """Whether ``ckpt`` (only the newest checkpoint) is due to be published."""
        if ckpt is None or ckpt.state.checkpoint != state.checkpoint:
            return False
        since = state.updates - self.published_updates()
        opened_at = state.window.get("opened_at") or time.time()
        return since >= self.settings.publish_every_updates or (
            since > 0 and time.time() - opened_at >= self.settings.publish_every_s
        )

    def publish(self, state: LearnerState, ckpt: Checkpoint) -> StoredAdapter:
        """Publish ``ckpt``'s adapter as the next version, child of the head, which it becomes. The
        window is closed after (:meth:`close_window`)."""
        window = state.window
        parent = None if state.head == BASE else state.head
        previous = self.store.latest()
        n = max(1, window.get("updates", 0))
        means = {f"mean_{k}": v / n for k, v in window.get("sums", {}).items()}
        data_window = {
            "topic": self.settings.rewarded_topic,
            "offsets_from": previous.manifest.data_window.get("offsets_to", {}) if previous else {},
            "offsets_to": {str(p): o for p, o in sorted(ckpt.state.offsets.items())},
            "checkpoint": ckpt.state.checkpoint,
            "updates": ckpt.state.updates,
            "window_updates": window.get("updates", 0),
            "outcomes": window.get("counts", {}),
        }
        self.progress(f"publishing update {ckpt.state.updates} (checkpoint {ckpt.state.checkpoint})")
        self.keep_optimizer(ckpt)
        stored = self.store.publish(
            ckpt.adapter_dir,
            self.settings.base_model,
            parent=parent,
            data_window=data_window,
            metrics=means,
        )
        self.progress(f"published {stored.version} (parent {parent or BASE})")
        state.head = stored.version
        return stored

    def keep_optimizer(self, ckpt: Checkpoint) -> None:
        """The AdamW state a version is published with, kept for a rebase on it (the latest few)."""
        target = optimizer_snapshot(self.settings.learner_state_dir, ckpt.state.checkpoint)
        target.parent.mkdir(parents=True, exist_ok=True)
        with replacing(target, fsync=False) as tmp:
            shutil.copyfile(ckpt.optimizer_path, tmp)
        for old in sorted(target.parent.glob("ckpt-*.optimizer.pt"))[
            : -self.settings.keep_published_optimizers
        ]:
            old.unlink()

    def settle(self, state: LearnerState, ckpt: Checkpoint) -> bool:
        """After a restart: True if a publish from ``ckpt`` already happened (the head is that version
        again and its window is closed); False if it did not."""
        latest = self.store.latest()
        if latest is None or latest.manifest.data_window.get("checkpoint") != ckpt.state.checkpoint:
            return False
        state.head = latest.version
        if state.window.get("opened_at"):
            self.close_window(state, latest.version)
        return True

    def close_window(self, state: LearnerState, version: str) -> None:
        window = state.window
        summary = {f"staleness_{k}": float(v) for k, v in window.get("staleness", {}).items()}
        summary.update({f"count_{k}": float(v) for k, v in window.get("counts", {}).items()})
        at_ms = window.get("last", {}).get("timestamp_ms")
        tags = {"adapter_version": version}
        self.tracker.close(self.window_run(state), state.updates, summary, tags, at_ms)
        state.window = {}
