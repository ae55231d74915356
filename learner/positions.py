"""Is the topic the one the checkpoint consumed? Storage identity of the learner's offsets.

The learner keeps its offsets in its own checkpoint, not only in the broker.
When the broker's storage and the learner's state part ways (a broker with
in-memory storage restarted, a topic deleted and created again, records
deleted by retention before they were consumed), the checkpointed offsets point
into a different log: resuming would skip the new topic's first records, or
train on a log the ledger never saw. Each checkpoint therefore also records,
per partition, the offset and a digest of the last record it consumed
(``last_records``). On start the learner compares them with the topic:

- the partition is gone, or has no record at the last consumed offset: recreated or truncated;
- the record at that offset is not the one consumed there: recreated;
- the topic's first offset is past the checkpointed one: records were deleted
  before the learner consumed them (lost to retention).

Any of these refuses to start with the reason and what to do, unless the
operator chose ``offset_reset = "earliest"``: then the learner starts over at
the topic's first offset, keeping its ledger (sessions it trained are still
recognised by id while they are in its index), and says so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

RESETS = ("refuse", "earliest")


def digest(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()[:32]


class StorageMismatch(RuntimeError):
    """The topic is not the log the checkpoint consumed; the message says what to do."""


@dataclass(frozen=True)
class Mismatch:
    partition: int
    reason: str


def check(
    offsets: dict[int, int],
    last_records: dict[int, list],
    first_offsets: dict[int, int],
    digest_at: Callable[[int, int], str | None],
) -> list[Mismatch]:
    """What does not match between the checkpoint (``offsets``: next offset per partition,
    ``last_records``: partition -> [offset, digest]) and the topic (``first_offsets``: partition ->
    its first offset; ``digest_at(partition, offset)``: the record's digest, None if it has none).

    The topic's end offset is not used: a broker may report it per batch (Tansu gives the last
    batch's base offset + 1), and the record itself is the stronger witness.
    """
    out = []
    for partition, offset in sorted(offsets.items()):
        if partition not in first_offsets:
            out.append(Mismatch(partition, "the partition no longer exists"))
            continue
        low = first_offsets[partition]
        if offset < low:
            out.append(
                Mismatch(
                    partition,
                    f"its first offset is {low}: records {offset}..{low - 1} were deleted before the learner "
                    "consumed them (retention)",
                )
            )
            continue
        last = last_records.get(partition)
        if last is None or last[0] < low:
            continue  # nothing recorded (an older checkpoint), or aged out after it was consumed
        found = digest_at(partition, last[0])
        if found is None:
            out.append(
                Mismatch(partition, f"the partition has no record at offset {last[0]}, the last one consumed")
            )
        elif found != last[1]:
            out.append(
                Mismatch(
                    partition, f"the record at offset {last[0]} is not the one the learner consumed there"
                )
            )
    return out


def refusal(topic: str, bootstrap: str, mismatches: list[Mismatch]) -> str:
    lines = "; ".join(f"partition {m.partition}: {m.reason}" for m in mismatches)
    return (
        f"the learner's checkpoint does not match topic {topic} on {bootstrap}: {lines}. The topic was "
        "probably recreated (a broker with in-memory storage restarted?). Nothing was consumed. To start "
        "over on this topic set RATCHET_OFFSET_RESET=earliest (the ledger is kept), or point "
        "RATCHET_LEARNER_STATE_DIR at a new folder"
    )
