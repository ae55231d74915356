"""Durable producing: idempotent, acks=all, keyed by session id.

``produce`` returns only once every record is acknowledged by the broker (or
has failed), so a caller never acknowledges to its own client what was not
durably produced.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Producer

from ingest import topics
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


class RecordProducer:
    def __init__(self, bootstrap: str, delivery_timeout_s: float = 10.0, **config: str | int | bool):
        self.delivery_timeout_s = delivery_timeout_s
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "compression.type": "lz4",
                "message.timeout.ms": int(delivery_timeout_s * 1000),
                "socket.timeout.ms": max(1000, int(delivery_timeout_s * 1000)),
                **config,
            }
        )
        self._lock = threading.Lock()

    def produce(self, records: list[Outgoing]) -> list[Delivery]:
        """Produce ``records`` and wait for each acknowledgement. Raises :class:`BrokerUnavailable`
        if any record is not acknowledged within the delivery timeout."""
        deliveries = [Delivery(r.topic, r.key) for r in records]
        done = threading.Event()
        pending = [len(records)]

        def on_delivery(delivery: Delivery):
            def callback(err: KafkaError | None, msg) -> None:
                if err is not None:
                    delivery.error = err.str()
                else:
                    delivery.partition, delivery.offset = msg.partition(), msg.offset()
                pending[0] -= 1
                if pending[0] == 0:
                    done.set()

            return callback

        if not records:
            return deliveries
        with self._lock:
            for record, delivery in zip(records, deliveries, strict=True):
                while True:
                    try:
                        self._producer.produce(
                            record.topic,
                            key=record.key.encode(),
                            value=record.value,
                            on_delivery=on_delivery(delivery),
                        )
                        break
                    except BufferError:  # local queue full: serve callbacks, then retry
                        self._producer.poll(0.05)
                    except KafkaException as exc:
                        delivery.error = str(exc)
                        pending[0] -= 1
                        break
        # Serve delivery callbacks until every record of this call is settled.
        remaining = self.delivery_timeout_s + 5.0
        deadline = time.monotonic() + remaining
        while pending[0] > 0 and time.monotonic() < deadline:
            self._producer.poll(0.05)
        if pending[0] > 0 or any(not d.ok for d in deliveries):
            failed = [d for d in deliveries if not d.ok]
            reason = (
                failed[0].error
                if failed and failed[0].error
                else "no acknowledgement before the delivery timeout"
            )
            raise BrokerUnavailable(
                f"{len(failed) or pending[0]} of {len(records)} records not acknowledged: {reason}"
            )
        return deliveries

    def dead_letter(self, letter: DeadLetter) -> Outgoing:
        """The outgoing record for a dead letter (keyed by its session id when known)."""
        return Outgoing(topics.DLQ, letter.session_id or "unknown", letter.to_json())

    def close(self) -> None:
        self._producer.flush(self.delivery_timeout_s)
