"""ratchet serving run|status"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

MLFLOW_CLIENT_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def _settings():
    from ingest.config import load
    from serving.settings import ControllerSettings

    return load(ControllerSettings, "serving")


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from prometheus_client import start_http_server

    from ops.model import prepare_model
    from serving.controller import Controller

    for key, value in MLFLOW_CLIENT_ENV.items():  # a registry outage must not stall the replicas' reconcile
        os.environ.setdefault(key, value)
    settings = _settings()
    if settings.model_dir is None:
        settings = dataclasses.replace(settings, model_dir=prepare_model(load_cache_dir()))
    try:
        controller = Controller(settings)
    except ValueError as exc:  # e.g. an unreadable decision key
        print(f"ratchet serving run: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with controller.exclusive():
            if settings.controller_metrics_port:
                start_http_server(
                    settings.controller_metrics_port,
                    settings.controller_metrics_host,
                    controller.metrics.registry,
                )
            if args.once:
                controller.reconcile()
                controller.reconcile()  # the second pass unloads what the first one drained
            else:
                controller.run(stop)
    except RuntimeError as exc:
        print(f"ratchet serving run: {exc}", file=sys.stderr)
        return 1
    finally:
        controller.close()
    return 0


def load_cache_dir():
    from ops.stack import load_settings

    return load_settings().cache_dir


def status_report(settings) -> dict:
    """Per replica: health and loaded versions (asked now), routed versions (the routes file), and the
    controller's last report (failures, problems)."""
    from learner.store import version_number
    from serving import replicas
    from serving.routing import RoutesFileError, read_routes
    from serving.vllm_admin import VLLMClient

    routes_path = settings.routes_path
    try:
        routes = read_routes(routes_path) if routes_path.exists() else None
        routes_error = None if routes else f"no routes file at {routes_path} (has the controller run?)"
    except RoutesFileError as exc:
        routes, routes_error = None, str(exc)
    status_path = settings.serving_dir / "status.json"
    last = json.loads(status_path.read_text()) if status_path.exists() else {}
    failures = {r["url"]: r.get("failures", {}) for r in last.get("replicas", [])}
    routed = {r.url: sorted(r.versions, key=version_number) for r in routes.replicas} if routes else {}
    alias = routes.aliases.get(settings.policy_alias) if routes else None
    base_adapter = routes.base_adapter if routes else None
    base_on = {r.url: r.serves(None, base_adapter is not None) for r in routes.replicas} if routes else {}
    rows = []
    for url in settings.vllm_urls:
        url = url.rstrip("/")
        client = VLLMClient(url, timeout_s=10)
        try:
            seen = replicas.observe(client, settings.adapter_prefix)
        finally:
            client.close()
        rows.append(
            {
                "replica": url,
                "healthy": seen.healthy,
                "error": seen.error,
                "loaded": sorted(seen.loaded, key=version_number),
                "routed": routed.get(url, []),
                "base": base_on.get(url, False),  # routed for the base model (its zero adapter if named)
                "serves_alias": seen.healthy
                and (alias in routed.get(url, []) if alias else base_on.get(url, base_adapter is None)),
                "failures": failures.get(url, {}),
            }
        )
    return {
        "alias": settings.policy_alias,
        "routed_version": alias,
        "base_adapter": base_adapter,
        "generation": routes.generation if routes else None,
        "routes_file": str(routes_path),
        "routes_error": routes_error,
        "champion": last.get("champion"),
        "champion_refused": last.get("champion_refused"),
        "signatures_checked": last.get("signatures_checked"),
        "controller_updated_s_ago": round(time.time() - last["updated_at"], 1) if last else None,
        "problems": last.get("problems", []),
        "replicas": rows,
    }


def print_status(report: dict) -> None:
    from learner.store import BASE

    alias = report["routed_version"] or BASE
    age = report["controller_updated_s_ago"]
    seen = f"controller's last pass {age:.0f}s ago" if age is not None else "controller has not run"
    print(
        f"{report['alias']} -> {alias}  (champion {report['champion'] or BASE}, routes generation "
        f"{report['generation']}, {seen})"
    )
    if report["routes_error"]:
        print(f"!! {report['routes_error']}")
    if report["signatures_checked"] is False:
        print("!! no decision key: the champion alias is served without checking the gate's signature")
    width = max(len(r["replica"]) for r in report["replicas"])
    print(f"   {'replica':<{width}}  {'health':<7}  {'loaded':<16}  routed")
    for r in report["replicas"]:
        mark = "ok " if r["healthy"] and r["serves_alias"] else "!! "
        health = "ok" if r["healthy"] else "down"
        loaded = " ".join(r["loaded"]) or "-"
        routed = " ".join(([BASE] if r["base"] else []) + r["routed"]) or "-"
        print(f"{mark}{r['replica']:<{width}}  {health:<7}  {loaded:<16}  {routed}")
        if r["error"]:
            print(f"     {r['error']}")
        for version, reason in r["failures"].items():
            print(f"     {version} refused: {reason}")
    for problem in report["problems"]:
        print(f"!! {problem}")


def status(args: argparse.Namespace) -> int:
    report = status_report(_settings())
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_status(report)
    ok = (
        report["routes_error"] is None
        and report["champion"] == report["routed_version"]
        and not report["champion_refused"]
        and all(r["healthy"] and r["serves_alias"] for r in report["replicas"])
    )
    return 0 if ok else 1


def register(sub) -> None:
    serving = sub.add_parser(
        "serving",
        help="the serving controller: hot-swap the champion adapter into every vLLM replica",
        description="Reconcile the champion adapter (MLflow alias RATCHET_CHAMPION_ALIAS of "
        "RATCHET_REGISTERED_MODEL) onto the vLLM replicas RATCHET_VLLM_URLS: load it from the adapter store "
        "(RATCHET_ADAPTER_STORE_DIR) after its hash check, verify it with a logprob probe, flip the routes "
        "file the capture proxies follow (RATCHET_ROUTING_FILE), and unload old versions once the proxies "
        "(RATCHET_PROXY_URLS) report them drained. With RATCHET_DECISION_KEY_FILE it serves only a champion "
        "the gate's signature vouches for. Rollback: move the champion alias back "
        "(`ratchet gate rollback`); the controller follows.",
    )
    actions = serving.add_subparsers(dest="action", required=True, metavar="ACTION")
    run_p = actions.add_parser("run", help="run the controller loop in the foreground (Ctrl-C stops it)")
    run_p.add_argument("--once", action="store_true", help="reconcile once (two passes) and exit")
    run_p.set_defaults(func=run)
    status_p = actions.add_parser(
        "status",
        help="per replica: health, loaded versions, routed versions (exit 1 if a replica does not serve "
        "the alias, the alias is not on the champion, or the champion alias is refused)",
    )
    status_p.add_argument("--json", action="store_true", help="machine-readable output")
    status_p.set_defaults(func=status)
