"""ratchet up|down|status: the whole loop (stack + every stage) as supervised processes."""

from __future__ import annotations

import argparse
import json
import sys
import time


def _pipeline(topology: str | None = None):
    """The loop's stack; ``topology`` (``--topology``) wins over RATCHET_TOPOLOGY and the TOML file."""
    from ops.pipeline import load_settings, pipeline
    from ops.stack import load_settings as load_stack_settings

    stack_settings = load_stack_settings(**({"topology": topology} if topology else {}))
    ps = load_settings()
    return pipeline(stack_settings, ps), stack_settings, ps


def up(args: argparse.Namespace) -> int:
    from ops.commands.stack import print_status
    from ops.config_reference import require_valid_config
    from ops.stack import StackError

    require_valid_config()  # a typo in the file would otherwise be ignored silently
    stack, _, _ = _pipeline(args.topology)
    try:
        stack.up(args.only.split(",") if args.only else None)
    except StackError as exc:
        print(f"ratchet up: {exc}", file=sys.stderr)
        return 1
    print_status(stack.status(), False, stack.settings.topology)
    return 0


def down(args: argparse.Namespace) -> int:
    stack, _, _ = _pipeline(args.topology)
    stack.down()
    return 0


def read_status(topology: str | None = None) -> dict:
    """Everything ``ratchet status`` shows, as one JSON-ready dict."""
    from ops.loop_status import loop_status
    from ops.pipeline import last_decisions, routed_version, serving_report

    stack, stack_settings, ps = _pipeline(topology)
    rows = stack.status()
    state = stack_settings.state_dir
    unreadable = []
    try:
        decisions = last_decisions(state, n=10**6)
    except (OSError, ValueError) as exc:
        decisions, unreadable = [], [f"{state / 'gate' / 'decisions.jsonl'} unreadable: {exc}"]
    try:
        report = serving_report(state)
    except (OSError, ValueError) as exc:
        report, unreadable = {}, [*unreadable, f"{state / 'serving' / 'status.json'} unreadable: {exc}"]
    serving = routed_version(stack_settings, ps)
    loop = loop_status(stack_settings, ps, decisions, serving, report)
    loop["warnings"] = unreadable + loop["warnings"]
    return {
        "topology": stack_settings.topology,
        "components": rows,
        "serving_version": serving,
        "champion_refused": report.get("champion_refused"),
        "decisions": decisions[-5:],
        "mlflow_url": stack_settings.mlflow_url,
        **loop,
    }


def serve_metrics(port: int, host: str, topology: str | None = None) -> int:
    """``/metrics`` on ``host:port``, the status read afresh on every scrape, until interrupted."""
    from prometheus_client import CollectorRegistry, start_http_server

    from ops.loop_metrics import StatusCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(lambda: read_status(topology)))
    server, thread = start_http_server(port, addr=host, registry=registry)
    print(f"ratchet status: Prometheus metrics on http://{host}:{port}/metrics (Ctrl-C stops)", flush=True)
    try:
        thread.join()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


def status(args: argparse.Namespace) -> int:
    from ops.commands.stack import print_status

    if args.serve is not None:
        return serve_metrics(args.serve, args.host, args.topology)
    out = read_status(args.topology)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    elif args.prometheus:
        from ops.loop_metrics import exposition

        print(exposition(out), end="")
    else:
        print_status(out["components"], False, out["topology"])
        print_loop(out)
        print(f"MLflow UI: {out['mlflow_url']}")
    return 0 if all(r["healthy"] for r in out["components"]) else 1


def _unknown(section) -> str | None:
    return f"unknown ({section['unknown']})" if isinstance(section, dict) and "unknown" in section else None


def _ago(at: float | None) -> str:
    return "-" if at is None else f"{time.time() - at:.0f}s ago"


