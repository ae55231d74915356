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

MLflow is written after the checkpoint (and the commit), idempotently: a
window's run is found by its ``window_key`` tag (derived from the checkpointed
window) before one is created, and each update's metrics are logged with the
update number as step and a timestamp kept in the checkpoint, so a restart
replays the checkpoint's last write and MLflow drops the identical copy. A crash
anywhere leaves neither a duplicated step nor a second run for one window.

Records are de-duplicated by ``(session_id, revision)``; amendments and skips
are described in :mod:`learner.batching`. What the de-duplication and the
amendments need is kept in :class:`learner.index.SessionIndex`, which forgets
sessions once they are stale (see there), so memory is bounded.

A data-quality failure quarantines only the records that fail (their session's
every record in the micro-batch); the rest of the micro-batch is trained.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
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
from ingest.health import Health
from ingest.producer import RecordProducer
from ingest.quality import QualityReport, QualitySettings, check_batch, quarantine
from learner import checkpoint, positions
from learner.advantages import Baselines, FamilyStats
from learner.batching import Limits, Outcome, Plan, collate, looks_stale, plan
from learner.checkpoint import Checkpoint, LearnerState, Ledger
from learner.consumer import Consumed, RewardedConsumer
from learner.index import SessionIndex
from learner.lineage import BASE, GateView, read_gate, rebase_target
from learner.settings import LearnerSettings, load_settings
from learner.store import AdapterStore, StoreError, version_number
from learner.tracking import WindowTracker
from learner.trainer import Trainer, load_policy

SOURCE = "learner"
# Fault injection for tests: the learner SIGKILLs itself the first time it reaches this point
# ("checkpointed": a checkpoint is written, nothing after it; "tracked": MLflow was just written).
CRASH_POINT_ENV = "RATCHET_CRASH_POINT"


def estimated_tokens(value: bytes) -> int:
    """About one token per list element of a rewarded record (token ids and logprobs)."""
    return value.count(b",")


