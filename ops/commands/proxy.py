"""ratchet proxy serve"""

from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ingest.config import load
    from serving.proxy import create_app
    from serving.settings import ProxySettings

    overrides = {k: v for k, v in (("proxy_host", args.host), ("proxy_port", args.port)) if v is not None}
    settings = load(ProxySettings, "proxy", **overrides)
    if not settings.ingest_tokens:
        print(
            "ratchet proxy serve: no tenant tokens configured; set RATCHET_INGEST_TOKENS=tenant=token,... "
            "(the ingest API's tokens: agents send theirs as the OpenAI client's api_key)",
            file=sys.stderr,
        )
        return 2
    app = create_app(settings)
    routes = app.state.proxy.routing.routes()
    following = (
        f"routes file {settings.routes_path} (generation {routes.generation})"
        if settings.routes_path.exists()
        else f"vLLM {', '.join(settings.vllm_urls)} until {settings.routes_path} exists"
    )
    print(
        f"capture proxy on http://{settings.proxy_host}:{settings.proxy_port}/v1 -> {following}; "
        f"aliases {routes.aliases}; journal {settings.journal_dir}; "
        f"tenants {', '.join(sorted(settings.ingest_tokens))}",
        flush=True,
    )
    uvicorn.run(
        app,
        host=settings.proxy_host,
        port=settings.proxy_port,
        log_level=args.log_level,
        timeout_keep_alive=settings.proxy_keep_alive_s,
    )
    return 0


def register(sub) -> None:
    proxy = sub.add_parser(
        "proxy",
        help="the OpenAI-compatible capture proxy in front of vLLM",
        description="Serve /v1/chat/completions and /v1/completions in front of vLLM, recording each "
        "request carrying an X-Ratchet-Session header as a turn of that session, for the tenant whose "
        "bearer token it carries (RATCHET_INGEST_TOKENS, the ingest API's tokens); "
        "POST /v1/sessions/{id}/end produces the session to sessions.v1. Replicas and the version each "
        "serves come from the routes file the serving controller writes (RATCHET_ROUTING_FILE, default "
        "$RATCHET_STATE_DIR/serving/routes.json), re-read when replaced; until it exists, RATCHET_VLLM_URLS "
        "and RATCHET_POLICY_VERSION. GET /admin/state reports in-flight requests per version "
        "(RATCHET_PROXY_ADMIN_TOKEN). Other settings: RATCHET_KAFKA_BOOTSTRAP, RATCHET_PROXY_HOST/PORT, "
        "RATCHET_POLICY_ALIAS, RATCHET_SESSION_IDLE_TIMEOUT_S, RATCHET_PROXY_KEEP_ALIVE_S (idle "
        "connections, default 75), RATCHET_STATE_DIR (journal).",
    )
    actions = proxy.add_subparsers(dest="action", required=True, metavar="ACTION")
    serve = actions.add_parser("serve", help="run the proxy in the foreground (Ctrl-C stops it)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 18200)")
    serve.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    proxy.set_defaults(func=run)
