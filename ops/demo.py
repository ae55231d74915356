"""``ratchet demo``: the whole loop on the embedded defaults, then a report that shows what it learned.

1. ``ratchet up`` with the demo configuration (``ops/demo.toml``, unless
   ``RATCHET_CONFIG`` names another file);
2. the traffic simulator sends training-split sessions through the capture
   proxy for ``--minutes``; reward workers, the learner, the gate and the
   serving controller do their work meanwhile;
3. the simulator stops; the loop gets ``--drain-minutes`` to finish the
   candidate in flight;
4. ``runs/<id>/report.json`` and ``runs/<id>/report.png`` are written from
   what the topics, the learner's ledger, the adapter store and the gate's
   decision log hold. The stack stays up so MLflow can be browsed; ``ratchet
   down`` stops everything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ingest.brokers import client_config

if TYPE_CHECKING:
    from ops.report import RunData

REPO = Path(__file__).resolve().parent.parent
DEMO_CONFIG = REPO / "ops" / "demo.toml"


def read_topic(bootstrap: str, topic: str, idle_s: float = 3.0) -> list:
    """Every record of ``topic`` from the beginning (stops after ``idle_s`` without news; no end offsets)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from ingest import topics

    consumer = Consumer(
        {
            **client_config(bootstrap),
            "group.id": f"ratchet-report-{time.time_ns()}",
            "enable.auto.commit": False,
        }
    )
    try:
        meta = consumer.list_topics(timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(meta.partitions)])
        out, idle_until = [], time.monotonic() + idle_s
        while time.monotonic() < idle_until:
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error() is not None:
                    continue
                if any(k == topics.REWARDED_MARKER_HEADER for k, _ in msg.headers() or ()):
                    continue
                out.append(msg)
                idle_until = time.monotonic() + idle_s
        return out
    finally:
        consumer.close()


def heldout_of(entry: dict, prefix: str = "") -> float | None:
    metrics = entry.get("metrics") or {}
    for key in (f"{prefix}target.pass@1", f"{prefix}target.pass_at_1", f"{prefix}target"):
        if key in metrics:
            return metrics[key]
    return None


def collect(stack_settings, started_at: float, ended_at: float, sim) -> RunData:
    from ingest import topics
    from learner.store import AdapterStore
    from ops.report import RunData

    s = stack_settings
    data = RunData(started_at=started_at, ended_at=ended_at)
    for msg in read_topic(s.kafka_bootstrap, topics.SESSIONS):
        sid = (msg.key() or b"").decode()
        if sid.startswith("sim-"):
            data.sessions[sid] = msg.timestamp()[1] / 1000
    for msg in read_topic(s.kafka_bootstrap, topics.REWARDED):
        try:
            rec = json.loads(msg.value())
        except ValueError:
            continue
        sid = rec.get("session_id", "")
        if sid not in data.sessions:
            continue
        if rec.get("revision", 0) == 0:
            data.rewards.append((msg.timestamp()[1] / 1000, float(rec["reward"])))
            if rec.get("flags"):
                data.hack_flagged += 1
        data.rewarded_ids.add(sid)

    store = AdapterStore(s.state_dir / "adapters")
    updates_to_version = []
    for version in store.versions():
        m = store.get(version).manifest
        data.versions.append({"version": version, "parent": m.parent, "created_at": m.created_at})
        updates_to_version.append((m.data_window.get("updates", 0), version))
    ledger = s.state_dir / "learner" / "ledger.jsonl"
    if ledger.exists():
        for line in ledger.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("outcome") not in ("trained", "amended") or entry.get("update") is None:
                continue
            version = next((v for u, v in updates_to_version if u >= entry["update"]), None)
            if version and entry["session_id"] not in data.trained:
                data.trained[entry["session_id"]] = version

    log = s.state_dir / "gate" / "decisions.jsonl"
    entries = (
        [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    )
    for e in entries:
        data.decisions.append(
            {
                "version": e["version"],
                "decision": e["decision"],
                "time": e["time"],
                "by": e.get("actor"),
                "champion": e.get("champion_before"),
                "reasons": [
                    r.get("message", str(r)) if isinstance(r, dict) else str(r) for r in e.get("reasons", [])
                ],
                "heldout_candidate": heldout_of(e),
                "heldout_champion": heldout_of(e, "champion."),
            }
        )
        if data.heldout_base is None and e.get("champion_before") in (None, "base"):
            data.heldout_base = heldout_of(e, "champion.")
    honeypot = [r for r in sim.results if r.family == "honeypot"]
    data.honeypot_sessions, data.honeypot_shortcuts = len(honeypot), sum(r.shortcut for r in honeypot)
    calc = [r for r in sim.results if r.family == "calculator"]
    data.simulator = {
        "sessions": len(sim.results),
        "errors": dict(sim.errors),
        "calculator_success": round(sum(r.passed for r in calc) / len(calc), 3) if calc else None,
    }
    return data


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
        help="time after the traffic for the newest candidate's gate decision (default 8)",
    )
    parser.add_argument("--runs-dir", type=Path, default=REPO / "runs", help="where runs/<id>/ is written")
    args = parser.parse_args(argv)

    os.environ.setdefault("RATCHET_CONFIG", str(DEMO_CONFIG))
    from ingest.config import ConfigError
    from learner.store import version_number
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

    log = stack_settings.state_dir / "gate" / "decisions.jsonl"
    store_dir = stack_settings.state_dir / "adapters" / "versions"
    deadline = time.monotonic() + args.drain_minutes * 60
    say(f"traffic stopped; up to {args.drain_minutes:g} minutes for the gate to decide on the last candidate")
    while time.monotonic() < deadline:
        versions = {p.name for p in store_dir.glob("v*")} if store_dir.exists() else set()
        decided = (
            {json.loads(x)["version"] for x in log.read_text().splitlines() if x.strip()}
            if log.exists()
            else set()
        )
        if versions and max(versions, key=version_number) in decided:  # the newest candidate is decided
            break
        time.sleep(5)
    ended = time.time()

    data = collect(stack_settings, started, ended, sim)
    run_dir = args.runs_dir / run_id
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
                    "versions",
                    "heldout",
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
