"""How long the local vLLM's engine processes poll before blocking (ops/vllm_site/ratchet_engine_wait.py):
every SpinCondition of vLLM's shared-memory rings gets the configured ``busy_loop_s``, whatever its
caller asked for, and a vLLM without that constructor argument is refused, not half-patched."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from ops.stack import VLLM_SITE

sys.path.insert(0, str(VLLM_SITE))
import ratchet_engine_wait  # noqa: E402


def _module():
    class SpinCondition:
        def __init__(self, is_reader, context, notify_address, busy_loop_s: float = 1):
            self.args = (is_reader, context, notify_address)
            self.busy_loop_s = busy_loop_s

    return types.SimpleNamespace(__name__="shm_broadcast", SpinCondition=SpinCondition)


def test_every_spin_condition_polls_the_configured_time():
    module = _module()
    ratchet_engine_wait.patch(module, 0.0)
    reader = module.SpinCondition(is_reader=True, context="ctx", notify_address="ipc://x")
    assert reader.busy_loop_s == 0.0 and reader.args == (True, "ctx", "ipc://x")
    asked = module.SpinCondition(False, "ctx", "ipc://y", busy_loop_s=5)
    assert asked.busy_loop_s == 0.0 and asked.args == (False, "ctx", "ipc://y")
    assert module.RATCHET_BUSY_LOOP_S == 0.0


def test_a_vllm_without_the_argument_is_refused():
    class SpinCondition:
        def __init__(self, is_reader, context, notify_address):
            pass

    with pytest.raises(RuntimeError, match="RATCHET_VLLM_BUSY_LOOP_S=-1"):
        ratchet_engine_wait.patch(types.SimpleNamespace(__name__="shm", SpinCondition=SpinCondition), 0.0)
    with pytest.raises(RuntimeError, match="no SpinCondition"):
        ratchet_engine_wait.patch(types.SimpleNamespace(__name__="shm"), 0.0)


@pytest.mark.parametrize(("value", "patched"), [("0", True), ("0.25", True), ("-1", False), ("", False)])
def test_sitecustomize_patches_only_when_asked(value, patched):
    """The site hook adjusts vLLM's ring module on import for a value >= 0 and leaves it alone otherwise."""
    code = "import sitecustomize; print('vllm.distributed.device_communicators.shm_broadcast' in sitecustomize.PATCHES)"
    env = {"PYTHONPATH": str(VLLM_SITE), "RATCHET_VLLM_BUSY_LOOP_S": value, "RATCHET_VLLM_CPU_LORA": "vllm"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(patched)


def test_the_local_vllm_blocks_instead_of_spinning(lazy_stack, vllm_url):
    """The real vLLM imported its ring module through the hook (a vLLM whose SpinCondition had changed
    would have refused to start: the hook raises inside its import)."""
    assert lazy_stack.settings.vllm_busy_loop_s == 0.0
    log = lazy_stack.stack.log_path("vllm").read_text(errors="replace")
    assert "ratchet: engine rings poll 0 s before blocking" in log


@pytest.mark.parametrize(
    ("text", "parsed"), [("auto/0", ("auto", 0.0)), ("0-1/-1", ("0-1", -1.0)), ("0,1/0.5", ("0,1", 0.5))]
)
def test_the_bench_reads_bind_and_busy_loop_pairs(text, parsed):
    from ops.bench.vllm_cpu import parse_config

    assert parse_config(text) == parsed


@pytest.mark.parametrize("text", ["auto", "/0", "auto/fast"])
def test_the_bench_refuses_a_malformed_pair(text):
    import argparse

    from ops.bench.vllm_cpu import parse_config

    with pytest.raises(argparse.ArgumentTypeError, match="BIND/BUSY_LOOP_S|not a number"):
        parse_config(text)
