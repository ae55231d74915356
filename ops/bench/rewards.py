"""Rewards worker throughput against the physical limit: ``python -m ops.bench rewards --json FILE``.

On a private broker, for N sessions (each with an in-line outcome, so revision 0
is due on arrival), in the same run:

- ``raw_per_s``: a bare aiokafka loop (one process) consumes them and produces
  each value unchanged to a scratch topic (same partition), pipelined as the
  worker is (acknowledgements awaited, then offsets committed, every commit
  interval: ``ops/bench/_bare_loop.py``);
- ``sessions_per_s``: one rewards worker (``python -m rewards.app``, one
  process) joins, scores and produces them to ``rewarded.v1``.

Each side first joins its consumer group and owns every partition (so neither
rate includes start-up or group formation); then the same N values are
produced to its input as fast as the client can, and the rate is N over the
span from the moment that began to the last output record's timestamp. The
headline ``ratio`` compares like with like: one worker process against one bare
loop process, the best of each over the same rounds. Target: ratio >= 0.5. ``cpu_ratio`` is the
same comparison in CPU time per record (the bare loop's over the worker's, the least of each):
steadier than the rates, which move with the broker and the feeding client on the same cores.
Also reported: ``scaling``, the same for
``--workers`` workers sharing the partitions as a deployment does (one per core
by default), the worker's CPU time per session, and the CPU cost of
the worker's three fixed steps (contract parse, scoring, serialisation)
measured in-process; ``one_core_ceiling_per_s`` is what those steps alone
allow one core.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ingest import topics
from ingest.brokers import client_config
from ingest.examples import example_outcome, example_session
from ops.stack import REPO, Stack, StackSettings, free_port

PARTITIONS = 4
SOURCE = "bench.in.v1"  # the bare loop's input: the same values as sessions.v1
SCRATCH = "bench.raw.v1"
TARGET_RATIO = 0.5
ASSIGNED = re.compile(rb"assigned partitions \[([0-9, ]*)\] \(generation (-?\d+)\)")


def bench_sessions(n: int) -> list[tuple[bytes, bytes]]:
    """(key, value) of ``n`` sessions, each with an in-line outcome."""
    out = []
    for i in range(n):
        sid = f"bench-{i}"
        session = example_session(session_id=sid, seed=i, outcome=example_outcome(sid, outcome_id=f"o-{sid}"))
        out.append((sid.encode(), session.to_json()))
    return out


def load(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> float:
    """Produce ``records`` to ``topic`` as fast as the client can; return when that began (epoch s)."""
    producer = Producer(client_config(bootstrap, **{"linger.ms": 5, "acks": "all"}))
    began = time.time()
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60) != 0:
        raise TimeoutError(f"loading {len(records)} records into {topic} timed out")
    return began


def span_s(fed_at: float, last_ms: int) -> float:
    """From the first input produced to the last output: every record's whole trip, the first
    batch's processing included (output timestamps are the producing clients' clocks, this host's)."""
    return max(1e-3, last_ms / 1000 - fed_at)


def bare_cpu_s(output: bytes) -> float:
    """The bare loop's CPU seconds from its last ``cpu SECONDS`` line (after ``ready``)."""
    lines = [line.split() for line in output.splitlines() if line.startswith(b"cpu ")]
    if not lines or len(lines[-1]) != 2:
        raise RuntimeError(f"the bare loop reported no CPU time: {output[-300:]!r}")
    return float(lines[-1][1])


