"""The policy model (base + a trainable LoRA adapter), per-token logprobs and one optimisation step.

One PEFT model holds the trainable adapter (``default``) and, frozen, the
recent store versions that served sessions (named by version, an LRU of
``adapter_cache_size``). π_train(v_old) and the base model's logits come from
one no-gradient mixed-adapter forward (PEFT ``adapter_names``; ``__base__`` is
the adapter disabled); π_θ from a forward with gradient through prompt and
completion, whose first epoch is also the proximal policy π_prox.

The KL anchor is exact over the vocabulary at every action token of the rows it
covers: rows served by the base model (whose reference forward is the base model
itself) and a random ``kl_row_fraction`` of the others, each of those counted
1/fraction times, so the anchor's value and gradient are unbiased estimates of the
whole micro-batch's at a fraction of the base-model forwards (``kl_row_weights``).

Temperature: vLLM's ``processed`` logprobs are of the tempered distribution the
tokens were drawn from, so π_train(v_old) is compared with them at that
temperature; ``raw`` logprobs are compared at temperature 1. The ratio, the
importance weight and the KL anchor use the sampling temperature: the policy
being improved is the one that samples.
"""

from __future__ import annotations

import math
import time
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple

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
    torch.manual_seed(settings.lora_seed)
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

    Rows that share the start of their prompt (a task's group, a conversation's earlier
    turns, which are a prefix of its later ones) run it once: each row's prompt is split
    into a shared head (see ``shared_prefixes``), whose keys and values are computed once
    per distinct (head, adapter) with gradient when ``grad`` and expanded to its rows, and
    the row's own rest, run over the shared head's cache. The backward pass sums the rows'
    gradients into the shared parts, so the result equals a full forward of each row.
    """
    from transformers import DynamicCache

    prompt_ids_B_P, prompt_mask_B_P = batch.prompt_ids_B_P, batch.prompt_mask_B_P
    completion_ids_B_C, completion_mask_B_C = batch.completion_ids_B_C, batch.completion_mask_B_C.long()
    B, P = prompt_ids_B_P.shape
    C = completion_ids_B_C.shape[1]
    names = adapter_names

    def named(rows: list[int]) -> dict:
        return {} if names is None else {"adapter_names": [names[r] for r in rows]}

    keys: list[torch.Tensor] = []  # per layer, [B, heads, H, dim], for the prompt minus its last token
    values: list[torch.Tensor] = []
    mask_B_H = torch.zeros(B, 0, dtype=torch.long)
    with torch.set_grad_enabled(grad):
        if P > 1:
            heads = [prompt_head(batch, b) for b in range(B)]
            shared, split_B = shared_prefixes(heads, names)
            inverse_B = torch.tensor(
                [shared.index((names[b] if names else None, tuple(heads[b][: split_B[b]]))) for b in range(B)]
            )
            S = max((len(ids) for _, ids in shared), default=0)
            if S > 0:
                ids_U_S, mask_U_S = _left_padded([list(ids) for _, ids in shared], S)
                firsts = [int((inverse_B == u).nonzero()[0]) for u in range(len(shared))]
                past = model(
                    input_ids=ids_U_S,
                    attention_mask=mask_U_S,
                    position_ids=(mask_U_S.cumsum(1) - 1).clamp(min=0),
                    use_cache=True,
                    logits_to_keep=1,
                    **named(firsts),
                ).past_key_values
                keys = [layer.keys[inverse_B] for layer in past.layers]
                values = [layer.values[inverse_B] for layer in past.layers]
                mask_B_H = mask_U_S[inverse_B]
            rests = [heads[b][split_B[b] :] for b in range(B)]
            R = max(len(r) for r in rests)
            if R > 0:
                own = [b for b in range(B) if rests[b]]
                own_R = torch.tensor(own)
                ids_O_R, mask_O_R = _left_padded([rests[b] for b in own], R)
                before_O = mask_B_H[own_R]
                cache = cache_rows(keys, values, own_R) if keys else None
                past = model(
                    input_ids=ids_O_R,
                    attention_mask=torch.cat([before_O, mask_O_R], dim=1),
                    position_ids=before_O.sum(1, keepdim=True) + (mask_O_R.cumsum(1) - 1).clamp(min=0),
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=1,
                    **named(own),
                ).past_key_values
                width = mask_B_H.shape[1]
                rest_keys, rest_values = [], []
                for layer in past.layers:  # the rows without a rest of their own get masked zeros
                    rest_k, rest_v = layer.keys[:, :, width:], layer.values[:, :, width:]
                    shape = (B, *rest_k.shape[1:])
                    rest_keys.append(rest_k.new_zeros(shape).index_copy(0, own_R, rest_k))
                    rest_values.append(rest_v.new_zeros(shape).index_copy(0, own_R, rest_v))
                if keys:
                    keys = [torch.cat(pair, dim=2) for pair in zip(keys, rest_keys, strict=True)]
                    values = [torch.cat(pair, dim=2) for pair in zip(values, rest_values, strict=True)]
                else:
                    keys, values = rest_keys, rest_values
                mask_B_R = torch.zeros(B, R, dtype=torch.long)
                mask_B_R[own_R] = mask_O_R
                mask_B_H = torch.cat([mask_B_H, mask_B_R], dim=1)
        tail_ids_B_C = torch.cat([prompt_ids_B_P[:, -1:], completion_ids_B_C[:, :-1]], dim=1)
        tail_mask_B_C = torch.cat([torch.ones(B, 1, dtype=torch.long), completion_mask_B_C[:, :-1]], dim=1)
        position_B_C = prompt_mask_B_P.sum(1, keepdim=True) - 1 + torch.arange(C)[None, :]
        past = DynamicCache(ddp_cache_data=list(zip(keys, values, strict=True))) if keys else None
        out = model(
            input_ids=tail_ids_B_C,
            attention_mask=torch.cat([mask_B_H, tail_mask_B_C], dim=1),
            position_ids=position_B_C,
            past_key_values=past,
            use_cache=past is not None,
            **named(list(range(B))),
        )
    return out.logits.to(torch.promote_types(out.logits.dtype, torch.float32))


def cache_rows(keys: list[torch.Tensor], values: list[torch.Tensor], index: torch.Tensor):
    """A KV cache whose rows are the rows ``index`` picks from per-layer ``keys`` and ``values``
    ([N, heads, T, dim]): a prefix run once, for every row that continues it (gradient flows back)."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=[(k[index], v[index]) for k, v in zip(keys, values, strict=True)])


