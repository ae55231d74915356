"""Kafka topics: names, layout and creation, in one place.

Every record is keyed by ``session_id`` so that one session's records (the
session, its feedback, its outcomes, its rewarded revisions) share a partition
number across topics with the same partition count.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from typing import Any

from ingest.brokers import client_config

SESSIONS = "sessions.v1"
FEEDBACK = "feedback.v1"
OUTCOMES = "outcomes.v1"
REWARDED = "rewarded.v1"
DLQ = "dlq.v1"

DAY_MS = 24 * 3600 * 1000

# Headers on rewarded.v1. A reward worker writes one marker record per partition
# when it is assigned that partition (so it can read the topic up to a point it
# knows without trusting end offsets); every reader of rewarded.v1 skips them.
REWARDED_MARKER_HEADER = "ratchet.marker"
REWARDED_EMITTED_HEADER = "ratchet.emitted"

# Every producer of the keyed topics must place a key on the same partition
# number in each topic: Ratchet's producers use murmur2 (the Java client's
# default), and so must outside producers.
PARTITIONER = "murmur2_random"


@dataclasses.dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    retention_ms: int
    replication_factor: int = 1

    def config(self) -> dict[str, str]:
        return {"retention.ms": str(self.retention_ms), "cleanup.policy": "delete"}


def topic_specs(partitions: int = 4, replication_factor: int = 1) -> list[TopicSpec]:
    """The topics Ratchet uses. Input topics share one partition count (co-partitioned)."""
    return [
        TopicSpec(SESSIONS, partitions, 14 * DAY_MS, replication_factor),
        TopicSpec(FEEDBACK, partitions, 14 * DAY_MS, replication_factor),
        TopicSpec(OUTCOMES, partitions, 14 * DAY_MS, replication_factor),
        TopicSpec(REWARDED, partitions, 30 * DAY_MS, replication_factor),
        TopicSpec(DLQ, 1, 30 * DAY_MS, replication_factor),
    ]


def ensure_topics(bootstrap: str, specs: list[TopicSpec] | None = None, timeout_s: float = 30.0) -> list[str]:
    """Create any missing topics; return the names created. Existing topics are left alone."""
    from confluent_kafka.admin import AdminClient, NewTopic

    specs = specs if specs is not None else topic_specs()
    admin = AdminClient(client_config(bootstrap, **{"socket.timeout.ms": 10_000}))
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    missing = [s for s in specs if s.name not in existing]
    if not missing:
        return []
    futures = admin.create_topics(
        [
            NewTopic(
                s.name,
                num_partitions=s.partitions,
                replication_factor=s.replication_factor,
                config=s.config(),
            )
            for s in missing
        ],
        request_timeout=timeout_s,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result()
            created.append(name)
        except Exception as exc:  # another process may have created it meanwhile
            if "TOPIC_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                raise
    # Metadata may lag creation by a moment: wait until every topic is listed.
    deadline = time.monotonic() + timeout_s
    names = {s.name for s in specs}
    while not names <= set(admin.list_topics(timeout=timeout_s).topics):
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics {sorted(names)} not all visible after {timeout_s}s")
        time.sleep(0.1)
    return created


def is_marker(message: Any) -> bool:
    """Whether a consumed record is a reader's position marker (see ``REWARDED_MARKER_HEADER``)."""
    return any(key == REWARDED_MARKER_HEADER for key, _ in message.headers() or ())


class TopicReadError(RuntimeError):
    pass


def read_topic(bootstrap: str, topic: str, poll_s: float = 0.2, strict: bool = False) -> Iterator[list]:
    """The records of ``topic`` from the beginning of every partition, a batch per poll (empty when none
    came): iterate until the records read are enough or none came for long enough. End offsets are not
    trusted (Tansu misreports them). Markers are left out. No group is joined, nothing is committed.

    A missing topic is a :class:`TopicReadError`; so is a record the broker fails, with ``strict``
    (else it is left out). Consuming starts at the first ``next()``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        client_config(
            bootstrap, **{"group.id": f"ratchet-read-{uuid.uuid4().hex}", "enable.auto.commit": False}
        )
    )
    try:
        found = consumer.list_topics(timeout=10).topics.get(topic)  # all topics: asking for one may create it
        if found is None or not found.partitions:
            raise TopicReadError(f"topic {topic!r} does not exist on {bootstrap}")
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(found.partitions)])
        while True:
            batch = []
            for message in consumer.consume(num_messages=1000, timeout=poll_s):
                if message.error() is not None:
                    if strict:
                        raise TopicReadError(f"reading {topic} from {bootstrap}: {message.error()}")
                elif not is_marker(message):
                    batch.append(message)
            yield batch
    finally:
        consumer.close()
