"""Storage identity: a learner whose checkpoint does not match its topic refuses, or restarts explicitly."""

from __future__ import annotations

import dataclasses

import pytest

from ingest.topics import TopicSpec, ensure_topics
from learner import checkpoint, positions
from learner.checkpoint import Ledger
from learner.loop import Learner, run
from learner.positions import Mismatch, check, digest
from ops.stack import Stack, StackSettings, free_port
from tests.learner.conftest import produce, rewarded, tiny_settings

RECORDS = {5: b"five", 9: b"nine"}


def digest_at(partition: int, offset: int) -> str | None:
    return digest(RECORDS[offset]) if partition == 0 and offset in RECORDS else None


@pytest.mark.parametrize(
    ("offsets", "last", "firsts", "reason"),
    [
        ({0: 6}, {0: [5, digest(b"five")]}, {0: 0}, None),  # the same log (grown since or not)
        ({0: 6}, {}, {0: 0}, None),  # nothing recorded yet (an older checkpoint): offsets only
        ({0: 6}, {0: [5, digest(b"five")]}, {0: 6}, None),  # the last record aged out; none lost
        ({0: 6}, {0: [5, digest(b"five")]}, {1: 0}, "no longer exists"),
        ({0: 12}, {0: [11, digest(b"x")]}, {0: 0}, "has no record at offset 11"),
        ({0: 6}, {0: [5, digest(b"other")]}, {0: 0}, "is not the one the learner consumed"),
        ({0: 6}, {0: [5, digest(b"five")]}, {0: 8}, "records 6..7 were deleted"),
    ],
)
def test_the_checkpoint_is_checked_against_the_topic(offsets, last, firsts, reason):
    found = check(offsets, last, firsts, digest_at)
    if reason is None:
        assert found == []
    else:
        assert [m.partition for m in found] == [0] and reason in found[0].reason, found


def test_a_refusal_says_what_to_do():
    message = positions.refusal(
        "rewarded.v1", "127.0.0.1:9092", [Mismatch(0, "the partition no longer exists")]
    )
    assert "rewarded.v1" in message and "RATCHET_OFFSET_RESET=earliest" in message
    assert "RATCHET_LEARNER_STATE_DIR" in message


@pytest.fixture
def private_broker(tmp_path):
    """A broker of its own with in-memory storage, so the test can restart it empty."""
    stack = Stack(StackSettings(state_dir=tmp_path / "stack", broker_port=free_port()), progress=print)
    stack.up(["broker"])
    yield stack
    stack.down()


def test_a_broker_restarted_in_memory_is_refused_then_reset_explicitly(
    private_broker, model_dir, tmp_path, single_thread
):
    """The learner trains 8 sessions; the in-memory broker restarts empty and receives 12 others (its
    log is now longer than the checkpoint's offset, so offsets alone would not tell). The learner
    refuses to start; with offset_reset = "earliest" it trains the 12 and keeps its ledger."""
    bootstrap = private_broker.settings.kafka_bootstrap
    topic = "rewarded-positions"
    ensure_topics(bootstrap, [TopicSpec(topic, 1, 3600_000)])
    settings = tiny_settings(tmp_path, bootstrap, topic, model_dir, publish_every_updates=100)
    produce(bootstrap, topic, [rewarded(f"a{i}", float(i % 2), task_id=f"t{i // 4}") for i in range(8)])
    assert run(settings, idle_exit_s=3.0, progress=print).offsets == {0: 8}

    private_broker.stop("broker")
    private_broker.up(["broker"])
    ensure_topics(bootstrap, [TopicSpec(topic, 1, 3600_000)])
    produce(bootstrap, topic, [rewarded(f"b{i}", float(i % 2), task_id=f"u{i // 4}") for i in range(4)])
    with pytest.raises(positions.StorageMismatch, match="has no record at offset 7"):
        Learner(settings, print)  # the new log is shorter than the checkpoint's
    produce(bootstrap, topic, [rewarded(f"b{i}", float(i % 2), task_id=f"u{i // 4}") for i in range(4, 12)])

    with pytest.raises(positions.StorageMismatch, match="is not the one the learner consumed") as refused:
        Learner(settings, print)
    assert "RATCHET_OFFSET_RESET=earliest" in str(refused.value)
    assert len(Ledger(settings.learner_state_dir / "ledger.jsonl").read()) == 8  # nothing consumed

    state = run(dataclasses.replace(settings, offset_reset="earliest"), idle_exit_s=3.0, progress=print)
    assert state.offsets == {0: 12} and state.resets == 1
    ledger = Ledger(settings.learner_state_dir / "ledger.jsonl").read()
    assert [e["session_id"] for e in ledger] == [*(f"a{i}" for i in range(8)), *(f"b{i}" for i in range(12))]
    assert checkpoint.latest(settings.learner_state_dir).state.last_records[0][0] == 11

    # The same topic again: it matches, the learner resumes without a reset.
    again = run(settings, idle_exit_s=2.0, progress=print)
    assert again.offsets == {0: 12} and again.resets == 1