def wait_ready(proc: subprocess.Popen, timeout_s: float) -> None:
    """Until the bare loop prints ``ready`` (it owns every partition)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 1.0)[0]:
            line = proc.stdout.readline()
            if line.strip() == b"ready":
                return
            if not line:
                raise RuntimeError(f"the bare loop exited with {proc.wait()} before it was ready")
    raise TimeoutError(f"the bare loop owned no partitions after {timeout_s:g}s")


def wait_group(workers: list[subprocess.Popen], logs: list[Path], timeout_s: float) -> None:
    """Until every worker's last assignment is of one generation, none is empty and together they
    cover every partition: the group is stable."""
    deadline = time.monotonic() + timeout_s
    last: list = []
    while time.monotonic() < deadline:
        for worker in workers:
            if worker.poll() is not None:
                raise RuntimeError(f"a rewards worker exited with {worker.returncode}")
        last = [(ASSIGNED.findall(log.read_bytes()) or [None])[-1] for log in logs]
        if all(last):
            owned = [{int(p) for p in parts.split(b",") if p.strip()} for parts, _ in last]
            if (
                len({g for _, g in last}) == 1
                and all(owned)
                and set().union(*owned) == set(range(PARTITIONS))
            ):
                return
        time.sleep(0.2)
    raise TimeoutError(f"the rewards workers' group was not stable after {timeout_s:g}s: {last}")


def last_output_ms(
    bootstrap: str, topic: str, n: int, timeout_s: float, workers: tuple[subprocess.Popen, ...] = ()
) -> int:
    """Timestamp (ms) of the last of the first ``n`` output records on ``topic`` (markers skipped)."""
    consumer = Consumer({**client_config(bootstrap), "group.id": "bench-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    stamps: list[int] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(stamps) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(stamps)} of {n} records on {topic} after {timeout_s:g}s")
            for worker in workers:
                if worker.poll() is not None:
                    raise RuntimeError(f"a rewards worker exited with {worker.returncode}")
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is None and not topics.is_marker(msg):
                    stamps.append(msg.timestamp()[1])
    finally:
        consumer.close()
    return max(stamps)


def cpu_seconds(workers: tuple[subprocess.Popen, ...]) -> float:
    total = 0.0
    for worker in workers:
        proc = psutil.Process(worker.pid)
        for p in [proc, *proc.children(recursive=True)]:
            times = p.cpu_times()
            total += times.user + times.system
    return total


def run_worker(bootstrap: str, state_dir: Path, name: str = "worker") -> tuple[subprocess.Popen, Path]:
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
    path = state_dir / f"{name}.log"
    with path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rewards.app"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    return proc, path


def create_topics(bootstrap: str, names: tuple[str, ...]) -> None:
    """Create ``names`` and let go of the admin client (a producer handle): one still alive when
    the broker stops logs a failed reconnect every second."""
    admin = AdminClient(client_config(bootstrap))
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names]).values():
        future.result()


class Round(NamedTuple):
    sessions_per_s: float  # through the workers
    raw_per_s: float  # through the bare loop
    cpu_us: float  # the workers' CPU µs per session
    raw_cpu_us: float  # the bare loop's CPU µs per record


def one_round(records: list[tuple[bytes, bytes]], timeout_s: float, n_workers: int) -> Round:
    """Both sides of one round, on a fresh private broker."""
    n = len(records)
    state = Path(tempfile.mkdtemp(prefix="ratchet-bench-rewards-"))
    stack = Stack(StackSettings(state_dir=state / "stack", broker_port=free_port()), progress=lambda m: None)
    stack.up(["broker"])
    bootstrap = stack.settings.kafka_bootstrap
    workers: list[subprocess.Popen] = []
    try:
        create_topics(bootstrap, (SOURCE, SCRATCH))
        bare = subprocess.Popen(
            [sys.executable, "-m", "ops.bench._bare_loop", bootstrap, SOURCE, SCRATCH, str(n)],
            cwd=REPO,
            stdout=subprocess.PIPE,
        )
        try:
            wait_ready(bare, timeout_s)
            fed_at = load(bootstrap, SOURCE, records)
            raw_per_s = n / span_s(fed_at, last_output_ms(bootstrap, SCRATCH, n, timeout_s))
            if bare.wait(timeout_s) != 0:
                raise RuntimeError(f"the bare loop exited with {bare.returncode}")
            raw_cpu_us = bare_cpu_s(bare.stdout.read()) * 1e6 / n
        finally:
            bare.kill()
            bare.wait()
        print(
            f"  bare aiokafka consume -> produce: {raw_per_s:,.0f} records/s, {raw_cpu_us:.0f} CPU µs each",
            flush=True,
        )
        started = [run_worker(bootstrap, state, f"worker-{i}") for i in range(n_workers)]
        workers = [w for w, _ in started]
        wait_group(workers, [log for _, log in started], timeout_s)
        cpu_before = cpu_seconds(tuple(workers))
        fed_at = load(bootstrap, topics.SESSIONS, records)
        span = span_s(fed_at, last_output_ms(bootstrap, topics.REWARDED, n, timeout_s, tuple(workers)))
        cpu = cpu_seconds(tuple(workers)) - cpu_before
        sessions_per_s, cpu_us = n / span, cpu * 1e6 / n
        print(
            f"  rewards workers ({n_workers}): {sessions_per_s:,.0f} sessions/s, {cpu_us:.0f} CPU µs each",
            flush=True,
        )
        return Round(sessions_per_s, raw_per_s, cpu_us, raw_cpu_us)
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
    best: dict[str, float] = {}
    for _ in range(3):  # the best of three passes: the first one also warms caches
        t0 = time.process_time()
        parsed = [parse(Session, r) for r in raw]
        t1 = time.process_time()
        rewarded = [reward_session(s, [], [], settings) for s in parsed]
        t2 = time.process_time()
        for r, session_json in zip(rewarded, raw, strict=True):
            r.to_json(session_json)  # as the worker does: the session's own JSON spliced in
        t3 = time.process_time()
        for k, v in (("parse", t1 - t0), ("score", t2 - t1), ("serialize", t3 - t2)):
            best[k] = min(best.get(k, v), v)
    return {k: round(v * 1e6 / n, 1) for k, v in best.items()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench rewards", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON here")
    parser.add_argument(
        "--sessions", type=int, default=20_000, help="sessions to push through (default 20000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds on fresh brokers; the best of each counts"
    )
    default_workers = max(1, min(os.cpu_count() or 1, PARTITIONS))
    parser.add_argument(
        "--workers",
        type=int,
        default=default_workers,
        help=f"rewards workers sharing the partitions, as deployed: one per core (default {default_workers})",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for each run")
    args = parser.parse_args(argv)
    if not 1 <= args.workers <= PARTITIONS:
        parser.error(f"--workers must be between 1 and {PARTITIONS} (the partitions to share)")

    print(f"serialising {args.sessions} sessions ...", flush=True)
    records = bench_sessions(args.sessions)
    counts = sorted({args.workers, 1}, reverse=True)
    rounds: dict[int, list[Round]] = {w: [] for w in counts}
    for r in range(args.rounds):
        for w in counts:
            print(f"round {r + 1}/{args.rounds}, {w} worker(s), each on a fresh private broker:", flush=True)
            rounds[w].append(one_round(records, args.timeout, w))

    def summary(runs: list[Round]) -> dict:
        # the best of the workers' rounds against the best of the bare loop's in the same rounds:
        # as many tries on each side (the bare loop's rate alone varies by a third between rounds)
        best, raw = max(x.sessions_per_s for x in runs), max(x.raw_per_s for x in runs)
        cpu, raw_cpu = min(x.cpu_us for x in runs), min(x.raw_cpu_us for x in runs)
        return {
            "sessions_per_s": round(best, 1),
            "raw_per_s": round(raw, 1),
            "ratio": round(best / raw, 3),
            "worker_cpu_us_per_session": round(cpu, 1),
            "raw_cpu_us_per_record": round(raw_cpu, 1),
            "cpu_ratio": round(raw_cpu / cpu, 3),
            "rounds": [
                {
                    "sessions_per_s": round(x.sessions_per_s, 1),
                    "raw_per_s": round(x.raw_per_s, 1),
                    "worker_cpu_us_per_session": round(x.cpu_us, 1),
                    "raw_cpu_us_per_record": round(x.raw_cpu_us, 1),
                }
                for x in runs
            ],
        }

    single, scaled = summary(rounds[1]), summary(rounds[args.workers])
    cost = scoring_cost_us()
    result = {
        "sessions": args.sessions,
        "session_bytes": len(records[0][1]),
        "sessions_per_s": single["sessions_per_s"],  # one worker process
        "raw_per_s": single["raw_per_s"],  # one bare loop process, in the same rounds
        "ratio": single["ratio"],
        "target_ratio": TARGET_RATIO,
        "worker_cpu_us_per_session": single["worker_cpu_us_per_session"],
        # the same comparison in CPU time per record, the least of each over the rounds: steadier
        # than the rates, which move with the broker and the feeding client on the same cores
        "raw_cpu_us_per_record": single["raw_cpu_us_per_record"],
        "cpu_ratio": single["cpu_ratio"],
        "rounds": single["rounds"],
        "scaling": {
            "workers": args.workers,
            "sessions_per_s": scaled["sessions_per_s"],
            "speedup_over_one": round(scaled["sessions_per_s"] / single["sessions_per_s"], 2),
            "rounds": scaled["rounds"],
        },
        "cpu_us_per_session": cost,
        "one_core_ceiling_per_s": round(1e6 / sum(cost.values()), 1),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0
