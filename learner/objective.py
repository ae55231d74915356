"""The learner objective: a pure function of per-token tensors.

For every action token t (``mask_B_T``) of a session served by adapter version
v_old through vLLM::

    mismatch   w_t   = min(exp(log π_train(v_old) − log π_vllm(v_old)), C)
               m_t   = 1[|log π_train(v_old) − log π_vllm(v_old)| ≤ δ]
    staleness  ρ_t   = exp(log π_θ − log π_train(v_old))
    surrogate  s_t   = −w_t · min(ρ_t·A_t, clip(ρ_t, 1 − ε_low, 1 + ε_high)·A_t)
    KL anchor  k_t   = exp(log π_base − log π_θ) − (log π_base − log π_θ) − 1     (k3 estimator, ≥ 0)

    loss = (Σ_t m_t·s_t + β·Σ_t k_t) / Σ_t mask_t

``w`` and ``m`` are constants (no gradient): they correct for the engine
discrepancy between vLLM and the trainer at the same adapter version. ``ρ``
carries the gradient and corrects for policy lag. The loss is normalised by the
number of action tokens in the batch, so a masked token simply drops out.
With on-policy inputs (π_θ = π_train(v_old) = π_vllm(v_old)) the gradient is the
plain policy gradient −Σ_t A_t ∇log π_θ / Σ_t mask_t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ObjectiveParams:
    mismatch_cap: float = 2.0  # C: truncation of the mismatch weight
    mismatch_log_bound: float = 0.5  # δ: tokens with |log w| above it carry no loss
    eps_low: float = 0.2
    eps_high: float = 0.28
    kl_coef: float = 0.02  # β


@dataclass(frozen=True)
class TokenTensors:
    """Per-token inputs of the objective; every tensor is [B, T] (B rows, T completion positions).

    ``old_logprobs_B_T`` is π_train(v_old) in the distribution the ratio uses (at the
    sampling temperature); ``old_matched_logprobs_B_T`` is π_train(v_old) in the same
    distribution as ``behaviour_logprobs_B_T`` (they differ only for raw-mode logprobs).
    """

    logprobs_B_T: torch.Tensor  # π_θ, with gradient
    old_logprobs_B_T: torch.Tensor
    old_matched_logprobs_B_T: torch.Tensor
    behaviour_logprobs_B_T: torch.Tensor  # π_vllm(v_old)
    base_logprobs_B_T: torch.Tensor  # adapter disabled
    advantages_B_T: torch.Tensor
    mask_B_T: torch.Tensor  # bool: action tokens that may carry loss


def objective(tokens: TokenTensors, params: ObjectiveParams) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss (a scalar with gradient through ``logprobs_B_T``) and its components."""
    mask_B_T = tokens.mask_B_T.bool()
    n_tokens = mask_B_T.sum().clamp(min=1)
    logprobs_B_T = tokens.logprobs_B_T
    old_B_T = tokens.old_logprobs_B_T.detach()
    adv_B_T = tokens.advantages_B_T.detach()

    log_w_B_T = (tokens.old_matched_logprobs_B_T - tokens.behaviour_logprobs_B_T).detach()
    weight_B_T = torch.exp(log_w_B_T).clamp(max=params.mismatch_cap)
    kept_B_T = mask_B_T & (log_w_B_T.abs() <= params.mismatch_log_bound)

    ratio_B_T = torch.exp(logprobs_B_T - old_B_T)
    clipped_B_T = ratio_B_T.clamp(1.0 - params.eps_low, 1.0 + params.eps_high)
    surrogate_B_T = -weight_B_T * torch.minimum(ratio_B_T * adv_B_T, clipped_B_T * adv_B_T)
    surrogate_B_T = torch.where(kept_B_T, surrogate_B_T, torch.zeros_like(surrogate_B_T))

    base_diff_B_T = tokens.base_logprobs_B_T.detach() - logprobs_B_T
    kl_B_T = torch.exp(base_diff_B_T) - base_diff_B_T - 1.0
    kl_B_T = torch.where(mask_B_T, kl_B_T, torch.zeros_like(kl_B_T))

    surrogate = surrogate_B_T.sum() / n_tokens
    kl = kl_B_T.sum() / n_tokens
    loss = surrogate + params.kl_coef * kl

    with torch.no_grad():
        r = ratio_B_T.detach()
        clip_high_B_T = kept_B_T & (adv_B_T > 0) & (r > 1.0 + params.eps_high)
        clip_low_B_T = kept_B_T & (adv_B_T < 0) & (r < 1.0 - params.eps_low)
        n = float(n_tokens)
        metrics = {
            "loss": float(loss.detach()),
            "surrogate": float(surrogate.detach()),
            "kl": float(kl.detach()),
            "clip_fraction": float((clip_high_B_T | clip_low_B_T).sum()) / n,
            "clip_high_fraction": float(clip_high_B_T.sum()) / n,
            "clip_low_fraction": float(clip_low_B_T.sum()) / n,
            "mismatch_masked_fraction": float((mask_B_T & ~kept_B_T).sum()) / n,
            "mismatch_truncated_fraction": float(
                (kept_B_T & (log_w_B_T > math.log(params.mismatch_cap))).sum()
            )
            / n,
            "mismatch_weight_mean": float(weight_B_T[kept_B_T].mean()) if kept_B_T.any() else 1.0,
            "ratio_mean": float(r[mask_B_T].mean()) if mask_B_T.any() else 1.0,
            "action_tokens": float(mask_B_T.sum()),
        }
    return loss, metrics
