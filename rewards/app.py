"""The rewards worker: sessions + late signals -> join -> score -> ``rewarded.v1``.

A faust-streaming app. Faust owns what it does well: group membership, its
co-partitioned assignor (partition p of ``sessions.v1``, ``feedback.v1`` and
``outcomes.v1`` always go to one worker), rebalancing, seeking to the committed
offsets, timers and the worker's lifecycle. Three things are deliberately not
faust's:

- Events: the consumer hands each fetched batch to :meth:`RewardsStage.on_batch`
  (:class:`rewards.stream_io.BatchApp`). Faust's per-event streams cost ~200 µs
  a record on this machine, more than joining and scoring it.
- Offsets: the input topics are declared with ``acks=False``, so faust never
  commits them. Faust would commit every acknowledged event, but a join needs
  its records until it closes. The stage commits, every
  ``rewards_commit_interval_s``, when partitions are revoked and on shutdown,
  the offsets :meth:`rewards.join.Partition.committable` gives (the oldest
  record an open join still needs) through ``app.consumer._commit``, once the
  outbox is flushed: rewarded and dead-letter records are queued without
  waiting, and every one produced before a commit is acknowledged before it.
- State: no faust tables. Table recovery trusts ListOffsets, which Tansu 0.6.0
  gets wrong. Join state is a function of the topics: on assignment the worker
  produces a marker to ``rewarded.v1`` partition p, reads that partition from
  the partition's floor up to its own marker (what is already out, without any
  end offset), then replays the inputs from the committed offsets. The floor
  (see :mod:`rewards.join`) is committed after the input offsets as the offset
  of ``rewarded.v1`` p in the group ``<group>.floor``.

Emission is idempotent by (session id, revision): a rebuilt join emits only
what its last revision lacks, so a worker killed at any moment and restarted,
or a partition moved to another worker, emits each revision exactly once.
Rewarded records go to the partition number of their input (co-partitioning
does not depend on a producer's partitioner) with the headers
``ratchet.emitted`` (session id, revision, signal ids) and ``ratchet.worker``.
Markers carry the header ``ratchet.marker``; readers of ``rewarded.v1`` skip
them. A failed produce or commit crashes the worker (exit 1): it restarts from
the last commit without loss.

Run it with ``ratchet rewards worker`` or ``python -m rewards.app``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Iterator
from typing import NoReturn

import httpx
from confluent_kafka import OFFSET_BEGINNING
from faust.types import TP

from ingest import topics
from ingest.brokers import faust_credentials
from ingest.contract import ContractError, DeadLetter, Feedback, Outcome, RewardedSession, Session, parse
from rewards import judge
from rewards.join import INPUTS, Emission, Partition, Rejection
from rewards.metrics import Metrics
from rewards.scoring import RewardSettings, load_reward_settings, reward_session
from rewards.stream_io import (
    HEADER_EMITTED,
    HEADER_WORKER,
    BatchApp,
    FloorStore,
    Out,
    Outbox,
    emitted_header,
    faust_brokers,
    read_history,
    worker_id,
)
from rewards.worker_settings import StreamSettings, load_stream_settings

log = logging.getLogger("rewards")


def now_ms() -> int:
    return int(time.time() * 1000)


@contextlib.contextmanager
def collection_between_batches() -> Iterator[None]:
    """Cyclic garbage collection paused for the block and resumed after it (if it was on).

    A batch holds every one of its sessions (parsed, joined, scored) until it is produced: about
    40 tracked objects a session, 80,000 for a batch of 2,000, which is what starts a collection.
    Run inside the batch, a collection scans all of them, and they are garbage a moment later.
    Run between batches, it scans what outlives them (the join state). Measured on the rewards
    bench (40,000 sessions, one worker): 112-116 CPU µs a session before, 101-107 after."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class RewardsStage:
    def __init__(
        self, app: BatchApp, settings: StreamSettings, reward_settings: RewardSettings, metrics: Metrics
    ):
        self.app, self.settings, self.reward_settings, self.metrics = app, settings, reward_settings, metrics
        self.rules = settings.rules()
        self.worker = worker_id()
        self._worker_header = (HEADER_WORKER, self.worker.encode())
        self.outbox = Outbox(settings.kafka_bootstrap)
        self.floors = FloorStore(settings.kafka_bootstrap, settings.rewards_group_id)
        self.lock = asyncio.Lock()
        self.parts: dict[int, Partition] = {}
        self.generation = -1
        self.closed = False
        self._committed: tuple[dict, dict] = ({}, {})
        self._last_commit = self._last_log = time.monotonic()
        self._consumed_at_log = 0.0
        self._sessions_read = 0  # in this batch, counted once at its end
        self._judge_client: httpx.Client | None = None  # made on the first judge call

    # -- rebalancing

    async def on_revoked(self, sender, revoked, **_) -> None:
        async with self.lock:
            if self.parts and not self.closed:
                await self._commit()
            self.parts.clear()
            self.generation = -1

    async def on_assigned(self, sender, assigned, **_) -> None:
        async with self.lock:
            self.parts.clear()
            if self.closed:
                return
            numbers = sorted({tp.partition for tp in assigned if tp.topic in INPUTS})
            missing = [f"{t}[{p}]" for p in numbers for t in INPUTS if TP(t, p) not in assigned]
            if missing:
                log.error("input partitions not co-assigned, joins may miss signals: missing %s", missing)
            if numbers:
                rewarded_partitions = await asyncio.to_thread(self.outbox.partitions_of, topics.REWARDED)
                if numbers[-1] >= rewarded_partitions:
                    raise RuntimeError(
                        f"{topics.REWARDED} has {rewarded_partitions} partitions but input partition {numbers[-1]} "
                        f"is assigned: it must have as many partitions as {', '.join(INPUTS)}"
                    )
                await asyncio.to_thread(self.outbox.flush)
                self.outbox.acked()  # of partitions this worker no longer has
                floors = await asyncio.to_thread(self.floors.read, numbers)
                markers = await asyncio.to_thread(self.outbox.markers, numbers, self.worker)
                starts = {p: OFFSET_BEGINNING if floors[p] is None else floors[p] for p in numbers}
                found = await asyncio.to_thread(read_history, self.settings.kafka_bootstrap, starts, markers)
                for p in numbers:
                    history, n_read = found[p]
                    self.parts[p] = Partition(
                        p, self.rules, rewarded_end=markers[p] + 1, history=history, now_ms=now_ms()
                    )
                    log.info(
                        "partition %d: read %d rewarded records from %s to our marker at %d (%d sessions known)",
                        p,
                        n_read,
                        "the beginning" if floors[p] is None else f"floor {floors[p]}",
                        markers[p],
                        len(history),
                    )
            self.generation = self.app.consumer_generation_id
            self.metrics.partitions.set(len(self.parts))
            log.info("assigned partitions %s (generation %d)", numbers, self.generation)

    # -- the loop

    async def on_batch(self, records: dict, generation: int) -> None:
        started = time.perf_counter()
        with collection_between_batches():
            await self._on_batch(records, generation)
        self.metrics.batch_seconds.observe(time.perf_counter() - started)

    async def _on_batch(self, records: dict, generation: int) -> None:
        async with self.lock:
            if generation != self.generation or self.closed:
                return  # fetched before a rebalance: the new assignment re-reads from committed offsets
            now, outs, touched = now_ms(), [], set()
            for tp, batch in records.items():
                part = self.parts.get(tp.partition)
                if part is None or tp.topic not in INPUTS:
                    continue
                touched.add(part)
                self.metrics.count(self.metrics.consumed, tp.topic, len(batch))
                for record in batch:
                    if not part.seen(tp.topic, record.offset):
                        outs += self._read(part, tp.topic, record, now)
            if self._sessions_read:
                self.metrics.sessions.inc(self._sessions_read)
                self._sessions_read = 0
            for part in touched:
                outs += await self._score(part.ready())
            self._send(outs)

    async def tick(self) -> None:
        async with self.lock:
            if self.closed:
                return
            now, outs = now_ms(), []
            for p, part in self.parts.items():
                emissions, rejections = part.sweep(now)
                outs += await self._score(emissions) + [self._dead_letter(r) for r in rejections]
                clock = part.clock(now)  # 0 until the partition's topics have been read or found quiet
                self.metrics.lag.labels(str(p)).set(max(0.0, (now - clock) / 1000) if clock else 0.0)
                held = part.committable()
                self.metrics.replay.labels(str(p)).set(sum(part.next_offset[t] - o for t, o in held.items()))
            self._send(outs)
            if time.monotonic() - self._last_commit >= self.settings.rewards_commit_interval_s:
                await self._commit()
            counts = [part.counts() for part in self.parts.values()]
            self.metrics.open_joins.set(sum(c[0] for c in counts))
            self.metrics.orphans.set(sum(c[1] for c in counts))
        if time.monotonic() - self._last_log >= self.settings.rewards_log_every_s:
            self._log_progress()

    async def shutdown(self) -> None:
        async with self.lock:
            if self.closed:
                return
            if self.parts:
                await self._commit()
            self.closed = True
            self.outbox.close()
            self.floors.close()
            if self._judge_client is not None:
                self._judge_client.close()

    # -- steps

    def _read(self, part: Partition, topic: str, record, now: int) -> list[Out]:
        ts = record.timestamp if record.timestamp and record.timestamp > 0 else now
        raw = record.value or b""
        try:
            if topic == topics.SESSIONS:
                rejected = part.add_session(record.offset, ts, parse(Session, raw), now, raw)
                self._sessions_read += 1
            elif topic == topics.FEEDBACK:
                rejected = part.add_feedback(record.offset, ts, parse(Feedback, raw), now)
            else:
                rejected = part.add_outcome(record.offset, ts, parse(Outcome, raw), now)
        except ContractError as exc:
            part.skip(topic, record.offset, ts, now)
            reason = f"{topic}[{part.partition}]@{record.offset}: {exc.reason}"
            return [self._dead_letter(Rejection("malformed", reason, raw, exc.session_id, exc.tenant))]
        return [self._dead_letter(r) for r in rejected]

    async def _score(self, emissions: list[Emission]) -> list[Out]:
        """Score each emission; a session whose scoring raised is dead-lettered. With the judge on,
        the flagged sessions' judge calls run together in threads, off the event loop (heartbeats and
        fetching go on meanwhile); the batch waits for the slowest (at most ``judge_timeout_s``)."""
        scored: list[tuple[Emission, RewardedSession | None, BaseException | None]] = []
        for e in emissions:
            try:
                args = (e.session, list(e.feedback), list(e.outcomes), self.reward_settings)
                scored.append((e, reward_session(*args, revision=e.revision), None))
            except Exception as exc:  # a scoring fault must not stop the stage: dead-letter the session
                scored.append((e, None, exc))
        if self.reward_settings.judge_enabled:
            flagged = [
                i for i, (_, rewarded, _) in enumerate(scored) if rewarded is not None and rewarded.flags
            ]
            verdicts = await asyncio.gather(
                *(self._judge(scored[i][1]) for i in flagged), return_exceptions=True
            )
            for i, judged in zip(flagged, verdicts, strict=True):
                e = scored[i][0]
                scored[i] = (e, None, judged) if isinstance(judged, BaseException) else (e, judged, None)
        outs, counted = [], []
        for e, rewarded, exc in scored:
            sid = e.session.session_id
            if exc is not None or rewarded is None:
                log.error("scoring session %s revision %d failed", sid, e.revision, exc_info=exc)
                reason = f"scoring revision {e.revision} of session {sid} failed: {exc!r}"
                outs.append(
                    self._dead_letter(Rejection("scoring_failed", reason, e.session.to_json(), sid, None))
                )
                continue
            counted.append((e.revision, rewarded.reward, [f.kind.value for f in rewarded.flags]))
            headers = ((HEADER_EMITTED, emitted_header(sid, e.emitted)), self._worker_header)
            outs.append(
                Out(topics.REWARDED, sid.encode(), rewarded.to_json(e.session_json), e.partition, headers)
            )
        self.metrics.rewarded(counted)
        return outs

    async def _judge(self, rewarded: RewardedSession) -> RewardedSession:
        if self._judge_client is None:
            self._judge_client = httpx.Client()  # thread-safe: shared by the concurrent calls
        return await asyncio.to_thread(judge.review, rewarded, self.reward_settings, self._judge_client)

    def _dead_letter(self, rejection: Rejection) -> Out:
        self.metrics.dead_letters.labels(rejection.kind).inc()
        ids = {"session_id": rejection.session_id, "tenant": rejection.tenant}
        letter = DeadLetter.of(
            "rewards", rejection.reason, rejection.payload, **{k: v and v[:1024] for k, v in ids.items()}
        )
        return Out(topics.DLQ, (letter.session_id or "unknown").encode(), letter.to_json())

    def _send(self, outs: list[Out]) -> None:
        """Queue ``outs``; note where the acknowledged ones landed (the end of ``rewarded.v1``)."""
        self.outbox.submit(outs)
        for topic, partition, offset in self.outbox.acked():
            if topic == topics.REWARDED and partition in self.parts:
                self.parts[partition].produced(offset)

    async def _commit(self) -> None:
        """Once everything produced so far is acknowledged: input offsets first, then floors (a crash
        between the two leaves an older floor, i.e. a longer read)."""
        await asyncio.to_thread(self.outbox.flush)
        self._send([])
        offsets = {TP(t, p): o for p, part in self.parts.items() for t, o in part.committable().items()}
        floors = {p: part.floor() for p, part in self.parts.items()}
        self._last_commit = time.monotonic()
        last_offsets, last_floors = self._committed
        if offsets and offsets != last_offsets and not await self.app.consumer._commit(offsets):
            return  # the group rebalanced meanwhile; the next owner replays from the last commit
        if floors != last_floors:
            await asyncio.to_thread(self.floors.commit, floors)
        self._committed = (offsets, floors)

    def _log_progress(self) -> None:
        m = self.metrics
        consumed = sum(m.value("ratchet_rewards_records_consumed_total", topic=t) for t in INPUTS)
        rate = (consumed - self._consumed_at_log) / (time.monotonic() - self._last_log)
        self._last_log, self._consumed_at_log = time.monotonic(), consumed
        rewarded = sum(m.value("ratchet_rewards_rewarded_total", revision=r) for r in ("0", "1", "2", "3+"))
        dead = sum(
            m.value("ratchet_rewards_dead_letters_total", reason=r)
            for r in ("malformed", "orphan_expired", "late_signal", "tenant_mismatch", "scoring_failed")
        )
        log.info(
            "%d records in (%.0f/s), %d rewarded (%d amendments), %d dead letters; %d open joins, %d orphans; "
            "partitions %s",
            consumed,
            rate,
            rewarded,
            m.value("ratchet_rewards_amendments_total"),
            dead,
            m.value("ratchet_rewards_open_joins"),
            m.value("ratchet_rewards_orphans"),
            sorted(self.parts),
        )