def ledger_entry(
    record: Consumed, outcome: Outcome | None, update: int | None, reason: str | None = None
) -> dict:
    entry: dict[str, Any] = {"partition": record.partition, "offset": record.offset}
    if outcome is None:
        return {**entry, "outcome": reason, "session_id": None, "revision": None}
    if reason is not None:
        entry["reason"] = reason
    trained = outcome.trained()
    rs = outcome.rewarded
    served = [t.adapter_version or rs.session.policy.adapter_version for t in rs.session.assistant_turns()]
    return {
        **entry,
        "created_at": rs.session.created_at.timestamp(),  # with "served": when it turns stale
        "served": min((version_number(v) if v else 0 for v in served), default=0),
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
        self.index = SessionIndex.rebuild(
            self.ledger.path,
            self.state.ledger_live_from,
            self.state.ledger_bytes,
            settings.max_staleness,
            settings.max_staleness_s,
        )
        self.index.evict(time.time(), self.latest_version_number())
        self.consumer = RewardedConsumer(
            settings.kafka_bootstrap, settings.rewarded_topic, settings.learner_group, self.state.offsets
        )
        self.state.offsets = {**self.consumer.start, **self.state.offsets}
        if ckpt is not None:
            try:
                self.check_positions()
            except positions.StorageMismatch:
                self.consumer.close()  # nothing was consumed; leave no client polling a broker
                raise
            self.consumer.commit(self.state.offsets)  # the checkpoint is the truth; the group may lag it
        self.tracker = WindowTracker(settings.mlflow_url, settings.mlflow_experiment)
        self.crash_at = os.environ.get(CRASH_POINT_ENV)
        self._producer: RecordProducer | None = None
        self.quality_settings = load(QualitySettings, "quality") if settings.quality_check else None
        self.last_checkpoint = ckpt
        if not self.state.head:
            self.state.head = latest.version if latest else BASE
        if latest is not None and (
            ckpt is None or latest.manifest.data_window.get("checkpoint") == ckpt.state.checkpoint
        ):
            self.trainer.weights_are = latest.version  # loaded from it, or from the checkpoint it was
        self._followed_at = -float("inf")
        self._follow_failing = False
        if ckpt is not None:
            where = f"resumed from checkpoint {ckpt.state.checkpoint}"
        else:
            where = f"started from {latest.version if latest else 'the base model'}"
        progress(f"learner: {where}: {self.state.updates} updates, offsets {self.state.offsets}")
        if ckpt is not None:
            self.track()  # the checkpoint's MLflow write again: the crash may have come before it
            self.settle_publish(ckpt)

    def check_positions(self) -> None:
        """Refuse (or, with ``offset_reset = "earliest"``, restart explicitly) when the topic is not the
        one the checkpoint consumed: see :mod:`learner.positions`."""
        s = self.settings
        if s.offset_reset not in positions.RESETS:
            raise ValueError(f"offset_reset: {s.offset_reset!r} is not one of {', '.join(positions.RESETS)}")
        firsts = self.consumer.first_offsets()
        found = positions.check(self.state.offsets, self.state.last_records, firsts, self.consumer.digest_at)
        if not found:
            return
        message = positions.refusal(s.rewarded_topic, s.kafka_bootstrap, found)
        if s.offset_reset != "earliest":
            raise positions.StorageMismatch(message)
        start = dict(firsts)
        self.progress(
            f"learner: {message.split('. ')[0]}; RATCHET_OFFSET_RESET=earliest: starting over at {start}"
        )
        self.state.offsets, self.state.last_records = start, {}
        self.state.resets += 1
        self.consumer.seek(start)

    def health(self) -> dict[str, Any]:
        """What ``/health`` and ``/metrics`` show (ingest/health.py)."""
        st = self.state
        latest = self.store.latest()
        return {
            "updates": st.updates,
            "checkpoint": st.checkpoint,
            "records": st.records,
            "rebases": st.rebases,
            "offset_resets": st.resets,
            "head": st.head,
            "published": latest.version if latest else None,
            "offsets": {str(p): o for p, o in sorted(st.offsets.items())},
        }

    def crash_point(self, name: str) -> None:
        if self.crash_at == name:
            self.progress(f"crash point {name}: SIGKILL")
            os.kill(os.getpid(), signal.SIGKILL)

    def latest_version_number(self) -> int:
        latest = self.store.latest()
        return version_number(latest.version) if latest else 0

    # --- one micro-batch ---------------------------------------------------------------

    def step(self, consumed: list[Consumed]) -> None:
        self.follow()
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
        self.crash_point("checkpointed")
        if metrics:
            self.track()
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

    def counts(self) -> Callable[[bytes], bool]:
        """What counts toward a micro-batch's size: a record that will not be skipped as stale (when
        traffic outruns the learner, stale records ride along to the ledger without filling batches
        that would otherwise train on a handful of fresh sessions)."""
        limits = self.limits()
        return lambda value: not looks_stale(value, limits)

    def limits(self) -> Limits:
        s = self.settings
        parent = self.store.latest()
        return Limits(
            parent=parent.version if parent else None,
            known_versions=frozenset(self.store.versions()),
            max_staleness=s.max_staleness,
            max_row_tokens=s.max_row_tokens,
            max_staleness_s=s.max_staleness_s,
            now=time.time(),
        )

    def plan(self, sessions: list[RewardedSession]) -> Plan:
        s = self.settings
        limits = self.limits()
        baselines = {k: FamilyStats(**v) for k, v in self.state.baselines.items()}
        trained, seen = self.index.view(rs.session_id for rs in sessions)
        return plan(sessions, trained, seen, baselines, limits, s.advantage_params(), s.skip_uniform_batches)

    def remember(self, records: list[Consumed], outcomes: list[Outcome], trained: bool) -> list[dict]:
        """Ledger lines for a planned batch (the index follows them once they are written)."""
        update = self.state.updates if trained else None
        return [ledger_entry(r, o, update) for r, o in zip(records, outcomes, strict=True)]

    def persist(self, consumed: list[Consumed], baselines: Baselines, entries: list[dict]) -> Checkpoint:
        """Ledger lines, then the checkpoint that covers them, then the consumer offsets."""
        state, s = self.state, self.settings
        for record in consumed:
            state.offsets[record.partition] = max(state.offsets.get(record.partition, 0), record.offset + 1)
            if record.offset >= state.last_records.get(record.partition, [-1])[0]:
                state.last_records[record.partition] = [record.offset, positions.digest(record.value)]
        state.baselines = {k: dataclasses.asdict(v) for k, v in baselines.items()}
        state.records += len(consumed)
        lines = sorted(entries, key=lambda e: (e["partition"], e["offset"]))
        start, state.ledger_bytes = state.ledger_bytes, self.ledger.append(lines)
        self.index.remember(lines, start, state.ledger_bytes)
        self.index.evict(time.time(), self.latest_version_number())
        state.ledger_live_from = self.index.live_from()
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
        """The great-expectations check of a micro-batch (its latest revision of each session). When
        the batch fails, only the sessions that fail are quarantined to the dead-letter topic (every
        record of theirs in the batch, each with its reason in the ledger); the rest go on."""
        latest: dict[str, RewardedSession] = {}
        for rs in sessions:
            if rs.session_id not in latest or rs.revision > latest[rs.session_id].revision:
                latest[rs.session_id] = rs
        report = check_batch(list(latest.values()), self.quality_settings)
        if report.success:
            return sessions, records, []
        reasons = self.failing(latest, report)
        bad = [rs for sid, rs in latest.items() if sid in reasons]
        letters = QualityReport(False, report.failures, {}, len(bad), reasons)
        quarantine(self.producer(), bad, letters, SOURCE)
        self.progress(f"quarantined {len(bad)} of {len(latest)} sessions: {'; '.join(report.failures)}")
        kept_sessions, kept_records, entries = [], [], []
        for rs, record in zip(sessions, records, strict=True):
            if rs.session_id in reasons:
                reason = "; ".join(reasons[rs.session_id])
                entries.append(ledger_entry(record, Outcome(rs, "quarantined"), None, reason))
            else:
                kept_sessions.append(rs)
                kept_records.append(record)
        return kept_sessions, kept_records, entries

    def failing(self, latest: dict[str, RewardedSession], report: QualityReport) -> dict[str, list[str]]:
        """The sessions of a failed batch that fail, with their failures: the rows great-expectations
        names as unexpected, then, if the others still fail together, each of those checked alone."""
        reasons = {sid: list(r) for sid, r in report.record_failures.items() if sid in latest}
        rest = [rs for sid, rs in latest.items() if sid not in reasons]
        if rest and (not reasons or not check_batch(rest, self.quality_settings).success):
            for rs in rest:
                own = check_batch([rs], self.quality_settings)
                if not own.success:
                    reasons[rs.session_id] = own.record_failures.get(rs.session_id) or own.failures
        if not reasons:  # the batch fails as a whole only (a table-level expectation): all of it
            why = "quarantined with its batch, which failed: " + "; ".join(report.failures)
            reasons = {sid: [why] for sid in latest}
        return reasons

    def account(self, outcomes: list[Outcome], metrics: dict[str, float] | None) -> None:
        """Add a micro-batch to the window's sums, and the update's MLflow record to the window: both
        go into the checkpoint, and MLflow is written only after it (:meth:`track`)."""
        window = self.state.window
        counts = window.setdefault("counts", {})
        for o in outcomes:
            counts[o.kind] = counts.get(o.kind, 0) + 1
        if metrics is None:
            return
        if not window.get("opened_at"):
            window["opened_at"] = time.time()
            window["first_update"] = self.state.updates
            origin = f"{self.settings.learner_group}|{self.settings.rewarded_topic}|{self.state.updates}|"
            origin += ",".join(f"{p}:{o}" for p, o in sorted(self.state.offsets.items()))
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
            "step": self.state.updates,
            "timestamp_ms": int(time.time() * 1000),
            "metrics": step_metrics,
        }

    def window_run(self) -> str | None:
        """The current window's MLflow run: the one already made for its key, else a new one."""
        window = self.state.window
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

    def track(self) -> None:
        """Write the checkpointed update's MLflow record (again, after a restart: MLflow keeps one)."""
        last = self.state.window.get("last")
        if last is None:
            return
        self.tracker.log(self.window_run(), last["step"], last["metrics"], last["timestamp_ms"])
        self.crash_point("tracked")

    # --- following the gate (learner/lineage.py) ----------------------------------------

    def follow(self) -> None:
        """Rebase on the champion when the gate has left the learner's line (at most every ``follow_every_s``)."""
        s = self.settings
        if (
            not s.follow_champion
            or not s.mlflow_url
            or time.monotonic() - self._followed_at < s.follow_every_s
        ):
            return
        self._followed_at = time.monotonic()
        try:
            view = read_gate(s.mlflow_url, s.registered_model)
        except Exception as exc:  # MLflow down must not stop training: say so once, retry later
            if not self._follow_failing:
                self.progress(
                    f"learner: cannot read the gate's decisions from {s.mlflow_url} ({exc}); retrying"
                )
            self._follow_failing = True
            return
        self._follow_failing = False
        self.follow_view(view)

    def follow_view(self, view: GateView) -> None:
        target = rebase_target(self.state.head, self.parent_of, view)
        if target is not None:
            self.rebase(target)

    def parent_of(self, version: str) -> str | None:
        try:
            return self.store.get(version).manifest.parent
        except StoreError:
            return None

    def optimizer_snapshot(self, checkpoint_number: int) -> Path:
        return (
            Path(self.settings.learner_state_dir) / "published" / f"ckpt-{checkpoint_number:08d}.optimizer.pt"
        )

    def rebase(self, target: str) -> None:
        """Continue from ``target``'s weights and the AdamW state it was published with.

        Nothing is written here: the next checkpoint records the new head, so a
        kill before it resumes on the old line and rebases again.
        """
        head = self.state.head
        stored = None if target == BASE else self.store.verify(target)
        trainer = Trainer(
            load_policy(self.settings, stored.path if stored else None), self.store, self.settings
        )
        snapshot = (
            self.optimizer_snapshot(stored.manifest.data_window.get("checkpoint", -1)) if stored else None
        )
        if snapshot is not None and snapshot.exists():
            trainer.optimizer.load_state_dict(torch.load(snapshot))
            optimizer = f"AdamW state of checkpoint {stored.manifest.data_window['checkpoint']}"
        else:
            optimizer = "a fresh AdamW state" + (" (its state is no longer kept)" if stored else "")
        trainer.weights_are = stored.version if stored else None
        self.trainer = trainer
        self.state.head = target
        self.state.rebases += 1
        self.progress(f"rebased on {target} (the gate left {head}'s line): its weights, {optimizer}")
        self.crash_point("rebased")

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
        parent = None if self.state.head == BASE else self.state.head
        previous = self.store.latest()
        n = max(1, window.get("updates", 0))
        means = {f"mean_{k}": v / n for k, v in window.get("sums", {}).items()}
        data_window = {
            "topic": self.settings.rewarded_topic,
            "offsets_from": previous.manifest.data_window.get("offsets_to", {}) if previous else {},
            "offsets_to": {str(p): o for p, o in sorted(state.offsets.items())},
            "checkpoint": state.checkpoint,
            "updates": state.updates,
            "window_updates": window.get("updates", 0),
            "outcomes": window.get("counts", {}),
        }
        self.progress(f"publishing update {state.updates} (checkpoint {state.checkpoint})")
        self.keep_optimizer(ckpt)
        stored = self.store.publish(
            ckpt.adapter_dir,
            self.settings.base_model_name,
            parent=parent,
            data_window=data_window,
            metrics=means,
        )
        self.progress(f"published {stored.version} (parent {parent or BASE})")
        self.state.head = stored.version
        self.trainer.weights_are = stored.version  # the checkpoint published is the latest one
        self.close_window(stored.version)

    def keep_optimizer(self, ckpt: Checkpoint) -> None:
        """The AdamW state a version is published with, kept for a rebase on it (the latest few)."""
        target = self.optimizer_snapshot(ckpt.state.checkpoint)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        shutil.copyfile(ckpt.optimizer_path, tmp)
        os.replace(tmp, target)
        for old in sorted(target.parent.glob("ckpt-*.optimizer.pt"))[
            : -self.settings.keep_published_optimizers
        ]:
            old.unlink()

    def settle_publish(self, ckpt: Checkpoint) -> None:
        """After a restart: close the window a publish from this checkpoint already covered, or publish if due."""
        latest = self.store.latest()
        if latest is not None and latest.manifest.data_window.get("checkpoint") == ckpt.state.checkpoint:
            self.state.head = latest.version
            if self.state.window.get("opened_at"):
                self.close_window(latest.version)
            return
        self.publish_if_due(ckpt)

    def close_window(self, version: str) -> None:
        window = self.state.window
        summary = {f"staleness_{k}": float(v) for k, v in window.get("staleness", {}).items()}
        summary.update({f"count_{k}": float(v) for k, v in window.get("counts", {}).items()})
        at_ms = window.get("last", {}).get("timestamp_ms")
        tags = {"adapter_version": version}
        self.tracker.close(self.window_run(), self.state.updates, summary, tags, at_ms)
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
    s = settings
    health = Health("learner", s.learner_health_stale_s)
    if s.learner_health_port:
        health.serve(s.learner_health_host, s.learner_health_port)
    try:
        learner = Learner(settings, progress)
        batches = 0
        try:
            while not stop() and (max_batches is None or batches < max_batches):
                health.beat(**learner.health())
                consumed = learner.consumer.batch(
                    s.batch_sessions,
                    s.batch_tokens,
                    s.batch_wait_s,
                    idle_exit_s or 5.0,
                    estimated_tokens,
                    learner.counts(),
                    max_skipped=16 * s.batch_sessions,
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
    finally:
        health.close()
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
    try:
        run(
            load_settings(),
            args.max_batches,
            args.idle_exit,
            lambda m: print(m, flush=True),
            lambda: bool(stopping),
        )
    except positions.StorageMismatch as exc:
        print(f"learner: refusing to start: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
