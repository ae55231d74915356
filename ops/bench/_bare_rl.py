"""The learning benchmark's reference arm: the plainest synchronous RL loop on one vLLM server.

Each round: sample ``prompts_per_round`` tasks × ``samples`` completions from vLLM with the
current adapter → verify each with the gate's verifier (reward 1 or 0) → one clipped
policy-gradient step with peft (a full forward over prompt + completion with gradient,
advantage = reward − the group's mean reward) → save the adapter to a new folder → load it
into vLLM under a new name → repeat until the wall-clock budget is spent. No Kafka, no gate.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import torch

from gating.tasks import Task, sample_tasks
from gating.verifiers import verify


@dataclass(frozen=True)
class BareConfig:
    model_dir: Path
    vllm_url: str
    base_model: str  # the base model's name on vLLM
    family: str
    seed: int
    minutes: float
    prompts_per_round: int = 8
    samples: int = 4  # completions per prompt: the group of the baseline
    temperature: float = 0.7
    max_tokens: int = 40
    learning_rate: float = 1e-3
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    epochs: int = 1  # optimisation steps per round
    clip_eps: float = 0.2
    grad_clip: float = 1.0
    torch_threads: int = 1  # 0: torch's default
    adapter_prefix: str = "bare"  # round k is served on vLLM as "<prefix>-r<k>"


@dataclass
class Group:
    task: Task
    prompt_ids: list[int]
    token_ids: list[list[int]]
    logprobs: list[list[float]]  # vLLM's processed (temperature-scaled) behaviour logprobs
    rewards: list[float]


@dataclass
class BareResult:
    rounds: list[dict] = field(default_factory=list)  # per round: minute, samples, success, adapter
    final_adapter: Path | None = None  # the newest adapter saved within the budget; None: the base model
    samples: int = 0
    minutes: float = 0.0


def task_stream(family: str, seed: int, group_size: int) -> Iterator[Task]:
    """Tasks in the order the traffic simulator draws them (``ops.simulator``, one family, ``sim_seed``)."""
    n = 0
    while True:
        n += 1
        (task,) = sample_tasks(family, 1, seed=seed * 1_000_003 + n)
        yield from [task] * group_size


def sample_group(http: httpx.Client, cfg: BareConfig, model: str, task: Task) -> Group:
    prompt_ids = http.post(
        "/tokenize", json={"model": cfg.base_model, "messages": task.messages, "add_generation_prompt": True}
    ).json()["tokens"]
    resp = http.post(
        "/v1/completions",
        json={
            "model": model,
            "prompt": prompt_ids,
            "n": cfg.samples,
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
            "logprobs": 0,
            "return_token_ids": True,
        },
    )
    resp.raise_for_status()
    choices = sorted(resp.json()["choices"], key=lambda c: c["index"])
    return Group(
        task,
        prompt_ids,
        [list(c["token_ids"]) for c in choices],
        [[float(x) for x in c["logprobs"]["token_logprobs"]] for c in choices],
        [float(verify(task, c["text"]).passed) for c in choices],
    )


def group_loss(model, group: Group, cfg: BareConfig, tokens: int) -> torch.Tensor | None:
    """Clipped policy-gradient loss of one group (summed over its tokens, divided by ``tokens``)."""
    rewards_G = torch.tensor(group.rewards)
    advantages_G = rewards_G - rewards_G.mean()
    if not advantages_G.abs().sum():
        return None
    P, C = len(group.prompt_ids), max(len(t) for t in group.token_ids)
    ids_G_S = torch.zeros(len(group.token_ids), P + C, dtype=torch.long)
    attention_G_S = torch.zeros_like(ids_G_S)
    mask_G_C = torch.zeros(len(group.token_ids), C)
    old_G_C = torch.zeros(len(group.token_ids), C)
    for g, (tokens_g, logprobs_g) in enumerate(zip(group.token_ids, group.logprobs, strict=True)):
        ids_G_S[g, : P + len(tokens_g)] = torch.tensor(group.prompt_ids + tokens_g)
        attention_G_S[g, : P + len(tokens_g)] = 1
        mask_G_C[g, : len(tokens_g)] = 1
        old_G_C[g, : len(tokens_g)] = torch.tensor(logprobs_g)
    logits_G_C_V = model(input_ids=ids_G_S, attention_mask=attention_G_S).logits[:, P - 1 : P + C - 1]
    logprobs_G_C_V = torch.log_softmax(logits_G_C_V.float() / cfg.temperature, dim=-1)
    logprobs_G_C = logprobs_G_C_V.gather(-1, ids_G_S[:, P:, None])[..., 0]
    ratio_G_C = torch.exp(logprobs_G_C - old_G_C)
    adv_G_1 = advantages_G[:, None]
    surrogate_G_C = torch.minimum(
        ratio_G_C * adv_G_1, ratio_G_C.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv_G_1
    )
    return -(surrogate_G_C * mask_G_C).sum() / tokens


def run(cfg: BareConfig, work: Path, say: Callable[[str], None]) -> BareResult:
    """The loop until ``cfg.minutes`` have passed; only adapters saved within the budget count."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(cfg.seed)
    if cfg.torch_threads > 0:
        torch.set_num_threads(cfg.torch_threads)
    base = AutoModelForCausalLM.from_pretrained(cfg.model_dir, dtype=torch.float32)
    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        target_modules=list(cfg.lora_targets),
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(base, lora)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=0.0)
    tasks = task_stream(cfg.family, cfg.seed, cfg.samples)
    result = BareResult()
    served, loaded = cfg.base_model, None
    http = httpx.Client(base_url=cfg.vllm_url.rstrip("/"), timeout=600)
    start = time.monotonic()
    deadline = start + cfg.minutes * 60

    def minute() -> float:
        return round((time.monotonic() - start) / 60, 3)

    try:
        k = 0
        while time.monotonic() < deadline:
            k += 1
            round_tasks = [next(tasks) for _ in range(cfg.prompts_per_round * cfg.samples)][:: cfg.samples]
            began = time.monotonic()
            with ThreadPoolExecutor(len(round_tasks)) as pool:
                groups = list(pool.map(functools.partial(sample_group, http, cfg, served), round_tasks))
            sampled = time.monotonic()
            if sampled >= deadline:
                say(f"bare r{k}: the budget ran out while sampling ({sampled - began:.0f} s)")
                break
            n = sum(len(g.rewards) for g in groups)
            result.samples += n
            success = sum(sum(g.rewards) for g in groups) / n
            learnable = [g for g in groups if len(set(g.rewards)) > 1]
            tokens = sum(len(t) for g in learnable for t in g.token_ids)
            entry = {"round": k, "samples": n, "success": round(success, 3), "served": served}
            entry["sample_s"] = round(sampled - began, 1)
            if not learnable:
                say(f"bare r{k}: success {success:.2f}, every group uniform: no update ({minute():.1f} min)")
                result.rounds.append(entry | {"minute": minute(), "adapter": None})
                continue
            model.train(False)  # no dropout; LoRA layers still take gradients
            for _ in range(cfg.epochs):
                for group in learnable:
                    loss = group_loss(model, group, cfg, tokens)
                    if loss is not None:
                        loss.backward()
                    if time.monotonic() >= deadline:
                        break
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            if time.monotonic() >= deadline:
                say(f"bare r{k}: the budget ran out while training ({time.monotonic() - sampled:.0f} s)")
                break
            folder = work / f"r{k}"
            model.save_pretrained(folder)
            name = f"{cfg.adapter_prefix}-r{k}"
            http.post(
                "/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(folder)}
            ).raise_for_status()
            if loaded is not None:
                http.post("/v1/unload_lora_adapter", json={"lora_name": loaded}).raise_for_status()
            served = loaded = name
            result.final_adapter = folder
            entry["train_s"] = round(time.monotonic() - sampled, 1)
            result.rounds.append(entry | {"minute": minute(), "adapter": name})
            say(
                f"bare r{k}: success {success:.2f} on {n} samples (sampled in {entry['sample_s']:.0f} s), "
                f"trained on {tokens} completion tokens in {entry['train_s']:.0f} s; serving {name} "
                f"at {minute():.1f} min"
            )
        result.minutes = round((min(time.monotonic(), deadline) - start) / 60, 3)
    finally:
        if loaded is not None:
            http.post("/v1/unload_lora_adapter", json={"lora_name": loaded})
        http.close()
    return result
