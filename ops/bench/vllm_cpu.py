"""python -m ops.bench vllm-cpu [--json FILE]: the CPU vLLM's engine settings, alone and on a busy machine.

On a small machine vLLM shares its cores with the learner, the reward worker and the
proxy, so a setting is judged twice: how fast vLLM serves, and how much CPU it leaves.
For each ``--configs`` entry ``BIND/BUSY[/RECHECK_MS]`` (``vllm_cpu_bind``, the OpenMP
binding of the model worker: ``auto`` pins it to one core and reserves another, ``0-1``
uses both; ``vllm_busy_loop_s``, how long the engine's processes poll before blocking:
vLLM's own is 1, -1 leaves it alone; with a busy loop >= 0, how often a blocked reader
rechecks its ring, ``vllm_recheck_ms``, 10 by default, vLLM's own 5000) a private
vLLM is started, a rank-16 adapter on all seven
projections is loaded under two names (the demo's recipe; vLLM's prefix cache is per adapter,
so neither run finds the other's prompts cached), and the gate's target suite (48 held-out
tasks x 3 samples, through the gate's harness) is run twice, once through each name: on an
otherwise idle machine, then beside ``--neighbours`` processes (one per core by default) each doing
512x512 matrix products on one torch thread, as the learner does. Reported per config:
``seconds_alone``, ``seconds_beside`` and ``neighbour_share``, the neighbours' summed rate
during the second run over their rate with the machine to themselves (measured first).
Still beside them, ``--sequential`` short requests (24 tokens, streamed) are sent one at a
time, as a judge or a lone agent sends them: ``sequential_seconds`` for all of them and
``longest_gap_s``, the longest wait between two streamed chunks (a step whose ring
notification was lost waits for the recheck). Each run's completion tokens are reported
too: every config samples the same requests,
so their counts should agree within sampling noise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_CONFIGS = ["auto/-1", "auto/0", "0-1/-1", "0-1/0"]


def _neighbour(index: int, stop, counts) -> None:
    """Matrix products on one torch thread until ``stop`` is set; ``counts`` gets (index, monotonic, n)."""
    import torch

    torch.set_num_threads(1)
    a = torch.randn(512, 512)
    n = 0
    while not stop.is_set():
        a @ a
        n += 1
        if n % 20 == 0:
            counts.put((index, time.monotonic(), n))


class Neighbours:
    """``processes`` one-thread torch loops, each in its own process (what the learner is, and what else
    a small machine runs beside vLLM); :meth:`rate` is their summed products per second over a window."""

    def __init__(self, processes: int):
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self.counts = ctx.Queue()
        self.processes = [
            ctx.Process(target=_neighbour, args=(i, self.stop, self.counts), daemon=True)
            for i in range(processes)
        ]
        self.seen: dict[int, list[tuple[float, int]]] = {i: [] for i in range(processes)}

    def __enter__(self) -> Neighbours:
        for process in self.processes:
            process.start()
        while not all(self.seen.values()):  # every loop has started: torch imported, products running
            index, t, n = self.counts.get(timeout=120)
            self.seen[index].append((t, n))
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()

    def _drain(self) -> None:
        while not self.counts.empty():
            index, t, n = self.counts.get()
            self.seen[index].append((t, n))

    def rate(self, start: float, end: float) -> float:
        self._drain()
        total = 0.0
        for index, seen in self.seen.items():
            inside = [(t, n) for t, n in seen if start <= t <= end]
            if len(inside) < 2:
                raise RuntimeError(f"neighbour {index} reported too little between {start:.1f} and {end:.1f}")
            (t0, n0), (t1, n1) = inside[0], inside[-1]
            total += (n1 - n0) / (t1 - t0)
        return total


def _adapter(model_dir: Path, out: Path) -> Path:
    """A freshly initialised rank-16 adapter on all seven projections (B = 0: the base model's outputs
    through the LoRA kernels)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets)).save_pretrained(out)
    return out


