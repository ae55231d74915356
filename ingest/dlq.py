"""Re-driving dead letters: which topic a letter came from, which letters to choose, what to send.

A dead letter (``ingest.contract.DeadLetter``) keeps the payload it was given and who rejected it
(``source``). :func:`origin_topic` works out from that the topic the payload was read from, or
would have been produced to:

- ``ingest.api:/v1/<name>``: that endpoint's topic (``sessions.v1``, ``feedback.v1``, ``outcomes.v1``);
- ``serving.proxy:...``: ``sessions.v1`` (an ended session that broke the contract);
- ``ops.quality:<topic>``: the topic ``ratchet quality`` sampled;
- ``learner``: ``rewarded.v1`` (a learner reading another topic needs ``--to``);
- ``rewards``: the input topic the reason names (``sessions.v1[2]@5: ...``), else the payload's
  kind (a feedback, an outcome, or a session whose scoring failed).

Any other source gives ``None``, and replaying it needs an explicit target.

**Replaying once.** Each replayed record carries the header ``ratchet.replay-of`` naming the
letter (``dlq.v1:<partition>:<offset>``), and once the broker has acknowledged it, a record keyed
by those coordinates goes to the replay log ``dlq-replays.v1`` (one partition). Before producing,
a replay reads that log up to a marker it has just written there itself, so it has seen every
earlier replay without trusting end offsets (Tansu misreports them), and skips those letters.
The log is kept in Kafka rather than in a local file so that replays from any machine see each
other, and rather than found by scanning the target topics for the header because those are
large, partitioned and kept for less time (14 days) than the dead letters (30): a scan would
replay again whatever the target had expired. The log keeps its records as long as ``dlq.v1``,
so an entry outlives its letter. Each entry also names the letter's ``created_at``, so a letter at
the same coordinates of a re-created ``dlq.v1`` is not mistaken for one replayed before.

Delivery is at least once: a replay that dies between the acknowledgement of a record and that
of its log entry replays it again on the next run (stages de-duplicate by id; the header tells a
copy). Two replays of the same letters at the same moment are not guarded against.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import time
from collections.abc import Iterable
from datetime import UTC, datetime

from ingest import topics
from ingest.brokers import client_config
from ingest.contract import MAX_TEXT_CHARS, ContractError, DeadLetter, parse
from ingest.intake import ENDPOINTS
from ingest.producer import BrokerUnavailable, producer_config

REPLAYS = "dlq-replays.v1"
REPLAY_HEADER = "ratchet.replay-of"
MARKER_HEADER = topics.REWARDED_MARKER_HEADER  # a reader's position marker, not a record
REPLAYS_SPEC = topics.TopicSpec(REPLAYS, 1, 30 * topics.DAY_MS)  # as long as dlq.v1 keeps letters

_ENDPOINT_TOPICS = {e.source: e.topic for e in ENDPOINTS}
_REWARDS_INPUTS = (topics.SESSIONS, topics.FEEDBACK, topics.OUTCOMES)


@dataclasses.dataclass(frozen=True)
class Letter:
    """A dead letter and where it sits in the dead-letter topic."""

    topic: str
    partition: int
    offset: int
    record: DeadLetter

    @property
    def coordinates(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"

    @property
    def truncated(self) -> bool:
        """Whether the payload was cut to the contract's text limit when it was dead-lettered."""
        return len(self.record.payload) >= MAX_TEXT_CHARS


@dataclasses.dataclass(frozen=True)
class Filters:
    sources: tuple[str, ...] = ()
    reason_contains: str | None = None
    session_ids: tuple[str, ...] = ()

    def match(self, letter: DeadLetter) -> bool:
        return (
            (not self.sources or letter.source in self.sources)
            and (self.reason_contains is None or self.reason_contains.lower() in letter.reason.lower())
            and (not self.session_ids or letter.session_id in self.session_ids)
        )


@dataclasses.dataclass(frozen=True)
class Replayed:
    """An entry of the replay log: a letter and where its payload went."""

    dead_letter: str  # coordinates of the letter
    letter_created_at: str
    topic: str
    partition: int
    offset: int

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self) | {"replayed_at": datetime.now(UTC).isoformat()}).encode()

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclasses.dataclass(frozen=True)
class Send:
    letter: Letter
    topic: str


@dataclasses.dataclass
class Plan:
    sends: list[Send] = dataclasses.field(default_factory=list)
    already: list[tuple[Letter, Replayed]] = dataclasses.field(default_factory=list)
    refused: list[tuple[Letter, str]] = dataclasses.field(default_factory=list)


