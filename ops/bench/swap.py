"""Hot-swap latency: from a promotion to every replica serving the new version, against a restart.

Two vLLM replicas (the running stack's, ``--vllm-url``, and a private one this
benchmark starts), the capture proxy (``ratchet proxy serve``) and the serving
controller (``ratchet serving run``) run as their own processes, as in
production, over a private broker and a private adapter store. Concurrent
clients send single-turn sessions to the proxy's ``policy`` alias throughout.
Each swap publishes a new adapter version, moves the MLflow ``champion``
alias to it, and times until the proxy routes the alias to it on every
replica (loaded, hash-checked, probe-verified). The first promotion (which
loads the probe's base model) is a warm-up and is not counted.

The alternative users have today is measured in the same run: restart the
private vLLM replica and load the new adapter into it, timed until the
adapter's first completion. ``ratio`` = restart_s / p50_s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import numpy as np


def write_random_adapter(model_dir: Path, out_dir: Path, seed: int, rank: int = 8) -> Path:
    """A LoRA adapter with random weights on every q_proj, in PEFT's file layout."""
    from safetensors.numpy import save_file

    config = json.loads((model_dir / "config.json").read_text())
    hidden = config["hidden_size"]
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        prefix = f"base_model.model.model.layers.{layer}.self_attn.q_proj"
        tensors[f"{prefix}.lora_A.weight"] = rng.normal(0, 0.05, (rank, hidden)).astype(np.float32)
        tensors[f"{prefix}.lora_B.weight"] = rng.normal(0, 0.05, (hidden, rank)).astype(np.float32)
    out_dir.mkdir(parents=True)
    save_file(tensors, out_dir / "adapter_model.safetensors")
    adapter_config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank,
        "lora_dropout": 0.0, "target_modules": ["q_proj"], "bias": "none",
        "base_model_name_or_path": str(model_dir),
    }  # fmt: skip
    (out_dir / "adapter_config.json").write_text(json.dumps(adapter_config))
    return out_dir


TENANT, TOKEN = "bench", "bench-swap-token"  # the proxy's one tenant in this benchmark


class Load:
    """Clients sending single-turn sessions to the proxy's alias; counts answers and failures."""

    def __init__(self, url: str, workers: int):
        self.url, self.ok, self.failed, self.reasons = url, 0, 0, []
        self.stop, self.lock = threading.Event(), threading.Lock()
        self.threads = [threading.Thread(target=self._work, daemon=True) for _ in range(workers)]
        for t in self.threads:
            t.start()

    def _work(self) -> None:
        body = {"model": "policy", "prompt": "The weather today is", "max_tokens": 4, "temperature": 0}
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=self.url, headers=auth, timeout=300) as client:
            while not self.stop.is_set():
                sid = f"bench-swap-{uuid.uuid4().hex[:16]}"
                try:
                    resp = client.post("/v1/completions", headers={"X-Ratchet-Session": sid}, json=body)
                    good = resp.status_code == 200
                    reason = None if good else f"{resp.status_code} {resp.text[:200]}"
                    if good:
                        client.post(f"/v1/sessions/{sid}/end", json={"status": "completed"})
                except httpx.HTTPError as exc:
                    good, reason = False, repr(exc)
                with self.lock:
                    self.ok += good
                    self.failed += not good
                    if reason and len(self.reasons) < 10:
                        self.reasons.append(reason)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(300)


