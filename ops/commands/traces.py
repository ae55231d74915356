"""ratchet traces run|forward"""

from __future__ import annotations

import argparse
import logging
import signal


def run(args: argparse.Namespace) -> int:
    from ingest.health import Health
    from rewards.traces import TraceExporter, load_trace_settings

    settings = load_trace_settings()
    if not settings.traces_enabled:
        print("traces: off (RATCHET_TRACES_ENABLED=false): nothing to do")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stopping = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.append(True))
    health = Health("traces", stale_s=max(60.0, 4 * settings.traces_feedback_poll_s))
    if settings.traces_health_port:
        health.serve(settings.traces_health_host, settings.traces_health_port)
    exporter = TraceExporter(settings)
    try:
        exporter.run_forever(lambda: bool(stopping), health.beat)
    finally:
        exporter.close()
        health.close()
        print(f"traces: stopped; {exporter.counts}")
    return 0


def forward(args: argparse.Namespace) -> int:
    from rewards.traces import TraceExporter, load_trace_settings

    exporter = TraceExporter(load_trace_settings())
    try:
        sent = exporter.forward_feedback()
    finally:
        exporter.close()
    print(f"traces: forwarded {sent} human assessment(s) as feedback")
    return 0


def register(sub) -> None:
    traces = sub.add_parser(
        "traces",
        help="rewarded sessions as MLflow traces; reviewers' verdicts in MLflow back as feedback",
        description="Log rewarded sessions (rewarded.v1) to MLflow as traces: one span per turn, the reward "
        "components and hack flags as assessments. A human assessment on a trace (thumbs up/down, or "
        "accept/reject/edit) is forwarded to feedback.v1 as that session's feedback. Settings: "
        "RATCHET_TRACES_* (traces_sample_rate, traces_experiment, traces_feedback_poll_s, ...) and "
        "RATCHET_MLFLOW_URL, RATCHET_KAFKA_BOOTSTRAP.",
    )
    actions = traces.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser("run", help="run the exporter until Ctrl-C/SIGTERM")
    p.set_defaults(func=run)
    p = actions.add_parser("forward", help="forward the new human assessments once, then exit")
    p.set_defaults(func=forward)
