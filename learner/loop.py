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

MLflow is written after the checkpoint (and the commit), idempotently, so a
restart replays the checkpoint's last write and MLflow drops the identical copy:
a crash anywhere leaves neither a duplicated step nor a second run for one
window (see :mod:`learner.publishing`).

Records are de-duplicated by ``(session_id, revision)``; amendments and skips
are described in :mod:`learner.batching`. What the de-duplication and the
amendments need is kept in :class:`learner.index.SessionIndex`, which forgets
sessions once they are stale (see there), so memory is bounded.

A data-quality failure quarantines only the records that fail (their session's
every record in the micro-batch); the rest of the micro-batch is trained.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
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
from learner.lineage import GateView, course, read_gate
from learner.publishing import Publisher, optimizer_snapshot, updates_in
from learner.quarantine import failing, latest_revisions
from learner.settings import LearnerSettings
from learner.store import BASE, AdapterStore, StoreError
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
    served = {t.adapter_version or rs.session.policy.adapter_version for t in rs.session.assistant_turns()}
    return {
        **entry,
        "created_at": rs.session.created_at.timestamp(),  # + max_staleness_s: when it is forgotten
        "served": sorted(v or BASE for v in served),
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
            settings.max_staleness_s,
        )
        self.index.evict(time.time())
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
        self.publisher = Publisher(settings, self.store, progress, self.crash_point)
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
        self._parents: dict[str, str | None] = {}  # each published version's parent (None: the base model)
        self._follow_failing = False
        self._unconfirmed: tuple[str, str | None] | None = None  # (head, version left at) awaiting a re-read
        self._kept: set[str] = set()  # versions that fell short and stay on the line, said so
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
            "unpublished": max(0, st.updates - updates_in(latest)),  # trained, not yet in a version
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
        self.publisher.account(self.state, batch.outcomes, metrics)
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

    def fill(self, consumed: list[Consumed]) -> list[Consumed]:
        """Dynamic sampling: ``consumed`` and more records, until at least ``batch_min_trained`` of their
        sessions would train, for at most ``batch_wait_s`` more (and 16 x ``batch_sessions`` records).
        Near the ceiling most groups score alike, and a step on the one or two that do not is noise."""
        s = self.settings
        deadline, cap = time.monotonic() + s.batch_wait_s, 16 * s.batch_sessions
        while len(consumed) < cap:
            left = deadline - time.monotonic()
            if left <= 0 or self.trainable(consumed) >= s.batch_min_trained:
                break
            more = self.consumer.batch(
                s.batch_sessions,
                s.batch_tokens,
                left,
                left,
                estimated_tokens,
                self.counts(),
                max_skipped=cap - len(consumed),
            )
            if not more:
                break
            consumed = consumed + more
        return consumed

    def trainable(self, consumed: list[Consumed]) -> int:
        """How many sessions of ``consumed`` an update would train on now (nothing is kept or sent)."""
        sessions = []
        for record in consumed:
            with contextlib.suppress(ContractError):  # step() dead-letters it with its reason
                sessions.append(parse(RewardedSession, record.value))
        return sum(o.kind in ("trained", "amended") for o in self.plan(sessions).outcomes)

    def counts(self) -> Callable[[bytes], bool]:
        """What counts toward a micro-batch's size: a record that will not be skipped as stale (when
        traffic outruns the learner, stale records ride along to the ledger without filling batches
        that would otherwise train on a handful of fresh sessions)."""
        limits = self.limits()
        return lambda value: not looks_stale(value, limits)

    def limits(self) -> Limits:
        s = self.settings
        known = self.store.versions()
        for version in known:
            if version not in self._parents:  # a manifest never changes once published
                self._parents[version] = self.parent_of(version)
        return Limits(
            head=None if self.state.head == BASE else self.state.head,
            known_versions=frozenset(known),
            max_staleness=s.max_staleness,
            max_row_tokens=s.max_row_tokens,
            max_staleness_s=s.max_staleness_s,
            now=time.time(),
            parents=dict(self._parents),
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
        self.index.evict(time.time())
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
        latest = latest_revisions(sessions)
        report = check_batch(list(latest.values()), self.quality_settings)
        if report.success:
            return sessions, records, []
        reasons = failing(latest, report, self.quality_settings)
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

    def track(self) -> None:
        """Write the checkpointed update's MLflow record (again, after a restart: MLflow keeps one)."""
        self.publisher.track(self.state)

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
        """Rebase when ``view`` shows the line left; a departure that may be a promotion half-written
        (``Course.awaits_confirmation``) only when the next read shows it again."""
        head = self.state.head
        line = course(head, self.parent_of, view, self.settings.keep_short_rejections)
        if line.target is None:
            self._unconfirmed = None
            self.note_kept(head, line.kept, view)
            return
        seen = (head, line.left_at)
        if line.awaits_confirmation and self._unconfirmed != seen:
            self._unconfirmed = seen
            self.progress(
                f"the gate promoted {seen[1]} but the champion is {line.target}: confirming on the next read"
            )
            return
        self._unconfirmed = None
        self.rebase(line.target)

    def note_kept(self, head: str, kept: tuple[str, ...], view: GateView) -> None:
        """Say once per version that a rejection which fell short stays on the line."""
        for version in kept:
            if version in self._kept:
                continue
            self._kept.add(version)
            self.progress(
                f"the gate rejected {version} short of its required gain (better than {view.champion or BASE} "
                f"on the mean, every other check passed): training goes on from {head}"
            )

    def parent_of(self, version: str) -> str | None:
        try:
            return self.store.get(version).manifest.parent
        except StoreError:
            return None

    def optimizer_snapshot(self, checkpoint_number: int) -> Path:
        return optimizer_snapshot(self.settings.learner_state_dir, checkpoint_number)

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

    # --- publishing (learner/publishing.py) --------------------------------------------

    def publish_if_due(self, ckpt: Checkpoint | None) -> None:
        if self.publisher.due(self.state, ckpt):
            stored = self.publisher.publish(self.state, ckpt)
            self.trainer.weights_are = stored.version  # the checkpoint published is the latest one
            self.publisher.close_window(self.state, stored.version)

    def settle_publish(self, ckpt: Checkpoint) -> None:
        """After a restart: close the window a publish from this checkpoint already covered, or publish if due."""
        if not self.publisher.settle(self.state, ckpt):
            self.publish_if_due(ckpt)

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
                if consumed and s.batch_min_trained:
                    consumed = learner.fill(consumed)
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
