"""The objective against numbers worked out by hand: values and gradients."""

import math

import pytest
import torch

from learner.objective import ObjectiveParams, TokenTensors, exact_kl, objective

LN2 = math.log(2.0)


def tokens(lp, prox, behaviour, kl, adv, mask, matched=None) -> TokenTensors:
    t = lambda xs: torch.tensor([xs], dtype=torch.float64)  # noqa: E731
    return TokenTensors(
        logprobs_B_T=t(lp).requires_grad_(True),
        proximal_logprobs_B_T=t(prox),
        old_matched_logprobs_B_T=t(matched if matched is not None else prox),
        behaviour_logprobs_B_T=t(behaviour),
        kl_B_T=t(kl).requires_grad_(True),
        advantages_B_T=t(adv),
        mask_B_T=torch.tensor([mask]),
    )


def test_clip_sides_truncation_mismatch_masking_and_kl_by_hand():
    params = ObjectiveParams(weight_cap=2.0, mismatch_log_bound=1.0, eps_low=0.2, eps_high=0.3, kl_coef=0.5)
    prox = [-1.0] * 6
    # r = π_θ/π_prox per token: 1.5 (A=+1, clipped high), 0.5 (A=-1, clipped low), 0.5 (A=+1, not clipped),
    # 0.75 (A=-1, not clipped: the low side binds only for A < 0 below 1 − ε), 1, 1
    lp = [-1.0 + math.log(1.5), -1.0 + math.log(0.5), -1.0 + math.log(0.5), -1.0 + math.log(0.75), -1.0, -1.0]
    # w = π_prox/μ: 1, 1, 1, 1, 2.5 → truncated to C = 2, and token 5 is not an action token
    behaviour = [-1.0, -1.0, -1.0, -1.0, -1.0 - math.log(2.5), -1.0]
    # π_train(v_old) vs μ: within δ = 1 except token 3 (log mismatch 1.5: masked)
    matched = [-1.0, -1.0, -1.0, -2.5, -1.0 - math.log(2.5), -1.0]
    kl = [0.2, 0.0, 0.1, 0.4, 0.3, 9.0]
    adv = [1.0, -1.0, 1.0, -1.0, 1.0, 3.0]
    mask = [True, True, True, True, True, False]
    t = tokens(lp, prox, behaviour, kl, adv, mask, matched)
    loss, metrics = objective(t, params)

    # surrogate per token: −1.3 (clipped), +0.8 (clipped), −0.5, masked, −2·1; N = 5
    assert metrics["surrogate"] == pytest.approx((-1.3 + 0.8 - 0.5 - 2.0) / 5)
    assert metrics["kl"] == pytest.approx((0.2 + 0.0 + 0.1 + 0.4 + 0.3) / 5)
    assert loss.item() == pytest.approx(-3.0 / 5 + 0.5 * 1.0 / 5)
    assert metrics["clip_fraction"] == pytest.approx(2 / 5)
    assert metrics["clip_high_fraction"] == pytest.approx(1 / 5)
    assert metrics["clip_low_fraction"] == pytest.approx(1 / 5)
    assert metrics["mismatch_masked_fraction"] == pytest.approx(1 / 5)
    assert metrics["weight_truncated_fraction"] == pytest.approx(1 / 5)
    assert metrics["action_tokens"] == 5

    loss.backward()
    # d/dlog π_θ = −w·r·A / N where unclipped and kept, 0 where clipped, masked or not an action
    expected = [0.0, 0.0, -0.5 / 5, 0.0, -2.0 / 5, 0.0]
    assert t.logprobs_B_T.grad[0].tolist() == pytest.approx(expected)
    # d/dKL = β / N on action tokens (masked by mismatch or not), 0 elsewhere
    assert t.kl_B_T.grad[0].tolist() == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.1, 0.0])


def test_the_trust_region_is_centred_on_the_proximal_policy_not_the_stale_version():
    """A session many versions old: π_train(v_old) is far from π_θ, but π_θ = π_prox, so the ratio is 1
    and the token keeps its gradient, weighted by the (truncated) lag weight π_prox/μ."""
    params = ObjectiveParams(weight_cap=2.0, mismatch_log_bound=0.5, kl_coef=0.0)
    # μ = π_train(v_old) = −3 (no engine mismatch); the learner has moved on to π_prox = π_θ = −1.5
    t = tokens([-1.5, -1.5], [-1.5, -1.5], [-3.0, -1.2], [0.0, 0.0], [1.0, 1.0], [True, True], [-3.0, -1.2])
    loss, metrics = objective(t, params)
    loss.backward()
    w = [2.0, math.exp(-1.5 + 1.2)]  # e^{1.5} truncated to 2; e^{−0.3}
    assert loss.item() == pytest.approx(-(w[0] + w[1]) / 2)
    assert t.logprobs_B_T.grad[0].tolist() == pytest.approx([-w[0] / 2, -w[1] / 2])
    assert metrics["clip_fraction"] == 0.0 and metrics["ratio_mean"] == pytest.approx(1.0)
    assert metrics["lag_abs_mean"] == pytest.approx((1.5 + 0.3) / 2)