class NoOrigin(ValueError):
    """Letters that do not say where their payload came from, and no target was given."""


# --- pure decisions -------------------------------------------------------------------------


def origin_topic(letter: DeadLetter) -> str | None:
    """The topic the letter's payload came from (or was headed to), or None if it cannot be told."""
    source = letter.source
    if source in _ENDPOINT_TOPICS:
        return _ENDPOINT_TOPICS[source]
    if source.startswith("serving.proxy:"):
        return topics.SESSIONS
    if source.startswith("ops.quality:"):
        return source.removeprefix("ops.quality:") or None
    if source == "learner":
        return topics.REWARDED
    if source == "rewards":
        for topic in _REWARDS_INPUTS:
            if letter.reason.startswith(f"{topic}["):
                return topic
        try:
            payload = json.loads(letter.payload)
        except ValueError:
            return None
        if isinstance(payload, dict):
            for field, topic in (("feedback_id", topics.FEEDBACK), ("outcome_id", topics.OUTCOMES)):
                if field in payload:
                    return topic
            if "turns" in payload:
                return topics.SESSIONS
    return None


def letters_of(topic: str, records: Iterable) -> tuple[list[Letter], dict[tuple[int, int], str]]:
    """The dead letters among records of ``topic`` (objects with ``partition``, ``offset`` and
    ``value``), and why each other record, by (partition, offset), is not one."""
    letters, unreadable = [], {}
    for record in records:
        try:
            letters.append(
                Letter(topic, record.partition, record.offset, parse(DeadLetter, record.value or b""))
            )
        except ContractError as exc:
            unreadable[(record.partition, record.offset)] = exc.reason
    return letters, unreadable


def at_offsets(
    letters: list[Letter], unreadable: dict[tuple[int, int], str], wanted: list[tuple[int, int]]
) -> list[Letter]:
    """The letters at (partition, offset) ``wanted``; a :class:`LookupError` names every one that
    is not there, and the range of offsets that are."""
    by_place = {(x.partition, x.offset): x for x in letters}
    problems = []
    for partition, offset in wanted:
        if (partition, offset) in unreadable:
            problems.append(f"offset {offset} holds no dead letter: {unreadable[(partition, offset)]}")
        elif (partition, offset) not in by_place:
            problems.append(
                f"no dead letter at offset {offset}" + (f" of partition {partition}" if partition else "")
            )
    if problems:
        raise LookupError("; ".join(problems) + "; " + offset_range(letters))
    return [by_place[place] for place in dict.fromkeys(wanted)]


def offset_range(letters: list[Letter]) -> str:
    if not letters:
        return "the topic holds no dead letters"
    spans = []
    for partition in sorted({x.partition for x in letters}):
        offsets = [x.offset for x in letters if x.partition == partition]
        where = f" in partition {partition}" if partition else ""
        spans.append(f"{min(offsets)}..{max(offsets)}{where}")
    return "dead letters sit at offsets " + ", ".join(spans)


def plan(chosen: list[Letter], replayed: dict[str, Replayed], to: str | None) -> Plan:
    """What to send where, what was replayed already, and what cannot be replayed.

    Raises :class:`NoOrigin` (naming them) when ``to`` is None and a letter does not say where its
    payload came from: nothing is sent then."""
    unknown = [x for x in chosen if to is None and origin_topic(x.record) is None]
    if unknown:
        listed = ", ".join(f"{x.coordinates} (source {x.record.source!r})" for x in unknown)
        raise NoOrigin(
            f"cannot tell which topic these dead letters came from: {listed}; name it with --to TOPIC"
        )
    out = Plan()
    for x in chosen:
        before = replayed.get(x.coordinates)
        if before is not None and before.letter_created_at == x.record.created_at.isoformat():
            out.already.append((x, before))
        elif x.truncated:
            out.refused.append((x, f"its payload was cut to {MAX_TEXT_CHARS} characters when dead-lettered"))
        else:
            out.sends.append(Send(x, to or origin_topic(x.record)))
    return out


def reason_kind(reason: str, width: int = 60) -> str:
    """A reason's first clause without ids, quoted values and numbers, cut to ``width``: the letters
    of one cause share it."""
    head = reason.split("; ")[0]
    head = re.sub(r"\b(session|feedback|outcome) [A-Za-z0-9][A-Za-z0-9._:@/-]*", r"\1 <id>", head)
    head = re.sub(r"'[^']*'", "'…'", head)
    head = re.sub(r"(?<![A-Za-z])\d+", "N", head)
    return head if len(head) <= width else head[: width - 1] + "…"


