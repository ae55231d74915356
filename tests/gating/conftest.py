"""Fixtures for the gate's tests against the real vLLM and MLflow.

Candidates are trained once (see ``candidates.py``) and published into one
adapter store per session: v1 improver, v2 honeypot, v3 destroyer, v4 drifter.
Each test gets its own decision log, registered model and MLflow experiment;
per-task results are shared across the session, so the base model is run once.
The suites are the built-in ones, cut down to fit the test budget.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gating import suites
from gating.gate import Gate
from gating.settings import GateSettings
from learner.store import AdapterStore

VERSIONS = {"improver": "v1", "honeypot": "v2", "destroyer": "v3", "drifter": "v4"}
TEST_SUITES = {  # name -> (tasks, samples per task, max_tokens)
    "target": (24, 2, 40),
    "honeypot": (8, 1, 40),
    "format": (8, 1, 40),
    "general": (16, 1, 16),
    "drift": (6, 1, 24),
}


@pytest.fixture(scope="session")
def candidate_dirs(model_dir, lazy_stack) -> dict[str, Path]:
    from tests.gating.candidates import build_all

    cache = Path(os.environ.get("RATCHET_TEST_CANDIDATES", lazy_stack.settings.cache_dir / "test-candidates"))
    return build_all(model_dir, cache, log=lambda m: print(m, flush=True))


@pytest.fixture(scope="session")
def store(candidate_dirs, served_model, tmp_path_factory) -> AdapterStore:
    store = AdapterStore(tmp_path_factory.mktemp("adapters"))
    for name, version in VERSIONS.items():
        assert store.publish(candidate_dirs[name], base_model=served_model).version == version
    return store


@pytest.fixture(scope="session")
def test_suites(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("suites")
    for name, (n, samples, max_tokens) in TEST_SUITES.items():
        full = suites.load_suite(name)
        config = dataclasses.replace(full.config, samples=samples, max_tokens=max_tokens)
        folder = root / name / config.version
        folder.mkdir(parents=True)
        for fname, data in suites.render(config, full.tasks[:n]).items():
            (folder / fname).write_bytes(data)
    return root


@pytest.fixture(scope="session")
def results_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("results")


@pytest.fixture
def settings(
    store, test_suites, results_dir, mlflow_url, vllm_url, served_model, model_dir, tmp_path
) -> Iterator[GateSettings]:
    name = f"test-gate-{uuid.uuid4().hex[:10]}"
    yield GateSettings(
        gate_vllm_url=vllm_url,
        mlflow_url=mlflow_url,
        base_model=served_model,
        model_dir=model_dir,
        adapter_store_dir=store.root,
        gate_dir=tmp_path / "gate",
        results_dir=results_dir,
        registered_model=name,
        gate_experiment=name,
        suites_dir=test_suites,
        # 8 in flight: on two cores vLLM's throughput is the same as with 16, and each task's
        # samples finish well inside the suites' 120 s limit instead of queueing up to it
        concurrency=8,
    )
    _forget_mlflow(mlflow_url, name)


def _forget_mlflow(url: str, name: str) -> None:
    """Remove what a test registered in a shared MLflow (its registered model and experiment)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(url, url)
    with contextlib.suppress(MlflowException):
        client.delete_registered_model(name)
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        client.delete_experiment(experiment.experiment_id)


@pytest.fixture
def make_gate(settings):
    gates: list[Gate] = []

    def make(**overrides) -> Gate:
        gate = Gate(dataclasses.replace(settings, **overrides), say=lambda m: print(m, flush=True))
        gates.append(gate)
        return gate

    yield make
    for gate in gates:
        gate.close()


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]
