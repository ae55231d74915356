"""Durable producing: idempotent, acks=all, keyed by session id.

``produce`` returns only once every record is acknowledged by the broker (or
has failed), so a caller never acknowledges to its own client what was not
durably produced. One background thread serves delivery reports, so many
threads may call ``produce`` at once and each wakes as soon as its own records
are settled. After a delivery failure that leaves an idempotent producer unable
to produce again (fenced, fatal, or timed out, which makes it bump its epoch)
it is replaced by a fresh one before the next ``produce``.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Producer

from ingest import topics
from ingest.brokers import client_config
from ingest.contract import DeadLetter


class BrokerUnavailable(RuntimeError):
    """The broker did not acknowledge in time; nothing may be reported as accepted."""


@dataclass(frozen=True)
class Outgoing:
    topic: str
    key: str
    value: bytes


@dataclass
class Delivery:
    topic: str
    key: str
    partition: int | None = None
    offset: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.offset is not None


# Delivery errors after which the producer is replaced: Tansu fences an idempotent producer
# that bumped its epoch after timed-out messages, and never lets it produce again.
RENEW_ON = {
    KafkaError._MSG_TIMED_OUT,
    KafkaError._FATAL,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    KafkaError.UNKNOWN_PRODUCER_ID,
}


def producer_config(bootstrap: str, delivery_timeout_s: float = 10.0, **config: str | int | bool) -> dict:
    """librdkafka settings of a durable producer: idempotent, acks=all, bounded delivery time."""
    return {
        **client_config(bootstrap),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "compression.type": "lz4",
        "partitioner": topics.PARTITIONER,
        "message.timeout.ms": int(delivery_timeout_s * 1000),
        "socket.timeout.ms": max(1000, int(delivery_timeout_s * 1000)),
        **config,
    }


class _Pending:
    """Counts the unsettled records of one ``produce`` call."""

    def __init__(self, n: int):
        self.left = n
        self.lock = threading.Lock()
        self.done = threading.Event()

    def settle(self) -> None:
        with self.lock:
            self.left -= 1
            if self.left == 0:
                self.done.set()


class RecordProducer:
    def __init__(self, bootstrap: str, delivery_timeout_s: float = 10.0, **config: str | int | bool):
        self.delivery_timeout_s = delivery_timeout_s
        self._config = producer_config(bootstrap, delivery_timeout_s, **config)
        self._lock = threading.Lock()
        self._current = (0, self._new_producer(0))  # (generation, producer), replaced together
        self._broken_generation: int | None = None
        self._retiring: list[Producer] = []
        self._closed = threading.Event()
        self._poller = threading.Thread(target=self._serve_reports, name="record-producer", daemon=True)
        self._poller.start()

    def _new_producer(self, generation: int) -> Producer:
        return Producer({**self._config, "error_cb": functools.partial(self._on_error, generation)})

    def _on_error(self, generation: int, err: KafkaError) -> None:
        if err.fatal() or err.code() in RENEW_ON:
            self._broken_generation = generation

    def _renew_if_broken(self) -> None:
        with self._lock:
            generation, producer = self._current
            if self._broken_generation != generation:
                return
            self._current = (generation + 1, self._new_producer(generation + 1))
            self._retiring.append(producer)  # polled until its last delivery report is served

    def _serve_reports(self) -> None:
        while not self._closed.is_set():
            self._current[1].poll(0.1)
            for old in list(self._retiring):
                old.poll(0)
                if len(old) == 0:
                    self._retiring.remove(old)

    def produce(self, records: list[Outgoing]) -> list[Delivery]:
        """Produce ``records`` and wait for each acknowledgement. Raises :class:`BrokerUnavailable`
        if any record is not acknowledged within the delivery timeout."""
        deliveries = [Delivery(r.topic, r.key) for r in records]
        if not records:
            return deliveries
        self._renew_if_broken()
        generation, producer = self._current
        pending = _Pending(len(records))
        deadline = time.monotonic() + self.delivery_timeout_s
        for record, delivery in zip(records, deliveries, strict=True):
            self._enqueue(producer, record, self._reporter(generation, delivery, pending), deadline)
        pending.done.wait(self.delivery_timeout_s + 5.0)
        failed = [d for d in deliveries if not d.ok]
        if failed:
            reason = next(
                (d.error for d in failed if d.error), "no acknowledgement before the delivery timeout"
            )
            raise BrokerUnavailable(f"{len(failed)} of {len(records)} records not acknowledged: {reason}")
        return deliveries

    def _reporter(self, generation: int, delivery: Delivery, pending: _Pending):
        def on_delivery(err: KafkaError | None, msg) -> None:
            if err is not None:
                delivery.error = err.str()
                self._on_error(generation, err)
            else:
                delivery.partition, delivery.offset = msg.partition(), msg.offset()
            pending.settle()

        return on_delivery

    def _enqueue(self, producer: Producer, record: Outgoing, on_delivery, deadline: float) -> None:
        while True:
            try:
                producer.produce(
                    record.topic, key=record.key.encode(), value=record.value, on_delivery=on_delivery
                )
                return
            except BufferError:  # local queue full: let deliveries drain it, up to the deadline
                if time.monotonic() > deadline:
                    on_delivery(KafkaError(KafkaError._QUEUE_FULL, "local produce queue full"), None)
                    return
                producer.poll(0.05)
            except KafkaException as exc:
                on_delivery(exc.args[0], None)
                return

    def healthy(self, timeout_s: float = 1.0) -> bool:
        """Whether the broker answers a metadata request within ``timeout_s``."""
        try:
            self._current[1].list_topics(timeout=timeout_s)
            return True
        except KafkaException:
            return False

    def dead_letter(self, letter: DeadLetter) -> Outgoing:
        """The outgoing record for a dead letter (keyed by its session id when known)."""
        return Outgoing(topics.DLQ, letter.session_id or "unknown", letter.to_json())

    def close(self) -> None:
        self._closed.set()
        self._poller.join()
        for producer in [self._current[1], *self._retiring]:
            producer.flush(self.delivery_timeout_s)
            producer.close()
        self._retiring.clear()
