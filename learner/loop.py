"""The learner's main loop: consume → check → plan → train → checkpoint → commit → publish.

Crash safety. Each micro-batch ends with, in this order: its ledger lines
appended (one per record: trained, amended or why not), a checkpoint written
atomically (adapter, optimizer state, next offsets, ledger length, baselines),
the consumer offsets committed, and, when due, a publish. A restart loads the
newest checkpoint, cuts the ledger back to it and seeks to its offsets, so the
records after it are consumed and trained again as if for the first time: no
session is trained twice or skipped. A version is published only from a
checkpoint and records that checkpoint in its data window, so a restart never
publishes the same state twice; half-written versions and checkpoints are
invisible (renamed into place) and cleaned on start.

Records are de-duplicated by ``(session_id, revision)``; amendments and skips
are described in :mod:`learner.batching`.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ingest.config import load
from ingest.contract import ContractError, DeadLetter, RewardedSession, parse
from ingest.producer import RecordProducer
from ingest.quality import QualitySettings, check_batch, quarantine
from learner import checkpoint
from learner.advantages import Advantage, Baselines, FamilyStats
from learner.batching import Limits, Outcome, Plan, Trained, collate, plan
from learner.checkpoint import Checkpoint, LearnerState, Ledger
from learner.consumer import Consumed, RewardedConsumer
from learner.settings import LearnerSettings, load_settings
from learner.store import AdapterStore
from learner.tracking import WindowTracker
from learner.trainer import Trainer, load_policy

SOURCE = "learner"


def estimated_tokens(value: bytes) -> int:
    """About one token per list element of a rewarded record (token ids and logprobs)."""
    return value.count(b",")


def ledger_index(entries: list[dict[str, Any]]) -> tuple[dict[str, Trained], set[tuple[str, int]]]:
    """What was trained (latest trained revision per session) and every pair already seen."""
    trained: dict[str, Trained] = {}
    seen: set[tuple[str, int]] = set()
    for e in entries:
        if e["outcome"] in ("malformed", "quarantined"):
            continue
        seen.add((e["session_id"], e["revision"]))
        if e["outcome"] in ("trained", "amended"):
            masked = tuple(tuple(span) for span in e["masked"])
            trained[e["session_id"]] = Trained(
                e["revision"], Advantage.of(e["advantage"]), masked, e["excluded"]
            )
    return trained, seen


def ledger_entry(
    record: Consumed, outcome: Outcome | None, update: int | None, reason: str | None = None
) -> dict:
    entry: dict[str, Any] = {"partition": record.partition, "offset": record.offset}
    if outcome is None:
        return {**entry, "outcome": reason, "session_id": None, "revision": None}
    trained = outcome.trained()
    rs = outcome.rewarded
    return {
        **entry,
        "session_id": rs.session_id,
        "revision": rs.revision,
        "outcome": outcome.kind,
        "reward": rs.reward,
        "update": update if trained else None,
        "advantage": dataclasses.asdict(outcome.advantage) if outcome.advantage else None,
        "masked": [list(s) for s in trained.masked] if trained else [],
        "excluded": trained.excluded if trained else False,
        "staleness": outcome.staleness,
        "unreproducible": outcome.unreproducible(),
    }


class Learner:
    def __init__(self, settings: LearnerSettings, progress: Callable[[str], None] = print):
        self.settings, self.progress = settings, progress
        state_dir = Path(settings.learner_state_dir)
        self.store = AdapterStore(settings.adapter_store_dir)
        self.store.clean_staging()
        checkpoint.clean_partials(state_dir)
        ckpt = checkpoint.latest(state_dir)
        self.ledger = Ledger(state_dir / "ledger.jsonl")
        self.ledger.truncate(ckpt.state.ledger_bytes if ckpt else 0)
        latest = self.store.latest()
        if ckpt is not None:
            self.state = ckpt.state
            adapter_dir = ckpt.adapter_dir
        else:
            self.state = LearnerState(updates=latest.manifest.data_window.get("updates", 0) if latest else 0)
            adapter_dir = latest.path if latest else None
        self.trainer = Trainer(load_policy(settings, adapter_dir), self.store, settings)
        if ckpt is not None:
            self.trainer.optimizer.load_state_dict(torch.load(ckpt.optimizer_path))
        self.trained, self.seen = ledger_index(self.ledger.read())
        self.consumer = RewardedConsumer(
            settings.kafka_bootstrap, settings.rewarded_topic, settings.learner_group, self.state.offsets
        )
        self.state.offsets = {**self.consumer.start, **self.state.offsets}
        if ckpt is not None:
            self.consumer.commit(self.state.offsets)  # the checkpoint is the truth; the group may lag it
        self.tracker = WindowTracker(settings.mlflow_url, settings.mlflow_experiment)
        self._producer: RecordProducer | None = None
        self.quality_settings = load(QualitySettings, "quality") if settings.quality_check else None
        self.last_checkpoint = ckpt
        if ckpt is not None:
            where = f"resumed from checkpoint {ckpt.state.checkpoint}"
        else:
            where = f"started from {latest.version if latest else 'the base model'}"
        progress(f"learner: {where}: {self.state.updates} updates, offsets {self.state.offsets}")
        if ckpt is not None:
            self.settle_publish(ckpt)

    # --- one micro-batch ---------------------------------------------------------------

    def step(self, consumed: list[Consumed]) -> None:
        sessions, records, entries = self.parse(consumed)
        if sessions and self.settings.quality_check:
            sessions, records, quarantined = self.check_quality(sessions, records)
            entries += quarantined
        batch = self.plan(sessions)
        metrics = (
            self.trainer.step(collate(batch.rows), self.settings.objective_params()) if batch.train else None
        )
        self.state.updates += int(batch.train)
        entries += self.remember(records, batch.outcomes, batch.train)
        self.account(batch.outcomes, metrics)
        ckpt = self.persist(consumed, batch.baselines, entries)
        line = ", ".join(f"{n} {k}" for k, n in sorted(Counter(e["outcome"] for e in entries).items()))
        if metrics:
            line += f"; update {self.state.updates}: loss {metrics['loss']:.4f}, kl {metrics['kl']:.4f}, "
            line += f"clip {metrics['clip_fraction']:.2f}, {metrics['tokens_per_s']:.0f} tokens/s"
        self.progress(f"batch of {len(consumed)}: {line}")
        self.publish_if_due(ckpt)

    def parse(self, consumed: list[Consumed]) -> tuple[list[RewardedSession], list[Consumed], list[dict]]:
        """Records that meet the contract; the others go to the dead-letter topic with their reason."""
        sessions, records, letters, entries = [], [], [], []
        for record in consumed:
            try:
                sessions.append(parse(RewardedSession, record.value))
                records.append(record)
            except ContractError as exc:
                ids = {"session_id": exc.session_id, "tenant": exc.tenant}
                letters.append(DeadLetter.of(SOURCE, exc.reason, record.value, **ids))
                entries.append(ledger_entry(record, None, None, "malformed"))
        if letters:
            self.producer().produce([self.producer().dead_letter(letter) for letter in letters])
        return sessions, records, entries

    def plan(self, sessions: list[RewardedSession]) -> Plan:
        s = self.settings
        parent = self.store.latest()
        limits = Limits(
            parent=parent.version if parent else None,
            known_versions=frozenset(self.store.versions()),
            max_staleness=s.max_staleness,
            max_row_tokens=s.max_row_tokens,
            max_staleness_s=s.max_staleness_s,
            now=time.time(),
        )
        baselines = {k: FamilyStats(**v) for k, v in self.state.baselines.items()}
        return plan(
            sessions, self.trained, self.seen, baselines, limits, s.advantage_params(), s.skip_uniform_batches
        )

    def remember(self, records: list[Consumed], outcomes: list[Outcome], trained: bool) -> list[dict]:
        """Ledger lines for a planned batch; the de-duplication and amendment index follow them."""
        entries = []
        for record, outcome in zip(records, outcomes, strict=True):
            entries.append(ledger_entry(record, outcome, self.state.updates if trained else None))
            self.seen.add((outcome.rewarded.session_id, outcome.rewarded.revision))
            if (done := outcome.trained()) is not None:
                self.trained[outcome.rewarded.session_id] = done
        return entries

    def persist(self, consumed: list[Consumed], baselines: Baselines, entries: list[dict]) -> Checkpoint:
        """Ledger lines, then the checkpoint that covers them, then the consumer offsets."""
        state, s = self.state, self.settings
        for record in consumed:
            state.offsets[record.partition] = max(state.offsets.get(record.partition, 0), record.offset + 1)
        state.baselines = {k: dataclasses.asdict(v) for k, v in baselines.items()}
        state.records += len(consumed)
        state.ledger_bytes = self.ledger.append(sorted(entries, key=lambda e: (e["partition"], e["offset"])))
        state.checkpoint += 1
        ckpt = checkpoint.save(
            s.learner_state_dir, state, self.trainer.save_adapter, self.trainer.optimizer, s.keep_checkpoints
        )
        self.last_checkpoint = ckpt
        self.progress(f"checkpoint {state.checkpoint} written: offsets {state.offsets}")
        self.consumer.commit(state.offsets)
        return ckpt

    def producer(self) -> RecordProducer:
        if self._producer is None:
            self._producer = RecordProducer(self.settings.kafka_bootstrap)
        return self._producer

    def check_quality(self, sessions: list[RewardedSession], records: list[Consumed]):
        """The great-expectations check of a micro-batch (its latest revision of each session);
        a failing batch is quarantined to the dead-letter topic and trains nothing."""
        latest: dict[str, RewardedSession] = {}
        for rs in sessions:
            if rs.session_id not in latest or rs.revision > latest[rs.session_id].revision:
                latest[rs.session_id] = rs
        report = check_batch(list(latest.values()), self.quality_settings)
        if report.success:
            return sessions, records, []
        quarantine(self.producer(), list(latest.values()), report, SOURCE)
        self.progress(f"batch quarantined: {'; '.join(report.failures)}")
        entries = [
            ledger_entry(r, Outcome(rs, "quarantined"), None) for rs, r in zip(sessions, records, strict=True)
        ]
        return [], [], entries

    def account(self, outcomes: list[Outcome], metrics: dict[str, float] | None) -> None:
        """Add a micro-batch to the window's sums (and open the window's MLflow run on its first update)."""
        window = self.state.window
        counts = window.setdefault("counts", {})
        for o in outcomes:
            counts[o.kind] = counts.get(o.kind, 0) + 1
        if metrics is None:
            return
        if not window.get("opened_at"):
            window["opened_at"] = time.time()
            window["run_id"] = self.tracker.open(
                None,
                {k: v for k, v in dataclasses.asdict(self.settings).items()},
                {
                    "window": f"after-update-{self.state.updates - 1}",
                    "learner_group": self.settings.learner_group,
                },
            )
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
        self.tracker.log(window.get("run_id"), self.state.updates, step_metrics)

    # --- publishing ---------------------------------------------------------------------

    def published_updates(self) -> int:
        latest = self.store.latest()
        return latest.manifest.data_window.get("updates", 0) if latest else 0

    def publish_if_due(self, ckpt: Checkpoint | None) -> None:
        if ckpt is None or ckpt.state.checkpoint != self.state.checkpoint:
            return
        since = self.state.updates - self.published_updates()
        opened_at = self.state.window.get("opened_at") or time.time()
        if since >= self.settings.publish_every_updates or (
            since > 0 and time.time() - opened_at >= self.settings.publish_every_s
        ):
            self.publish(ckpt)

    def publish(self, ckpt: Checkpoint) -> None:
        state, window = ckpt.state, self.state.window
        parent = self.store.latest()
        n = max(1, window.get("updates", 0))
        means = {f"mean_{k}": v / n for k, v in window.get("sums", {}).items()}
        data_window = {
            "topic": self.settings.rewarded_topic,
            "offsets_from": parent.manifest.data_window.get("offsets_to", {}) if parent else {},
            "offsets_to": {str(p): o for p, o in sorted(state.offsets.items())},
            "checkpoint": state.checkpoint,
            "updates": state.updates,
            "window_updates": window.get("updates", 0),
            "outcomes": window.get("counts", {}),
        }
        self.progress(f"publishing update {state.updates} (checkpoint {state.checkpoint})")
        stored = self.store.publish(
            ckpt.adapter_dir,
            self.settings.base_model_name,
            parent=parent.version if parent else None,
            data_window=data_window,
            metrics=means,
        )
        self.progress(f"published {stored.version} (parent {parent.version if parent else 'base'})")
        self.close_window(stored.version)

    def settle_publish(self, ckpt: Checkpoint) -> None:
        """After a restart: close the window a publish from this checkpoint already covered, or publish if due."""
        latest = self.store.latest()
        if latest is not None and latest.manifest.data_window.get("checkpoint") == ckpt.state.checkpoint:
            if self.state.window.get("opened_at"):
                self.close_window(latest.version)
            return
        self.publish_if_due(ckpt)

    def close_window(self, version: str) -> None:
        window = self.state.window
        summary = {f"staleness_{k}": float(v) for k, v in window.get("staleness", {}).items()}
        summary.update({f"count_{k}": float(v) for k, v in window.get("counts", {}).items()})
        self.tracker.close(window.get("run_id"), self.state.updates, summary, {"adapter_version": version})
        self.state.window = {}

    def close(self) -> None:
        self.consumer.close()
        if self._producer is not None:
            self._producer.close()


def run(
    settings: LearnerSettings,
    max_batches: int | None = None,
    idle_exit_s: float | None = None,
    progress: Callable[[str], None] = print,
    stop: Callable[[], bool] = lambda: False,
) -> LearnerState:
    """Run the learner until ``stop()``, ``max_batches`` micro-batches, or ``idle_exit_s`` without records."""
    learner = Learner(settings, progress)
    s = settings
    batches = 0
    try:
        while not stop() and (max_batches is None or batches < max_batches):
            consumed = learner.consumer.batch(
                s.batch_sessions, s.batch_tokens, s.batch_wait_s, idle_exit_s or 5.0, estimated_tokens
            )
            if consumed:
                learner.step(consumed)
                batches += 1
            else:
                learner.publish_if_due(learner.last_checkpoint)
                if idle_exit_s is not None:
                    progress(f"learner: no records for {idle_exit_s:g}s, stopping")
                    break
    finally:
        learner.close()
    return learner.state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m learner.loop", description="Run the rolling learner.")
    parser.add_argument("--max-batches", type=int, default=None, help="stop after this many micro-batches")
    parser.add_argument(
        "--idle-exit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this long without records",
    )
    args = parser.parse_args(argv)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    run(
        load_settings(),
        args.max_batches,
        args.idle_exit,
        lambda m: print(m, flush=True),
        lambda: bool(stopping),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
