"""Per-token log-probabilities of completions under a (PEFT) causal LM."""

from __future__ import annotations

import torch


def completion_logprobs(
    model, prompt_ids: list[int], completion_ids: list[int], temperature: float = 1.0
) -> torch.Tensor:
    """log p(completion_t | prompt, completion_<t) for each completion token, shape [T].

    ``temperature`` divides the logits first, matching a sampler that drew the
    tokens at that temperature (vLLM ``processed_logprobs``); 0 means greedy and
    is treated as 1 (the logits are not rescaled for greedy decoding).
    """
    ids_S = torch.tensor([prompt_ids + completion_ids])
    logits_S_V = model(input_ids=ids_S).logits[0].float()
    start = len(prompt_ids) - 1
    logits_T_V = logits_S_V[start : start + len(completion_ids)]
    if temperature and temperature != 1.0:
        logits_T_V = logits_T_V / temperature
    logprobs_T_V = torch.log_softmax(logits_T_V, dim=-1)
    return logprobs_T_V.gather(-1, torch.tensor(completion_ids)[:, None])[:, 0]
