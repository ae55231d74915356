"""ratchet learner run|status"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
from collections import Counter


def _settings(for_training: bool):
    """The learner's settings; for training, the local stack fills in the model and MLflow when they are
    not configured at all (``RATCHET_MLFLOW_URL=none`` runs without MLflow)."""
    from ingest.config import is_configured
    from learner.settings import load_settings

    settings = load_settings()
    if for_training:
        from ops.model import prepare_model
        from ops.stack import load_settings as stack_settings

        stack = stack_settings()
        if settings.model_dir is None:
            settings = dataclasses.replace(
                settings, model_dir=stack.model_dir or prepare_model(stack.cache_dir)
            )
        if settings.mlflow_url is None and not is_configured("mlflow_url", "learner"):
            settings = dataclasses.replace(settings, mlflow_url=stack.mlflow_url)
    return settings


def run(args: argparse.Namespace) -> int:
    from learner import checkpoint
    from learner.checkpoint import read_ledger
    from learner.loop import run as run_learner
    from learner.positions import StorageMismatch
    from learner.store import AdapterStore

    settings = _settings(for_training=args.action == "run")
    if args.action == "status":
        ckpt = checkpoint.latest(settings.learner_state_dir)
        ledger_path = settings.learner_state_dir / "ledger.jsonl"
        outcomes = Counter(e["outcome"] for e in read_ledger(ledger_path))
        store = AdapterStore(settings.adapter_store_dir)
        status = {
            "checkpoint": ckpt.state.checkpoint if ckpt else None,
            "updates": ckpt.state.updates if ckpt else 0,
            "offsets": ckpt.state.offsets if ckpt else {},
            "records": ckpt.state.records if ckpt else 0,
            "outcomes": dict(outcomes),
            "versions": store.versions(),
        }
        print(json.dumps(status, indent=2, default=str))
        return 0
    print(
        f"learner: topic {settings.rewarded_topic} on {settings.kafka_bootstrap}, model {settings.model_dir}, "
        f"store {settings.adapter_store_dir}, state {settings.learner_state_dir}",
        file=sys.stderr,
    )
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        run_learner(
            settings, args.max_batches, args.idle_exit, lambda m: print(m, flush=True), lambda: bool(stopping)
        )
    except StorageMismatch as exc:
        print(f"learner: refusing to start: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


def register(sub) -> None:
    learner = sub.add_parser(
        "learner",
        help="the rolling learner: rewarded sessions in, LoRA adapter versions out",
        description="Consume rewarded.v1, train the LoRA adapter with off-policy-corrected updates, checkpoint "
        "with the consumer offsets, and publish candidate versions to the adapter store. Settings: RATCHET_* "
        "variables or the [learner] table of RATCHET_CONFIG (e.g. RATCHET_LORA_RANK, RATCHET_LEARNING_RATE, "
        "RATCHET_PUBLISH_EVERY_UPDATES, RATCHET_ADAPTER_STORE_DIR, RATCHET_MLFLOW_URL).",
    )
    actions = learner.add_subparsers(dest="action", required=True, metavar="ACTION")
    run_parser = actions.add_parser(
        "run", help="run the learner (SIGTERM stops it after the current micro-batch)"
    )
    run_parser.add_argument(
        "--max-batches", type=int, default=None, help="stop after this many micro-batches"
    )
    run_parser.add_argument(
        "--idle-exit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this long without records",
    )
    actions.add_parser(
        "status", help="the latest checkpoint, ledger outcome counts and published versions (JSON)"
    )
    learner.set_defaults(func=run)
