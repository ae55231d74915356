"""A live canary on the real stack: a champion on trial gets a share of live traffic next to the one
before it, and the gate's canary judge confirms it or rolls it back from the rewarded sessions.

A better adapter (the gate tests' improver, trained on the training split) is confirmed against the
base model; then a random LoRA approved by hand is rolled back automatically to the improver: every
new session goes back to it, the decision log and MLflow record the verdict with its evidence, and
no request of the simulated traffic fails meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest

from gating.decisions import DecisionLog
from gating.gate import Gate
from gating.settings import load_settings as gate_settings
from learner.store import AdapterStore
from ops.pipeline import on_free_ports, pipeline, stage_env
from tests.conftest import free_port
from tests.e2e.clients import e2e_simulator, probe
from tests.e2e.test_loop import wait_for

CANARY_CONFIG = """
[gate]
canary = true
canary_margin = 0.1
canary_min_pairs = 8
canary_max_pairs = 80
canary_max_s = 900
suites = ["target"]
required_suites = ["target"]
poll_interval_s = 1

[serving]
canary_share = 0.5

[rewards]
join_wait_s = 5
"""


def entries(state: Path) -> list[dict]:
    path = state / "gate" / "decisions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def verdict_on(state: Path, version: str) -> dict | None:
    """The canary judge's entry on ``version``: its confirmation, or the rollback that names it."""
    for e in entries(state):
        if e["actor"] != "canary":
            continue
        if e["action"] == "canary" and e["version"] == version:
            return e
        if e["action"] == "rollback" and e["reasons"][0]["message"].startswith(f"{version} rolled back"):
            return e
    return None


def routes(state: Path) -> dict:
    path = state / "serving" / "routes.json"
    return json.loads(path.read_text()) if path.exists() else {}


@pytest.mark.timeout(1800)
def test_a_better_canary_is_confirmed_and_a_worse_one_rolled_back_under_live_traffic(
    lazy_stack, mlflow_url, vllm_url, model_dir, tmp_path, monkeypatch
):
    from tests.gating.candidates import build_all

    config = tmp_path / "canary.toml"
    config.write_text(CANARY_CONFIG)
    monkeypatch.setenv("RATCHET_CONFIG", str(config))
    monkeypatch.setenv("RATCHET_REGISTERED_MODEL", f"canary-policy-{time.time_ns()}")
    settings = dataclasses.replace(lazy_stack.settings, state_dir=tmp_path / "state", broker_port=free_port())
    ps = on_free_ports(join_wait_s=5)
    state = settings.state_dir
    candidates = build_all(model_dir, lazy_stack.settings.cache_dir / "test-candidates", log=print)
    store = AdapterStore(state / "adapters")
    improver = store.publish(candidates["improver"], base_model=settings.base_model).version
    stack = pipeline(settings, ps, progress=print)
    stages = ["broker", "ingest", "proxy", "rewards", "serving"]
    stop, traffic_stop, gate_thread = threading.Event(), threading.Event(), None

    def start_gate() -> threading.Thread:
        thread = threading.Thread(target=gate.run_forever, args=(stop,), daemon=True)
        thread.start()
        return thread

    try:
        stack.up(stages)
        for name, value in stage_env(settings, ps).items():
            monkeypatch.setenv(name, value)
        gate = Gate(gate_settings(), say=lambda m: print(f"gate: {m}", flush=True))
        assert gate.settings.canary and gate.settings.kafka_bootstrap == settings.kafka_bootstrap
        gate.override("approve", improver, reason="e2e: a better policy, on trial", actor="e2e")
        assert DecisionLog(gate.settings.decision_log_path).state().canary == improver
        gate_thread = start_gate()

        sim = e2e_simulator(
            ps,
            sim_concurrency=8,
            sim_mix={"calculator": "1"},
            sim_followup_max_tokens=0,
            sim_feedback_rate=0.0,
        )
        traffic = threading.Thread(
            target=lambda: asyncio.run(sim.run(duration_s=1500, until=traffic_stop.is_set)), daemon=True
        )
        traffic.start()

        # 1. the improver against the base model: confirmed on live traffic
        confirmed = wait_for(f"a canary verdict on {improver}", lambda: verdict_on(state, improver), 900, 2)
        assert confirmed["action"] == "canary" and confirmed["decision"] == "promote", confirmed
        assert confirmed["reasons"][0]["code"] == "canary_confirmed"
        assert confirmed["state"] == {"champion": improver, "challenger": None}
        assert confirmed["metrics"]["canary.pairs"] >= 8 and confirmed["metrics"]["canary.lower"] >= -0.1
        served_improver = [r for r in sim.results if r.adapter_version == improver]
        served_base = [r for r in sim.results if r.adapter_version is None]
        assert served_improver and served_base  # both sides of the trial served live sessions

        def serving_only(version: str) -> bool:
            r = routes(state)
            return r.get("aliases", {}).get("policy") == version and not r.get("canary")

        wait_for("the alias to move to the improver", lambda: serving_only(improver), 300, 1)

        # 2. a random LoRA approved by hand while the gate is down (so it is not evaluated first):
        # the restarted gate finds it on trial and rolls it back to the improver automatically
        stop.set()
        gate_thread.join(120)
        assert not gate_thread.is_alive()
        random_lora = store.publish(candidates["drifter"], base_model=settings.base_model).version
        gate.override("approve", random_lora, reason="e2e: a broken adapter, on trial", actor="e2e")
        stop.clear()
        gate_thread = start_gate()
        rolled = wait_for(
            f"a canary verdict on {random_lora}", lambda: verdict_on(state, random_lora), 900, 2
        )
        assert rolled["action"] == "rollback" and rolled["version"] == improver, rolled
        assert rolled["reasons"][0]["code"] == "canary_worse" and rolled["actor"] == "canary"
        assert rolled["state"]["champion"] == improver and "canary" not in rolled["state"]
        assert rolled["metrics"]["canary.upper"] < -0.1
        assert rolled["metrics"]["canary.score"] < rolled["metrics"]["canary.incumbent_score"]
        assert any(r.adapter_version == random_lora for r in sim.results)  # it was live before the verdict

        run = gate.registry.run(rolled["run_id"])
        assert run.data.tags["gate.actor"] == "canary" and run.data.tags["gate.action"] == "rollback"
        assert run.data.metrics["canary.pairs"] == rolled["metrics"]["canary.pairs"]
        # the log entry is written before the aliases move (gating/gate.py): they follow it
        wait_for(
            "the aliases to follow the rollback",
            lambda: gate.registry.aliases() == {"champion": improver},
            60,
            1,
        )
        wait_for("every new session back on the improver", lambda: serving_only(improver), 300, 1)
        for _ in range(6):  # new sessions: never the rolled-back version
            resp = probe(ps, "after")
            assert resp.status_code == 200 and resp.headers["X-Ratchet-Adapter-Version"] == improver
        traffic_stop.set()
        traffic.join(300)
        assert not sim.errors, sim.errors  # no failed request through two trials and their verdicts
    finally:
        stop.set()
        traffic_stop.set()
        if gate_thread is not None:
            gate_thread.join(60)
        stack.down(stages)
