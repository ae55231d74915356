"""ratchet up|down|status: the whole loop (stack + every stage) as supervised processes."""

from __future__ import annotations

import argparse
import json
import sys


def _pipeline():
    from ops.pipeline import load_settings, pipeline
    from ops.stack import load_settings as load_stack_settings

    stack_settings, ps = load_stack_settings(), load_settings()
    return pipeline(stack_settings, ps), stack_settings, ps


def up(args: argparse.Namespace) -> int:
    from ops.commands.stack import print_status
    from ops.config_reference import require_valid_config
    from ops.stack import StackError

    require_valid_config()  # a typo in the file would otherwise be ignored silently
    stack, _, _ = _pipeline()
    try:
        stack.up(args.only.split(",") if args.only else None)
    except StackError as exc:
        print(f"ratchet up: {exc}", file=sys.stderr)
        return 1
    print_status(stack.status(), False)
    return 0


def down(args: argparse.Namespace) -> int:
    stack, _, _ = _pipeline()
    stack.down()
    return 0


def status(args: argparse.Namespace) -> int:
    from ops.commands.stack import print_status
    from ops.pipeline import last_decisions, routed_version, serving_report

    stack, stack_settings, ps = _pipeline()
    rows = stack.status()
    decisions = last_decisions(stack_settings.state_dir)
    serving = routed_version(stack_settings, ps)
    refused = serving_report(stack_settings.state_dir).get("champion_refused")
    if args.json:
        out = {
            "components": rows,
            "serving_version": serving,
            "champion_refused": refused,
            "decisions": decisions,
        }
        print(json.dumps(out, indent=2))
    else:
        print_status(rows, False)
        print(f"\nserving version: {serving or 'unknown (proxy down)'}")
        if refused:
            print(
                f"!! champion alias -> {refused['version']} REFUSED: {refused['reason']} "
                f"(still serving {refused['serving']})"
            )
        print("last gate decisions:" if decisions else "no gate decisions yet")
        for d in decisions:
            reasons = "; ".join(d.get("reasons") or []) or "-"
            print(f"  {d.get('version')}: {d.get('decision')} ({reasons})")
        print(f"MLflow UI: {stack_settings.mlflow_url}")
    return 0 if all(r["healthy"] for r in rows) else 1


def register(sub) -> None:
    p = sub.add_parser("up", help="start the whole loop: broker, MLflow, vLLM and every stage (idempotent)")
    p.add_argument(
        "--only", metavar="NAMES", help="comma-separated subset, e.g. broker,mlflow,vllm,ingest,proxy"
    )
    p.set_defaults(func=up)
    p = sub.add_parser("down", help="stop every process `ratchet up` started, and nothing else")
    p.set_defaults(func=down)
    p = sub.add_parser(
        "status", help="health of every component, the serving version and the last gate decisions"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=status)