def print_loop(out: dict) -> None:
    """The readable form of ``ratchet status``: one section per stage."""
    serving, refused = out["serving_version"], out["champion_refused"]
    print(f"\nserving version: {serving or 'unknown (proxy down)'}")
    if refused:
        print(
            f"!! champion alias -> {refused['version']} REFUSED: {refused['reason']} "
            f"(still serving {refused['serving']})"
        )
    print("\nconsumer lag:")
    lag = out["lag"]
    for stage in ("rewards", "learner"):
        section = lag.get(stage, lag)
        if _unknown(section):
            print(f"  {stage}: {_unknown(section)}")
            continue
        parts = [
            f"{r['topic']}[{r['partition']}] {r['lag'] if r['lag'] is not None else '?'}"
            for r in section["partitions"]
            if r["lag"] != 0
        ]
        total = section["total"] if section["total"] is not None else "unknown"
        what = (
            "records past its committed offsets (it commits below its oldest open join, held for late signals)"
            if stage == "rewards"
            else "records behind"
        )
        print(f"  {stage}: {total} {what}" + (f" ({', '.join(parts)})" if parts else ""))
    print("records per minute (last 5 min):")
    rates = out["rates"]
    for topic, label in (("sessions.v1", "in"), ("rewarded.v1", "out")):
        section = rates.get(topic, rates)
        shown = _unknown(section) or f"{section['per_minute']}" + (
            " (at least)" if section["truncated"] else ""
        )
        print(f"  {label:<4}{topic}: {shown}")
    learner = out["learner"]
    ckpt = learner["checkpoint"]
    print("\nlearner:")
    if _unknown(ckpt):
        print(f"  checkpoint: {_unknown(ckpt)}")
    else:
        print(
            f"  checkpoint {ckpt['checkpoint']}: {ckpt['updates']} updates, head {ckpt['head']}, "
            f"last update {_ago(ckpt['last_update_at'])}"
        )
    published = learner["published"]
    print(f"  published: {_unknown(published) or ', '.join(published['versions']) or 'none'}")
    print(f"  /health: {_unknown(learner['health']) or learner['health'].get('status')}")
    gate = out["gate"]
    print("\ngate:")
    evaluating = gate["evaluating"]
    if _unknown(evaluating):
        print(f"  evaluating: {_unknown(evaluating)}")
    elif evaluating:
        total = evaluating["tasks_total"] if evaluating["tasks_total"] is not None else "?"
        print(f"  evaluating {evaluating['version']}: {evaluating['tasks_done']}/{total} candidate tasks")
    else:
        print("  evaluating: nothing")
    last = gate["last_decision"]
    shown = _unknown(last) or f"{last['version']} {last['action']} {last['decision']} at {last['at']}"
    print(f"  last decision: {shown}")
    print("last gate decisions:" if out["decisions"] else "no gate decisions yet")
    for d in out["decisions"]:
        reasons = "; ".join(
            r.get("message", str(r)) if isinstance(r, dict) else str(r) for r in d.get("reasons") or []
        )
        print(f"  {d.get('version')}: {d.get('decision')} ({reasons or '-'})")
    replicas = out["replicas"]
    print("\nreplicas:")
    if _unknown(replicas["replicas"]):
        print(f"  {_unknown(replicas['replicas'])}")
    else:
        for r in replicas["replicas"]:
            print(f"  {r['url']}: serves {r['serves'] or 'nothing'} (loaded {', '.join(r['loaded']) or '-'})")
        canary = replicas.get("canary")
        if canary:
            print(f"  canary: {canary['version']} on trial for {canary['share']:.0%} of new sessions")
    for warning in out["warnings"]:
        print(f"!! {warning}")


def add_topology(parser: argparse.ArgumentParser) -> None:
    from ops.stack import TOPOLOGIES

    parser.add_argument(
        "--topology",
        choices=TOPOLOGIES,
        help="the stack's topology (default: RATCHET_TOPOLOGY, else local); production: the broker on S3 "
        "(SeaweedFS), MLflow on PostgreSQL with its artifacts on S3, two vLLM replicas",
    )


def register(sub) -> None:
    p = sub.add_parser("up", help="start the whole loop: broker, MLflow, vLLM and every stage (idempotent)")
    p.add_argument(
        "--only",
        metavar="NAMES",
        help="comma-separated subset, e.g. broker,mlflow,vllm,ingest,proxy "
        "(s3, postgres, vllm2: production topology)",
    )
    add_topology(p)
    p.set_defaults(func=up)
    p = sub.add_parser("down", help="stop every process `ratchet up` started, and nothing else")
    add_topology(p)
    p.set_defaults(func=down)
    p = sub.add_parser(
        "status",
        help="health of every component and of the loop: lag, rates, learner, gate, replicas, warnings",
    )
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="machine-readable output")
    shown.add_argument(
        "--prometheus", action="store_true", help="the same figures in the Prometheus text format, once"
    )
    shown.add_argument(
        "--serve",
        type=int,
        metavar="PORT",
        help="serve them as Prometheus metrics on PORT (/metrics), read afresh on every scrape",
    )
    p.add_argument("--host", default="127.0.0.1", help="address --serve binds (default 127.0.0.1)")
    add_topology(p)
    p.set_defaults(func=status)
