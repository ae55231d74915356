"""Data-quality check speed: ``check_batch`` on micro-batches of sessions.

Reports the one-time cost (great-expectations import and suite build) and the
warm time per batch of ``--batch`` sessions (median of ``--repeats``), which is
what the learner pays per micro-batch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from ingest.examples import example_session


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench quality", description=__doc__)
    parser.add_argument("--batch", type=int, default=200, help="sessions per batch (default 200)")
    parser.add_argument("--tokens", type=int, default=256, help="completion tokens per session (default 256)")
    parser.add_argument("--repeats", type=int, default=5, help="warm runs (default 5)")
    parser.add_argument("--json", metavar="FILE", help="write the results here")
    args = parser.parse_args(argv)

    batch = [
        example_session(session_id=f"bench-{i}", seed=i, n_tokens=args.tokens, adapter_version="v3")
        for i in range(args.batch)
    ]
    started = time.perf_counter()
    from ingest.quality import check_batch

    report = check_batch(batch)
    cold_s = time.perf_counter() - started
    assert report.success, report.failures
    warm = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        check_batch(batch)
        warm.append(time.perf_counter() - started)
    result = {
        "batch": args.batch,
        "tokens_per_session": args.tokens,
        "cold_s": round(cold_s, 3),
        "warm_batch_s": round(statistics.median(warm), 4),
        "sessions_per_s": round(args.batch / statistics.median(warm), 1),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
