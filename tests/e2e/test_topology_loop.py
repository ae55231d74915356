"""The whole loop on the production topology: the broker on S3 (SeaweedFS), MLflow on PostgreSQL with
its artifacts on S3, two vLLM replicas, every stage its own process configured through ``RATCHET_*``.

Sessions go through the capture proxy in two halves; between them the broker and MLflow are stopped
and started again. The learner's update spans both halves, so every stage that talks to them has to
reconnect by itself; nothing sent may be lost or counted twice."""

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections import Counter

import httpx
import pytest
from mlflow import MlflowClient

from ingest.topics import read_topic
from ops.pipeline import on_free_ports, pipeline, stage_env
from ops.stack import StackSettings, free_port, load_settings
from tests.e2e.clients import e2e_simulator, probe
from tests.e2e.test_loop import E2E_CONFIG, decisions, wait_for
from tests.ops.test_topology import PORTS, query

MODEL = "e2e-topology-policy"
INFRA = ["s3", "broker", "postgres", "mlflow", "vllm", "vllm2"]
STAGES = ["ingest", "proxy", "rewards", "learner", "gate", "review", "serving"]  # as tests/e2e/test_loop.py
HALF = 4  # sessions before the restarts and after them: one learner batch (E2E_CONFIG) spans both


def topic_ids(bootstrap: str, topic: str, sent: set[str], timeout_s: float = 120) -> Counter:
    """How often each (session id, revision) of the sessions ``sent`` occurs in ``topic`` (sessions
    have revision 0), read from the beginning until every session is there and then a quiet second more."""
    seen: Counter = Counter()
    deadline, quiet = time.monotonic() + timeout_s, 0
    for batch in read_topic(bootstrap, topic, poll_s=0.5):
        for message in batch:
            record = json.loads(message.value())
            if record["session_id"] in sent:
                seen[record["session_id"], record.get("revision", 0)] += 1
        quiet = quiet + 1 if not batch and {sid for sid, _ in seen} >= sent else 0
        if quiet >= 2 or time.monotonic() > deadline:
            return seen


def counts(settings: StackSettings, sent: set[str]) -> dict:
    return {
        "sessions": topic_ids(settings.kafka_bootstrap, "sessions.v1", sent),
        "rewarded": topic_ids(settings.kafka_bootstrap, "rewarded.v1", sent),
        "decisions": len(decisions(settings.state_dir)),
    }


def totals(found: dict) -> dict[str, int]:
    return {what: sum(n.values()) if isinstance(n, Counter) else n for what, n in found.items()}


def assert_once_each(found: dict, sent: set[str]) -> None:
    """Every session in sessions.v1 once, and rewarded once (revision 0; a later revision, from a
    signal that came after it, at most once too)."""
    assert found["sessions"] == Counter({(sid, 0): 1 for sid in sent}), found["sessions"]
    assert {sid for sid, revision in found["rewarded"] if revision == 0} == sent, found["rewarded"]
    assert set(found["rewarded"].values()) == {1}, found["rewarded"]


def restart(stack, name: str) -> None:
    pid = stack._owned_process(name).pid
    assert stack.stop(name)
    stack.up([name])
    assert stack._owned_process(name).pid != pid


def ratchet(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ops.cli", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **env},
    )