def start_process(
    argv: list[str], env: dict, log: Path, ready_url: str, timeout_s: float
) -> subprocess.Popen:
    fh = log.open("ab")
    proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    fh.close()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(ready_url, timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.terminate()
            raise RuntimeError(f"{argv[3:5]} did not come up; log {log}:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def wait_served(proxy_url: str, version: str, timeout_s: float) -> float:
    """Seconds until the proxy routes the alias to ``version`` on every replica."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        state = httpx.get(f"{proxy_url}/admin/state", timeout=10).json()
        if state["aliases"].get("policy") == version and all(
            r["healthy"] and version in (r["versions"] or ()) for r in state["replicas"]
        ):
            return time.monotonic() - start
        time.sleep(0.02)
    raise RuntimeError(f"{version} was not served on every replica within {timeout_s:.0f}s")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench swap", description=__doc__)
    parser.add_argument("--json", metavar="FILE", help="write the results here as JSON")
    parser.add_argument("--swaps", type=int, default=20, help="measured swaps (default 20)")
    parser.add_argument("--concurrency", type=int, default=3, help="concurrent clients (default 3)")
    parser.add_argument(
        "--interval", type=float, default=2.0, help="controller reconcile interval (default 2)"
    )
    parser.add_argument("--vllm-url", help="the first replica (default: the running stack's vLLM)")
    parser.add_argument("--mlflow-url", help="MLflow (default: the running stack's)")
    args = parser.parse_args(argv)

    from mlflow import MlflowClient

    from learner.store import AdapterStore
    from ops.bench import exit_on_sigterm
    from ops.model import prepare_model
    from ops.stack import QUIET_ENV, Stack, StackSettings, free_port, load_settings, vllm_healthy
    from serving.vllm_admin import VLLMClient, VLLMError

    base = load_settings()
    replica_1 = (args.vllm_url or base.vllm_url).rstrip("/")
    mlflow_url = args.mlflow_url or base.mlflow_url
    if not vllm_healthy(replica_1):
        print(f"no healthy vLLM at {replica_1}; start the stack first (ratchet stack up)", file=sys.stderr)
        return 1
    root = Path(tempfile.mkdtemp(prefix="ratchet-bench-swap-"))
    note = lambda msg: print(f"[swap] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    exit_on_sigterm(note, "the private stack and the load")
    private = Stack(
        StackSettings(
            state_dir=root / "stack", cache_dir=base.cache_dir, vllm_python=base.vllm_python,
            broker_port=free_port(), vllm_port=free_port(), mlflow_port=free_port(), s3_port=free_port(),
            vllm_cpu_bind=str((os.cpu_count() or 1) - 1),  # "auto" would pin it to core 0, like replica 1
        ),
        progress=note,
    )  # fmt: skip
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    registry, name = MlflowClient(mlflow_url), f"ratchet-bench-swap-{uuid.uuid4().hex[:8]}"
    procs: list[subprocess.Popen] = []
    load = None
    try:
        private.up(["broker"])
        started = time.monotonic()
        private.up(["vllm"])
        cold_start_s = time.monotonic() - started
        replica_2 = private.settings.vllm_url
        model_dir = prepare_model(base.cache_dir)
        store = AdapterStore(root / "adapters")
        for i in range(args.swaps + 1):
            store.publish(write_random_adapter(model_dir, root / "src" / f"a{i}", seed=i), base.base_model)
        registry.create_registered_model(name)
        run_id = registry.create_run(registry.get_experiment_by_name("Default").experiment_id).info.run_id

        proxy_port = free_port()
        proxy_url = f"http://127.0.0.1:{proxy_port}"
        env = {
            **os.environ, **QUIET_ENV,
            "RATCHET_STATE_DIR": str(root / "state"), "RATCHET_KAFKA_BOOTSTRAP": private.settings.kafka_bootstrap,
            "RATCHET_ADAPTER_PREFIX": prefix, "RATCHET_BASE_MODEL": base.base_model,
            "RATCHET_VLLM_URLS": f"{replica_1},{replica_2}",
            "RATCHET_PROXY_URLS": proxy_url, "RATCHET_ADAPTER_STORE_DIR": str(store.root),
            "RATCHET_MODEL_DIR": str(model_dir), "RATCHET_MLFLOW_URL": mlflow_url,
            "RATCHET_REGISTERED_MODEL": name, "RATCHET_RECONCILE_INTERVAL_S": str(args.interval),
            "RATCHET_CONTROLLER_METRICS_PORT": "0", "RATCHET_INGEST_TOKENS": f"{TENANT}={TOKEN}",
        }  # fmt: skip
        cli = [sys.executable, "-m", "ops.cli"]
        procs.append(
            start_process(
                [*cli, "proxy", "serve", "--port", str(proxy_port)],
                env,
                root / "proxy.log",
                f"{proxy_url}/health",
                60,
            )  # fmt: skip
        )
        controller = subprocess.Popen(
            [*cli, "serving", "run"], env=env, stdout=(root / "controller.log").open("ab"),
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        procs.append(controller)
        load = Load(proxy_url, args.concurrency)

        versions = store.versions()
        times: list[float] = []
        for i, version in enumerate(versions):
            number = registry.create_model_version(
                name, source=f"runs:/{run_id}/adapter", run_id=run_id, tags={"adapter_version": version}
            ).version
            registry.set_registered_model_alias(name, "champion", number)
            took = wait_served(proxy_url, version, 300)
            if i == 0:
                note(f"warm-up {version}: {took:.2f}s")
                continue
            times.append(took)
            note(
                f"swap {i}/{args.swaps} to {version}: {took:.2f}s ({load.ok} ok, {load.failed} failed so far)"
            )
        load.close()
        requests, errors, reasons = load.ok + load.failed, load.failed, load.reasons

        # The alternative: restart the replica with the new adapter, until its first completion.
        note("restarting the private replica with the newest adapter (the alternative)")
        controller.terminate()
        controller.wait(60)
        started = time.monotonic()
        private.stop("vllm")
        private.up(["vllm"])
        client = VLLMClient(replica_2)
        newest = versions[-1]
        client.load_adapter(f"restart-{newest}", store.path_of(newest))
        client.complete(f"restart-{newest}", "The weather today is", max_tokens=4)
        restart_s = time.monotonic() - started
        client.close()
    finally:
        if load is not None:
            load.close()
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(60)
        private.down()
        client = VLLMClient(replica_1)
        with contextlib.suppress(httpx.HTTPError, VLLMError):  # leave the shared replica as it was
            for model in client.models():
                if model.startswith(f"{prefix}-"):
                    client.unload_adapter(model)
        client.close()
        if name in {m.name for m in registry.search_registered_models(f"name = '{name}'")}:
            registry.delete_registered_model(name)
        shutil.rmtree(root, ignore_errors=True)

    p50, p99 = (float(np.percentile(times, q)) for q in (50, 99))
    result = {
        "p50_s": round(p50, 3),
        "p99_s": round(p99, 3),
        "error_rate": errors / requests if requests else None,
        "restart_s": round(restart_s, 3),
        "ratio": round(restart_s / p50, 1),
        "swaps": len(times),
        "swap_s": [round(t, 3) for t in times],
        "requests": requests,
        "errors": errors,
        "error_examples": reasons,
        "replicas": 2,
        "concurrency": args.concurrency,
        "reconcile_interval_s": args.interval,
        "private_replica_cold_start_s": round(cold_start_s, 1),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0
