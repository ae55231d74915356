"""ratchet ingest serve"""

from __future__ import annotations

import argparse
import sys


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ingest.config import load
    from ingest.settings import IngestSettings

    settings = load(IngestSettings, "ingest")
    if not settings.ingest_tokens:
        print(
            "ratchet ingest serve: no tenant tokens configured; set RATCHET_INGEST_TOKENS=tenant=token,... "
            "(or ingest_tokens in the RATCHET_CONFIG file)",
            file=sys.stderr,
        )
        return 2
    host = args.host or settings.ingest_host
    port = args.port or settings.ingest_port
    tenants = ", ".join(sorted(settings.ingest_tokens))
    print(
        f"ingest: serving http://{host}:{port} for tenants {tenants}, producing to {settings.kafka_bootstrap}",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        "ingest.api:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=args.workers,
        access_log=args.access_log,
        log_level=args.log_level,
        timeout_keep_alive=settings.ingest_keep_alive_s,
    )
    return 0


def register(sub) -> None:
    ingest = sub.add_parser(
        "ingest",
        help="the ingest HTTP API (sessions, feedback, outcomes into Kafka)",
        description="Run the ingest API. Settings: RATCHET_KAFKA_BOOTSTRAP, RATCHET_INGEST_TOKENS "
        "(tenant=token,...), RATCHET_INGEST_HOST, RATCHET_INGEST_PORT, RATCHET_INGEST_MAX_RECORD_BYTES, "
        "RATCHET_INGEST_MAX_BATCH_BYTES, RATCHET_INGEST_MAX_BATCH_RECORDS, "
        "RATCHET_INGEST_DELIVERY_TIMEOUT_S, RATCHET_INGEST_RETRY_AFTER_S, RATCHET_INGEST_KEEP_ALIVE_S (idle "
        "connections, default 75).",
    )
    actions = ingest.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser(
        "serve", help="serve POST /v1/sessions, /v1/feedback, /v1/outcomes, /healthz, /metrics"
    )
    run.add_argument("--host", help="bind address (default RATCHET_INGEST_HOST, 127.0.0.1)")
    run.add_argument("--port", type=int, help="port (default RATCHET_INGEST_PORT, 18100)")
    run.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    run.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="log every request (default on)",
    )
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    run.set_defaults(func=serve)
