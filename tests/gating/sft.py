"""Test candidates: small supervised LoRA fine-tunes on the CPU, and a random-weight adapter.

Examples that share a prompt prefix (system message and one-shot example) are
trained together: the prefix runs once, its keys and values are broadcast over
the batch, and only the question and completion run per example. This is the
same computation as running every full sequence, at a fraction of the tokens.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from learner.trainer import cache_rows

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
END = "<|im_end|>"


def _split(tokenizer, messages: list[dict], completion: str) -> tuple[tuple[int, ...], list[int], list[int]]:
    """(prefix ids, suffix ids, suffix labels) for a chat whose last message is the question."""
    prefix = tokenizer.apply_chat_template(messages[:-1], tokenize=False)
    full = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert full.startswith(prefix)
    prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    prompt_ids = tokenizer(full[len(prefix) :], add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(completion + END, add_special_tokens=False)["input_ids"]
    return tuple(prefix_ids), prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids


def train_adapter(
    model_dir: Path,
    examples: list[tuple[list[dict], str]],
    out_dir: Path,
    steps: int,
    lr: float = 2e-3,
    rank: int = 8,
    batch: int = 8,
    seed: int = 0,
    layers: list[int] | None = None,
    init_from: Path | None = None,
    log=None,
) -> Path:
    """A LoRA adapter trained with cross-entropy on ``(messages, completion)`` pairs; saved to ``out_dir``."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if init_from is not None:
        model = PeftModel.from_pretrained(model, str(init_from), is_trainable=True)
    else:
        config = LoraConfig(
            r=rank, lora_alpha=2 * rank, target_modules=TARGETS, lora_dropout=0.0, layers_to_transform=layers
        )
        model = get_peft_model(model, config)
    groups: dict[tuple[int, ...], list[tuple[list[int], list[int]]]] = {}
    for messages, completion in examples:
        prefix, ids, labels = _split(tokenizer, messages, completion)
        groups.setdefault(prefix, []).append((ids, labels))
    order = sorted(groups)
    optimiser = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for step in range(steps):
        prefix = order[step % len(order)]
        rows = rng.sample(groups[prefix], min(batch, len(groups[prefix])))
        width = max(len(ids) for ids, _ in rows)
        ids_B_S = torch.tensor([ids + [0] * (width - len(ids)) for ids, _ in rows])
        labels_B_S = torch.tensor([labels + [-100] * (width - len(labels)) for _, labels in rows])
        prefix_1_P = torch.tensor([prefix])
        cache = model(input_ids=prefix_1_P, use_cache=True).past_key_values
        B, P = len(rows), len(prefix)
        shared = cache_rows(
            [layer.keys for layer in cache.layers],
            [layer.values for layer in cache.layers],
            torch.zeros(B, dtype=torch.long),
        )
        positions_B_S = torch.arange(P, P + width).expand(B, -1)
        logits_B_S_V = model(
            input_ids=ids_B_S,
            past_key_values=shared,
            position_ids=positions_B_S,
            attention_mask=torch.ones(B, P + width, dtype=torch.long),
        ).logits
        loss = torch.nn.functional.cross_entropy(
            logits_B_S_V[:, :-1].reshape(-1, logits_B_S_V.shape[-1]), labels_B_S[:, 1:].reshape(-1)
        )
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        if log:
            log(f"step {step + 1}/{steps}: loss {loss.item():.3f}")
    model.save_pretrained(out_dir)
    return out_dir


def random_adapter(model_dir: Path, out_dir: Path, scale: float, rank: int = 8, seed: int = 0) -> Path:
    """A LoRA adapter with random A and B weights of size ``scale``: far from the base model."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(
        model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS, lora_dropout=0.0)
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, scale)
    model.save_pretrained(out_dir)
    return out_dir
