"""How long the local vLLM's engine processes poll before blocking (ops/vllm_site/ratchet_engine_wait.py):
every SpinCondition of vLLM's shared-memory rings gets the configured ``busy_loop_s``, whatever its
caller asked for, a blocked reader rechecks its ring every few milliseconds (a lost notification
costs one short wait, not vLLM's 5 s), and a vLLM without those is refused, not half-patched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from ops.stack import VLLM_SITE

sys.path.insert(0, str(VLLM_SITE))
import ratchet_engine_wait  # noqa: E402


def _module():
    class SpinCondition:
        def __init__(self, is_reader, context, notify_address, busy_loop_s: float = 1):
            self.args = (is_reader, context, notify_address)
            self.busy_loop_s = busy_loop_s

    return types.SimpleNamespace(
        __name__="shm_broadcast", SpinCondition=SpinCondition, SHM_READER_RECHECK_INTERVAL_MS=5000
    )


def test_every_spin_condition_polls_the_configured_time():
    module = _module()
    ratchet_engine_wait.patch(module, 0.0)
    reader = module.SpinCondition(is_reader=True, context="ctx", notify_address="ipc://x")
    assert reader.busy_loop_s == 0.0 and reader.args == (True, "ctx", "ipc://x")
    asked = module.SpinCondition(False, "ctx", "ipc://y", busy_loop_s=5)
    assert asked.busy_loop_s == 0.0 and asked.args == (False, "ctx", "ipc://y")
    assert module.RATCHET_BUSY_LOOP_S == 0.0
    assert module.SHM_READER_RECHECK_INTERVAL_MS == ratchet_engine_wait.RECHECK_MS == 10
    ratchet_engine_wait.patch(_module(), 0.0, recheck_ms=3)
    with pytest.raises(ValueError, match="at least 1"):
        ratchet_engine_wait.patch(_module(), 0.0, recheck_ms=0)


def test_a_vllm_without_the_argument_is_refused():
    class SpinCondition:
        def __init__(self, is_reader, context, notify_address):
            pass

    with pytest.raises(RuntimeError, match="RATCHET_VLLM_BUSY_LOOP_S=-1"):
        ratchet_engine_wait.patch(types.SimpleNamespace(__name__="shm", SpinCondition=SpinCondition), 0.0)
    with pytest.raises(RuntimeError, match="no SpinCondition"):
        ratchet_engine_wait.patch(types.SimpleNamespace(__name__="shm"), 0.0)
    no_recheck = types.SimpleNamespace(__name__="shm", SpinCondition=_module().SpinCondition)
    with pytest.raises(RuntimeError, match="SHM_READER_RECHECK_INTERVAL_MS"):
        ratchet_engine_wait.patch(no_recheck, 0.0)


@pytest.mark.parametrize(("busy", "recheck_ms"), [("0", 10), ("-1", 5000)])
def test_a_blocked_reader_reads_what_a_lost_notification_announced(lazy_stack, busy, recheck_ms):
    """vLLM's real ring, every notification dropped (its PUB socket drops them silently when it believes
    the last one undelivered): the blocked reader still reads the message, its waits bounded by the
    recheck, 10 ms with the hook and vLLM's own 5 s without it (-1)."""
    from ops.stack import _bootstrap_python

    python = lazy_stack.settings.vllm_python or _bootstrap_python("vllm")
    env = {k: v for k, v in os.environ.items() if k != "RATCHET_VLLM_RECHECK_MS"} | {
        "PYTHONPATH": str(VLLM_SITE),
        "RATCHET_VLLM_BUSY_LOOP_S": busy,
        "RATCHET_VLLM_CPU_LORA": "vllm",
        "VLLM_LOGGING_LEVEL": "WARNING",
    }
    script = Path(__file__).parent / "data" / "lost_notify.py"
    out = subprocess.run([str(python), str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"read": [{"step": 1}], "max_timeout_ms": recheck_ms, "patched": busy == "0"}


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
    assert "ratchet: engine rings poll 0 s before blocking, recheck every 10 ms" in log


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("auto/0", ("auto", 0.0, None)),
        ("0-1/-1", ("0-1", -1.0, None)),
        ("0,1/0.5", ("0,1", 0.5, None)),
        ("auto/0/5000", ("auto", 0.0, 5000)),
    ],
)
def test_the_bench_reads_bind_and_busy_loop_pairs(text, parsed):
    from ops.bench.vllm_cpu import parse_config

    assert parse_config(text) == parsed


@pytest.mark.parametrize("text", ["auto", "/0", "auto/fast", "auto/0/0", "auto/0/soon", "auto/0/10/1"])
def test_the_bench_refuses_a_malformed_pair(text):
    import argparse

    from ops.bench.vllm_cpu import parse_config

    with pytest.raises(argparse.ArgumentTypeError, match="BIND/BUSY_LOOP_S|not a number|milliseconds"):
        parse_config(text)


@pytest.mark.parametrize("recheck_ms", [10, 250])
def test_the_stack_hands_its_recheck_to_every_replica(tmp_path, recheck_ms):
    """``vllm_recheck_ms`` reaches each replica's environment, which the site hook reads."""
    import dataclasses

    from ops.stack import Stack, load_settings

    settings = dataclasses.replace(
        load_settings(),
        state_dir=tmp_path,
        model_dir=tmp_path / "model",
        vllm_python=Path(sys.executable),
        vllm_recheck_ms=recheck_ms,
    )
    env = Stack(settings)._vllm("vllm", 8000).env
    assert env["RATCHET_VLLM_RECHECK_MS"] == str(recheck_ms)
    assert env["RATCHET_VLLM_BUSY_LOOP_S"] == "0.0"


@pytest.mark.parametrize("recheck_ms", [0, -5])
def test_the_stack_refuses_a_recheck_that_is_not_positive(recheck_ms):
    import dataclasses

    from ops.stack import load_settings

    with pytest.raises(ValueError, match="vllm_recheck_ms"):
        dataclasses.replace(load_settings(), vllm_recheck_ms=recheck_ms)
