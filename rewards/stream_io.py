"""Kafka plumbing of the rewards worker: the batch path into faust, the outbox, history and floors.

- :class:`BatchApp` is a faust app whose consumer hands each fetched batch to
  ``app.on_batch`` instead of faust's per-event streams (which cost more per
  record than the scoring itself); faust still owns group membership, the
  co-partitioned assignment, rebalancing and seeking to committed offsets.
- :class:`Outbox` produces with explicit partitions and headers without
  waiting, and tells which records were acknowledged where; ``flush`` waits.
- :func:`read_history` reads ``rewarded.v1`` partition p from a floor up to a
  marker this worker produced itself, so it never needs an end offset.
- :class:`FloorStore` keeps each partition's floor as the committed offset of
  ``rewarded.v1`` in the group ``<group>.floor`` (Tansu keeps no commit metadata).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import faust
import pydantic_core
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from faust.transport.drivers import aiokafka as faust_aiokafka

from ingest import topics
from ingest.brokers import client_config
from ingest.producer import BrokerUnavailable
from rewards.join import Emitted

HEADER_EMITTED = topics.REWARDED_EMITTED_HEADER  # {"session_id", "revision", "feedback_ids", "outcome_ids"}
HEADER_WORKER = "ratchet.worker"
HEADER_MARKER = topics.REWARDED_MARKER_HEADER  # on records that are not rewarded sessions: skip them

BatchHandler = Callable[[dict, int], Awaitable[None]]


# --- faust, batch by batch ------------------------------------------------------------------


class BatchConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        # faust fixes the broker's long-poll at 1.5 s. aiokafka keeps one fetch in flight per broker,
        # for the partitions whose fetched records are used up: when that fetch names only partitions
        # at their end, the others wait behind it for the whole long-poll although the broker has
        # their records. A short one bounds that stall.
        consumer._fetch_max_wait_ms = self.app.fetch_max_wait_ms
        return consumer


class BatchConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> BatchConsumerThread:
        return BatchConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _drain_messages(self, fetcher) -> None:
        consumer_stopped, fetcher_stopped = self._stopped.is_set, fetcher._stopped.is_set
        try:
            while not (consumer_stopped() or fetcher_stopped()):
                records, _ = await self._wait_next_records(1.0)
                generation = self.app.consumer_generation_id
                if records and self.flow_active and not self.should_stop:
                    await self.app.on_batch(records, generation)
        except (*self.consumer_stopped_errors, asyncio.CancelledError):
            if self.app.should_stop:
                return
            raise


class BatchTransport(faust_aiokafka.Transport):
    Consumer = BatchConsumer


class BatchApp(faust.App):
    """A faust app fed batches: set ``on_batch(records_by_tp, generation)`` and ``on_shutdown()``."""

    on_batch: BatchHandler
    on_shutdown: Callable[[], Awaitable[None]] | None = None
    fetch_max_wait_ms: int = 100  # the broker's long-poll (faust's own is 1500)

    def _new_transport(self):
        return BatchTransport(self.conf.broker_consumer, self)

    async def on_stop(self) -> None:
        if self.on_shutdown is not None:
            await self.on_shutdown()
        await super().on_stop()


def faust_brokers(bootstrap: str) -> str:
    return ";".join(f"kafka://{host.strip()}" for host in bootstrap.split(",") if host.strip())


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# --- out ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Out:
    topic: str
    key: bytes
    value: bytes
    partition: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


class Outbox:
    """Idempotent, acks=all producing. :meth:`submit` queues records and returns at once (order is
    kept per partition); :meth:`acked` hands back their offsets as acknowledgements arrive;
    :meth:`flush` waits for all of them. A record that is not acknowledged raises
    :class:`BrokerUnavailable` from the next call."""

    def __init__(self, bootstrap: str, delivery_timeout_s: float = 30.0):
        self.delivery_timeout_s = delivery_timeout_s
        self._producer = Producer(
            {
                **client_config(bootstrap),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": int(delivery_timeout_s * 1000),
            }
        )
        self._acked: collections.deque[tuple[str, int, int]] = collections.deque()
        self._errors: list[str] = []
        self._closed = threading.Event()
        self._poller = threading.Thread(target=self._serve_reports, name="rewards-outbox", daemon=True)
        self._poller.start()

    def _serve_reports(self) -> None:
        while not self._closed.is_set():
            self._producer.poll(0.1)

    def _on_delivery(self, err: KafkaError | None, msg) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")
        else:
            self._acked.append((msg.topic(), msg.partition(), msg.offset()))

    def _raise_errors(self) -> None:
        if self._errors:
            raise BrokerUnavailable(f"{len(self._errors)} records not acknowledged: {self._errors[0]}")

    def submit(self, records: list[Out], on_delivery=None) -> None:
        self._raise_errors()
        produce, report = self._producer.produce, on_delivery or self._on_delivery
        for r in records:
            kwargs = {"partition": r.partition} if r.partition is not None else {}
            while True:
                try:
                    produce(r.topic, r.value, r.key, headers=list(r.headers), on_delivery=report, **kwargs)
                    break
                except BufferError:  # the local queue is full: wait for deliveries to drain it
                    self._producer.poll(0.05)

    def acked(self) -> list[tuple[str, int, int]]:
        """(topic, partition, offset) of the records acknowledged since the last call."""
        self._raise_errors()
        out = []
        while self._acked:
            out.append(self._acked.popleft())
        return out

    def flush(self) -> None:
        """Block until every submitted record is acknowledged."""
        left = self._producer.flush(self.delivery_timeout_s + 5)
        self._raise_errors()
        if left:
            raise BrokerUnavailable(f"{left} records not acknowledged before the delivery timeout")

    def send(self, records: list[Out]) -> list[int]:
        """Produce ``records`` and wait: their offsets, in order."""
        offsets: list[int | None] = [None] * len(records)

        def report(i: int):
            def on_delivery(err: KafkaError | None, msg) -> None:
                if err is not None:
                    self._errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")
                else:
                    offsets[i] = msg.offset()

            return on_delivery

        for i, record in enumerate(records):
            self.submit([record], on_delivery=report(i))
        self.flush()
        return offsets

    def partitions_of(self, topic: str) -> int:
        return len(
            self._producer.list_topics(topic, timeout=self.delivery_timeout_s).topics[topic].partitions
        )

    def markers(self, partitions: list[int], worker: str) -> dict[int, int]:
        """Produce a marker to each partition of ``rewarded.v1``; its offset bounds a history read."""
        outs = [
            Out(
                topics.REWARDED,
                HEADER_MARKER.encode(),
                json.dumps({"marker": worker, "partition": p, "at_ms": int(time.time() * 1000)}).encode(),
                p,
                ((HEADER_MARKER, worker.encode()),),
            )
            for p in partitions
        ]
        return dict(zip(partitions, self.send(outs), strict=True))

    def close(self) -> None:
        self._producer.flush(self.delivery_timeout_s)
        self._closed.set()
        self._poller.join()
        # librdkafka's handle lives (and keeps reconnecting to the broker) until the Producer is
        # collected, and an app object can outlive the stage: drop the only reference now
        self._producer = None


def emitted_header(session_id: str, emitted: Emitted) -> bytes:
    return pydantic_core.to_json(
        {
            "session_id": session_id,
            "revision": emitted.revision,
            "feedback_ids": sorted(emitted.feedback_ids),
            "outcome_ids": sorted(emitted.outcome_ids),
        }
    )


def parse_emitted(headers: list[tuple[str, bytes]] | None, value: bytes | None) -> tuple[str, Emitted] | None:
    """The session id and revision summary of a ``rewarded.v1`` record; ``None`` for markers and
    records that are not rewarded sessions."""
    found = dict(headers or [])
    if HEADER_MARKER in found:
        return None
    try:
        obj = json.loads(found.get(HEADER_EMITTED) or value or b"")
        emitted = Emitted(int(obj["revision"]), frozenset(obj["feedback_ids"]), frozenset(obj["outcome_ids"]))
        return str(obj["session_id"]), emitted
    except (ValueError, KeyError, TypeError):
        return None


# --- history and floors -------------------------------------------------------------------------


def read_history(
    bootstrap: str, starts: dict[int, int], markers: dict[int, int], timeout_s: float = 300.0
) -> dict[int, tuple[dict[str, tuple[Emitted, int, int]], int]]:
    """For each partition p of ``rewarded.v1``, read from ``starts[p]`` up to the marker at
    ``markers[p]``: the last revision of each session (session id -> (summary, offset, timestamp
    ms)) and the number of records read."""
    consumer = Consumer(
        {
            **client_config(bootstrap),
            "group.id": "ratchet-rewards-history",  # assign() only: nothing is committed
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    found: dict[int, tuple[dict[str, tuple[Emitted, int, int]], int]] = {p: ({}, 0) for p in starts}
    pending = set(starts)
    deadline = time.monotonic() + timeout_s
    try:
        consumer.assign([TopicPartition(topics.REWARDED, p, start) for p, start in starts.items()])
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topics.REWARDED}: markers {markers} not all reached within {timeout_s:g}s; "
                    f"still reading partitions {sorted(pending)}"
                )
            for msg in consumer.consume(1000, timeout=0.05):
                if msg.error() is not None:
                    raise BrokerUnavailable(f"reading {topics.REWARDED}: {msg.error().str()}")
                p = msg.partition()
                history, n_read = found[p]
                found[p] = history, n_read + 1
                summary = parse_emitted(msg.headers(), msg.value())
                if summary is not None:
                    sid, emitted = summary
                    if sid not in history or history[sid][0].revision <= emitted.revision:
                        history[sid] = (emitted, msg.offset(), msg.timestamp()[1])
                if msg.offset() >= markers[p]:
                    pending.discard(p)
                    consumer.incremental_unassign([TopicPartition(topics.REWARDED, p)])
        return found
    finally:
        consumer.close()


class FloorStore:
    """Each partition's floor: the committed offset of ``rewarded.v1`` p in group ``<group>.floor``."""

    def __init__(self, bootstrap: str, group: str, timeout_s: float = 30.0):
        self.timeout_s = timeout_s
        self._consumer = Consumer(
            {**client_config(bootstrap), "group.id": f"{group}.floor", "enable.auto.commit": False}
        )

    def read(self, partitions: list[int]) -> dict[int, int | None]:
        tps = self._consumer.committed(
            [TopicPartition(topics.REWARDED, p) for p in partitions], timeout=self.timeout_s
        )
        return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in tps}

    def commit(self, floors: dict[int, int]) -> None:
        if floors:
            self._consumer.commit(
                offsets=[TopicPartition(topics.REWARDED, p, f) for p, f in floors.items()], asynchronous=False
            )

    def close(self) -> None:
        self._consumer.close()
