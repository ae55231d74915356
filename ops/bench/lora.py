"""python -m ops.bench lora [--json FILE]: sampling through a LoRA adapter on the CPU vLLM, by kernel.

For each LoRA kernel setting of the local vLLM (``vllm_cpu_lora``: ``grouped``, Ratchet's
grouped products, and ``vllm``, vLLM-CPU's own per-token gather) a private vLLM is started
on one core, the learning benchmark's recipe of adapter is loaded (rank 16 on q, k, v, o,
random weights), and the same requests are sent through the base model and through the
adapter: ``--requests`` training-split calculator prompts, ``--concurrency`` in flight,
temperature 0.7, ``--max-tokens`` completion tokens. Reported per kernel and model: wall
seconds, completion tokens per second, and the adapter's slowdown against the base model;
at the top, the adapter's throughput with grouped kernels over vLLM's own (same requests,
same adapter, same core: only the kernels differ).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def _adapter(model_dir: Path, out: Path) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    peft = get_peft_model(model, config)
    with torch.no_grad():  # B is zero at initialisation: give the adapter a real (small) effect
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.01)
    peft.save_pretrained(out)
    return out


def _run(url: str, model: str, prompts: list[list[dict]], concurrency: int, max_tokens: int) -> dict:
    import httpx

    def one(messages: list[dict]) -> int:
        body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.7}
        resp = http.post("/v1/chat/completions", json=body)
        resp.raise_for_status()
        return int(resp.json()["usage"]["completion_tokens"])

    with httpx.Client(base_url=url, timeout=600) as http:
        one(prompts[0])  # warm the prefix cache with the shared system prompt
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            tokens = sum(pool.map(one, prompts))
        seconds = time.monotonic() - start
    return {"seconds": round(seconds, 2), "tokens": tokens, "tokens_per_s": round(tokens / seconds, 1)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench lora", description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE", help="write the results here as JSON")
    parser.add_argument("--requests", type=int, default=64, help="requests per model (default 64)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight (default 16)")
    parser.add_argument("--max-tokens", type=int, default=40, help="completion tokens (default 40)")
    args = parser.parse_args(argv)

    import httpx

    from gating.tasks import CALCULATOR, sample_tasks
    from ops.bench import exit_on_sigterm, finish
    from ops.model import prepare_model
    from ops.stack import QUIET_ENV, Stack, free_port
    from ops.stack import load_settings as stack_settings

    os.environ.update(QUIET_ENV)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    exit_on_sigterm(say, "the private vLLM")
    base = stack_settings()
    model_dir = base.model_dir or prepare_model(base.cache_dir, say)
    prompts = [t.messages for t in sample_tasks(CALCULATOR, args.requests, seed=7)]
    result: dict = {"requests": args.requests, "concurrency": args.concurrency, "max_tokens": args.max_tokens}
    with tempfile.TemporaryDirectory(prefix="bench-lora-") as tmp:
        adapter = _adapter(model_dir, Path(tmp) / "adapter")
        for kernels in ("grouped", "vllm"):
            settings = dataclasses.replace(
                base,
                state_dir=Path(tmp) / kernels,
                vllm_port=free_port(),
                broker_port=free_port(),
                mlflow_port=free_port(),
                s3_port=free_port(),
                vllm_cpu_bind=str((os.cpu_count() or 1) - 1),
                vllm_cpu_lora=kernels,
            )
            stack = Stack(settings, progress=say)
            try:
                stack.up(["vllm"])
                resp = httpx.post(
                    f"{settings.vllm_url}/v1/load_lora_adapter",
                    json={"lora_name": "bench", "lora_path": str(adapter)},
                    timeout=120,
                )
                resp.raise_for_status()
                runs = {
                    model: _run(settings.vllm_url, name, prompts, args.concurrency, args.max_tokens)
                    for model, name in (("base", settings.base_model), ("adapter", "bench"))
                }
                runs["adapter_slowdown"] = round(
                    runs["base"]["tokens_per_s"] / runs["adapter"]["tokens_per_s"], 2
                )
                result[kernels] = runs
                say(f"{kernels}: {json.dumps(runs)}")
            finally:
                stack.down()
    result["adapter_speedup_grouped_over_vllm"] = round(
        result["grouped"]["adapter"]["tokens_per_s"] / result["vllm"]["adapter"]["tokens_per_s"], 2
    )
    return finish(result, args.json)
