"""The rolling consumer of ``rewarded.v1``: manual assignment, manual offsets, micro-batches.

The learner owns every partition of its topic (``assign``, no group
rebalancing). Where it starts is decided by the caller, normally the
checkpoint's offsets; the group's committed offsets are only written after a
checkpoint is durable and serve monitoring and fresh starts.

Records carrying the ``ratchet.marker`` header (a reward worker's position
markers) are skipped. The client is confluent-kafka (librdkafka), as for Ratchet's producers: lz4
batches, manual assignment and synchronous commits of explicit offsets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ingest import topics
from ingest.brokers import client_config
from learner.positions import digest


@dataclass(frozen=True)
class Consumed:
    partition: int
    offset: int
    value: bytes


class RewardedConsumer:
    def __init__(
        self, bootstrap: str, topic: str, group: str, offsets: dict[int, int], timeout_s: float = 30.0
    ):
        self.topic = topic
        self.config = {
            **client_config(bootstrap),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        }
        self.consumer = Consumer(self.config)
        deadline = time.monotonic() + timeout_s
        while True:
            meta = self.consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic} has no partitions on {bootstrap} after {timeout_s}s")
            time.sleep(0.2)
        partitions = sorted(meta.partitions)
        committed = {
            tp.partition: tp.offset
            for tp in self.consumer.committed(
                [TopicPartition(topic, p) for p in partitions], timeout=timeout_s
            )
        }
        self.start = {p: offsets.get(p, committed[p] if committed[p] >= 0 else 0) for p in partitions}
        self.consumer.assign([TopicPartition(topic, p, o) for p, o in self.start.items()])

    def batch(
        self,
        max_records: int,
        max_weight: int,
        wait_s: float,
        idle_s: float | None,
        weigh: Callable[[bytes], int],
        counts: Callable[[bytes], bool] = lambda value: True,
        max_skipped: int | None = None,
    ) -> list[Consumed]:
        """Records until ``max_records`` of them that ``counts`` or ``max_weight`` is reached, or
        ``wait_s`` has passed since the first one; ``[]`` after ``idle_s`` without any record (``None``:
        wait for one). Records that do not count (stale ones, which the learner only skips) are
        carried along, at most ``max_skipped`` of them (``None``: no bound)."""
        out: list[Consumed] = []
        weight, counted = 0, 0
        started = time.monotonic()
        first_at: float | None = None
        while True:
            room = max_records - counted
            if max_skipped is not None:
                room = min(room, max_skipped - (len(out) - counted))
            room = max(1, room)
            for msg in self.consumer.consume(num_messages=room, timeout=0.2):
                if msg.error() is not None:
                    if msg.error().fatal() or msg.error().code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise KafkaException(msg.error())
                    continue
                if topics.is_marker(msg):
                    continue  # a reward worker's position marker, not a rewarded session
                value = msg.value() or b""
                out.append(Consumed(msg.partition(), msg.offset(), value))
                if counts(value):
                    counted += 1
                    weight += weigh(value)
            now = time.monotonic()
            if out and first_at is None:
                first_at = now
            skipped = len(out) - counted
            full = counted >= max_records or weight >= max_weight
            full = full or (max_skipped is not None and skipped >= max_skipped)
            if out and (full or now - first_at >= wait_s):
                return out
            if not out and idle_s is not None and now - started >= idle_s:
                return out

    def first_offsets(self, timeout_s: float = 30.0) -> dict[int, int]:
        """Partition -> the first offset the broker still holds."""
        meta = self.consumer.list_topics(self.topic, timeout=timeout_s).topics.get(self.topic)
        partitions = sorted(meta.partitions) if meta is not None and meta.error is None else []
        return {
            p: self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=timeout_s)[0]
            for p in partitions
        }

    def digest_at(self, partition: int, offset: int, timeout_s: float = 10.0) -> str | None:
        """The digest of the record at ``offset`` (None when the log has no record there)."""
        probe = Consumer({**self.config, "group.id": f"{self.config['group.id']}-probe"})
        try:
            probe.assign([TopicPartition(self.topic, partition, offset)])
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                msg = probe.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue
                return digest(msg.value() or b"") if msg.offset() == offset else None
            return None
        finally:
            probe.close()

    def seek(self, offsets: dict[int, int]) -> None:
        """Consume from ``offsets`` from now on (an explicit reset)."""
        self.start = dict(offsets)
        self.consumer.assign([TopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())])

    def commit(self, offsets: dict[int, int]) -> None:
        self.consumer.commit(
            offsets=[TopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())], asynchronous=False
        )

    def committed(self) -> dict[int, int]:
        tps = [TopicPartition(self.topic, p) for p in self.start]
        return {tp.partition: tp.offset for tp in self.consumer.committed(tps, timeout=30)}

    def close(self) -> None:
        self.consumer.close()
