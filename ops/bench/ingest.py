"""Ingest throughput: sessions/s through ``POST /v1/sessions`` (JSONL batches) into the broker.

The API runs as its own process (``ratchet ingest serve``) against a private
Tansu broker (or ``--bootstrap``); concurrent HTTP clients post batches of
realistic ~4 KB sessions for ``--seconds``. The same bytes are then produced
with the bare confluent-kafka client (same producer settings: idempotent,
acks=all, lz4) for the raw rate, and parsed in-process for the validation rate;
``ratio`` = sessions_per_s / raw_produce_per_s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from ingest.contract import AssistantTurn, Cost, PolicyRef, SamplingParams, Session, ToolTurn, UserTurn, parse

TENANT, TOKEN = "bench", "bench-token"


def realistic_session(session_id: str, seed: int, completion_tokens: int) -> Session:
    """A calculator-tool session: user, assistant (tool call), tool, assistant (answer)."""
    rng = random.Random(seed)

    def assistant(turn_id: str, prompt: int, completion: int, text: str) -> AssistantTurn:
        return AssistantTurn(
            turn_id=turn_id,
            prompt_token_ids=[rng.randrange(49_152) for _ in range(prompt)],
            completion_token_ids=[rng.randrange(49_152) for _ in range(completion)],
            behaviour_logprobs=[-rng.expovariate(2.0) for _ in range(completion)],
            sampling=SamplingParams(temperature=0.7, max_tokens=256),
            adapter_version="v12",
            text=text,
            latency_s=round(rng.uniform(0.2, 3.0), 3),
        )

    a, b = rng.randrange(100, 999), rng.randrange(10, 99)
    return Session(
        session_id=session_id,
        tenant=TENANT,
        task_id=f"calc-{seed % 500}",
        policy=PolicyRef(base_model="smollm2-135m-instruct", adapter_version="v12"),
        turns=[
            UserTurn(
                turn_id="u0", text=f"What is {a} * {b}? Use the calculator tool and answer with the number."
            ),
            assistant(
                "a0",
                48,
                completion_tokens,
                f'{{"name": "calculator", "arguments": {{"expression": "{a}*{b}"}}}}',
            ),
            ToolTurn(
                turn_id="t0", name="calculator", arguments=f'{{"expression": "{a}*{b}"}}', output=str(a * b)
            ),
            assistant("a1", 24, completion_tokens // 3, f"The answer is {a * b}."),
        ],
        status="completed",
        cost=Cost(tokens=72 + completion_tokens * 4 // 3, seconds=round(rng.uniform(1, 6), 2)),
        metadata={"harness": "bench", "region": "local"},
    )


def session_lines(run: str, count: int, target_bytes: int, variants: int = 64) -> list[bytes]:
    """``count`` distinct sessions of about ``target_bytes`` each (ids of one width, so one size)."""
    n = 8
    while len(realistic_session(f"{run}-{0:09d}", 0, n).to_json()) < target_bytes:
        n += 4
    templates = [realistic_session(f"{run}-{0:09d}", seed, n).to_json() for seed in range(variants)]
    placeholder = f"{run}-{0:09d}".encode()
    return [templates[i % variants].replace(placeholder, f"{run}-{i:09d}".encode()) for i in range(count)]


def start_server(bootstrap: str, port: int, workers: int) -> subprocess.Popen:
    env = {**os.environ, "RATCHET_KAFKA_BOOTSTRAP": bootstrap, "RATCHET_INGEST_TOKENS": f"{TENANT}={TOKEN}"}
    argv = [sys.executable, "-m", "ops.cli", "ingest", "serve", "--port", str(port), "--no-access-log"]
    argv += ["--log-level", "warning", "--workers", str(workers)]
    server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=5) as client:
        while True:
            try:
                if client.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    return server
            except httpx.TransportError:
                pass
            if server.poll() is not None:
                raise RuntimeError(f"ingest server exited: {server.stderr.read()}")
            if time.monotonic() > deadline:
                server.terminate()
                raise RuntimeError("ingest server did not answer /healthz within 60 s")
            time.sleep(0.1)


async def post_batches(
    url: str, bodies, connections: int, seconds: float
) -> tuple[list[float], int, int, float]:
    """Post JSONL bodies from ``bodies`` with ``connections`` concurrent clients for ``seconds``.
    Returns per-request latencies (s), accepted sessions, failed requests and the elapsed time."""
    latencies: list[float] = []
    accepted = failed = 0
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson"}
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    start = time.perf_counter()
    end = start + seconds

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def worker() -> None:
            nonlocal accepted, failed
            while time.perf_counter() < end:
                body = next(bodies)
                sent = time.perf_counter()
                resp = await client.post("/v1/sessions", content=body, headers=headers)
                latencies.append(time.perf_counter() - sent)
                if resp.status_code == 202:
                    accepted += resp.json()["accepted"]
                else:
                    failed += 1

        await asyncio.gather(*(worker() for _ in range(connections)))
    return latencies, accepted, failed, time.perf_counter() - start


def raw_produce_rate(bootstrap: str, lines: list[bytes], keys: list[bytes]) -> float:
    from confluent_kafka import Producer

    from ingest import topics
    from ingest.producer import producer_config

    producer = Producer(producer_config(bootstrap))
    producer.produce(topics.SESSIONS, key=keys[0], value=lines[0])  # connect and get a producer id first
    producer.flush(30)
    start = time.perf_counter()
    for key, value in zip(keys, lines, strict=True):
        while True:
            try:
                producer.produce(topics.SESSIONS, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("raw produce: records not acknowledged within 60 s")
    elapsed = time.perf_counter() - start
    producer.close()
    return len(lines) / elapsed


def mean_produce_ms(metrics_text: str) -> float:
    """Mean time per request from produce to broker acknowledgement, from the server's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    samples = {
        s.name: s.value
        for f in text_string_to_metric_families(metrics_text)
        for s in f.samples
        if not s.labels
    }
    count = samples.get("ratchet_ingest_produce_seconds_count", 0.0)
    return 1000 * samples.get("ratchet_ingest_produce_seconds_sum", 0.0) / count if count else 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench ingest", description=__doc__)
    parser.add_argument("--json", metavar="FILE", help="write the results here as JSON")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured posting time (default 20)")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured posting first (default 3)")
    parser.add_argument("--batch", type=int, default=100, help="sessions per request (default 100)")
    parser.add_argument("--connections", type=int, default=4, help="concurrent HTTP connections (default 4)")
    parser.add_argument("--session-bytes", type=int, default=4096, help="size of one session (default 4096)")
    parser.add_argument("--workers", type=int, default=1, help="API worker processes (default 1)")
    parser.add_argument("--bootstrap", help="use this broker instead of a private one")
    args = parser.parse_args(argv)

    from ops.stack import Stack, StackSettings, free_port, load_settings

    run = f"bench-{uuid.uuid4().hex[:8]}"
    pool = session_lines(run, 20_000, args.session_bytes)
    print(
        f"ingest bench: {len(pool[0])}-byte sessions, batches of {args.batch}, {args.connections} connections"
    )
    with tempfile.TemporaryDirectory(prefix="ratchet-bench-") as tmp:
        stack = None
        bootstrap = args.bootstrap
        if bootstrap is None:
            stack = Stack(
                StackSettings(
                    state_dir=Path(tmp), cache_dir=load_settings().cache_dir, broker_port=free_port()
                ),
                progress=lambda m: None,
            )
            stack.up(["broker"])
            bootstrap = stack.settings.kafka_bootstrap
        port = free_port()
        server = start_server(bootstrap, port, args.workers)
        try:
            batches = [b"\n".join(pool[i : i + args.batch]) for i in range(0, len(pool), args.batch)]
            # Every body is posted once at most per pass; ids repeat only across passes.
            bodies = iter(batches * 1000)
            url = f"http://127.0.0.1:{port}"
            print(f"  warm-up {args.warmup:.0f} s, then {args.seconds:.0f} s measured ...", flush=True)
            asyncio.run(post_batches(url, bodies, args.connections, args.warmup))
            latencies, accepted, failed, elapsed = asyncio.run(
                post_batches(url, bodies, args.connections, args.seconds)
            )
            produce_mean_ms = mean_produce_ms(httpx.get(f"{url}/metrics", timeout=10).text)
        finally:
            server.terminate()
            server.wait(30)
        print("  raw produce of the same bytes ...", flush=True)
        keys = [f"{run}-{i:09d}".encode() for i in range(len(pool))]
        raw_per_s = raw_produce_rate(bootstrap, pool * 2, keys * 2)
        started = time.perf_counter()
        for line in pool[:2000]:
            parse(Session, line)
        validate_per_s = 2000 / (time.perf_counter() - started)
        if stack is not None:
            stack.down()

    sessions_per_s = accepted / elapsed
    result = {
        "sessions_per_s": round(sessions_per_s, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "produce_mean_ms": round(produce_mean_ms, 2),
        "raw_produce_per_s": round(raw_per_s, 1),
        "ratio": round(sessions_per_s / raw_per_s, 4),
        "validate_per_s": round(validate_per_s, 1),
        "session_bytes": len(pool[0]),
        "batch": args.batch,
        "connections": args.connections,
        "workers": args.workers,
        "seconds": round(elapsed, 2),
        "requests": len(latencies),
        "failed_requests": failed,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if failed == 0 else 1
