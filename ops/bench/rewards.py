"""Rewards worker throughput against the physical limit: ``python -m ops.bench rewards --json FILE``.

On a private broker, N sessions (each with an in-line outcome, so revision 0
is due on arrival) are loaded into ``sessions.v1``. Then, over the same
messages:

- ``raw_per_s``: a bare aiokafka loop consumes them and produces each value
  unchanged to a scratch topic (same partition), committing per batch;
- ``sessions_per_s``: one rewards worker (``python -m rewards.app``) joins,
  scores and produces them to ``rewarded.v1``.

Both rates are N over the span between the first and the last output record's
timestamp, so neither includes start-up or group formation. Target: ratio >= 0.5.
Also reported: the worker's CPU time per session over that span, and the CPU
cost of its three fixed steps (contract parse, scoring, serialisation) measured
in-process; ``one_core_ceiling_per_s`` is what those steps alone allow.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ingest import topics
from ingest.examples import example_outcome, example_session
from ops.stack import REPO, Stack, StackSettings
from rewards.stream_io import HEADER_MARKER

PARTITIONS = 4
SCRATCH = "bench.raw.v1"
TARGET_RATIO = 0.5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_sessions(bootstrap: str, n: int) -> int:
    """Produce ``n`` sessions; return the size of one in bytes."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    size = 0
    for i in range(n):
        sid = f"bench-{i}"
        value = example_session(
            session_id=sid, seed=i, outcome=example_outcome(sid, outcome_id=f"o-{sid}")
        ).to_json()
        size = len(value)
        while True:
            try:
                producer.produce(topics.SESSIONS, value, sid.encode())
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0, "loading the sessions timed out"
    return size


