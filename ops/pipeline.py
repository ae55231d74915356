"""The whole loop as supervised processes: the stack plus every stage.

``ratchet up`` starts, in order, the broker, MLflow and vLLM (``ops.stack``; in
the production topology also S3 storage, PostgreSQL and a second vLLM replica),
then the ingest API, the capture proxy, a reward worker, the learner, the gate
and the serving controller, each as its own process with a PID file and a log
under the state folder. Every stage gets the same addresses through
``RATCHET_*`` variables, so one state folder holds one consistent loop.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from gating.records import create_decision_key
from ingest.config import load
from learner.store import BASE
from ops.stack import Component, Stack, StackSettings, free_port, http_ok
from ops.stack import load_settings as load_stack_settings


@dataclasses.dataclass(frozen=True)
class PipelineSettings:
    ingest_port: int = 18100  # the ingest API
    proxy_port: int = 18200  # the capture proxy
    rewards_metrics_port: int = 19101  # the reward worker's /metrics
    controller_metrics_port: int = 18300  # the serving controller's /metrics
    gate_port: int = 18400  # the gate's review API (passed on as RATCHET_REVIEW_PORT)
    learner_health_port: int = 18310  # the learner's /health and /metrics
    gate_health_port: int = 18410  # `ratchet gate run`'s /health and /metrics
    traces_health_port: int = 18510  # `ratchet traces run`'s /health and /metrics
    tenant: str = "demo"  # the tenant the simulator and the demo use
    tenant_token: str = "demo-token"  # that tenant's bearer token (ingest API and capture proxy)
    review_token: str = "review-token"  # bearer token of the gate's review API
    # bearer token of the capture proxy's GET /admin/state (the serving controller sends it); set for
    # the stages of the production topology only, as ops/deploy/ratchet.env.example sets it
    proxy_admin_token: str = "admin-token"
    join_wait_s: float = 20.0  # the reward worker's join wait in the loop


def load_settings(**overrides) -> PipelineSettings:
    return load(PipelineSettings, "pipeline", **overrides)


def on_free_ports(**overrides) -> PipelineSettings:
    """Settings with a free port for every stage: a private loop beside another (benchmarks, tests)."""
    fields = dataclasses.fields(PipelineSettings)
    return PipelineSettings(**{f.name: free_port() for f in fields if f.name.endswith("_port")} | overrides)


# The loop's stages in start order, each with the `ratchet` command its process runs.
STAGE_COMMANDS = {
    "ingest": ("ingest", "serve"),
    "proxy": ("proxy", "serve"),
    "rewards": ("rewards", "worker"),
    "learner": ("learner", "run"),
    "gate": ("gate", "run"),
    "review": ("gate", "serve"),
    "serving": ("serving", "run"),
    "traces": ("traces", "run"),
}
STAGES = tuple(STAGE_COMMANDS)


def stage_env(stack: StackSettings, ps: PipelineSettings) -> dict[str, str]:
    """The addresses every stage shares. Every replica serves the policy (the proxy and the serving
    controller get them all); the gate evaluates candidates on the first."""
    state = stack.state_dir
    from ops.model import prepare_model

    model_dir = stack.model_dir or prepare_model(stack.cache_dir, lambda m: None)
    env = {
        "RATCHET_STATE_DIR": str(state),
        "RATCHET_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "RATCHET_MLFLOW_URL": stack.mlflow_url,
        "RATCHET_GATE_VLLM_URL": stack.vllm_url,
        "RATCHET_VLLM_URLS": ",".join(stack.vllm_urls),
        "RATCHET_MODEL_DIR": str(model_dir),
        "RATCHET_BASE_MODEL": stack.base_model,
        "RATCHET_ADAPTER_STORE_DIR": str(state / "adapters"),
        "RATCHET_LEARNER_STATE_DIR": str(state / "learner"),
        "RATCHET_INGEST_PORT": str(ps.ingest_port),
        "RATCHET_INGEST_TOKENS": f"{ps.tenant}={ps.tenant_token}",
        "RATCHET_PROXY_PORT": str(ps.proxy_port),
        "RATCHET_PROXY_URLS": f"http://{stack.host}:{ps.proxy_port}",
        "RATCHET_REWARDS_METRICS_PORT": str(ps.rewards_metrics_port),
        "RATCHET_JOIN_WAIT_S": str(ps.join_wait_s),
        "RATCHET_CONTROLLER_METRICS_PORT": str(ps.controller_metrics_port),
        "RATCHET_GATE_DIR": str(state / "gate"),
        "RATCHET_REVIEW_PORT": str(ps.gate_port),
        "RATCHET_LEARNER_HEALTH_PORT": str(ps.learner_health_port),
        "RATCHET_GATE_HEALTH_PORT": str(ps.gate_health_port),
        "RATCHET_TRACES_HEALTH_PORT": str(ps.traces_health_port),
        "RATCHET_REVIEW_TOKEN": ps.review_token,
        # the gate signs champions with it and the serving controller serves only what it signed
        "RATCHET_DECISION_KEY_FILE": str(create_decision_key(decision_key_path(state))),
    }
    if stack.production:
        env["RATCHET_PROXY_ADMIN_TOKEN"] = ps.proxy_admin_token
    return env


def decision_key_path(state_dir: Path) -> Path:
    """The local stack's decision key, created on first use."""
    return state_dir / "secrets" / "decision.key"