def summary(letters: list[Letter], width: int = 60) -> list[tuple[int, str, str]]:
    """(count, source, reason kind), most frequent first."""
    counts = collections.Counter((x.record.source, reason_kind(x.record.reason, width)) for x in letters)
    return [(n, source, kind) for (source, kind), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


# --- Kafka ------------------------------------------------------------------------------------


def read_replayed(
    bootstrap: str, log_topic: str = REPLAYS, replication_factor: int = 1, timeout_s: float = 30.0
) -> dict[str, Replayed]:
    """Every entry of the replay log, by letter coordinates. Reads up to a marker it produces first,
    so it sees every replay acknowledged before this call. A missing log is created (with
    ``replication_factor``: that of the dead-letter topic)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    spec = dataclasses.replace(REPLAYS_SPEC, name=log_topic, replication_factor=replication_factor)
    topics.ensure_topics(bootstrap, [spec], timeout_s)
    ((partition, marker),) = _produce(bootstrap, [(log_topic, b"marker", b"", [(MARKER_HEADER, b"dlq")])])
    consumer = Consumer(
        client_config(bootstrap, **{"group.id": "ratchet-dlq-replay", "enable.auto.commit": False})
    )  # assign() only: nothing is committed
    found: dict[str, Replayed] = {}
    deadline = time.monotonic() + timeout_s
    try:
        consumer.assign([TopicPartition(log_topic, partition, OFFSET_BEGINNING)])
        while True:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(
                    f"{log_topic}: own marker at offset {marker} not read in {timeout_s:g}s"
                )
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error() is not None:
                    raise BrokerUnavailable(f"reading {log_topic}: {msg.error().str()}")
                if msg.offset() >= marker:
                    return found
                if not topics.is_marker(msg):
                    entry = json.loads(msg.value())
                    entry.pop("replayed_at", None)
                    found[entry["dead_letter"]] = Replayed(**entry)
    finally:
        consumer.close()


def replay(
    bootstrap: str, sends: list[Send], log_topic: str = REPLAYS
) -> tuple[list[tuple[Send, Replayed]], list[tuple[Send, str]]]:
    """Produce each payload to its topic, keyed by its session id, with the replay header; then log
    every acknowledged one. Returns those replays and the sends that failed, with the error."""
    outgoing = [
        (
            s.topic,
            (s.letter.record.session_id or "unknown").encode(),
            s.letter.record.payload.encode(),
            [(REPLAY_HEADER, s.letter.coordinates.encode())],
        )
        for s in sends
    ]
    done, failed = [], []
    for send, result in zip(sends, _produce(bootstrap, outgoing, strict=False), strict=True):
        if isinstance(result, str):
            failed.append((send, result))
        else:
            created = send.letter.record.created_at.isoformat()
            done.append((send, Replayed(send.letter.coordinates, created, send.topic, *result)))
    try:
        _produce(bootstrap, [(log_topic, r.dead_letter.encode(), r.to_json(), []) for _, r in done])
    except BrokerUnavailable as exc:
        sent = ", ".join(f"{r.dead_letter} -> {r.where}" for _, r in done)
        raise BrokerUnavailable(
            f"sent {sent} but could not log it in {log_topic} ({exc}): replaying these again sends them again"
        ) from None
    return done, failed


def _produce(bootstrap: str, records: list[tuple], strict: bool = True, timeout_s: float = 10.0) -> list:
    """Produce (topic, key, value, headers) records and wait for each: (partition, offset), or the
    error as text. With ``strict``, any error raises :class:`BrokerUnavailable`. (Unlike
    ``ingest.producer.RecordProducer``, which this shares its settings with, it sends headers.)"""
    from confluent_kafka import KafkaException, Producer

    if not records:
        return []
    producer = Producer(producer_config(bootstrap, timeout_s))
    results: list = ["no acknowledgement before the delivery timeout"] * len(records)

    def reporter(i: int):
        def on_delivery(err, msg) -> None:
            results[i] = err.str() if err is not None else (msg.partition(), msg.offset())

        return on_delivery

    for i, (topic, key, value, headers) in enumerate(records):
        try:
            producer.produce(topic, key=key, value=value, headers=headers, on_delivery=reporter(i))
        except (BufferError, KafkaException) as exc:
            results[i] = str(exc)
    producer.flush(timeout_s + 5.0)
    errors = [r for r in results if isinstance(r, str)]
    if strict and errors:
        raise BrokerUnavailable(f"{len(errors)} of {len(records)} records not acknowledged: {errors[0]}")
    return results
