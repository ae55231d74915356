"""The rewards worker against a real broker (a private Tansu per test), as subprocesses.

Each test ends with a barrier: one session per partition, produced last, that is
rewarded only when its wait expires. By then every earlier record of that
partition has been read and every emission it caused is before the barrier's,
so counting up to the barriers counts everything, duplicates included.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from ingest import topics
from ingest.contract import DeadLetter, RewardedSession, parse
from ingest.examples import example_feedback, example_outcome, example_session
from ops.stack import REPO, Stack, StackSettings
from rewards.stream_io import HEADER_MARKER, HEADER_WORKER, FloorStore
from tests.conftest import free_port

PARTITIONS = 4
WAIT_S = 3.0


@pytest.fixture
def private_broker(tmp_path):
    stack = Stack(
        StackSettings(state_dir=tmp_path / "stack", broker_port=free_port()), progress=lambda m: None
    )
    stack.up(["broker"])
    yield stack.settings.kafka_bootstrap
    stack.down()


class Worker:
    """``python -m rewards.app`` as a subprocess, its output in a log file."""

    def __init__(self, bootstrap: str, tmp_path: Path, name: str, **settings):
        self.log_path = tmp_path / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
        env.update(
            {
                "RATCHET_KAFKA_BOOTSTRAP": bootstrap,
                "RATCHET_STATE_DIR": str(tmp_path / "state"),
                "RATCHET_REWARDS_GROUP_ID": "rewards-test",
                "RATCHET_REWARDS_SESSION_TIMEOUT_S": "3",
                "RATCHET_REWARDS_COMMIT_INTERVAL_S": "1",
                "RATCHET_REWARDS_LOG_EVERY_S": "2",
                "RATCHET_REWARDS_METRICS_PORT": "0",
                "RATCHET_JOIN_WAIT_S": str(WAIT_S),
                "RATCHET_AMEND_WINDOW_S": "120",
                "RATCHET_ORPHAN_TTL_S": "120",
                "RATCHET_CLOCK_IDLE_S": "1",
                "RATCHET_EXPECT_OUTCOME": "true",
                "RATCHET_EXPECT_FEEDBACK": "true",
                **{f"RATCHET_{k.upper()}": str(v) for k, v in settings.items()},
            }
        )
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rewards.app"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


class Input:
    """Produces sessions and signals (keyed by session id) and remembers every signal sent."""

    def __init__(self, bootstrap: str):
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
        self.signals: dict[str, set[tuple[str, str]]] = {}

    def session(self, sid: str, feedback: bool = False, partition: int | None = None) -> None:
        session = example_session(
            session_id=sid,
            outcome=example_outcome(sid, outcome_id=f"o-{sid}"),
            feedback=example_feedback(sid, feedback_id=f"fi-{sid}") if feedback else None,
        )
        self.signals[sid] = {("outcome", f"o-{sid}")} | ({("feedback", f"fi-{sid}")} if feedback else set())
        self.raw(topics.SESSIONS, sid, session.to_json(), partition)

    def feedback(self, sid: str, fid: str, kind: str = "accept") -> None:
        self.signals[sid].add(("feedback", fid))
        self.raw(topics.FEEDBACK, sid, example_feedback(sid, kind=kind, feedback_id=fid).to_json())

    def raw(self, topic: str, key: str, value: bytes, partition: int | None = None) -> None:
        kwargs = {"partition": partition} if partition is not None else {}
        self.producer.produce(topic, value, key.encode(), **kwargs)
        self.producer.poll(0)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0

    def barriers(self, tag: str) -> list[str]:
        """One session per partition with no feedback: rewarded only when its wait expires."""
        sids = [f"barrier-{tag}-{p}" for p in range(PARTITIONS)]
        for p, sid in enumerate(sids):
            self.session(sid, partition=p)
        self.flush()
        return sids


class Output:
    """Everything on ``rewarded.v1`` and ``dlq.v1`` from the beginning, read as it comes."""

    def __init__(self, bootstrap: str):
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"check-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
            }
        )
        tps = [TopicPartition(topics.REWARDED, p, 0) for p in range(PARTITIONS)] + [
            TopicPartition(topics.DLQ, 0, 0)
        ]
        self.consumer.assign(tps)
        self.rewarded: list[tuple[int, RewardedSession, str]] = []  # (partition, record, worker)
        self.markers: list[tuple[int, str]] = []
        self.dead: list[DeadLetter] = []

    def poll_until(self, condition, timeout_s: float, workers: list[Worker], what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {w.log_path.name}\n{w.tail()}" for w in workers)
                raise AssertionError(f"timed out waiting for {what}\n{logs}")
            for msg in self.consumer.consume(500, timeout=0.2):
                if msg.error() is not None:
                    continue
                headers = dict(msg.headers() or [])
                if msg.topic() == topics.DLQ:
                    self.dead.append(parse(DeadLetter, msg.value()))
                elif HEADER_MARKER in headers:
                    self.markers.append((msg.partition(), headers[HEADER_MARKER].decode()))
                else:
                    record = parse(RewardedSession, msg.value())
                    self.rewarded.append((msg.partition(), record, headers[HEADER_WORKER].decode()))

    def has(self, sid: str, revision: int = 0) -> bool:
        return any(r.session_id == sid and r.revision == revision for _, r, _ in self.rewarded)

    def revisions(self) -> dict[str, list[RewardedSession]]:
        out: dict[str, list[RewardedSession]] = {}
        for _, record, _ in self.rewarded:
            out.setdefault(record.session_id, []).append(record)
        return out

    def close(self) -> None:
        self.consumer.close()


def assert_each_revision_once_with_every_signal(out: Output, sent: Input) -> None:
    by_session = out.revisions()
    assert set(by_session) == set(sent.signals), "sessions missing from (or unknown to) rewarded.v1"
    for sid, records in by_session.items():
        revisions = sorted(r.revision for r in records)
        assert revisions == list(range(len(records))), f"{sid}: revisions {revisions}, each must appear once"
        last = max(records, key=lambda r: r.revision)
        got = {("feedback", i) for i in last.feedback_ids} | {("outcome", i) for i in last.outcome_ids}
        assert got == sent.signals[sid], f"{sid}: the last revision lacks signals"


def test_late_feedback_joins_amends_and_bad_input_is_dead_lettered(private_broker, tmp_path):
    port = free_port()
    sent, out = Input(private_broker), Output(private_broker)
    worker = Worker(private_broker, tmp_path, "worker", rewards_metrics_port=port, orphan_ttl_s=2)
    try:
        sent.session("joined")  # waits for a feedback (expect_feedback), which comes as its own record
        sent.feedback("joined", "f-1")
        sent.session("amended")  # no feedback in time: revision 0 when the wait expires
        sent.flush()
        out.poll_until(lambda: out.has("amended") and out.has("joined"), 60, [worker], "revision 0 of both")
        sent.feedback("amended", "f-2", kind="reject")  # after emission: an amendment
        sent.raw(topics.FEEDBACK, "broken", b'{"schema_version": 1, "feedback_id": "x"')
        sent.raw(topics.SESSIONS, "bad", b'{"schema_version": 1, "session_id": "bad", "tenant": "acme"}')
        sent.raw(topics.OUTCOMES, "ghost", example_outcome("ghost", outcome_id="o-ghost").to_json())
        sent.flush()
        out.poll_until(lambda: out.has("amended", 1), 30, [worker], "the amendment")
        out.poll_until(lambda: len(out.dead) >= 3, 30, [worker], "three dead letters")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        barriers = sent.barriers("a")
        out.poll_until(lambda: all(out.has(b) for b in barriers), 60, [worker], "the barriers")
    finally:
        worker.stop()
        out.close()
    assert worker.proc.returncode == 0, worker.tail()

    assert_each_revision_once_with_every_signal(out, sent)
    amended = out.revisions()["amended"]
    first, second = sorted(amended, key=lambda r: r.revision)
    assert "feedback" not in first.components and second.components["feedback"] < 0  # the reject
    assert second.outcome_ids == ["o-amended"] and second.feedback_ids == ["f-2"]
    (joined,) = out.revisions()["joined"]  # one record, with both the outcome and the late feedback
    assert joined.revision == 0 and joined.feedback_ids == ["f-1"] and joined.outcome_ids == ["o-joined"]
    assert joined.components["feedback"] > 0 and "tests" in joined.components

    reasons = {d.reason.split(":")[0]: d for d in out.dead}
    assert any(r.startswith("feedback.v1[") for r in reasons), reasons
    bad_session = next(d for d in out.dead if d.reason.startswith("sessions.v1["))
    assert "policy: Field required" in bad_session.reason and bad_session.session_id == "bad"
    ghost = next(d for d in out.dead if d.session_id == "ghost")
    assert "no session ghost arrived within orphan_ttl_s=2" in ghost.reason
    assert json.loads(ghost.payload)["outcome_id"] == "o-ghost"

    assert 'ratchet_rewards_rewarded_total{revision="0"} 2.0' in metrics
    assert 'ratchet_rewards_rewarded_total{revision="1"} 1.0' in metrics
    assert 'ratchet_rewards_dead_letters_total{reason="malformed"} 2.0' in metrics
    assert 'ratchet_rewards_dead_letters_total{reason="orphan_expired"} 1.0' in metrics
    assert "ratchet_rewards_lag_seconds" in metrics and "ratchet_rewards_reward_bucket" in metrics


def stream(sent: Input, prefix: str, stop: threading.Event) -> threading.Thread:
    """Sessions at ~50/s until ``stop``: a third with in-line feedback (rewarded at once), the rest
    with a late feedback 1, 2 or 3.6 s later (before or after their 3 s wait: in revision 0 or 1)."""

    def run() -> None:
        late: list[tuple[float, str]] = []
        i = 0
        while not stop.is_set():
            sid = f"{prefix}-{i}"
            inline = i % 3 == 0
            sent.session(sid, feedback=inline)
            if not inline:
                late.append((time.monotonic() + (1.0, 2.0, 3.6)[i % 3], sid))
            now = time.monotonic()
            for due, late_sid in [x for x in late if x[0] <= now]:
                sent.feedback(late_sid, f"f-{late_sid}")
                late.remove((due, late_sid))
            i += 1
            stop.wait(1 / 50)  # the input's pace
        for _, late_sid in late:
            sent.feedback(late_sid, f"f-{late_sid}")
        sent.flush()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def emitted_by(out: Output, worker: Worker) -> int:
    return sum(1 for _, _, w in out.rewarded if w.endswith(f":{worker.proc.pid}"))


def test_kill_9_mid_stream_and_restart_rewards_every_revision_exactly_once(private_broker, tmp_path):
    sent, out = Input(private_broker), Output(private_broker)
    windows = {"amend_window_s": 3, "orphan_ttl_s": 2}  # joins close mid-test: commits and floors move on
    first = Worker(private_broker, tmp_path, "first", **windows)
    floors = FloorStore(private_broker, "rewards-test")
    workers = [first]
    stop = threading.Event()
    try:
        producing = stream(sent, "k", stop)
        out.poll_until(
            lambda: (
                any(r.revision > 0 for _, r, _ in out.rewarded)
                and max(floors.read([0, 1, 2, 3]).values()) > 1
            ),
            60,
            workers,
            "the first worker to amend, close joins and commit a floor past its marker",
        )
        first.kill()  # SIGKILL mid-stream: no commit, no goodbye
        second = Worker(private_broker, tmp_path, "second", **windows)
        workers.append(second)
        out.poll_until(lambda: emitted_by(out, second) >= 40, 60, workers, "the restarted worker to catch up")
        stop.set()
        producing.join(60)
        barriers = sent.barriers("k")
        out.poll_until(lambda: all(out.has(b) for b in barriers), 90, workers, "the barriers")
    finally:
        stop.set()
        for w in workers:
            w.stop()
        out.close()
        floors.close()

    assert_each_revision_once_with_every_signal(out, sent)
    emitters = {w for _, _, w in out.rewarded}
    assert len(emitters) == 2, f"both incarnations must have rewarded sessions: {emitters}"
    assert len({w for _, w in out.markers}) == 2  # each read its history up to its own marker
    assert out.dead == []


def test_two_workers_share_the_partitions_and_reward_every_session_once(private_broker, tmp_path):
    sent, out = Input(private_broker), Output(private_broker)
    workers = [Worker(private_broker, tmp_path, "one")]
    stop = threading.Event()
    try:
        producing = stream(sent, "t", stop)
        out.poll_until(lambda: len(out.rewarded) >= 40, 60, workers, "the first worker to reward")
        workers.append(Worker(private_broker, tmp_path, "two"))  # takes partitions over mid-stream
        out.poll_until(lambda: emitted_by(out, workers[1]) >= 20, 60, workers, "the second worker to reward")
        stop.set()
        producing.join(60)
        barriers = sent.barriers("t")
        out.poll_until(lambda: all(out.has(b) for b in barriers), 90, workers, "the barriers")
    finally:
        stop.set()
        for w in workers:
            w.stop()
        out.close()

    assert_each_revision_once_with_every_signal(out, sent)
    barrier_emitters = {w for p, r, w in out.rewarded if r.session_id.startswith("barrier-")}
    assert len(barrier_emitters) == 2, "at the end each worker owns some of the partitions"
    assert out.dead == []


def test_collection_pauses_for_a_batch_and_resumes_as_it_was():
    import gc

    from rewards.app import collection_between_batches

    assert gc.isenabled()
    with collection_between_batches():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collection_between_batches():
        raise RuntimeError("a failed batch")
    assert gc.isenabled()
    gc.disable()  # a process that turned collection off keeps it off
    try:
        with collection_between_batches():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