def prompt_head(batch: Padded, b: int) -> list[int]:
    """Row ``b``'s prompt without its last token (the part run before the completion's tail)."""
    return batch.prompt_ids_B_P[b, :-1][batch.prompt_mask_B_P[b, :-1].bool()].tolist()


def _left_padded(rows: list[list[int]], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row)
            mask[i, width - len(row) :] = 1
    return ids, mask


def shared_prefixes(
    heads: list[list[int]], names: list[str] | None
) -> tuple[list[tuple[str | None, tuple[int, ...]]], list[int]]:
    """Where each row's prompt splits into a head run once for several rows and its own rest.

    Each row starts from the longest prefix it shares with another row of the same
    adapter; a head is then folded into a shorter one that is its prefix when that costs
    fewer token positions (its own length against the extra rest of its rows), so that a
    conversation's later turns share their first turn's prompt instead of each pair of
    them sharing a slightly longer one. Returns the distinct (adapter, head) pairs and
    each row's split (its head's length)."""
    B = len(heads)
    adapter = [names[b] if names else None for b in range(B)]

    def common(a: list[int], b: list[int]) -> int:
        n = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            n += 1
        return n

    split = [
        max((common(heads[b], heads[o]) for o in range(B) if o != b and adapter[o] == adapter[b]), default=0)
        for b in range(B)
    ]

    def key(b: int) -> tuple[str | None, tuple[int, ...]]:
        return adapter[b], tuple(heads[b][: split[b]])

    folded = True
    while folded:
        folded = False
        members: dict[tuple[str | None, tuple[int, ...]], list[int]] = {}
        for b in range(B):
            members.setdefault(key(b), []).append(b)
        for (name, head), rows in sorted(members.items(), key=lambda kv: -len(kv[0][1])):
            shorter = [h for n, h in members if n == name and 0 < len(h) < len(head) and head[: len(h)] == h]
            if not shorter:
                continue
            target = len(max(shorter, key=len))
            if (len(head) - target) * len(rows) < len(head):
                for b in rows:
                    split[b] = target
                folded = True
                break
    shared = sorted({key(b) for b in range(B)}, key=lambda s: (str(s[0]), s[1]))
    return shared, split


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