def build_app(
    settings: StreamSettings, reward_settings: RewardSettings | None = None, metrics: Metrics | None = None
) -> tuple[BatchApp, RewardsStage]:
    session_timeout = settings.rewards_session_timeout_s
    app = BatchApp(
        settings.rewards_group_id,
        broker=faust_brokers(settings.kafka_bootstrap),
        broker_credentials=faust_credentials(),
        key_serializer="raw",
        value_serializer="raw",
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=session_timeout,
        broker_heartbeat_interval=min(3.0, session_timeout / 3),
        broker_max_poll_records=settings.rewards_batch_max,
        consumer_max_fetch_size=4 * 1024 * 1024,
        stream_wait_empty=False,
        topic_allow_declare=False,
        topic_disable_leader=True,
        web_enabled=False,
        datadir=str(settings.state_dir / "rewards" / settings.rewards_group_id),
    )
    stage = RewardsStage(app, settings, reward_settings or load_reward_settings(), metrics or Metrics())
    app.topics.add(app.topic(*INPUTS, acks=False))
    app.on_batch, app.on_shutdown = stage.on_batch, stage.shutdown
    app.on_partitions_revoked.connect(stage.on_revoked)
    app.on_partitions_assigned.connect(stage.on_assigned)
    app.timer(settings.rewards_sweep_interval_s)(stage.tick)
    return app, stage


