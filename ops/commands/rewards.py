"""ratchet rewards worker"""

from __future__ import annotations

import argparse
from typing import NoReturn


def run(args: argparse.Namespace) -> NoReturn:
    from rewards.app import run_worker
    from rewards.worker_settings import load_stream_settings

    overrides = {
        name: value
        for name, value in (
            ("kafka_bootstrap", args.bootstrap),
            ("rewards_group_id", args.group),
            ("rewards_metrics_port", args.metrics_port),
            ("join_wait_s", args.join_wait),
        )
        if value is not None
    }
    run_worker(load_stream_settings(**overrides), loglevel=args.log_level)


def register(sub) -> None:
    rewards = sub.add_parser(
        "rewards",
        help="reward workers: join sessions with late signals, score them, produce rewarded.v1",
        description="Reward workers consume sessions.v1, feedback.v1 and outcomes.v1, join each session "
        "with its late signals, score it and produce rewarded.v1 (amendments carry a higher revision); "
        "bad input goes to dlq.v1. Settings: RATCHET_* variables or [rewards] in RATCHET_CONFIG "
        "(join_wait_s, expect_feedback, expect_outcome, amend_window_s, orphan_ttl_s, ...).",
    )
    actions = rewards.add_subparsers(dest="action", required=True, metavar="ACTION")
    worker = actions.add_parser(
        "worker",
        help="run one worker until Ctrl-C/SIGTERM (start several: they share the partitions)",
        description="Run one rewards worker. It logs its partitions, what it read back from rewarded.v1 on "
        "each assignment, and a progress line every rewards_log_every_s. Prometheus metrics on "
        "http://127.0.0.1:RATCHET_REWARDS_METRICS_PORT/metrics (default 19101, 0 = off).",
    )
    worker.add_argument(
        "--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap servers (RATCHET_KAFKA_BOOTSTRAP)"
    )
    worker.add_argument("--group", metavar="ID", help="consumer group id (RATCHET_REWARDS_GROUP_ID)")
    worker.add_argument("--metrics-port", type=int, metavar="PORT", help="Prometheus port, 0 = off")
    worker.add_argument("--join-wait", type=float, metavar="SECONDS", help="RATCHET_JOIN_WAIT_S")
    worker.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    worker.set_defaults(func=run)
