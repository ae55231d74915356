"""Run by every Python process of the local stack's vLLM (``ops/stack.py`` puts this folder first
on its ``PYTHONPATH``): when vLLM imports its CPU LoRA kernels, they are replaced by the grouped
ones of :mod:`ratchet_cpu_lora` before anything binds them. Nothing else is touched, and nothing
is imported until vLLM asks for that module."""

import importlib.abc
import importlib.machinery
import os
import sys

TARGET = "vllm.lora.ops.torch_ops.lora_ops"


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        import ratchet_cpu_lora

        ratchet_cpu_lora.patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader)
        return spec


if os.environ.get("RATCHET_VLLM_CPU_LORA", "grouped") == "grouped":
    sys.meta_path.insert(0, _Finder())
