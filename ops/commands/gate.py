"""ratchet gate evaluate|run|approve|reject|rollback|log|state|reconcile|serve"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading


def _settings():
    """The gate's settings; the local stack fills in the base model's folder when unset."""
    from gating.settings import load_settings

    settings = load_settings()
    if settings.model_dir is None and "drift" in settings.suites:
        from ops.model import prepare_model
        from ops.stack import load_settings as stack_settings

        stack = stack_settings()
        model_dir = stack.model_dir or prepare_model(
            stack.cache_dir, progress=lambda m: print(m, file=sys.stderr)
        )
        settings = dataclasses.replace(settings, model_dir=model_dir)
    return settings


def _gate(progress: bool = True):
    from gating.gate import Gate

    return Gate(_settings(), progress=progress, say=lambda m: print(m, file=sys.stderr, flush=True))


def _print_entry(entry, as_json: bool) -> None:
    from gating.decisions import describe

    print(json.dumps(entry.to_json(), indent=2, sort_keys=True) if as_json else describe(entry))


def evaluate(args: argparse.Namespace) -> int:
    from gating.gate import GateError
    from gating.harness import HarnessError
    from learner.store import StoreError

    gate = _gate()
    try:
        entry = gate.evaluate(args.version, force=args.force)
    except (GateError, HarnessError, StoreError) as exc:
        print(f"ratchet gate evaluate: {exc}", file=sys.stderr)
        return 2
    finally:
        gate.close()
    _print_entry(entry, args.json)
    return 0 if entry.decision == "promote" else 3


def run(args: argparse.Namespace) -> int:
    gate = _gate()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(
        f"watching {gate.store.root} for new adapter versions (every {gate.settings.poll_interval_s:g}s); "
        "Ctrl-C stops",
        file=sys.stderr,
    )
    from ingest.health import Health

    s = gate.settings
    health = Health("gate", s.gate_health_stale_s)
    if s.gate_health_port:
        health.serve(s.gate_health_host, s.gate_health_port)
    try:
        gate.run_forever(stop, health.beat)
    except KeyboardInterrupt:
        stop.set()
    finally:
        health.close()
        gate.close()
    return 0


def override(args: argparse.Namespace) -> int:
    from gating.decisions import LogError
    from learner.store import StoreError

    gate = _gate(progress=False)
    try:
        entry = gate.override(args.action, args.version, args.reason, args.by)
    except (LogError, StoreError) as exc:
        print(f"ratchet gate {args.action}: {exc}", file=sys.stderr)
        return 2
    finally:
        gate.close()
    _print_entry(entry, args.json)
    return 0


def history(args: argparse.Namespace) -> int:
    from gating.decisions import DecisionLog, describe
    from gating.settings import load_settings

    entries = DecisionLog(load_settings().decision_log_path).entries()
    if args.limit:
        entries = entries[-args.limit :]
    if args.json:
        print(json.dumps([e.to_json() for e in entries], indent=2, sort_keys=True))
    elif not entries:
        print("no decisions yet")
    else:
        print("\n".join(describe(e) for e in entries))
    return 0


def state(args: argparse.Namespace) -> int:
    from gating.decisions import DecisionLog
    from gating.records import Registry
    from gating.settings import load_settings
    from learner.store import BASE

    s = load_settings()
    current = DecisionLog(s.decision_log_path).state()
    out = {"champion": current.champion or BASE, "challenger": current.challenger}
    if args.mlflow:
        out["mlflow_aliases"] = Registry(s.mlflow_url, s.registered_model, s.gate_experiment).aliases()
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


def reconcile(args: argparse.Namespace) -> int:
    gate = _gate(progress=False)
    try:
        print(json.dumps(gate.reconcile(), sort_keys=True))
    finally:
        gate.close()
    return 0


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gating.review_api import create_app
    from gating.settings import load_settings

    s = load_settings()
    try:
        app = create_app(s)
    except ValueError as exc:
        print(f"ratchet gate serve: {exc}", file=sys.stderr)
        return 2
    print(f"gate review API on http://{s.review_host}:{s.review_port}", file=sys.stderr)
    uvicorn.run(app, host=s.review_host, port=s.review_port, log_level="warning")
    return 0


def register(sub) -> None:
    gate = sub.add_parser(
        "gate",
        help="the validation gate: evaluate candidate adapters, promote or reject, manual review",
        description="Regression suites (target, honeypot, format, general capability, drift) decide whether a "
        "candidate adapter from the adapter store replaces the champion. Every decision is an MLflow run "
        "and a line in the append-only decision log (RATCHET_GATE_DIR); aliases champion/challenger on the "
        "registered model (RATCHET_REGISTERED_MODEL) follow the log.",
    )
    actions = gate.add_subparsers(dest="action", required=True, metavar="ACTION")

    ev = actions.add_parser("evaluate", help="evaluate one adapter version and apply the decision")
    ev.add_argument("version", help="adapter version in the store, e.g. v7")
    ev.add_argument("--force", action="store_true", help="evaluate again even if the version was decided")
    ev.add_argument("--json", action="store_true", help="print the decision log entry as JSON")
    ev.set_defaults(func=evaluate)

    rn = actions.add_parser("run", help="watch the adapter store and evaluate each new version")
    rn.set_defaults(func=run)

    for name, text in (
        ("approve", "make VERSION champion by hand (overrides a rejection)"),
        ("reject", "reject VERSION by hand; a rejected champion hands back to the one it replaced"),
        ("rollback", "make an earlier champion (or 'base', no adapter) champion again"),
    ):
        p = actions.add_parser(name, help=text)
        p.add_argument(
            "version", help="adapter version, e.g. v7" + (" or base" if name == "rollback" else "")
        )
        p.add_argument("--reason", required=True, help="why; recorded in the log and in MLflow")
        p.add_argument("--by", required=True, help="who decides; recorded in the log and in MLflow")
        p.add_argument("--json", action="store_true", help="print the decision log entry as JSON")
        p.set_defaults(func=override)

    lg = actions.add_parser("log", help="decision history, oldest first")
    lg.add_argument("--limit", type=int, default=0, help="only the last N entries")
    lg.add_argument("--json", action="store_true", help="machine-readable output")
    lg.set_defaults(func=history)

    st = actions.add_parser("state", help="the current champion and challenger")
    st.add_argument("--mlflow", action="store_true", help="also show the aliases MLflow holds")
    st.set_defaults(func=state)

    rc = actions.add_parser("reconcile", help="set MLflow aliases from the decision log (after a crash)")
    rc.set_defaults(func=reconcile)

    sv = actions.add_parser("serve", help="the review HTTP API (bearer token: RATCHET_REVIEW_TOKEN)")
    sv.set_defaults(func=serve)
