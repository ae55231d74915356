"""What the end-to-end tests send through a running pipeline: simulated traffic and one probe request."""

from __future__ import annotations

import time

import httpx

from ops.pipeline import PipelineSettings
from ops.simulator import Simulator, SimulatorSettings


def e2e_simulator(ps: PipelineSettings, progress=print, **overrides) -> Simulator:
    """The traffic simulator pointed at this pipeline's proxy and ingest API, as its tenant; outcomes
    arrive after half a second. ``overrides`` are further ``SimulatorSettings`` fields."""
    settings = SimulatorSettings(
        proxy_url=f"http://127.0.0.1:{ps.proxy_port}",
        ingest_url=f"http://127.0.0.1:{ps.ingest_port}",
        sim_tenant=ps.tenant,
        sim_token=ps.tenant_token,
        sim_outcome_delay_s=0.5,
        **overrides,
    )
    return Simulator(settings, progress=progress)


def probe(ps: PipelineSettings, prefix: str = "e2e-probe") -> httpx.Response:
    """A two-token chat through the capture proxy as a new session; its adapter version is the
    ``X-Ratchet-Adapter-Version`` header."""
    return httpx.post(
        f"http://127.0.0.1:{ps.proxy_port}/v1/chat/completions",
        headers={
            "X-Ratchet-Session": f"{prefix}-{time.time_ns()}",
            "Authorization": f"Bearer {ps.tenant_token}",
        },
        json={"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        timeout=120,
    )
