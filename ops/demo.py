"""``ratchet demo``: the whole loop on the embedded defaults, then a report of what this run did.

1. ``ratchet up`` with the demo configuration (``ops/demo.toml``, unless
   ``RATCHET_CONFIG`` names another file);
2. the traffic simulator sends training-split sessions through the capture
   proxy for ``--minutes``; reward workers, the learner, the gate and the
   serving controller do their work meanwhile;
3. the simulator stops; the demo waits (at most ``--ledger-minutes``) until the
   learner's ledger has a line for every rewarded session of the run, then gives
   the learner and the gate ``--drain-minutes`` to publish its last updates (a
   version is due ``publish_every_s`` after its window opened) and decide on the
   newest candidate;
4. the run's base policy (the champion when it started, usually the base model)
   and every version promoted during it are measured afresh on the gate's
   held-out target suite (``--eval-tasks`` x ``--eval-samples``, new samples in
   ``runs/<id>/heldout/``; ``gating.heldout``);
5. ``runs/<id>/report.json`` and ``runs/<id>/report.png`` (``ops/report.py``)
   are written from this run's sessions and what the topics, the learner's
   ledger, the adapter store and the decision log hold of them and since the run
   began, and logged to MLflow. The stack stays up so MLflow can be browsed;
   ``ratchet down`` stops everything.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ops.report import Rewarded, RunData

REPO = Path(__file__).resolve().parent.parent
DEMO_CONFIG = REPO / "ops" / "demo.toml"


def read_topic(bootstrap: str, topic: str, idle_s: float = 3.0) -> list:
    """Every record of ``topic`` from the beginning (stops after ``idle_s`` without news; no end offsets)."""
    from contextlib import closing

    from ingest import topics

    out, idle_until = [], time.monotonic() + idle_s
    with closing(topics.read_topic(bootstrap, topic)) as batches:
        while time.monotonic() < idle_until:
            batch = next(batches)
            if batch:
                out += batch
                idle_until = time.monotonic() + idle_s
    return out


def rewarded_sessions(bootstrap: str, run_ids: set[str]) -> dict[str, Rewarded]:
    """The reward records of this run's sessions on ``rewarded.v1``: revision 0's, else the first seen."""
    from ingest import topics
    from ops.report import Rewarded

    out: dict[str, Rewarded] = {}
    for msg in read_topic(bootstrap, topics.REWARDED):
        try:
            rec = json.loads(msg.value())
        except ValueError:
            continue
        sid = rec.get("session_id", "")
        if sid not in run_ids or (sid in out and rec.get("revision", 0) != 0):
            continue
        out[sid] = Rewarded(msg.timestamp()[1] / 1000, float(rec["reward"]), bool(rec.get("flags")))
    return out


def read_ledger(path: Path, run_ids: set[str]) -> list[dict]:
    """The learner's ledger lines of this run's sessions."""
    from learner.checkpoint import read_ledger as read_all

    return [e for e in read_all(path) if e.get("session_id") in run_ids]


def wait_for_ledger(bootstrap: str, ledger: Path, run_ids: set[str], timeout_s: float, say) -> None:
    """Until the learner's ledger has a line for every rewarded session of the run (and no new
    reward came in since the last look), or ``timeout_s``; the learner closes a micro-batch at
    most ``batch_wait_s`` after its first record, and writes its lines after the update."""
    deadline, told, before = time.monotonic() + timeout_s, None, None
    while True:
        rewarded = set(rewarded_sessions(bootstrap, run_ids))
        missing = rewarded - {e["session_id"] for e in read_ledger(ledger, run_ids)}
        if not missing and rewarded == before:
            say(f"the learner's ledger holds all {len(rewarded)} rewarded sessions of this run")
            return
        if time.monotonic() >= deadline:
            say(f"{len(missing)} rewarded sessions of this run are still not in the learner's ledger after "
                f"{timeout_s / 60:g} minutes; the report counts them as unaccounted")  # fmt: skip
            return
        if len(missing) != told:
            say(f"waiting for the learner: {len(missing)} of {len(rewarded)} rewarded sessions of this run "
                "not yet in its ledger")  # fmt: skip
            told = len(missing)
        before = rewarded
        time.sleep(5)


def collect(stack_settings, started_at: float, ended_at: float, sim) -> RunData:
    """What the topics, the adapter store, the learner's ledger and the decision log hold for this run
    (``ops.report.scope`` keeps the run's part of the versions and decisions)."""
    from gating.decisions import DecisionLog
    from ingest import topics
    from learner.store import AdapterStore
    from ops.report import RunData, Served, live_success

    s = stack_settings
    data = RunData(started_at=started_at, ended_at=ended_at)
    data.served = {r.session_id: Served(r.ended_at, r.adapter_version) for r in sim.results}
    run_ids = set(data.served)
    for msg in read_topic(s.kafka_bootstrap, topics.SESSIONS):
        sid = (msg.key() or b"").decode()
        if sid in run_ids:
            data.sessions[sid] = msg.timestamp()[1] / 1000
    data.rewarded = rewarded_sessions(s.kafka_bootstrap, run_ids)
    store = AdapterStore(s.state_dir / "adapters")
    for version in store.versions():
        m = store.get(version).manifest
        data.versions.append(
            {
                "version": version,
                "parent": m.parent,
                "created_at": m.created_at,
                "updates": m.data_window.get("updates", 0),
            }
        )
    data.ledger = read_ledger(s.state_dir / "learner" / "ledger.jsonl", run_ids)
    data.decisions = DecisionLog(s.state_dir / "gate" / "decisions.jsonl").entries()
    honeypot = [r for r in sim.results if r.family == "honeypot"]
    data.honeypot_sessions, data.honeypot_shortcuts = len(honeypot), sum(r.shortcut for r in honeypot)
    calc = [r for r in sim.results if r.family == "calculator"]
    data.simulator = {
        "sessions": len(sim.results),
        "errors": dict(sim.errors),
        "calculator_success": round(sum(r.passed for r in calc) / len(calc), 3) if calc else None,
        "success_by_version": live_success(sim.results),
    }
    return data


def measure_heldout(data: RunData, stack_settings, run_dir: Path, tasks: int, samples: int, say) -> None:
    """Held-out success of the run's base policy and of each version it promoted, measured afresh on the
    gate's target suite (new samples under ``run_dir/heldout``, never the gate's cached results), into
    ``data.heldout``."""
    from gating.harness import HarnessError
    from gating.heldout import estimate, measure
    from gating.settings import load_settings as load_gate_settings
    from gating.suites import Suite
    from learner.store import BASE, AdapterStore
    from ops.model import prepare_model
    from ops.report import policies_to_measure

    s = stack_settings
    labels = policies_to_measure(data)
    store = AdapterStore(s.state_dir / "adapters")
    policies = {x: None if x == BASE else store.verify(x).path for x in labels}
    gate_settings = load_gate_settings()
    suite = gate_settings.load_suite("target", limited=False).limited(tasks)  # the gate's version of it
    suite = Suite(dataclasses.replace(suite.config, samples=samples), suite.tasks, suite.content_hash)
    data.heldout_suite, data.heldout_samples = suite.name, samples
    say(
        f"measuring held-out success afresh: {', '.join(labels)} on {len(suite.tasks)} {suite.name} "
        f"tasks x {samples} samples (minutes per policy on a CPU)"
    )
    try:
        scores = measure(
            policies,
            suite,
            s.vllm_url,
            s.base_model,
            run_dir / "heldout",
            model_dir=s.model_dir or prepare_model(s.cache_dir, progress=say),
            concurrency=gate_settings.concurrency,
            say=say,
            progress=True,
        )
    except HarnessError as exc:  # the report stands without the measurement, which it says
        say(f"could not measure held-out success ({exc}); the report has none")
        return
    for label, per_metric in scores.items():
        est = estimate(per_metric[f"{suite.name}.pass_at_1"])
        (lo, hi) = est["ci95"]
        data.heldout[label] = {"mean": est["mean"], "lo": lo, "hi": hi, "tasks": est["tasks"]}
        say(f"  {label}: held-out pass@1 {est['mean']} (95 % interval {lo}–{hi}, {est['tasks']} tasks)")


def settled(newest: str | None, decided: set[str], unpublished: int | None) -> bool:
    """Whether the run's last candidate is in: the learner has no trained update left unpublished
    (``unpublished``, from its /health; None: it did not answer, so only the gate is waited for) and
    the gate has decided on the newest version (or there is none)."""
    return not unpublished and (newest is None or newest in decided)


def learner_unpublished(health_url: str) -> int | None:
    """The learner's updates not yet in a published version, from its /health; None if it does not
    answer."""
    import httpx

    try:
        return int(httpx.get(health_url, timeout=5).json()["unpublished"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ratchet demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=float(os.environ.get("RATCHET_DEMO_MINUTES", 15)),
        help="how long the simulator sends traffic (default 15, or RATCHET_DEMO_MINUTES)",
    )
    parser.add_argument(
        "--drain-minutes",
        type=float,
        default=8.0,
        help="time after the ledger is complete for the learner's last version and its gate decision (default 8)",
    )
    parser.add_argument(
        "--ledger-minutes",
        type=float,
        default=10.0,
        help="after the traffic, at most this long for the learner's ledger to hold every rewarded "
        "session of the run (default 10: the learner trains what is not yet stale while the gate "
        "evaluates beside it)",
    )
    parser.add_argument(
        "--eval-tasks",
        type=int,
        default=48,
        help="held-out target tasks measured afresh (default 48; 0: all)",
    )
    parser.add_argument("--eval-samples", type=int, default=2, help="samples per held-out task (default 2)")
    parser.add_argument("--runs-dir", type=Path, default=REPO / "runs", help="where runs/<id>/ is written")
    args = parser.parse_args(argv)
    if args.eval_tasks < 0 or args.eval_samples < 1:
        parser.error("--eval-tasks must be >= 0 and --eval-samples >= 1")

    os.environ.setdefault("RATCHET_CONFIG", str(DEMO_CONFIG))
    from gating.decisions import DecisionLog
    from ingest.config import ConfigError
    from learner.store import AdapterStore
    from ops.config_reference import require_valid_config
    from ops.pipeline import load_settings, pipeline, routed_version
    from ops.report import log_report, write_report
    from ops.simulator import Simulator
    from ops.simulator import load_settings as load_sim_settings
    from ops.stack import StackError
    from ops.stack import load_settings as load_stack_settings

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    try:
        require_valid_config()
    except ConfigError as exc:
        print(f"ratchet demo: configuration error: {exc}", file=sys.stderr)
        return 2
    stack_settings, ps = load_stack_settings(), load_settings()
    stack = pipeline(stack_settings, ps, progress=say)
    say(f"starting the loop (state in {stack_settings.state_dir}, config {os.environ['RATCHET_CONFIG']})")
    try:
        stack.up()
    except StackError as exc:
        print(f"ratchet demo: {exc}", file=sys.stderr)
        return 1

    run_id = time.strftime("%Y%m%d-%H%M%S")
    sim = Simulator(
        load_sim_settings(
            proxy_url=f"http://{stack_settings.host}:{ps.proxy_port}",
            ingest_url=f"http://{stack_settings.host}:{ps.ingest_port}",
            sim_tenant=ps.tenant,
            sim_token=ps.tenant_token,
        ),
        progress=say,
    )
    started = time.time()
    say(f"simulating traffic for {args.minutes:g} minutes; MLflow UI at {stack_settings.mlflow_url}")
    asyncio.run(sim.run(duration_s=args.minutes * 60))
    say(sim.summary())

    run_ids = {r.session_id for r in sim.results}
    wait_for_ledger(
        stack_settings.kafka_bootstrap,
        stack_settings.state_dir / "learner" / "ledger.jsonl",
        run_ids,
        args.ledger_minutes * 60,
        say,
    )
    log = DecisionLog(stack_settings.state_dir / "gate" / "decisions.jsonl")
    store = AdapterStore(stack_settings.state_dir / "adapters")
    health_url = f"http://{stack_settings.host}:{ps.learner_health_port}/health"
    deadline = time.monotonic() + args.drain_minutes * 60
    say(
        f"up to {args.drain_minutes:g} minutes for the learner to publish its last updates "
        "and the gate to decide on the last candidate"
    )
    while time.monotonic() < deadline:
        newest = store.latest()
        if settled(
            newest.version if newest else None,
            {e.version for e in log.entries()},
            learner_unpublished(health_url),
        ):
            break
        time.sleep(5)
    ended = time.time()

    data = collect(stack_settings, started, ended, sim)
    run_dir = args.runs_dir / run_id
    measure_heldout(data, stack_settings, run_dir, args.eval_tasks, args.eval_samples, say)
    report = write_report(data, run_dir, run_id, stack_settings.mlflow_url)
    try:
        mlflow_run = log_report(report, run_dir, stack_settings.mlflow_url)
        say(f"report recorded in MLflow: experiment ratchet-demo, run {mlflow_run}")
    except Exception as exc:  # the report on disk stands; MLflow is where it is also shown
        say(f"could not record the report in MLflow ({exc}); it is in {run_dir}")
    say(f"serving version now: {routed_version(stack_settings, ps)}")
    print(
        json.dumps(
            {
                k: report[k]
                for k in (
                    "sessions_ingested",
                    "sessions_rewarded",
                    "sessions_trained",
                    "sessions_skipped",
                    "sessions_unaccounted",
                    "versions",
                    "promotions",
                    "rollbacks",
                    "heldout_by_version",
                    "served_share",
                    "gate_seconds_median",
                    "hack_rate",
                    "freshness_median_s",
                )
            },
            indent=2,
        )
    )
    for d in report["decisions"]:
        print(
            f"  {d['version']}: {d['decision']} at {d['time_s']:.0f}s — {'; '.join(d['reasons']) or 'all checks passed'}"
        )
    say(f"report: {run_dir / 'report.json'} and {run_dir / 'report.png'}")
    say(f"MLflow UI: {stack_settings.mlflow_url}   (stop everything with: ratchet down)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
