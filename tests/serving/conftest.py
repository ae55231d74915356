"""Fixtures of the serving tests: a capture proxy served over real HTTP, and reading records back."""

from __future__ import annotations

import contextlib
import os
import threading
import time

import pytest
import uvicorn
from confluent_kafka import Consumer, TopicPartition

from ingest.contract import Record, parse
from serving.settings import ProxySettings
from tests.conftest import free_port

# The proxy's tenants and their bearer tokens (RATCHET_INGEST_TOKENS); AUTH is acme's.
TOKENS = {"acme": "acme-proxy-token", "beta": "beta-proxy-token"}
AUTH = {"Authorization": f"Bearer {TOKENS['acme']}"}
BETA = {"Authorization": f"Bearer {TOKENS['beta']}"}


@contextlib.contextmanager
def serving(app, timeout_s: float = 30.0):
    """Run ``app`` with uvicorn on a free 127.0.0.1 port; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the proxy did not start"
        thread.join(0.01)  # returns early if the server thread dies
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout_s)


def read_record(bootstrap: str, model: type[Record], topic: str, partition: int, offset: int) -> Record:
    """The record at ``topic[partition]@offset``, parsed with the contract."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "serving-tests", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None and message.offset() == offset:
                return parse(model, message.value())
    finally:
        consumer.close()
    raise AssertionError(f"no record at {topic}[{partition}]@{offset}")


@pytest.fixture
def proxy_settings(tmp_path, vllm_url, broker, served_model) -> ProxySettings:
    return ProxySettings(
        vllm_urls=(vllm_url,),
        kafka_bootstrap=broker,
        base_model=served_model,
        state_dir=tmp_path / "state",
        vllm_timeout_s=120.0,
        ingest_tokens=TOKENS,
    )


def write_lora_adapter(model_dir, out_dir, seed: int = 0, rank: int = 8):
    """A small random LoRA adapter on every q_proj, in PEFT's file layout (no model load needed)."""
    from ops.bench.swap import write_random_adapter

    return write_random_adapter(model_dir, out_dir, seed=seed, rank=rank)


# --- the second vLLM replica and the registry, for the controller's tests ------------------------


class PrivateReplica:
    """A vLLM replica of this test session only (the shared dev replica is never stopped or killed).

    It starts in the background as soon as collection shows a test needs it."""

    def __init__(self, state_dir):
        from ops.stack import Stack, StackSettings, load_settings

        base = load_settings()
        settings = StackSettings(
            state_dir=state_dir,
            cache_dir=base.cache_dir,
            vllm_python=base.vllm_python,
            vllm_port=free_port(),
            broker_port=free_port(),
            mlflow_port=free_port(),
            s3_port=free_port(),
            vllm_start_timeout_s=max(base.vllm_start_timeout_s, 300.0),
            # "auto" pins every replica's threads to core 0: give this one the last core instead
            vllm_cpu_bind=str((os.cpu_count() or 1) - 1),
        )
        self.stack = Stack(settings, progress=lambda m: print(f"private replica: {m}", flush=True))
        self.url = settings.vllm_url
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, name="private-replica", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            self.stack.up(["vllm"])
        except BaseException as exc:  # surfaced by ready()
            self._error = exc

    def ready(self) -> str:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.url

    def kill(self) -> None:
        """kill -9 the replica's whole process group (API server and engine), then remove the shared
        memory segments it can no longer clean up itself."""
        import signal
        from pathlib import Path

        proc = self.stack._owned_process("vllm")
        assert proc is not None, "the private replica is not running"
        segments = set()
        for p in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(OSError):
                maps = Path(f"/proc/{p.pid}/maps").read_text()
                segments |= {line.split()[-1] for line in maps.splitlines() if "/dev/shm/" in line}
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        for segment in segments:
            Path(segment).unlink(missing_ok=True)

    def restart(self) -> None:
        self.stack.up(["vllm"])

    def stop(self) -> None:
        self._thread.join()
        self.stack.down(["vllm"])


_private: dict[str, PrivateReplica] = {}


def pytest_collection_finish(session) -> None:
    if any("private_replica" in getattr(item, "fixturenames", ()) for item in session.items):
        import tempfile
        from pathlib import Path

        _private["replica"] = PrivateReplica(Path(tempfile.mkdtemp(prefix="ratchet-replica-")))


def pytest_sessionfinish(session) -> None:
    replica = _private.pop("replica", None)
    if replica is not None:
        import shutil

        replica.stop()
        if session.testsfailed:
            print(f"\nprivate replica's log kept: {replica.stack.log_path('vllm')}")
        else:
            shutil.rmtree(replica.stack.state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def private_replica() -> PrivateReplica:
    replica = _private.get("replica")
    assert replica is not None, "the private replica was not started at collection"
    replica.ready()
    return replica


class Registry:
    """The gate's side of the MLflow registry: model versions tagged adapter_version, the champion alias."""

    def __init__(self, mlflow_url: str, name: str):
        from mlflow import MlflowClient

        self.client = MlflowClient(mlflow_url)
        self.name = name
        self.client.create_registered_model(name)
        experiment = self.client.get_experiment_by_name("Default")
        self.run_id = self.client.create_run(experiment.experiment_id).info.run_id
        self.numbers: dict[str, str] = {}

    def promote(self, version: str) -> None:
        if version not in self.numbers:
            registered = self.client.create_model_version(
                self.name, source=f"runs:/{self.run_id}/adapter", run_id=self.run_id,
                tags={"adapter_version": version},
            )  # fmt: skip
            self.numbers[version] = registered.version
        self.client.set_registered_model_alias(self.name, "champion", self.numbers[version])

    def delete(self) -> None:
        self.client.delete_registered_model(self.name)
        self.client.delete_run(self.run_id)
