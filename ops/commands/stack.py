"""ratchet stack up|down|status"""

from __future__ import annotations

import argparse
import json
import sys


def print_status(rows: list[dict], as_json: bool, topology: str | None = None) -> None:
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    if topology:
        print(f"topology: {topology}")
    width = max(len(r["component"]) for r in rows)
    for r in rows:
        mark = "ok " if r["healthy"] else "!! "
        pid = f"pid {r['pid']}" if r["pid"] else "-"
        print(f"{mark}{r['component']:<{width}}  {r['state']:<9}  {r['url']:<28}  {pid}")


def run(args: argparse.Namespace) -> int:
    from ops.stack import Stack, StackError, load_settings

    overrides = {"durable": True} if getattr(args, "durable", False) else {}
    if args.topology:
        overrides["topology"] = args.topology
    stack = Stack(load_settings(**overrides))
    names = args.only.split(",") if getattr(args, "only", None) else None
    try:
        if args.action == "up":
            stack.up(names)
            print_status(stack.status(), False, stack.settings.topology)
        elif args.action == "down":
            stack.down(names)
        else:
            rows = stack.status()
            print_status(rows, args.json, stack.settings.topology)
            return 0 if all(r["healthy"] for r in rows) else 1
    except StackError as exc:
        print(f"ratchet stack {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


def register(sub) -> None:
    from ops.commands.loop import add_topology

    stack = sub.add_parser(
        "stack",
        help="the local stack: Kafka-protocol broker, MLflow, vLLM (and S3, PostgreSQL)",
        description="Start, stop or inspect the local stack. State (PID files, logs, data) lives "
        "in RATCHET_STATE_DIR (default ~/.local/state/ratchet). RATCHET_TOPOLOGY=production (or --topology "
        "production) runs the production topology: the broker on S3 (SeaweedFS), MLflow on PostgreSQL with "
        "its artifacts on S3, two vLLM replicas.",
    )
    actions = stack.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start every component that is not already healthy (idempotent)")
    up.add_argument(
        "--durable", action="store_true", help="keep broker data on S3 storage (SeaweedFS) instead of memory"
    )
    up.add_argument(
        "--only", metavar="NAMES", help="comma-separated subset: s3,broker,postgres,mlflow,vllm,vllm2"
    )
    down = actions.add_parser("down", help="stop the components this stack started")
    down.add_argument(
        "--only", metavar="NAMES", help="comma-separated subset: s3,broker,postgres,mlflow,vllm,vllm2"
    )
    status = actions.add_parser(
        "status", help="show each component and its health (exit 1 if any is unhealthy)"
    )
    status.add_argument("--json", action="store_true", help="machine-readable output")
    for parser in (up, down, status):
        add_topology(parser)
    stack.set_defaults(func=run)