def parse_config(text: str) -> tuple[str, float, int | None]:
    """``BIND/BUSY[/RECHECK_MS]`` -> (bind, busy_loop_s, recheck_ms or None for the default)."""
    parts = text.split("/")
    if len(parts) not in (2, 3) or not parts[0]:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected BIND/BUSY_LOOP_S[/RECHECK_MS], e.g. auto/0, 0-1/-1 or auto/0/5000"
        )
    try:
        busy = float(parts[1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {parts[1]!r} is not a number of seconds") from None
    if len(parts) == 2:
        return parts[0], busy, None
    if not parts[2].isdigit() or int(parts[2]) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: {parts[2]!r} is not a whole number of milliseconds >= 1")
    return parts[0], busy, int(parts[2])


def _sequential(url: str, model: str, n: int) -> tuple[float, float]:
    """``n`` streamed 24-token requests one after another: (seconds for all, longest gap between chunks)."""
    import httpx

    longest, start = 0.0, time.monotonic()
    with httpx.Client(timeout=600) as client:
        for i in range(n):
            body = {
                "model": model,
                "max_tokens": 24,
                "temperature": 0,
                "stream": True,
                "messages": [
                    {"role": "user", "content": f"Count from {i} to {i + 30}, one number per line."}
                ],
            }
            last = time.monotonic()
            with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                response.raise_for_status()
                for _ in response.iter_lines():
                    now = time.monotonic()
                    longest, last = max(longest, now - last), now
    return time.monotonic() - start, longest


def _suite_seconds(
    url: str, base_model: str, adapter: str, results: Path, concurrency: int
) -> tuple[float, int]:
    from gating.harness import Harness, Policy
    from gating.suites import load_suite

    shutil.rmtree(results, ignore_errors=True)
    harness = Harness(url, base_model, results, concurrency=concurrency)
    try:
        start = time.monotonic()
        done = harness.run(Policy(adapter, adapter), load_suite("target"))
        return time.monotonic() - start, sum(r.completion_tokens for r in done)
    finally:
        harness.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops.bench vllm-cpu",
        description=__doc__.splitlines()[0],
        epilog="Takes about 4 minutes per config on 2 cores; run it on an otherwise idle machine.",
    )
    parser.add_argument("--json", metavar="FILE", help="write the results here as JSON")
    parser.add_argument(
        "--configs",
        nargs="+",
        type=parse_config,
        default=[parse_config(c) for c in DEFAULT_CONFIGS],
        metavar="BIND/BUSY[/RECHECK_MS]",
        help=f"vllm_cpu_bind/vllm_busy_loop_s[/recheck ms] (default {' '.join(DEFAULT_CONFIGS)})",
    )
    parser.add_argument(
        "--sequential",
        type=int,
        default=40,
        help="short requests sent one at a time beside the neighbours (default 40; 0: none)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=12, help="requests in flight (default 12, the demo gate's)"
    )
    parser.add_argument(
        "--neighbours",
        type=int,
        default=os.cpu_count() or 1,
        help="one-thread torch loops beside vLLM in the second run (default: one per core, a busy machine)",
    )
    args = parser.parse_args(argv)

    from ops.bench import exit_on_sigterm, finish
    from ops.model import prepare_model
    from ops.stack import QUIET_ENV, Stack, free_port
    from ops.stack import load_settings as stack_settings
    from serving.vllm_admin import VLLMClient

    os.environ.update(QUIET_ENV)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    exit_on_sigterm(say, "the private vLLM and the neighbours")
    base = stack_settings()
    model_dir = base.model_dir or prepare_model(base.cache_dir, say)
    result: dict = {"concurrency": args.concurrency, "suite": "target", "configs": []}
    with tempfile.TemporaryDirectory(prefix="bench-vllm-cpu-") as tmp:
        adapter = _adapter(model_dir, Path(tmp) / "adapter")
        with Neighbours(args.neighbours) as alone:
            start = time.monotonic()
            time.sleep(10)  # a measuring window: their rate with the machine to themselves
            alone_rate = alone.rate(start, time.monotonic())
        result["neighbours"] = args.neighbours
        result["neighbour_rate_alone"] = round(alone_rate, 1)
        for bind, busy, recheck_ms in args.configs:
            settings = dataclasses.replace(
                base,
                state_dir=Path(tmp) / f"{bind}-{busy}",
                vllm_port=free_port(),
                broker_port=free_port(),
                mlflow_port=free_port(),
                s3_port=free_port(),
                vllm_cpu_bind=bind,
                vllm_busy_loop_s=busy,
                vllm_recheck_ms=recheck_ms or base.vllm_recheck_ms,
            )
            stack = Stack(settings, progress=say)
            try:
                stack.up(["vllm"])
                admin = VLLMClient(settings.vllm_url)
                try:
                    # the same weights under two names: vLLM's prefix cache is keyed by adapter, so
                    # the second run does not find the first one's prompts cached
                    admin.load_adapter("alone", adapter)
                    admin.load_adapter("beside", adapter)
                finally:
                    admin.close()
                results = Path(tmp) / "results"
                alone, tokens_alone = _suite_seconds(
                    settings.vllm_url, base.base_model, "alone", results, args.concurrency
                )
                with Neighbours(args.neighbours) as beside:
                    start = time.monotonic()
                    seconds, tokens_beside = _suite_seconds(
                        settings.vllm_url, base.base_model, "beside", results, args.concurrency
                    )
                    share = beside.rate(start, time.monotonic()) / alone_rate
                    sequential, gap = (
                        _sequential(settings.vllm_url, base.base_model, args.sequential)
                        if args.sequential
                        else (None, None)
                    )
                row = {
                    "bind": bind,
                    "busy_loop_s": busy,
                    "recheck_ms": settings.vllm_recheck_ms,
                    "seconds_alone": round(alone, 1),
                    "seconds_beside": round(seconds, 1),
                    "neighbour_share": round(share, 3),
                    "completion_tokens": [tokens_alone, tokens_beside],
                    "sequential": args.sequential,
                    "sequential_seconds": sequential and round(sequential, 1),
                    "longest_gap_s": gap and round(gap, 2),
                }
                result["configs"].append(row)
                say(json.dumps(row))
            finally:
                stack.down()
    return finish(result, args.json)
