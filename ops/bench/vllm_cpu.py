"""python -m ops.bench vllm-cpu [--json FILE]: the CPU vLLM's engine settings, alone and on a busy machine.

On a small machine vLLM shares its cores with the learner, the reward worker and the
proxy, so a setting is judged twice: how fast vLLM serves, and how much CPU it leaves.
For each ``--configs`` entry ``BIND/BUSY`` (``vllm_cpu_bind``, the OpenMP binding of the
model worker: ``auto`` pins it to one core and reserves another, ``0-1`` uses both;
``vllm_busy_loop_s``, how long the engine's processes poll before blocking: vLLM's own is
1, -1 leaves it alone) a private vLLM is started, a rank-16 adapter on all seven
projections is loaded under two names (the demo's recipe; vLLM's prefix cache is per adapter,
so neither run finds the other's prompts cached), and the gate's target suite (48 held-out
tasks x 3 samples, through the gate's harness) is run twice, once through each name: on an
otherwise idle machine, then beside ``--neighbours`` processes (one per core by default) each doing
512x512 matrix products on one torch thread, as the learner does. Reported per config:
``seconds_alone``, ``seconds_beside`` and ``neighbour_share``, the neighbours' summed rate
during the second run over their rate with the machine to themselves (measured first).
Each run's completion tokens are reported too: every config samples the same requests,
so their counts should agree within sampling noise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import shutil
import signal
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


def parse_config(text: str) -> tuple[str, float]:
    bind, sep, busy = text.rpartition("/")
    if not sep or not bind:
        raise argparse.ArgumentTypeError(f"{text!r}: expected BIND/BUSY_LOOP_S, e.g. auto/0 or 0-1/-1")
    try:
        return bind, float(busy)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {busy!r} is not a number of seconds") from None


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
        epilog="Takes about 2.5 minutes per config on 2 cores; run it on an otherwise idle machine.",
    )
    parser.add_argument("--json", metavar="FILE", help="write the results here as JSON")
    parser.add_argument(
        "--configs",
        nargs="+",
        type=parse_config,
        default=[parse_config(c) for c in DEFAULT_CONFIGS],
        metavar="BIND/BUSY",
        help=f"vllm_cpu_bind/vllm_busy_loop_s pairs (default {' '.join(DEFAULT_CONFIGS)})",
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

    from ops.bench import finish
    from ops.model import prepare_model
    from ops.stack import QUIET_ENV, Stack, free_port
    from ops.stack import load_settings as stack_settings
    from serving.vllm_admin import VLLMClient

    os.environ.update(QUIET_ENV)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731

    def terminated(signum, frame) -> None:
        say("terminated (SIGTERM): stopping the private vLLM and the neighbours")
        sys.exit(143)  # through the finally and with blocks below

    signal.signal(signal.SIGTERM, terminated)
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
        for bind, busy in args.configs:
            settings = dataclasses.replace(
                base,
                state_dir=Path(tmp) / f"{bind}-{busy}",
                vllm_port=free_port(),
                broker_port=free_port(),
                mlflow_port=free_port(),
                s3_port=free_port(),
                vllm_cpu_bind=bind,
                vllm_busy_loop_s=busy,
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
                row = {
                    "bind": bind,
                    "busy_loop_s": busy,
                    "seconds_alone": round(alone, 1),
                    "seconds_beside": round(seconds, 1),
                    "neighbour_share": round(share, 3),
                    "completion_tokens": [tokens_alone, tokens_beside],
                }
                result["configs"].append(row)
                say(json.dumps(row))
            finally:
                stack.down()
    return finish(result, args.json)
