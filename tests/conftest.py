"""Shared fixtures: the real local stack, started once per test session.

The stack runs under a private state folder and free ports, so a developer's
own `ratchet stack up` is never touched (unless RATCHET_TEST_STACK=running). Components start lazily: a test that
only needs the broker never waits for vLLM.
"""

from __future__ import annotations

import os

import pytest

from ops.stack import QUIET_ENV, Stack, StackSettings, free_port, load_settings

os.environ.update(QUIET_ENV)


class LazyStack:
    def __init__(self, settings: StackSettings):
        self.stack = Stack(settings, progress=lambda m: print(m, flush=True))
        self.settings = settings
        self.started: set[str] = set()

    def need(self, *names: str) -> StackSettings:
        missing = [n for n in names if n not in self.started]
        if missing:
            self.stack.up(missing)
            self.started.update(missing)
        return self.settings


@pytest.fixture(scope="session")
def lazy_stack(tmp_path_factory):
    base = load_settings()
    if os.environ.get("RATCHET_TEST_STACK") == "running":
        # Development shortcut: reuse the stack `ratchet stack up` manages (started if
        # missing, never stopped). CI always starts a private stack.
        lazy = LazyStack(base)
        yield lazy
        return
    settings = StackSettings(
        state_dir=tmp_path_factory.mktemp("stack"),
        cache_dir=base.cache_dir,
        vllm_python=base.vllm_python,
        broker_port=free_port(),
        mlflow_port=free_port(),
        vllm_port=free_port(),
        s3_port=free_port(),
        vllm_cpu_lora=base.vllm_cpu_lora,  # RATCHET_VLLM_CPU_LORA=vllm: the suite on vLLM's own kernels
    )
    lazy = LazyStack(settings)
    yield lazy
    lazy.stack.down()


@pytest.fixture(scope="session")
def broker(lazy_stack) -> str:
    """Bootstrap address of a real Tansu broker with Ratchet's topics created."""
    return lazy_stack.need("broker").kafka_bootstrap


@pytest.fixture(scope="session")
def mlflow_url(lazy_stack) -> str:
    return lazy_stack.need("mlflow").mlflow_url


@pytest.fixture(scope="session")
def vllm_url(lazy_stack) -> str:
    return lazy_stack.need("vllm").vllm_url


@pytest.fixture(scope="session")
def served_model(lazy_stack) -> str:
    return lazy_stack.settings.base_model


@pytest.fixture(scope="session")
def model_dir(lazy_stack):
    from ops.model import prepare_model

    return prepare_model(lazy_stack.settings.cache_dir)
