"""The policy model (base + a trainable LoRA adapter), per-token logprobs and one optimisation step.

One PEFT model holds the trainable adapter (``default``) and, frozen, the
recent store versions that served sessions (named by version, an LRU of
``adapter_cache_size``). π_train(v_old) and the base model's logits come from
one no-gradient mixed-adapter forward (PEFT ``adapter_names``; ``__base__`` is
the adapter disabled); π_θ from a forward with gradient through prompt and
completion, whose first epoch is also the proximal policy π_prox.

Temperature: vLLM's ``processed`` logprobs are of the tempered distribution the
tokens were drawn from, so π_train(v_old) is compared with them at that
temperature; ``raw`` logprobs are compared at temperature 1. The ratio, the
importance weight and the KL anchor use the sampling temperature: the policy
being improved is the one that samples.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from pathlib import Path

import torch

from learner.batching import Padded
from learner.objective import ObjectiveParams, TokenTensors, exact_kl, objective
from learner.settings import LearnerSettings
from learner.store import AdapterStore

BASE_ADAPTER = "__base__"
POLICY_ADAPTER = "default"


def load_policy(settings: LearnerSettings, adapter_dir: Path | None = None):
    """The base model with the trainable adapter: fresh (identical to the base model) or from ``adapter_dir``."""
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    if settings.model_dir is None:
        raise ValueError("the learner needs the base model folder: set RATCHET_MODEL_DIR")
    torch.manual_seed(settings.seed)
    if settings.torch_threads > 0:
        torch.set_num_threads(settings.torch_threads)
    base = AutoModelForCausalLM.from_pretrained(settings.model_dir, dtype=torch.float32)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(base, adapter_dir, adapter_name=POLICY_ADAPTER, is_trainable=True)
    else:
        config = LoraConfig(
            r=settings.lora_rank,
            lora_alpha=settings.lora_alpha,
            target_modules=list(settings.lora_targets),
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(base, config, adapter_name=POLICY_ADAPTER)
    model.eval()  # no dropout anywhere; mixed-adapter forwards need eval mode
    return model


def token_logprobs(
    logits_B_C_V: torch.Tensor, ids_B_C: torch.Tensor, temperature_B: torch.Tensor
) -> torch.Tensor:
    """log softmax(logits / temperature) at ``ids``, [B, C]."""
    scaled_B_C_V = logits_B_C_V / temperature_B[:, None, None]
    picked_B_C = scaled_B_C_V.gather(-1, ids_B_C[..., None])[..., 0]
    return picked_B_C - torch.logsumexp(scaled_B_C_V, dim=-1)


def completion_logits(
    model, batch: Padded, adapter_names: list[str] | None = None, grad: bool = False
) -> torch.Tensor:
    """Logits predicting each completion token, [B, C, V], with gradient through prompt and completion.

    Rows that share a prompt (a task's group, a conversation's earlier turns) run it
    once: its keys and values are computed for each distinct (prompt, adapter), with
    gradient when ``grad``, and expanded to the rows; the backward pass sums the rows'
    gradients into it, so the result equals a full forward of each row.
    """
    prompt_ids_B_P, prompt_mask_B_P = batch.prompt_ids_B_P, batch.prompt_mask_B_P
    completion_ids_B_C, completion_mask_B_C = batch.completion_ids_B_C, batch.completion_mask_B_C.long()
    B, P = prompt_ids_B_P.shape
    C = completion_ids_B_C.shape[1]
    extra = {} if adapter_names is None else {"adapter_names": adapter_names}
    head_mask_B_H = prompt_mask_B_P[:, :-1]
    past = None
    with torch.set_grad_enabled(grad):
        if P > 1:
            unique_U, inverse_B = _distinct_rows(prompt_ids_B_P[:, :-1], head_mask_B_H, adapter_names)
            head_ids_U_H, head_mask_U_H = prompt_ids_B_P[unique_U, :-1], head_mask_B_H[unique_U]
            unique_extra = (
                {} if adapter_names is None else {"adapter_names": [adapter_names[u] for u in unique_U]}
            )
            past = model(
                input_ids=head_ids_U_H,
                attention_mask=head_mask_U_H,
                position_ids=(head_mask_U_H.cumsum(1) - 1).clamp(min=0),
                use_cache=True,
                logits_to_keep=1,
                **unique_extra,
            ).past_key_values
            if len(unique_U) < B:
                from transformers import DynamicCache

                past = DynamicCache(
                    ddp_cache_data=[(layer.keys[inverse_B], layer.values[inverse_B]) for layer in past.layers]
                )
        tail_ids_B_C = torch.cat([prompt_ids_B_P[:, -1:], completion_ids_B_C[:, :-1]], dim=1)
        tail_mask_B_C = torch.cat([torch.ones(B, 1, dtype=torch.long), completion_mask_B_C[:, :-1]], dim=1)
        position_B_C = prompt_mask_B_P.sum(1, keepdim=True) - 1 + torch.arange(C)[None, :]
        out = model(
            input_ids=tail_ids_B_C,
            attention_mask=torch.cat([head_mask_B_H, tail_mask_B_C], dim=1),
            position_ids=position_B_C,
            past_key_values=past,
            use_cache=past is not None,
            **extra,
        )
    return out.logits.to(torch.promote_types(out.logits.dtype, torch.float32))


def _distinct_rows(
    ids_B_H: torch.Tensor, mask_B_H: torch.Tensor, adapter_names: list[str] | None
) -> tuple[list[int], torch.Tensor]:
    """The first row of each distinct (prompt, adapter), and each row's index among those."""
    first: dict[tuple, int] = {}
    firsts: list[int] = []
    inverse: list[int] = []
    for b in range(ids_B_H.shape[0]):
        key = (
            adapter_names[b] if adapter_names is not None else None,
            tuple(ids_B_H[b][mask_B_H[b].bool()].tolist()),
        )
        if key not in first:
            first[key] = len(firsts)
            firsts.append(b)
        inverse.append(first[key])
    return firsts, torch.tensor(inverse)


