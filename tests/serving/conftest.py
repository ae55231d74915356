"""Fixtures of the serving tests: a capture proxy served over real HTTP, and reading records back."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
import uvicorn
from confluent_kafka import Consumer, TopicPartition

from ingest.contract import Record, parse
from serving.settings import ProxySettings
from tests.conftest import free_port


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
        vllm_url=vllm_url,
        kafka_bootstrap=broker,
        base_model=served_model,
        state_dir=tmp_path / "state",
        vllm_timeout_s=120.0,
    )


def write_lora_adapter(model_dir, out_dir, seed: int = 0, rank: int = 8):
    """A small random LoRA adapter on every q_proj, in PEFT's file layout (no model load needed)."""
    import json

    import numpy as np
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
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": ["q_proj"],
        "bias": "none",
        "base_model_name_or_path": str(model_dir),
    }
    (out_dir / "adapter_config.json").write_text(json.dumps(adapter_config))
    return out_dir
