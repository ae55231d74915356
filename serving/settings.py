"""Settings of the capture proxy, read with ``ingest.config.load(ProxySettings, "proxy")``."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path


def _default_state_dir() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "ratchet"


@dataclasses.dataclass(frozen=True)
class ProxySettings:
    vllm_url: str = "http://127.0.0.1:18000"
    kafka_bootstrap: str = "127.0.0.1:19092"
    proxy_host: str = "127.0.0.1"
    proxy_port: int = 18200
    base_model: str = "smollm2-135m-instruct"  # the base model's served name on vLLM
    policy_alias: str = "policy"  # the model name clients ask for to get the current policy
    policy_version: str | None = None  # adapter version the alias routes to; None: the base model
    adapter_prefix: str = "policy"  # version vN is served on vLLM as "<adapter_prefix>-vN"
    routing_file: Path | None = None  # JSON {"alias": "vN" or null, ...}; overrides policy_version
    default_tenant: str = "default"  # when neither X-Ratchet-Tenant nor the end request names one
    session_idle_timeout_s: float = 1800.0  # an open session idle this long is closed as "timeout"
    state_dir: Path = dataclasses.field(default_factory=_default_state_dir)
    vllm_timeout_s: float = 300.0
    delivery_timeout_s: float = 10.0

    @property
    def journal_dir(self) -> Path:
        """One append-only JSONL file per open session."""
        return self.state_dir / "proxy" / "journal"
