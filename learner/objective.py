"""The learner objective: a pure function of per-token tensors (the decoupled form).

Three policies meet at every action token t (``mask_B_T``) of a session served
by adapter version v_old through the serving engine:

* behaviour μ: the engine's recorded logprobs (``behaviour_logprobs_B_T``);
* proximal π_prox: the learner's parameters at the start of this update,
  computed once per micro-batch before its epochs (no gradient);
* current π_θ: the parameters being optimised (``logprobs_B_T``, with gradient).

Ratchet keeps every adapter version, so π_train(v_old), the trainer's own
logprobs of the version that served the session, splits the importance weight
π_prox / μ into its two causes::

    engine mismatch   m_t = 1[|log π_train(v_old) − log μ| ≤ δ]       (numerics: mask beyond δ)
    weight            w_t = min(π_prox / μ, C)                           (policy lag: truncated at C)
    ratio             r_t = π_θ / π_prox                                 (trust region centred on now)
    surrogate         s_t = −w_t · min(r_t·A_t, clip(r_t, 1 − ε_low, 1 + ε_high)·A_t)
    KL anchor         k_t = KL(π_θ(·|t) ‖ π_base(·|t)), exact over the vocabulary (``kl_B_T``)

    loss = (Σ_t m_t·s_t + β·Σ_t k_t) / Σ_t mask_t

``w`` and ``m`` are constants; ``r`` and ``k`` carry the gradient. On-policy
(π_θ = π_prox = π_train(v_old) = μ) the gradient is the plain policy gradient
−Σ_t A_t ∇log π_θ / Σ_t mask_t plus β ∇KL. The loss is normalised by the action
tokens of the batch, so a masked token simply drops out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ObjectiveParams:
    weight_cap: float = 2.0  # C: truncation of the importance weight π_prox / μ
    mismatch_log_bound: float = 0.5  # δ: tokens with |log π_train(v_old) − log μ| above it carry no loss
    eps_low: float = 0.2
    eps_high: float = 0.28
    kl_coef: float = 0.02  # β


@dataclass(frozen=True)
class TokenTensors:
    """Per-token inputs of the objective; every tensor is [B, T] (B rows, T completion positions).

    ``old_matched_logprobs_B_T`` is π_train(v_old) in the distribution of
    ``behaviour_logprobs_B_T`` (tempered for processed logprobs, raw otherwise);
    every other logprob is of the sampling (tempered) distribution.
    """

    logprobs_B_T: torch.Tensor  # π_θ, with gradient
    proximal_logprobs_B_T: torch.Tensor  # π_prox
    old_matched_logprobs_B_T: torch.Tensor  # π_train(v_old), matched to μ's mode
    behaviour_logprobs_B_T: torch.Tensor  # μ
    kl_B_T: torch.Tensor  # KL(π_θ ‖ π_base) per position, with gradient
    advantages_B_T: torch.Tensor
    mask_B_T: torch.Tensor  # bool: action tokens that may carry loss


def exact_kl(logits_N_V: torch.Tensor, base_logits_N_V: torch.Tensor, temperature_N: torch.Tensor):
    """KL(softmax(logits/τ) ‖ softmax(base/τ)) at each of N positions, exact over the vocabulary."""
    scale_N_1 = temperature_N[:, None].to(logits_N_V.dtype)
    logp_N_V = torch.log_softmax(logits_N_V / scale_N_1, dim=-1)
    base_logp_N_V = torch.log_softmax(base_logits_N_V.detach() / scale_N_1, dim=-1)
    return (logp_N_V.exp() * (logp_N_V - base_logp_N_V)).sum(-1)


def objective(
    tokens: TokenTensors, params: ObjectiveParams, n_tokens: float | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss (a scalar with gradient through ``logprobs_B_T`` and ``kl_B_T``) and its components.

    ``n_tokens``: the normaliser, when these rows are a chunk of a larger batch (the
    batch's action tokens: the chunks' losses then sum to the batch's)."""
    mask_B_T = tokens.mask_B_T.bool()
    if n_tokens is None:
        n_tokens = mask_B_T.sum().clamp(min=1)
    logprobs_B_T = tokens.logprobs_B_T
    prox_B_T = tokens.proximal_logprobs_B_T.detach()
    behaviour_B_T = tokens.behaviour_logprobs_B_T.detach()
    adv_B_T = tokens.advantages_B_T.detach()

    log_mismatch_B_T = tokens.old_matched_logprobs_B_T.detach() - behaviour_B_T
    kept_B_T = mask_B_T & (log_mismatch_B_T.abs() <= params.mismatch_log_bound)
    log_weight_B_T = prox_B_T - behaviour_B_T
    weight_B_T = torch.exp(log_weight_B_T).clamp(max=params.weight_cap)

    ratio_B_T = torch.exp(logprobs_B_T - prox_B_T)
    clipped_B_T = ratio_B_T.clamp(1.0 - params.eps_low, 1.0 + params.eps_high)
    surrogate_B_T = -weight_B_T * torch.minimum(ratio_B_T * adv_B_T, clipped_B_T * adv_B_T)
    surrogate_B_T = torch.where(kept_B_T, surrogate_B_T, torch.zeros_like(surrogate_B_T))
    kl_B_T = torch.where(mask_B_T, tokens.kl_B_T, torch.zeros_like(tokens.kl_B_T))

    surrogate = surrogate_B_T.sum() / n_tokens
    kl = kl_B_T.sum() / n_tokens
    loss = surrogate + params.kl_coef * kl

    with torch.no_grad():
        r = ratio_B_T.detach()
        clip_high_B_T = kept_B_T & (adv_B_T > 0) & (r > 1.0 + params.eps_high)
        clip_low_B_T = kept_B_T & (adv_B_T < 0) & (r < 1.0 - params.eps_low)
        lag_B_T = prox_B_T - tokens.old_matched_logprobs_B_T.detach()
        n = float(n_tokens)
        metrics = {
            "loss": float(loss.detach()),
            "surrogate": float(surrogate.detach()),
            "kl": float(kl.detach()),
            "clip_fraction": float((clip_high_B_T | clip_low_B_T).sum()) / n,
            "clip_high_fraction": float(clip_high_B_T.sum()) / n,
            "clip_low_fraction": float(clip_low_B_T.sum()) / n,
            "mismatch_masked_fraction": float((mask_B_T & ~kept_B_T).sum()) / n,
            "mismatch_abs_mean": float(log_mismatch_B_T[mask_B_T].abs().mean()) if mask_B_T.any() else 0.0,
            "lag_abs_mean": float(lag_B_T[mask_B_T].abs().mean()) if mask_B_T.any() else 0.0,
            "weight_truncated_fraction": float(
                (kept_B_T & (log_weight_B_T > math.log(params.weight_cap))).sum()
            )
            / n,
            "weight_mean": float(weight_B_T[kept_B_T].mean()) if kept_B_T.any() else 1.0,
            "ratio_mean": float(r[mask_B_T].mean()) if mask_B_T.any() else 1.0,
            "action_tokens": float(mask_B_T.sum()),
        }
    return loss, metrics