async def bare_loop(bootstrap: str, n: int) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    consumer = AIOKafkaConsumer(
        topics.SESSIONS,
        bootstrap_servers=bootstrap,
        group_id="bench-raw",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    await consumer.start()
    await producer.start()
    try:
        done = 0
        while done < n:
            batch = await consumer.getmany(timeout_ms=1000, max_records=2000)
            sends = []
            for tp, records in batch.items():
                for record in records:
                    sends.append(
                        await producer.send(SCRATCH, record.value, key=record.key, partition=tp.partition)
                    )
                done += len(records)
            await asyncio.gather(*sends)
            if batch:
                await consumer.commit()
    finally:
        await consumer.stop()
        await producer.stop()


def output_span(
    bootstrap: str, topic: str, n: int, timeout_s: float, workers: tuple[subprocess.Popen, ...] = ()
) -> tuple[float, float]:
    """Seconds between the first and the n-th output record on ``topic`` (markers skipped), and the
    CPU seconds ``workers`` used meanwhile."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    stamps: list[int] = []
    deadline = time.monotonic() + timeout_s
    cpu_at_first = None
    try:
        while len(stamps) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(stamps)} of {n} records on {topic} after {timeout_s:g}s")
            for worker in workers:
                if worker.poll() is not None:
                    raise RuntimeError(f"a rewards worker exited with {worker.returncode}")
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is None and HEADER_MARKER not in dict(msg.headers() or []):
                    stamps.append(msg.timestamp()[1])
            if stamps and cpu_at_first is None:
                cpu_at_first = cpu_seconds(workers)
    finally:
        consumer.close()
    return max(1e-3, (max(stamps) - min(stamps)) / 1000), cpu_seconds(workers) - (cpu_at_first or 0.0)


def cpu_seconds(workers: tuple[subprocess.Popen, ...]) -> float:
    total = 0.0
    for worker in workers:
        proc = psutil.Process(worker.pid)
        for p in [proc, *proc.children(recursive=True)]:
            times = p.cpu_times()
            total += times.user + times.system
    return total


def run_worker(bootstrap: str, state_dir: Path, name: str = "worker") -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    env.update(
        {
            "RATCHET_KAFKA_BOOTSTRAP": bootstrap,
            "RATCHET_STATE_DIR": str(state_dir),
            "RATCHET_REWARDS_GROUP_ID": "bench-rewards",
            "RATCHET_REWARDS_METRICS_PORT": "0",
            "RATCHET_REWARDS_SESSION_TIMEOUT_S": "6",
        }
    )
    log = (state_dir / f"{name}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "rewards.app"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )


def one_round(sessions: int, timeout_s: float, n_workers: int) -> tuple[float, float, float, int]:
    """(sessions/s through the workers, raw records/s, worker CPU µs per session, session size) on a
    fresh private broker."""
    state = Path(tempfile.mkdtemp(prefix="ratchet-bench-rewards-"))
    stack = Stack(StackSettings(state_dir=state / "stack", broker_port=free_port()), progress=lambda m: None)
    stack.up(["broker"])
    bootstrap = stack.settings.kafka_bootstrap
    workers: list[subprocess.Popen] = []
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(SCRATCH, PARTITIONS, 1)])[SCRATCH].result()
        print(f"loading {sessions} sessions into a private broker at {bootstrap} ...", flush=True)
        size = load_sessions(bootstrap, sessions)
        asyncio.run(asyncio.wait_for(bare_loop(bootstrap, sessions), timeout_s))
        raw_per_s = sessions / output_span(bootstrap, SCRATCH, sessions, timeout_s)[0]
        print(f"  bare aiokafka consume -> produce: {raw_per_s:,.0f} records/s", flush=True)
        workers = [run_worker(bootstrap, state, f"worker-{i}") for i in range(n_workers)]
        span, cpu = output_span(bootstrap, topics.REWARDED, sessions, timeout_s, tuple(workers))
        sessions_per_s, cpu_us = sessions / span, cpu * 1e6 / sessions
        print(
            f"  rewards workers ({n_workers}): {sessions_per_s:,.0f} sessions/s, {cpu_us:.0f} CPU µs each",
            flush=True,
        )
        return sessions_per_s, raw_per_s, cpu_us, size
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(60)
        stack.down()


def scoring_cost_us(n: int = 2000) -> dict[str, float]:
    """CPU microseconds per session of the worker's three steps, in this process."""
    from ingest.contract import Session, parse
    from rewards.scoring import load_reward_settings, reward_session

    settings = load_reward_settings()
    raw = [
        example_session(
            session_id=f"c-{i}", seed=i, outcome=example_outcome(f"c-{i}", outcome_id=f"o-{i}")
        ).to_json()
        for i in range(n)
    ]
    t0 = time.process_time()
    parsed = [parse(Session, r) for r in raw]
    t1 = time.process_time()
    rewarded = [reward_session(s, [], [], settings) for s in parsed]
    t2 = time.process_time()
    for r in rewarded:
        r.to_json()
    t3 = time.process_time()
    return {
        k: round(v * 1e6 / n, 1) for k, v in (("parse", t1 - t0), ("score", t2 - t1), ("serialize", t3 - t2))
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench rewards", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON here")
    parser.add_argument(
        "--sessions", type=int, default=20_000, help="sessions to push through (default 20000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds on fresh brokers; the best of each counts"
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="rewards workers sharing the partitions (default 1)"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for each run")
    args = parser.parse_args(argv)

    rounds = [one_round(args.sessions, args.timeout, args.workers) for _ in range(args.rounds)]
    sessions_per_s = max(r[0] for r in rounds)
    raw_per_s = max(r[1] for r in rounds)
    worker_cpu_us = min(r[2] for r in rounds)
    cost = scoring_cost_us()
    result = {
        "sessions": args.sessions,
        "workers": args.workers,
        "session_bytes": rounds[0][3],
        "sessions_per_s": round(sessions_per_s, 1),
        "raw_per_s": round(raw_per_s, 1),
        "ratio": round(sessions_per_s / raw_per_s, 3),
        "target_ratio": TARGET_RATIO,
        "rounds": [
            {
                "sessions_per_s": round(a, 1),
                "raw_per_s": round(b, 1),
                "worker_cpu_us_per_session": round(c, 1),
            }
            for a, b, c, _ in rounds
        ],
        "worker_cpu_us_per_session": round(worker_cpu_us, 1),
        "cpu_us_per_session": cost,
        "one_core_ceiling_per_s": round(1e6 / sum(cost.values()), 1),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0