def kl_row_weights(batch: Padded, fraction: float) -> torch.Tensor:
    """Each row's weight in the KL anchor, [B]: 1 for rows served by the base model (their base
    logits come with their reference forward); of the n others, ceil(fraction·n) drawn without
    replacement weigh n / ceil(fraction·n) and the rest 0, so every row's expected weight is 1.
    The draw is a function of the micro-batch's content: the same batch, after a restart, draws
    the same rows."""
    weights_B = torch.tensor([1.0 if v is None else 0.0 for v in batch.versions], dtype=torch.float64)
    others = [b for b, v in enumerate(batch.versions) if v is not None]
    if not others:
        return weights_B
    m = min(len(others), max(1, math.ceil(fraction * len(others) - 1e-9)))
    if m == len(others):
        weights_B[others] = 1.0
        return weights_B
    key = zlib.crc32(batch.completion_ids_B_C.numpy().tobytes())
    key = zlib.crc32(batch.prompt_ids_B_P.numpy().tobytes(), key)
    key = zlib.crc32("\0".join(v or "" for v in batch.versions).encode(), key)
    order = torch.randperm(len(others), generator=torch.Generator().manual_seed(key))
    weights_B[[others[i] for i in order[:m].tolist()]] = len(others) / m
    return weights_B


class Reference(NamedTuple):
    matched_B_C: torch.Tensor  # π_train(v_old) at the behaviour logprobs' temperature (not for reused rows)
    base_N_V: torch.Tensor | None  # the base model's logits at the action tokens (zero where unweighted)
    reused_B: torch.Tensor  # rows whose π_train(v_old) is the proximal policy
    kl_weight_B: torch.Tensor | None  # each row's weight in the KL anchor (``kl_row_weights``)


