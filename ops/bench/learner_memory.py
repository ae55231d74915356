"""Learner memory: the planning and ledger path over many sessions, without a model.

``python -m ops.bench learner-memory [--sessions 100000] [--json FILE]``. Sessions
arrive at ``--rate`` per (simulated) second in micro-batches of ``--batch``,
each served by the version published at its time (a new one every
``--publish-every`` batches), with one upstream duplicate per batch. Each batch
is planned against the learner's de-duplication index
(:class:`learner.index.SessionIndex`), its ledger lines are written and
remembered, and stale sessions are forgotten (``bounded``); ``unbounded``
forgets nothing, as the learner did before. Each mode runs in its own process,
so ``peak_rss_mb`` (the process's peak resident set) is its own. JSON per mode:
``peak_rss_mb``, ``baseline_rss_mb`` (after imports, before the first batch),
``index_sessions`` (at the end) and ``index_sessions_max``, ``ledger_lines``,
``restart_lines_read`` (lines a restart reads to rebuild the index) and
``seconds``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def session(i: int, created_at: float, version: int):
    from ingest.contract import AssistantTurn, PolicyRef, RewardedSession, SamplingParams, Session

    served = f"v{version}"
    turn = AssistantTurn(turn_id="a0", prompt_token_ids=[1, 2, 3, 4], completion_token_ids=[5, 6, 7, 8],
                         behaviour_logprobs=[-1.0] * 4, adapter_version=served,
                         sampling=SamplingParams(temperature=1.0), logprobs_mode="processed")  # fmt: skip
    s = Session(session_id=f"s{i}", tenant="bench", task_id=f"task-{i // 4}", status="completed",
                policy=PolicyRef(base_model="bench", adapter_version=served), turns=[turn],
                created_at=datetime.fromtimestamp(created_at, UTC))  # fmt: skip
    return RewardedSession(session_id=f"s{i}", tenant="bench", session=s, reward=float(i % 2))


def measure(args) -> dict:
    from learner.batching import Limits, plan
    from learner.checkpoint import Ledger
    from learner.consumer import Consumed
    from learner.index import SessionIndex
    from learner.loop import ledger_entry
    from learner.settings import load_settings

    settings = load_settings()
    work = Path(tempfile.mkdtemp(prefix="ratchet-bench-memory-"))
    ledger = Ledger(work / "ledger.jsonl")
    index = SessionIndex(settings.max_staleness_s)
    params = settings.advantage_params()
    baselines: dict = {}
    baseline = peak_rss_mb()
    started = time.perf_counter()
    t0 = time.time() - 60.0
    ledger_bytes, offset, biggest, version, recent = 0, 0, 0, 1, []
    for b, first in enumerate(range(0, args.sessions, args.batch)):
        version = 1 + b // args.publish_every
        batch = [
            session(i, t0 + i / args.rate, version)
            for i in range(first, min(first + args.batch, args.sessions))
        ]
        if recent:
            batch.append(recent[0])  # an upstream duplicate of a session two batches back
        recent = (recent + [batch[0]])[-2:]
        now = t0 + (first + len(batch)) / args.rate
        limits = Limits(f"v{version}", frozenset(f"v{k}" for k in range(1, version + 1)),
                        settings.max_staleness, settings.max_row_tokens, settings.max_staleness_s, now)  # fmt: skip
        trained, seen = index.view(rs.session_id for rs in batch)
        result = plan(batch, trained, seen, baselines, limits, params)
        baselines = result.baselines
        records = [Consumed(0, offset + k, b"") for k in range(len(batch))]
        offset += len(batch)
        update = b if result.train else None
        entries = [ledger_entry(r, o, update) for r, o in zip(records, result.outcomes, strict=True)]
        start, ledger_bytes = ledger_bytes, ledger.append(entries)
        index.remember(entries, start, ledger_bytes)
        if args.mode == "bounded":
            index.evict(now)
        biggest = max(biggest, len(index))
    seconds = time.perf_counter() - started
    live_from = index.live_from()
    with ledger.path.open("rb") as fh:
        lines = sum(1 for _ in fh)
        fh.seek(live_from)
        restart_lines = sum(1 for _ in fh)
    return {
        "mode": args.mode,
        "sessions": args.sessions,
        "batch": args.batch,
        "rate_per_s": args.rate,
        "publish_every_batches": args.publish_every,
        "max_staleness": settings.max_staleness,
        "max_staleness_s": settings.max_staleness_s,
        "versions": version,
        "peak_rss_mb": peak_rss_mb(),
        "baseline_rss_mb": baseline,
        "index_sessions": len(index),
        "index_sessions_max": biggest,
        "ledger_lines": lines,
        "restart_lines_read": restart_lines,
        "seconds": round(seconds, 1),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops.bench learner-memory", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=16, help="sessions per micro-batch")
    parser.add_argument("--rate", type=float, default=10.0, help="sessions per simulated second")
    parser.add_argument("--publish-every", type=int, default=8, help="micro-batches per published version")
    parser.add_argument("--mode", choices=["bounded", "unbounded", "both"], default="both")
    args = parser.parse_args(argv)
    if args.mode != "both":
        result = measure(args)
    else:
        result = {}
        for mode in ("bounded", "unbounded"):
            cmd = [sys.executable, "-m", "ops.bench", "learner-memory", "--mode", mode,
                   "--sessions", str(args.sessions), "--batch", str(args.batch), "--rate", str(args.rate),
                   "--publish-every", str(args.publish_every)]  # fmt: skip
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            result[mode] = json.loads(out)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
