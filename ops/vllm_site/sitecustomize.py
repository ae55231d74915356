"""Run by every Python process of the local stack's vLLM (``ops/stack.py`` puts this folder first
on its ``PYTHONPATH``): when vLLM imports one of the modules below, it is adjusted before anything
binds its names. Nothing else is touched, and nothing is imported until vLLM asks for that module.

- ``vllm.lora.ops.torch_ops.lora_ops``: the grouped CPU LoRA kernels of :mod:`ratchet_cpu_lora`
  (``RATCHET_VLLM_CPU_LORA=grouped``, the default; ``vllm`` keeps vLLM's own).
- ``vllm.distributed.device_communicators.shm_broadcast``: how long the engine's processes poll
  their shared-memory rings before blocking, :mod:`ratchet_engine_wait`
  (``RATCHET_VLLM_BUSY_LOOP_S``, 0 by default; a negative value keeps vLLM's 1 s).
"""

import importlib.abc
import importlib.machinery
import os
import sys


def _grouped_lora(module):
    import ratchet_cpu_lora

    ratchet_cpu_lora.patch(module)


def _engine_wait(module):
    import ratchet_engine_wait

    recheck = os.environ.get("RATCHET_VLLM_RECHECK_MS")  # the stack's vllm_recheck_ms
    kwargs = {"recheck_ms": int(recheck)} if recheck else {}
    ratchet_engine_wait.patch(module, float(os.environ["RATCHET_VLLM_BUSY_LOOP_S"]), **kwargs)


PATCHES = {}
if os.environ.get("RATCHET_VLLM_CPU_LORA", "grouped") == "grouped":
    PATCHES["vllm.lora.ops.torch_ops.lora_ops"] = _grouped_lora
if float(os.environ.get("RATCHET_VLLM_BUSY_LOOP_S") or -1) >= 0:
    PATCHES["vllm.distributed.device_communicators.shm_broadcast"] = _engine_wait


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, after):
        self.loader = loader
        self.after = after

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.after(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        after = PATCHES.get(name)
        if after is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, after)
        return spec


if PATCHES:
    sys.meta_path.insert(0, _Finder())