def stages(ps: PipelineSettings) -> Callable[[Stack], list[Component]]:
    """The loop's stage processes, as the ``stages`` of :class:`ops.stack.Stack` (after the stack's own)."""

    def build(stack: Stack) -> list[Component]:
        s = stack.settings
        env = stage_env(s, ps)

        def stage(name: str, port: int, health: str | Callable[[str], bool], **extra) -> Component:
            url = f"http://{s.host}:{port}"
            argv = [sys.executable, "-m", "ops.cli", *STAGE_COMMANDS[name]]
            check = (lambda: health(url)) if callable(health) else (lambda: http_ok(f"{url}{health}"))
            return Component(name, argv, url, port, health=check, env=env, **extra)

        return [
            stage("ingest", ps.ingest_port, "/healthz"),
            stage("proxy", ps.proxy_port, "/health"),
            stage("rewards", ps.rewards_metrics_port, "/metrics"),
            stage("learner", ps.learner_health_port, "/health"),
            stage("gate", ps.gate_health_port, "/health"),
            stage("review", ps.gate_port, "/health"),
            stage("serving", ps.controller_metrics_port, serving_ready, start_timeout_s=120),
            stage("traces", ps.traces_health_port, "/health"),
        ]

    return build


def reconcile_passes(metrics: str) -> float:
    """``ratchet_serving_reconcile_passes_total`` in the serving controller's /metrics text (0 if absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "ratchet_serving_reconcile_passes_total":
                return sample.value
    return 0.0


def serving_ready(url: str) -> bool:
    """The serving controller is up once it has completed a reconcile pass. Before that the routes file
    may be an earlier run's, naming versions that a restarted vLLM no longer holds (the proxy would
    answer 503 for them), so traffic should not start."""
    try:
        resp = httpx.get(f"{url}/metrics", timeout=2.0)
    except httpx.HTTPError:
        return False
    try:
        return resp.status_code == 200 and reconcile_passes(resp.text) >= 1
    except ValueError:  # not a Prometheus text: something else answers on that port
        return False


def pipeline(
    stack_settings: StackSettings | None = None, ps: PipelineSettings | None = None, progress=None
) -> Stack:
    return Stack(
        stack_settings or load_stack_settings(), progress=progress, stages=stages(ps or load_settings())
    )


def routed_version(stack: StackSettings, ps: PipelineSettings) -> str | None:
    """The adapter version the proxy routes the policy alias to, or None when unreachable."""
    try:
        resp = httpx.get(
            f"http://{stack.host}:{ps.proxy_port}/v1/routes",
            headers={"Authorization": f"Bearer {ps.tenant_token}"},
            timeout=5,
        )
        resp.raise_for_status()
    except httpx.HTTPError:
        return None
    routes = resp.json()
    policy = routes.get("routes", routes).get("policy") if isinstance(routes, dict) else None
    if isinstance(policy, dict):
        policy = policy.get("adapter_version") or policy.get("version")
    return policy or BASE


def serving_report(state_dir: Path) -> dict:
    """The serving controller's last report (``<state>/serving/status.json``); empty before its first pass."""
    path = state_dir / "serving" / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def last_decisions(state_dir: Path, n: int = 5) -> list[dict]:
    path = state_dir / "gate" / "decisions.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines[-n:]
