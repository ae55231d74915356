"""python -m ops.bench gate [--json FILE]: wall time of one candidate evaluation, by suite.

Runs the whole gate (every configured suite, the real vLLM and MLflow of the
local stack) on one candidate against the base model, in a fresh gate folder,
so nothing is cached. ``seconds_per_candidate`` is the whole evaluation (suites,
drift, MLflow records). The task suites of both policies share one request pool,
so ``by_suite`` splits that pool's wall time by each suite's and policy's share
of request time; drift is timed on its own. ``seconds_per_candidate_champion_cached``
leaves out the champion's share, which later evaluations against the same
champion reuse. Without ``--version`` the candidate is the adapter store's latest
version, or a freshly initialised LoRA adapter when the store is empty.

With ``--prefetch`` the champion is first measured the way ``ratchet gate run`` does
while no candidate waits (``champion_prefetch_seconds``); ``seconds_per_candidate``
is then the time from the candidate's arrival to its decision.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path


def _fresh_adapter(model_dir: Path, out: Path) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
    get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets)).save_pretrained(out)
    return out


def split_wall(timings: dict[str, dict[str, float]]) -> tuple[dict[str, dict[str, float]], dict]:
    """(seconds by suite and role, the target's rounds) from a gate's timings: the task suites'
    shared wall time split by each (suite, role)'s share of summed request seconds; drift as timed."""
    timings = dict(timings)
    wall = timings.pop("tasks_wall", {}).get("all", 0.0)
    rounds = timings.pop("target_rounds", {})
    busy = sum(v for name, t in timings.items() if name != "drift" for v in t.values()) or 1.0
    by_suite = {
        name: {who: round(wall * v / busy, 2) for who, v in t.items()} if name != "drift" else t
        for name, t in timings.items()
    }
    return by_suite, rounds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench gate", description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE", help="write the results here as JSON")
    parser.add_argument("--version", help="adapter version to evaluate (default: the store's latest)")
    parser.add_argument(
        "--max-tasks",
        type=int,
        help="cut every suite to this many tasks (default: the configured max_tasks_per_suite, so "
        "RATCHET_CONFIG=ops/demo.toml measures the demo's suites)",
    )
    parser.add_argument(
        "--prefetch",
        action="store_true",
        help="first measure the champion as `ratchet gate run` does while no candidate waits "
        "(timed apart, champion_prefetch_seconds), then time the candidate's evaluation",
    )
    args = parser.parse_args(argv)

    from gating.gate import Gate
    from learner.store import AdapterStore
    from ops.commands.gate import _settings

    settings = _settings()
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
        store = AdapterStore(settings.adapter_store_dir)
        version = args.version or (store.latest().version if store.latest() else None)
        if version is None:
            store = AdapterStore(Path(tmp) / "store")
            fresh = _fresh_adapter(settings.model_dir, Path(tmp) / "fresh")
            version = store.publish(fresh, base_model=settings.base_model).version
        name = f"bench-gate-{uuid.uuid4().hex[:8]}"
        settings = dataclasses.replace(
            settings,
            adapter_store_dir=store.root,
            gate_dir=Path(tmp) / "gate",
            results_dir=None,
            registered_model=name,
            gate_experiment=name,
            max_tasks_per_suite=settings.max_tasks_per_suite if args.max_tasks is None else args.max_tasks,
        )
        gate = Gate(settings, progress=True, say=lambda m: print(m, file=sys.stderr, flush=True))
        prefetch_s = None
        try:
            with contextlib.redirect_stdout(sys.stderr):  # MLflow prints run links: stdout is the JSON
                if args.prefetch:
                    start = time.monotonic()
                    while gate.prefetch():
                        pass
                    prefetch_s = round(time.monotonic() - start, 2)
                start = time.monotonic()
                entry = gate.evaluate(version)
                total = time.monotonic() - start
        finally:
            gate.close()
    by_suite, rounds = split_wall(gate.timings)
    champion_s = sum(t.get("champion", 0.0) for t in by_suite.values())
    result = {
        "candidate": version,
        "decision": entry.decision,
        "seconds_per_candidate": round(total, 2),
        "champion_prefetch_seconds": prefetch_s,
        # an estimate from request time; with --prefetch, seconds_per_candidate measures it
        "seconds_per_candidate_champion_cached": None if args.prefetch else round(total - champion_s, 2),
        "by_suite": by_suite,
        "target_rounds": rounds,
        "tasks_by_suite": {s.name: len(s.tasks) for s in gate.suites},
        "concurrency": settings.concurrency,
    }
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0