class AdapterCache:
    """Store versions loaded as frozen adapters of the policy model, least recently used evicted."""

    def __init__(self, model, store: AdapterStore, size: int):
        self.model, self.store, self.size = model, store, max(1, size)
        self.loaded: OrderedDict[str, None] = OrderedDict()

    def ensure(self, versions: set[str]) -> None:
        for version in sorted(versions):
            if version in self.loaded:
                self.loaded.move_to_end(version)
                continue
            stored = self.store.verify(version)
            self.model.load_adapter(stored.path, adapter_name=version, is_trainable=False)
            self.loaded[version] = None
        while len(self.loaded) > max(self.size, len(versions)):
            victim = next(v for v in self.loaded if v not in versions)
            self.model.delete_adapter(victim)
            del self.loaded[victim]
        self.model.set_adapter(POLICY_ADAPTER)


class Trainer:
    def __init__(self, model, store: AdapterStore, settings: LearnerSettings):
        self.model = model
        self.settings = settings
        self.cache = AdapterCache(model, store, settings.adapter_cache_size)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=settings.learning_rate, weight_decay=settings.weight_decay
        )

    def reference(self, batch: Padded, with_base: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """π_train(v_old) matched to the behaviour logprobs' mode, [B, C], and the base model's
        logits at the action tokens, [N, V] (when ``with_base``); one forward, no gradient."""
        self.cache.ensure({v for v in batch.versions if v is not None})
        B = len(batch.versions)
        names = [v or BASE_ADAPTER for v in batch.versions]
        rows = list(range(B))
        base_rows: list[int] = []
        if with_base:
            base_rows = [b for b in range(B) if names[b] != BASE_ADAPTER]
            rows += base_rows
            names += [BASE_ADAPTER] * len(base_rows)
        with torch.no_grad():
            logits_R_C_V = completion_logits(self.model, batch.select(rows), adapter_names=names)
            temperature_B = torch.where(batch.processed_B, batch.temperature_B, torch.ones(B))
            matched_B_C = token_logprobs(logits_R_C_V[:B], batch.completion_ids_B_C, temperature_B)
            base_N_V = None
            if with_base:
                base_B_C_V = logits_R_C_V[:B].clone()
                if base_rows:
                    base_B_C_V[torch.tensor(base_rows)] = logits_R_C_V[B:]
                base_N_V = base_B_C_V[batch.loss_mask_B_C]
        return matched_B_C, base_N_V

    def policy_logits(self, batch: Padded, grad: bool = True) -> torch.Tensor:
        return completion_logits(self.model, batch, grad=grad)

    def policy_logprobs(self, batch: Padded, grad: bool = True) -> torch.Tensor:
        return token_logprobs(self.policy_logits(batch, grad), batch.completion_ids_B_C, batch.temperature_B)

    def loss(
        self,
        batch: Padded,
        params: ObjectiveParams,
        matched_B_C: torch.Tensor,
        base_N_V: torch.Tensor | None,
        proximal_B_C: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
        """The objective at the current parameters (with gradient) and π_θ's logprobs, [B, C].
        ``proximal_B_C`` None: this forward is the proximal policy (the update's first epoch)."""
        logits_B_C_V = self.policy_logits(batch)
        logprobs_B_C = token_logprobs(logits_B_C_V, batch.completion_ids_B_C, batch.temperature_B)
        kl_B_C = torch.zeros_like(logprobs_B_C)
        if base_N_V is not None:
            mask_B_C = batch.loss_mask_B_C
            temperature_N = batch.temperature_B[:, None].expand_as(mask_B_C)[mask_B_C]
            kl_B_C = kl_B_C.masked_scatter(
                mask_B_C, exact_kl(logits_B_C_V[mask_B_C], base_N_V, temperature_N)
            )
        tokens = TokenTensors(
            logprobs_B_T=logprobs_B_C,
            proximal_logprobs_B_T=logprobs_B_C.detach() if proximal_B_C is None else proximal_B_C,
            old_matched_logprobs_B_T=matched_B_C,
            behaviour_logprobs_B_T=batch.behaviour_logprobs_B_C,
            kl_B_T=kl_B_C,
            advantages_B_T=batch.advantages_B_C,
            mask_B_T=batch.loss_mask_B_C,
        )
        loss, metrics = objective(tokens, params)
        return loss, metrics, logprobs_B_C.detach()

    def step(self, batch: Padded, params: ObjectiveParams) -> dict[str, float]:
        """``epochs_per_batch`` optimisation steps on a micro-batch against one reference and one
        proximal policy (the parameters before the first step); returns the last step's loss
        components, and timings."""
        start = time.perf_counter()
        matched_B_C, base_N_V = self.reference(batch, with_base=params.kl_coef > 0)
        proximal_B_C = None
        for _ in range(max(1, self.settings.epochs_per_batch)):
            loss, metrics, logprobs_B_C = self.loss(batch, params, matched_B_C, base_N_V, proximal_B_C)
            if proximal_B_C is None:
                proximal_B_C = logprobs_B_C
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.settings.grad_clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - start
        metrics.update(
            grad_norm=float(grad_norm),
            step_seconds=seconds,
            tokens_per_s=batch.tokens / seconds,
            action_tokens_per_s=batch.action_tokens / seconds,
        )
        return metrics

    def save_adapter(self, folder: Path) -> None:
        self.model.save_pretrained(folder, selected_adapters=[POLICY_ADAPTER])