class Trainer:
    def __init__(self, model, store: AdapterStore, settings: LearnerSettings):
        self.model = model
        self.weights_are: str | None = None  # the store version the trainable adapter equals, if any
        self.reference_rows = 0  # rows the last reference forward ran
        self.settings = settings
        self.cache = AdapterCache(model, store, settings.adapter_cache_size)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=settings.learning_rate, weight_decay=settings.weight_decay
        )

    def chunks(self, batch: Padded) -> list[list[int]]:
        """The batch's rows in chunks of about ``grad_chunk_tokens`` positions run (a shared head
        once, plus each row's rest and completion), rows that share a head kept together."""
        budget, B = self.settings.grad_chunk_tokens, len(batch.versions)
        if budget <= 0 or B <= 1:
            return [list(range(B))]
        heads = [prompt_head(batch, b) for b in range(B)]
        _, split_B = shared_prefixes(heads, None)
        clusters: dict[tuple[int, ...], list[int]] = {}
        for b in range(B):
            clusters.setdefault(tuple(heads[b][: split_B[b]]), []).append(b)
        lengths_B = batch.completion_mask_B_C.sum(1).tolist()
        out: list[list[int]] = []
        current: list[int] = []
        cost, heads_in = 0, set()
        for head, rows in clusters.items():
            for b in rows:
                extra = (
                    len(heads[b])
                    - split_B[b]
                    + 1
                    + int(lengths_B[b])
                    + (0 if head in heads_in else len(head))
                )
                if current and cost + extra > budget:
                    out.append(current)
                    current, cost, heads_in = [], 0, set()
                    extra = len(heads[b]) - split_B[b] + 1 + int(lengths_B[b]) + len(head)
                current.append(b)
                cost += extra
                heads_in.add(head)
        return [*out, current] if current else out

    def reference(self, batch: Padded, with_base: bool) -> Reference:
        """π_train(v_old) matched to the behaviour logprobs' mode, [B, C], and the base model's
        logits at the action tokens, [N, V] (when ``with_base``: of the rows ``kl_row_weights``
        gives a weight, zero elsewhere); no gradient, mixed-adapter forwards chunk by chunk.

        Rows sampled by the version the trainable adapter still equals (published, or
        rebased on, and not stepped since) are left out: their π_train(v_old) is π_θ at
        the update's start, the proximal policy, filled in by ``loss``."""
        reused_B = torch.tensor(
            [
                v is not None
                and v == self.weights_are
                and (bool(batch.processed_B[b]) or float(batch.temperature_B[b]) == 1.0)
                for b, v in enumerate(batch.versions)
            ],
            dtype=torch.bool,
        )
        self.cache.ensure({v for b, v in enumerate(batch.versions) if v is not None and not reused_B[b]})
        names = [v or BASE_ADAPTER for v in batch.versions]
        matched_B_C = torch.zeros(batch.completion_ids_B_C.shape)
        counts_B = batch.loss_mask_B_C.sum(1)
        starts_B = counts_B.cumsum(0) - counts_B
        base_N_V = None
        kl_weight_B = kl_row_weights(batch, self.settings.kl_row_fraction) if with_base else None
        self.reference_rows = 0
        for chunk in self.chunks(batch):
            rows = [b for b in chunk if not reused_B[b]]
            base_rows = (
                [b for b in chunk if names[b] != BASE_ADAPTER and float(kl_weight_B[b]) > 0]
                if kl_weight_B is not None
                else []
            )
            forward = rows + base_rows
            self.reference_rows += len(forward)
            if not forward:
                continue
            with torch.no_grad():
                logits_R_C_V = completion_logits(
                    self.model,
                    batch.select(forward),
                    adapter_names=[names[b] for b in rows] + [BASE_ADAPTER] * len(base_rows),
                )
                if rows:
                    own = batch.select(rows)
                    temperature_O = torch.where(own.processed_B, own.temperature_B, torch.ones(len(rows)))
                    matched_B_C = matched_B_C.to(logits_R_C_V.dtype)
                    matched_B_C[torch.tensor(rows)] = token_logprobs(
                        logits_R_C_V[: len(rows)], own.completion_ids_B_C, temperature_O
                    )
                if not with_base:
                    continue
                if base_N_V is None:
                    base_N_V = logits_R_C_V.new_zeros((int(counts_B.sum()), logits_R_C_V.shape[-1]))
                # rows served by the base model are their own base; the rest were run under it
                at = {b: i for i, b in enumerate(rows) if names[b] == BASE_ADAPTER}
                at |= {b: len(rows) + i for i, b in enumerate(base_rows)}
                for b, i in at.items():
                    start = int(starts_B[b])
                    base_N_V[start : start + int(counts_B[b])] = logits_R_C_V[i][batch.loss_mask_B_C[b]]
        if with_base and base_N_V is None:
            base_N_V = torch.zeros(int(counts_B.sum()), 1)  # no action token
        return Reference(matched_B_C, base_N_V, reused_B, kl_weight_B)

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
        reused_B: torch.Tensor | None = None,
        n_tokens: float | None = None,
        kl_weight_B: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float], TokenTensors]:
        """The objective at the current parameters (with gradient), and its per-token inputs.
        ``proximal_B_C`` None: this forward is the proximal policy (the update's first epoch).
        ``reused_B``: rows whose π_train(v_old) is the proximal policy (see ``reference``).
        ``n_tokens``: the normaliser when ``batch`` is a chunk (the whole batch's action tokens).
        ``kl_weight_B``: each row's weight in the KL anchor (None: 1 for every row); the KL is
        computed only where it is non-zero, ``base_N_V`` still holding every action token."""
        logits_B_C_V = self.policy_logits(batch)
        logprobs_B_C = token_logprobs(logits_B_C_V, batch.completion_ids_B_C, batch.temperature_B)
        if reused_B is not None and bool(reused_B.any()):
            proximal = logprobs_B_C.detach() if proximal_B_C is None else proximal_B_C
            matched_B_C = torch.where(reused_B[:, None], proximal, matched_B_C)
        kl_B_C = torch.zeros_like(logprobs_B_C)
        if base_N_V is not None:
            mask_B_C = batch.loss_mask_B_C
            if kl_weight_B is None:
                kl_weight_B = torch.ones(len(batch.versions), dtype=torch.float64)
            covered_B_C = mask_B_C & (kl_weight_B > 0)[:, None]
            covered_N = covered_B_C[mask_B_C]
            temperature_N = batch.temperature_B[:, None].expand_as(mask_B_C)[covered_B_C]
            kl_B_C = kl_B_C.masked_scatter(
                covered_B_C, exact_kl(logits_B_C_V[covered_B_C], base_N_V[covered_N], temperature_N)
            )
            kl_B_C = kl_B_C * kl_weight_B.to(kl_B_C.dtype)[:, None]
        tokens = TokenTensors(
            logprobs_B_T=logprobs_B_C,
            proximal_logprobs_B_T=logprobs_B_C.detach() if proximal_B_C is None else proximal_B_C,
            old_matched_logprobs_B_T=matched_B_C,
            behaviour_logprobs_B_T=batch.behaviour_logprobs_B_C,
            kl_B_T=kl_B_C,
            advantages_B_T=batch.advantages_B_C,
            mask_B_T=batch.loss_mask_B_C,
        )
        loss, metrics = objective(tokens, params, n_tokens)
        return loss, metrics, tokens

    def step(self, batch: Padded, params: ObjectiveParams) -> dict[str, float]:
        """``epochs_per_batch`` optimisation steps on a micro-batch against one reference and one
        proximal policy (the parameters before the first step); each step back-propagates the
        rows chunk by chunk (``chunks``) and sums their gradients. Returns the last step's loss
        components (over the whole micro-batch), and timings."""
        start = time.perf_counter()
        matched_B_C, base_N_V, reused_B, kl_weight_B = self.reference(batch, with_base=params.kl_coef > 0)
        chunks = self.chunks(batch)
        counts_B = batch.loss_mask_B_C.sum(1)
        starts_B = counts_B.cumsum(0) - counts_B
        n_tokens = float(counts_B.sum().clamp(min=1))
        proximal_B_C = None
        for _ in range(max(1, self.settings.epochs_per_batch)):
            logprobs_B_C = torch.zeros(batch.completion_ids_B_C.shape, dtype=matched_B_C.dtype)
            kl_B_C = torch.zeros_like(logprobs_B_C)
            used_B_C = matched_B_C.clone()
            for rows in chunks:
                index_R = torch.tensor(rows)
                part = batch.select(rows)
                base = None
                if base_N_V is not None:
                    positions = [torch.arange(int(starts_B[b]), int(starts_B[b] + counts_B[b])) for b in rows]
                    base = base_N_V[torch.cat(positions)]
                loss, _, tokens = self.loss(
                    part,
                    params,
                    matched_B_C[index_R],
                    base,
                    None if proximal_B_C is None else proximal_B_C[index_R],
                    reused_B[index_R],
                    n_tokens,
                    None if kl_weight_B is None else kl_weight_B[index_R],
                )
                loss.backward()
                logprobs_B_C[index_R] = tokens.logprobs_B_T.detach().to(logprobs_B_C.dtype)
                kl_B_C[index_R] = tokens.kl_B_T.detach().to(kl_B_C.dtype)
                used_B_C[index_R] = tokens.old_matched_logprobs_B_T.detach().to(used_B_C.dtype)
            with torch.no_grad():  # the components over the whole micro-batch
                _, metrics = objective(
                    TokenTensors(
                        logprobs_B_T=logprobs_B_C,
                        proximal_logprobs_B_T=logprobs_B_C if proximal_B_C is None else proximal_B_C,
                        old_matched_logprobs_B_T=used_B_C,
                        behaviour_logprobs_B_T=batch.behaviour_logprobs_B_C,
                        kl_B_T=kl_B_C,
                        advantages_B_T=batch.advantages_B_C,
                        mask_B_T=batch.loss_mask_B_C,
                    ),
                    params,
                )
            if proximal_B_C is None:
                proximal_B_C = logprobs_B_C
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.settings.grad_clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.weights_are = None
        seconds = time.perf_counter() - start
        metrics.update(
            grad_norm=float(grad_norm),
            step_seconds=seconds,
            tokens_per_s=batch.tokens / seconds,
            action_tokens_per_s=batch.action_tokens / seconds,
            reference_rows=float(self.reference_rows),
            chunks=float(len(chunks)),
        )
        return metrics

    def save_adapter(self, folder: Path) -> None:
        self.model.save_pretrained(folder, selected_adapters=[POLICY_ADAPTER])
