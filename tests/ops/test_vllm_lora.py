"""The grouped CPU LoRA kernels the local vLLM runs with (ops/vllm_site): the same products as
vLLM-CPU's per-token gather, one matrix product per adapter slot, and no LoRA term for a token
without an adapter (index -1, which vLLM's own kernels read as the last slot)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from ops.stack import VLLM_SITE

sys.path.insert(0, str(VLLM_SITE))
import ratchet_cpu_lora as grouped  # noqa: E402

SLOTS, RANK, HIDDEN, TOKENS = 4, 8, 48, 37


def per_token(inputs, weights, indices):
    """vLLM-CPU's products, token by token: inputs[t] @ weights[indices[t]].T, for indices >= 0."""
    weights = weights.squeeze(1) if weights.dim() == 4 else weights
    return torch.stack(
        [
            inputs[t] @ weights[i].T if i >= 0 else torch.zeros(weights.shape[1])
            for t, i in enumerate(indices.tolist())
        ]
    )


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(TOKENS, HIDDEN, generator=g),
        torch.randn(SLOTS, 1, RANK, HIDDEN, generator=g),  # lora_a stacked: [slots, 1, rank, in]
        torch.randn(SLOTS, 1, HIDDEN, RANK, generator=g),  # lora_b stacked: [slots, 1, out, rank]
        torch.randn(TOKENS, RANK, generator=g),
    )


@pytest.mark.parametrize("kind", ["one adapter", "mixed", "mixed with base tokens"])
def test_the_products_equal_vllms_per_token_ones_and_base_tokens_get_none(data, kind):
    x, a, b, h = data
    if kind == "one adapter":
        indices = torch.full((TOKENS,), 2)
    else:
        low = -1 if "base" in kind else 0
        indices = torch.randint(low, SLOTS, (TOKENS,), generator=torch.Generator().manual_seed(1))
    shrunk = torch.zeros(TOKENS, RANK)
    grouped.bgmv_shrink(x, a, shrunk, indices, 0.5)
    torch.testing.assert_close(shrunk, 0.5 * per_token(x, a, indices), rtol=1e-5, atol=1e-5)

    out = torch.ones(TOKENS, HIDDEN)
    grouped.bgmv_expand(h, b, out, indices, add_inputs=True)
    torch.testing.assert_close(out, 1 + per_token(h, b, indices), rtol=1e-5, atol=1e-5)
    if "base" in kind:
        assert (indices == -1).any() and torch.equal(out[indices == -1], torch.ones_like(out[indices == -1]))

    wide = torch.zeros(TOKENS, 3 * HIDDEN)
    grouped.bgmv_expand_slice(h, b, wide, indices, HIDDEN, HIDDEN, add_inputs=False)
    torch.testing.assert_close(wide[:, HIDDEN : 2 * HIDDEN], per_token(h, b, indices), rtol=1e-5, atol=1e-5)
    assert not wide[:, :HIDDEN].any() and not wide[:, 2 * HIDDEN :].any()


def test_patch_replaces_the_three_kernels_and_refuses_a_module_without_them():
    module = types.SimpleNamespace(
        __name__="lora_ops", bgmv_shrink=None, bgmv_expand=None, bgmv_expand_slice=None
    )
    grouped.patch(module)
    assert module.bgmv_shrink is grouped.bgmv_shrink and module.bgmv_expand_slice is grouped.bgmv_expand_slice
    with pytest.raises(RuntimeError, match="has no bgmv_expand"):
        grouped.patch(types.SimpleNamespace(__name__="other", bgmv_shrink=None))


def test_the_local_vllm_runs_the_grouped_kernels(lazy_stack, vllm_url):
    log = lazy_stack.stack.log_path("vllm").read_text(errors="replace")
    assert "ratchet: grouped CPU LoRA kernels" in log