def run_worker(settings: StreamSettings, loglevel: str = "info") -> NoReturn:
    """Run one worker until SIGTERM/SIGINT, then exit the process (non-zero after a crash)."""
    import faust

    gc.set_threshold(100_000, 50, 100)  # open joins are many long-lived objects: collect less often
    (settings.state_dir / "rewards").mkdir(parents=True, exist_ok=True)
    app, stage = build_app(settings)
    try:
        stage.metrics.serve(settings.rewards_metrics_host, settings.rewards_metrics_port)
    except OSError as exc:
        port = f"{settings.rewards_metrics_host}:{settings.rewards_metrics_port}"
        raise SystemExit(
            f"rewards worker: cannot serve metrics on {port} ({exc}); set RATCHET_REWARDS_METRICS_PORT"
        ) from None
    log.info(
        "rewards worker %s: group %s on %s; join_wait_s=%g amend_window_s=%g orphan_ttl_s=%g "
        "expect_feedback=%s expect_outcome=%s; metrics %s",
        stage.worker,
        settings.rewards_group_id,
        settings.kafka_bootstrap,
        settings.join_wait_s,
        settings.amend_window_s,
        settings.orphan_ttl_s,
        settings.expect_feedback,
        settings.expect_outcome,
        f"http://{settings.rewards_metrics_host}:{settings.rewards_metrics_port}/metrics"
        if settings.rewards_metrics_port
        else "off",
    )
    faust.Worker(app, loglevel=loglevel, quiet=True).execute_from_commandline()


if __name__ == "__main__":
    run_worker(load_stream_settings())