def test_exact_kl_by_hand_and_its_gradient():
    # two positions over a vocabulary of 2; temperature 1 and 0.5
    logits_N_V = torch.tensor([[0.0, LN2], [0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    base_N_V = torch.tensor([[0.0, 0.0], [0.0, LN2]], dtype=torch.float64)
    kl_N = exact_kl(logits_N_V, base_N_V, torch.tensor([1.0, 0.5], dtype=torch.float64))
    # p = (1/3, 2/3), q = (1/2, 1/2): KL = 1/3 ln(2/3) + 2/3 ln(4/3)
    first = (1 / 3) * math.log(2 / 3) + (2 / 3) * math.log(4 / 3)
    # at τ = 0.5: p = (1/2, 1/2), q ∝ (1, 4) = (1/5, 4/5): KL = ½ ln(5/2) + ½ ln(5/8)
    second = 0.5 * math.log(2.5) + 0.5 * math.log(5 / 8)
    assert kl_N.tolist() == pytest.approx([first, second])
    kl_N[0].backward()
    # ∂KL/∂z_v = p_v (log p_v − log q_v − KL) / τ
    p, q = [1 / 3, 2 / 3], [0.5, 0.5]
    grad = [p[v] * (math.log(p[v]) - math.log(q[v]) - first) for v in range(2)]
    assert logits_N_V.grad[0].tolist() == pytest.approx(grad)
    assert logits_N_V.grad[1].tolist() == [0.0, 0.0]
    same = exact_kl(base_N_V, base_N_V, torch.ones(2, dtype=torch.float64))
    assert same.tolist() == pytest.approx([0.0, 0.0], abs=1e-12)


def test_mismatch_is_judged_on_the_distribution_the_engine_reported():
    params = ObjectiveParams(weight_cap=10.0, mismatch_log_bound=0.1, kl_coef=0.0)
    # π_prox is far from μ (real lag: weighted), but π_train(v_old) in μ's mode agrees: nothing is masked
    t = tokens([-1.0], [-1.0], [-3.0], [0.0], [1.0], [True], matched=[-3.0])
    loss, metrics = objective(t, params)
    assert metrics["mismatch_masked_fraction"] == 0.0
    assert loss.item() == pytest.approx(-math.exp(2.0))
    masked = tokens([-1.0], [-1.0], [-3.0], [0.0], [1.0], [True], matched=[-1.0])
    assert objective(masked, params)[1]["mismatch_masked_fraction"] == 1.0


def test_on_policy_inputs_give_the_plain_policy_gradient():
    g = torch.Generator().manual_seed(3)
    lp_B_T = -torch.rand(3, 7, generator=g, dtype=torch.float64) * 4
    adv_B_T = torch.randn(3, 7, generator=g, dtype=torch.float64)
    mask_B_T = torch.rand(3, 7, generator=g) > 0.3
    policy_B_T = lp_B_T.clone().requires_grad_(True)
    t = TokenTensors(policy_B_T, lp_B_T, lp_B_T, lp_B_T, torch.zeros_like(lp_B_T), adv_B_T, mask_B_T)
    loss, metrics = objective(t, ObjectiveParams(kl_coef=0.1))
    loss.backward()

    plain_B_T = lp_B_T.clone().requires_grad_(True)
    n = mask_B_T.sum()
    plain = -(adv_B_T * plain_B_T * mask_B_T).sum() / n
    plain.backward()
    assert loss.item() == pytest.approx((-(adv_B_T * mask_B_T).sum() / n).item())  # ρ = 1
    assert torch.allclose(policy_B_T.grad, plain_B_T.grad)
    assert (
        metrics["kl"] == 0.0
        and metrics["clip_fraction"] == 0.0
        and metrics["mismatch_masked_fraction"] == 0.0
    )


def test_loss_is_normalised_per_action_token():
    params = ObjectiveParams()
    one = tokens([-1.0, -2.0], [-1.1, -2.0], [-1.1, -2.0], [0.1, 0.2], [1.0, -0.5], [True, True])
    twice = TokenTensors(*(torch.cat([getattr(one, f), getattr(one, f)]) for f in one.__dataclass_fields__))
    assert objective(one, params)[0].item() == pytest.approx(objective(twice, params)[0].item())
    empty = tokens([-1.0], [-1.0], [-1.0], [0.3], [1.0], [False])
    assert objective(empty, params)[0].item() == 0.0
