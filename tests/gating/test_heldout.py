"""Fresh held-out measurement: the bootstrap helpers, the loading and caching (a mock vLLM answers),
and base model vs a random adapter on the real vLLM."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import httpx
import pytest

from gating.heldout import bootstrap_interval, estimate, measure
from gating.suites import Suite, load_suite
from gating.tasks import tool_call
from learner.store import BASE
from ops.bench.swap import write_random_adapter


def test_bootstrap_interval_brackets_the_mean_and_narrows_with_more_tasks():
    few = [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    low, high = bootstrap_interval(few, seed=3)
    assert 0.2 < low < 0.6 < high < 0.95
    assert bootstrap_interval(few, seed=3) == (low, high)  # seeded
    many_low, many_high = bootstrap_interval(few * 40)
    assert many_high - many_low < (high - low) / 3
    assert bootstrap_interval([0.5] * 7) == (0.5, 0.5)
    assert all(math.isnan(x) for x in bootstrap_interval([]))


def test_a_wider_confidence_gives_a_wider_interval():
    values = [0.0, 0.5, 1.0, 1.0, 0.0, 0.5, 1.0, 0.0]
    lo90, hi90 = bootstrap_interval(values, confidence=0.90)
    lo99, hi99 = bootstrap_interval(values, confidence=0.99)
    assert lo99 < lo90 and hi99 > hi90


def test_estimate_is_the_mean_over_tasks_with_its_interval():
    est = estimate({"a": 1.0, "b": 0.0, "c": 0.5, "d": 1.0})
    assert est["mean"] == 0.625 and est["tasks"] == 4
    assert est["ci95"][0] < 0.625 < est["ci95"][1]
    assert estimate({}) == {"mean": None, "ci95": [None, None], "tasks": 0}


def test_the_learning_bench_uses_the_same_helpers():
    from ops.bench import learning_report

    assert learning_report.estimate is estimate


# --- loading, caching and scoring, with a mock vLLM ----------------------------------------------


class MockVLLM:
    """Answers the target suite: right for the adapter folder ``good``, wrong for anything else."""

    def __init__(self, good: Path):
        self.good = good
        self.loaded: dict[str, str] = {}  # name -> lora_path
        self.most_loaded = 0
        self.chats = 0  # tasks asked
        self.prefills = 0  # one-token requests that warm the prefix cache
        self.answers = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/v1/load_lora_adapter":
            self.loaded[body["lora_name"]] = body["lora_path"]
            self.most_loaded = max(self.most_loaded, len(self.loaded))
            return httpx.Response(200, text="ok")
        if request.url.path == "/v1/unload_lora_adapter":
            del self.loaded[body["lora_name"]]
            return httpx.Response(200, text="ok")
        if body["max_tokens"] == 1:
            self.prefills += 1
        else:
            self.chats += 1
        right = Path(self.loaded[body["model"]]) == self.good
        text = tool_call(
            "calculator", expression=self.answers[json.dumps(body["messages"])] if right else "1+1"
        )
        choices = [{"index": i, "message": {"content": text}} for i in range(body["n"])]
        return httpx.Response(200, json={"choices": choices, "usage": {"completion_tokens": 5}})


def small_target(tasks: int, samples: int) -> Suite:
    suite = load_suite("target").limited(tasks)
    return Suite(dataclasses.replace(suite.config, samples=samples), suite.tasks, suite.content_hash)


def fake_model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"hidden_size": 8, "num_hidden_layers": 2}))
    return model


def test_measure_loads_a_few_at_a_time_serves_the_base_as_a_zero_adapter_and_caches_per_policy(tmp_path):
    model = fake_model(tmp_path)
    adapters = {f"v{i}": write_random_adapter(model, tmp_path / f"v{i}", seed=i) for i in range(1, 4)}
    suite = small_target(3, 2)
    vllm = MockVLLM(good=adapters["v2"])
    vllm.answers = {json.dumps(t.messages): str(t.expected["value"]) for t in suite.tasks}
    said: list[str] = []

    def run(results: Path) -> dict:
        return measure({BASE: None, **adapters}, suite, "http://vllm.test", "m", results,
                       per_load=2, say=said.append, transport=httpx.MockTransport(vllm))  # fmt: skip

    scores = run(tmp_path / "results")
    assert list(scores) == [BASE, "v1", "v2", "v3"]
    assert scores["v2"]["target.pass_at_1"] == {t.task_id: 1.0 for t in suite.tasks}
    for label in (BASE, "v1", "v3"):
        assert set(scores[label]["target.pass_at_1"].values()) == {0.0}
    assert vllm.most_loaded == 2 and vllm.loaded == {}  # two at a time, all unloaded afterwards
    assert vllm.chats == 4 * 3 and len(said) == 2
    zero = next(tmp_path.glob("results/zero-adapters/*"))
    assert (zero / "adapter_config.json").read_bytes() == (
        adapters["v1"] / "adapter_config.json"
    ).read_bytes()

    run(tmp_path / "results")  # the same folder: every result is on disk
    assert vllm.chats == 4 * 3
    run(tmp_path / "fresh")  # a new folder: new samples
    assert vllm.chats == 2 * 4 * 3


def test_measure_the_base_model_alone_from_the_model_folder(tmp_path):
    suite = small_target(2, 1)
    vllm = MockVLLM(good=tmp_path / "none")
    model = fake_model_with_weights(tmp_path)
    scores = measure({BASE: None}, suite, "http://vllm.test", "m", tmp_path / "results", model_dir=model,
                     transport=httpx.MockTransport(vllm))  # fmt: skip
    assert scores[BASE]["target.pass_at_1"] == {t.task_id: 0.0 for t in suite.tasks}
    assert vllm.most_loaded == 1


def fake_model_with_weights(tmp_path: Path) -> Path:
    """A model folder whose safetensors header has q_proj weights (what ``zero_adapter`` reads)."""
    import numpy as np
    from safetensors.numpy import save_file

    model = fake_model(tmp_path)
    weights = {f"model.layers.{i}.self_attn.q_proj.weight": np.zeros((8, 8), np.float32) for i in range(2)}
    save_file(weights, model / "model.safetensors")
    return model


# --- the real vLLM ---------------------------------------------------------------------------------


@pytest.mark.stack
def test_base_model_and_a_random_adapter_on_the_real_vllm(vllm_url, served_model, model_dir, tmp_path):
    adapter = write_random_adapter(Path(model_dir), tmp_path / "random", seed=7, rank=8)
    suite = small_target(4, 1)
    scores = measure(
        {BASE: None, "random": adapter}, suite, vllm_url, served_model, tmp_path / "results", concurrency=4
    )
    assert list(scores) == [BASE, "random"]
    for per_metric in scores.values():
        per_task = per_metric["target.pass_at_1"]
        assert set(per_task) == {t.task_id for t in suite.tasks}
        assert all(score in (0.0, 1.0) for score in per_task.values())
        est = estimate(per_task)
        assert est["tasks"] == 4 and est["ci95"][0] <= est["mean"] <= est["ci95"][1]
    assert (tmp_path / "results" / "candidate" / "base").is_dir()  # cached per policy
    assert not [
        name for name in httpx.get(f"{vllm_url}/v1/models").json()["data"] if "heldout-" in name["id"]
    ]
