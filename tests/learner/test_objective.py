"""The objective against numbers worked out by hand."""

import math

import pytest
import torch

from learner.objective import ObjectiveParams, TokenTensors, objective

LN2 = math.log(2.0)


def tokens(lp, old, behaviour, base, adv, mask, matched=None) -> TokenTensors:
    t = lambda xs: torch.tensor([xs], dtype=torch.float64)  # noqa: E731
    return TokenTensors(
        logprobs_B_T=t(lp).requires_grad_(True),
        old_logprobs_B_T=t(old),
        old_matched_logprobs_B_T=t(matched if matched is not None else old),
        behaviour_logprobs_B_T=t(behaviour),
        base_logprobs_B_T=t(base),
        advantages_B_T=t(adv),
        mask_B_T=torch.tensor([mask]),
    )


def test_clipping_truncation_masking_and_kl_by_hand():
    params = ObjectiveParams(mismatch_cap=2.0, mismatch_log_bound=1.0, eps_low=0.2, eps_high=0.3, kl_coef=0.5)
    old = [-1.0, -1.0, -1.0, -1.0, -1.0, -1.0]
    # ρ per token: 1.5 (A=+1, clipped high), 0.5 (A=-1, clipped low), 0.5 (A=+1, not clipped), 1, 1, 1
    lp = [-1.0 + math.log(1.5), -1.0 + math.log(0.5), -1.0 + math.log(0.5), -1.0, -1.0, -1.0]
    # log w: 0, 0, 0, ln 2.5 (truncated to C=2), 1.5 (> δ: masked), 0
    behaviour = [-1.0, -1.0, -1.0, -1.0 - math.log(2.5), -2.5, -1.0]
    # base − θ: ln 2 on token 0, −ln 2 on token 4, 0 elsewhere; token 5 is not an action token
    base = [lp[0] + LN2, lp[1], lp[2], lp[3], lp[4] - LN2, lp[5] + 5.0]
    adv = [1.0, -1.0, 1.0, 1.0, 1.0, 3.0]
    mask = [True, True, True, True, True, False]
    t = tokens(lp, old, behaviour, base, adv, mask)
    loss, metrics = objective(t, params)

    # surrogate: (−1.3 + 0.8 − 0.5 − 2·1 + 0) / 5; KL (k3): (2 − ln2 − 1) + (½ + ln2 − 1) = ½, / 5
    assert metrics["surrogate"] == pytest.approx(-3.0 / 5)
    assert metrics["kl"] == pytest.approx(0.5 / 5)
    assert loss.item() == pytest.approx(-0.6 + 0.5 * 0.1)
    assert metrics["clip_fraction"] == pytest.approx(2 / 5)
    assert metrics["clip_high_fraction"] == pytest.approx(1 / 5)
    assert metrics["clip_low_fraction"] == pytest.approx(1 / 5)
    assert metrics["mismatch_masked_fraction"] == pytest.approx(1 / 5)
    assert metrics["mismatch_truncated_fraction"] == pytest.approx(1 / 5)
    assert metrics["action_tokens"] == 5

    loss.backward()
    # d/dlogπ_θ: clipped tokens carry no surrogate gradient; −w·ρ·A / N elsewhere; KL: β·(1 − e^{base−θ}) / N
    expected = [0.5 * (1 - 2.0) / 5, 0.0, -0.5 / 5, -2.0 / 5, 0.5 * (1 - 0.5) / 5, 0.0]
    assert t.logprobs_B_T.grad[0].tolist() == pytest.approx(expected)


def test_raw_mode_compares_the_matching_distribution():
    params = ObjectiveParams(mismatch_cap=10.0, mismatch_log_bound=0.1, kl_coef=0.0)
    # old (tempered) is far from behaviour, but the matched (raw) logprobs agree: nothing is masked
    t = tokens([-1.0], [-1.0], [-3.0], [-1.0], [1.0], [True], matched=[-3.0])
    loss, metrics = objective(t, params)
    assert metrics["mismatch_masked_fraction"] == 0.0
    assert loss.item() == pytest.approx(-1.0)


def test_on_policy_inputs_give_the_plain_policy_gradient():
    g = torch.Generator().manual_seed(3)
    lp_B_T = -torch.rand(3, 7, generator=g, dtype=torch.float64) * 4
    adv_B_T = torch.randn(3, 7, generator=g, dtype=torch.float64)
    mask_B_T = torch.rand(3, 7, generator=g) > 0.3
    policy_B_T = lp_B_T.clone().requires_grad_(True)
    t = TokenTensors(policy_B_T, lp_B_T, lp_B_T, lp_B_T, lp_B_T, adv_B_T, mask_B_T)
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
    one = tokens([-1.0, -2.0], [-1.1, -2.0], [-1.1, -2.0], [-1.0, -2.0], [1.0, -0.5], [True, True])
    twice = TokenTensors(*(torch.cat([getattr(one, f), getattr(one, f)]) for f in one.__dataclass_fields__))
    assert objective(one, params)[0].item() == pytest.approx(objective(twice, params)[0].item())
    empty = tokens([-1.0], [-1.0], [-1.0], [-1.0], [1.0], [False])
    assert objective(empty, params)[0].item() == 0.0
