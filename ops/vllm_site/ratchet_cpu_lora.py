"""Grouped LoRA products for vLLM's CPU engine (imported by this folder's ``sitecustomize``).

vLLM-CPU applies LoRA through ``vllm.lora.ops.torch_ops.lora_ops``, whose ``bgmv_*``
functions gather a copy of the adapter's weight matrix for every token
(``weights[indices]``, [tokens, out, in]) and contract it token by token. On a prompt of
a few thousand tokens that is hundreds of megabytes per projection and layer: prefill
through an adapter ran several times slower than through the base model. Worse, a token
without an adapter has index -1, and ``weights[-1]`` is the *last adapter slot*: a
base-model request batched with a full set of adapters was served with that slot's
adapter added.

These replacements compute the same products as one matrix product per adapter slot
present in the batch (usually one or two), and give tokens with index -1 no LoRA term.
Signatures and in-place semantics are those of the functions they replace.
"""

from __future__ import annotations

import os

import torch


def lora_products(inputs: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor, dtype) -> torch.Tensor:
    """Row t of the result is ``inputs[t] @ weights[indices[t]].T`` (0 where ``indices[t] < 0``)."""
    if weights.dim() == 4:
        weights = weights.squeeze(dim=1)
    x = inputs.to(dtype=dtype)
    tokens = x.shape[0]
    indices = indices[:tokens]
    slots = torch.unique(indices)
    if len(slots) == 1 and int(slots[0]) >= 0 and len(indices) == tokens:  # one adapter: one product
        return x @ weights[int(slots[0])].to(dtype=dtype).T
    out = x.new_zeros((tokens, weights.shape[1]))
    for slot in slots.tolist():
        if slot < 0:
            continue
        rows = (indices == slot).nonzero(as_tuple=True)[0]
        out[rows] = x[rows] @ weights[slot].to(dtype=dtype).T
    return out


def bgmv_shrink(
    inputs: torch.Tensor,
    lora_b_weights: torch.Tensor,
    output_tensor: torch.Tensor,
    lora_indices_tensor: torch.Tensor,
    scaling: float = 1.0,
):
    outputs = lora_products(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    output_tensor[:, : outputs.shape[1]] = scaling * outputs[:]


def bgmv_expand(
    inputs: torch.Tensor,
    lora_b_weights: torch.Tensor,
    output_tensor: torch.Tensor,
    lora_indices_tensor: torch.Tensor,
    add_inputs: bool = True,
):
    outputs = lora_products(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    limit = output_tensor.shape[0]
    if outputs.shape[0] == 1 and output_tensor.shape[0] != 1:
        limit = 1
    # LoRA adapter and model may add different amounts of padding to output
    common_len = min(outputs.shape[1], output_tensor.shape[1])
    if add_inputs:
        output_tensor[:, :common_len] += outputs[:limit, :common_len]
    else:
        output_tensor[:, :common_len] = outputs[:limit, :common_len]


def bgmv_expand_slice(
    inputs: torch.Tensor,
    lora_b_weights: torch.Tensor,
    output_tensor: torch.Tensor,
    lora_indices_tensor: torch.Tensor,
    slice_offset: int,
    slice_size: int,
    add_inputs: bool = True,
):
    outputs = lora_products(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    if add_inputs:
        output_tensor[:, slice_offset : slice_offset + slice_size] += outputs[:]
    else:
        output_tensor[:, slice_offset : slice_offset + slice_size] = outputs[:]


REPLACED = {"bgmv_shrink": bgmv_shrink, "bgmv_expand": bgmv_expand, "bgmv_expand_slice": bgmv_expand_slice}


def patch(module) -> None:
    """Replace the ``bgmv_*`` functions of vLLM's ``lora_ops`` module (its ``sgmv_*`` functions call
    them by name, so prefill goes through them too)."""
    for name, function in REPLACED.items():
        if not hasattr(module, name):
            raise RuntimeError(
                f"{module.__name__} has no {name}: this vLLM is not the one these were written for"
            )
        setattr(module, name, function)
    module.RATCHET_PATCHED = True
    print(f"ratchet: grouped CPU LoRA kernels in {module.__name__} (pid {os.getpid()})", flush=True)
