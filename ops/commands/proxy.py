"""ratchet proxy serve"""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ingest.config import load
    from serving.proxy import create_app
    from serving.settings import ProxySettings

    overrides = {k: v for k, v in (("proxy_host", args.host), ("proxy_port", args.port)) if v is not None}
    settings = load(ProxySettings, "proxy", **overrides)
    app = create_app(settings)
    routes = app.state.proxy.routing.snapshot()
    print(
        f"capture proxy on http://{settings.proxy_host}:{settings.proxy_port}/v1 -> vLLM {settings.vllm_url}; "
        f"routes {routes}; journal {settings.journal_dir}",
        flush=True,
    )
    uvicorn.run(app, host=settings.proxy_host, port=settings.proxy_port, log_level=args.log_level)
    return 0


def register(sub) -> None:
    proxy = sub.add_parser(
        "proxy",
        help="the OpenAI-compatible capture proxy in front of vLLM",
        description="Serve /v1/chat/completions and /v1/completions in front of vLLM, recording each "
        "request carrying an X-Ratchet-Session header as a turn of that session; "
        "POST /v1/sessions/{id}/end produces the session to sessions.v1. Settings: RATCHET_VLLM_URL, "
        "RATCHET_KAFKA_BOOTSTRAP, RATCHET_PROXY_HOST/PORT, RATCHET_POLICY_ALIAS, RATCHET_POLICY_VERSION, "
        "RATCHET_ROUTING_FILE, RATCHET_SESSION_IDLE_TIMEOUT_S, RATCHET_STATE_DIR (journal).",
    )
    actions = proxy.add_subparsers(dest="action", required=True, metavar="ACTION")
    serve = actions.add_parser("serve", help="run the proxy in the foreground (Ctrl-C stops it)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 18200)")
    serve.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    proxy.set_defaults(func=run)
