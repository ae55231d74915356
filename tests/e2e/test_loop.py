"""The whole loop on the real stack: traffic -> rewards -> learner -> gate -> hot-swap into vLLM."""

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ops.pipeline import PipelineSettings, pipeline, stage_env
from tests.conftest import free_port
from tests.e2e.clients import e2e_simulator, probe

E2E_CONFIG = """
[learner]
learning_rate = 0.001
batch_sessions = 8
batch_wait_s = 60
publish_every_updates = 1
publish_every_s = 60
torch_threads = 1

[rewards]
join_wait_s = 5

[gate]
suites = ["target"]
required_suites = ["target"]
max_tasks_per_suite = 6
concurrency = 4
poll_interval_s = 1
"""


def wait_for(what: str, check, timeout_s: float, every_s: float = 1.0):
    """Poll ``check`` until it returns something truthy; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)  # polling interval of a condition with a deadline, not a synchronisation guess
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")


def decisions(state_dir: Path) -> list[dict]:
    log = state_dir / "gate" / "decisions.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.mark.timeout(1500)
def test_loop_reaches_a_gate_decision_and_a_hot_swap(lazy_stack, mlflow_url, vllm_url, tmp_path, monkeypatch):
    config = tmp_path / "e2e.toml"
    config.write_text(E2E_CONFIG)
    monkeypatch.setenv("RATCHET_CONFIG", str(config))
    monkeypatch.setenv("RATCHET_REGISTERED_MODEL", f"e2e-policy-{time.time_ns()}")
    # Its own broker and state folder (other tests' traffic stays out of this loop); the session's vLLM and MLflow.
    settings = dataclasses.replace(lazy_stack.settings, state_dir=tmp_path / "state", broker_port=free_port())
    ps = PipelineSettings(
        ingest_port=free_port(),
        proxy_port=free_port(),
        rewards_metrics_port=free_port(),
        controller_metrics_port=free_port(),
        gate_port=free_port(),
        learner_health_port=free_port(),
        gate_health_port=free_port(),
        join_wait_s=5,
    )
    stack = pipeline(settings, ps, progress=print)
    state = settings.state_dir
    stages = ["broker", "ingest", "proxy", "rewards", "learner", "gate", "review", "serving"]
    try:
        stack.up(stages)
        sim = e2e_simulator(ps, sim_concurrency=4)
        results = asyncio.run(sim.run(max_sessions=8))
        assert len(results) == 8 and not sim.errors

        first = wait_for("a gate decision", lambda: decisions(state), timeout_s=600, every_s=2)[0]
        version = first["version"]
        assert first["decision"] in ("promote", "reject") and first["run_id"]
        if first["decision"] == "reject":
            assert first["reasons"], "a rejection names its reasons"
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "ops.cli",
                    "gate",
                    "approve",
                    version,
                    "--reason",
                    "e2e: exercise the swap",
                    "--by",
                    "e2e",
                ],
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, **stage_env(settings, ps)},
            )
            assert out.returncode == 0, out.stderr

        # The controller loads the champion into vLLM and flips the proxy's route.
        def served_version():
            try:
                resp = probe(ps)
            except httpx.HTTPError:  # a busy CPU replica may time out mid-swap; ask again
                return False
            assert resp.status_code == 200, resp.text  # a swap never fails a request
            return resp.headers["X-Ratchet-Adapter-Version"] == version

        wait_for(f"the proxy to serve {version}", served_version, timeout_s=600, every_s=2)
        loaded = httpx.get(f"{vllm_url}/v1/models", timeout=30).json()["data"]
        assert any(m["id"].endswith(f"-{version}") for m in loaded)
    finally:
        stack.down(stages)