@pytest.mark.timeout(1500)
def test_the_loop_runs_on_the_production_topology_through_restarts(tmp_path, monkeypatch):
    started = time.monotonic()
    config = tmp_path / "e2e.toml"
    # One update of exactly one batch: the learner waits for all eight sessions, whatever the restarts take.
    config.write_text(E2E_CONFIG.replace("batch_wait_s = 60", "batch_wait_s = 900"))
    monkeypatch.setenv("RATCHET_CONFIG", str(config))
    monkeypatch.setenv("RATCHET_REGISTERED_MODEL", MODEL)
    settings = dataclasses.replace(
        load_settings(),
        state_dir=tmp_path / "state",
        topology="production",
        **{name: free_port() for name in PORTS},
    )
    ps = on_free_ports(join_wait_s=5)
    # `ratchet up --topology production` on these ports and this state folder; the test's own handle
    # on the same folder restarts components and stops everything at the end.
    cli_env = {f"RATCHET_{name.upper()}": str(getattr(settings, name)) for name in PORTS}
    cli_env |= {f"RATCHET_{f.name.upper()}": str(getattr(ps, f.name)) for f in dataclasses.fields(ps)}
    cli_env |= {"RATCHET_STATE_DIR": str(settings.state_dir)}
    stack = pipeline(settings, ps, progress=print)
    env = stage_env(settings, ps)
    assert env["RATCHET_VLLM_URLS"].split(",") == list(settings.vllm_urls) and len(settings.vllm_urls) == 2
    sim = e2e_simulator(ps, sim_concurrency=4, sim_group_size=HALF)
    try:
        up = ratchet(cli_env, "up", "--topology", "production", "--only", ",".join(INFRA + STAGES))
        assert up.returncode == 0, up.stderr[-5000:]
        print(f"up after {time.monotonic() - started:.0f}s")

        first = {r.session_id for r in asyncio.run(sim.run(max_sessions=HALF))}
        assert len(first) == HALF and not sim.errors, sim.errors
        before = counts(settings, first)
        assert_once_each(before, first)
        assert before["decisions"] == 0  # the learner waits for the second half

        restart(stack, "broker")  # its topics, offsets and groups are on S3
        restart(stack, "mlflow")  # its runs and registry are in PostgreSQL
        print(f"broker and MLflow restarted after {time.monotonic() - started:.0f}s")
        restarted = counts(settings, first)  # read back from the restarted broker
        assert_once_each(restarted, first)
        assert all(restarted["rewarded"][key] == 1 for key in before["rewarded"])
        assert restarted["decisions"] == before["decisions"]

        sent = first | {r.session_id for r in asyncio.run(sim.run(max_sessions=HALF))[HALF:]}
        assert len(sent) == 2 * HALF and not sim.errors, sim.errors
        decision = wait_for(
            "a gate decision", lambda: decisions(settings.state_dir), timeout_s=900, every_s=2
        )[0]
        version = decision["version"]
        print(f"{version}: {decision['decision']} after {time.monotonic() - started:.0f}s")
        assert decision["decision"] in ("promote", "reject") and decision["run_id"]

        # The decision is in MLflow, and MLflow keeps it in PostgreSQL.
        client = MlflowClient(tracking_uri=settings.mlflow_url, registry_uri=settings.mlflow_url)
        run = client.get_run(decision["run_id"])
        assert run.data.tags["gate.decision"] == decision["decision"]
        assert run.data.tags["gate.candidate"] == version
        assert query(
            settings, "SELECT value FROM tags WHERE run_uuid = %s AND key = 'gate.decision'", run.info.run_id
        ) == [(decision["decision"],)]
        if decision["decision"] == "reject":
            assert decision["reasons"], "a rejection names its reasons"
            out = ratchet(
                env, "gate", "approve", version, "--reason", "e2e: exercise the swap", "--by", "e2e"
            )
            assert out.returncode == 0, out.stderr
        champion = client.get_model_version_by_alias(MODEL, "champion")
        assert champion.tags["adapter_version"] == version and champion.tags["gate.decision"] == "promote"
        assert query(
            settings,
            "SELECT a.version, t.value FROM registered_model_aliases a JOIN model_version_tags t "
            "ON t.name = a.name AND t.version = a.version AND t.key = 'adapter_version' "
            "WHERE a.name = %s AND a.alias = 'champion'",
            MODEL,
        ) == [(int(champion.version), version)]

        # Both replicas serve it: each has it loaded and routed, and the proxy answers with it.
        def both_serve() -> bool:
            out = ratchet(cli_env, "status", "--json", "--topology", "production")
            status = json.loads(out.stdout)
            replicas = status["replicas"].get("replicas", []) if isinstance(status["replicas"], dict) else []
            return sorted(r["url"] for r in replicas if r["serves"] == version) == sorted(settings.vllm_urls)

        wait_for(f"both replicas to serve {version}", both_serve, timeout_s=600, every_s=3)
        for url in settings.vllm_urls:
            loaded = httpx.get(f"{url}/v1/models", timeout=30).json()["data"]
            assert any(m["id"].endswith(f"-{version}") for m in loaded), (url, loaded)

        def proxy_serves() -> bool:
            resp = probe(ps)
            assert resp.status_code == 200, resp.text
            return resp.headers["X-Ratchet-Adapter-Version"] == version

        wait_for(f"the proxy to answer with {version}", proxy_serves, timeout_s=120, every_s=1)
        status = json.loads(ratchet(cli_env, "status", "--json", "--topology", "production").stdout)
        rows = {r["component"]: r for r in status["components"]}
        assert status["topology"] == "production"
        assert all(rows[name]["healthy"] for name in INFRA + STAGES), rows

        # Nothing was lost across the restarts and nothing counted twice.
        after = counts(settings, sent)
        assert_once_each(after, sent)
        assert all(after["rewarded"][key] == 1 for key in before["rewarded"])
        assert after["decisions"] == before["decisions"] + 1 + (decision["decision"] == "reject")
        print(
            f"records of the sent sessions before the restarts {totals(before)}, at the end {totals(after)}"
        )
        print(f"the loop on the production topology took {time.monotonic() - started:.0f}s")
    finally:
        stack.down()
