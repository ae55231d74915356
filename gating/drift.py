"""Drift: per-token KL of the candidate from a reference policy, on the candidate's own samples.

The candidate samples a continuation of every reference prompt through vLLM
(temperature 1). Then, on the CPU with PEFT, each continuation is run under the
candidate and under the reference (base model: adapter off; champion: its
adapter), and at every sampled position the KL between the two next-token
distributions is computed exactly over the vocabulary:

    KL = mean over positions t of  Σ_v p_cand(v | x, y_<t) · (log p_cand(v | ·) − log p_ref(v | ·))

Monte Carlo over trajectories only, so it is never negative and far less noisy
than a single-token estimator. (vLLM's ``prompt_logprobs`` would avoid the CPU
pass, but with a LoRA adapter in the batch it kills the vLLM-CPU engine.)
``engine_gap`` is the mean absolute difference between vLLM's and PEFT's
log-prob of each sampled token under the candidate: a check that both run the
same policy.
"""

from __future__ import annotations

from pathlib import Path

import torch

from gating.harness import DriftSample


class DriftScorer:
    def __init__(self, model_dir: Path, torch_threads: int = 0):
        from transformers import AutoModelForCausalLM

        if torch_threads:
            torch.set_num_threads(torch_threads)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    @torch.no_grad()
    def kl(
        self, samples: list[DriftSample], candidate: Path, references: dict[str, Path | None], vllm_key: str
    ) -> dict[str, dict[str, float]]:
        """``{reference key: {"kl", "engine_gap", "tokens"}}``; a reference path of None is the base model."""
        from peft import PeftModel

        model = PeftModel.from_pretrained(self.model, str(candidate), adapter_name="candidate")
        names: dict[str, str] = {}
        for key, folder in references.items():
            if folder is not None:
                names[key] = f"reference{len(names)}"
                model.load_adapter(str(folder), adapter_name=names[key])

        def logprobs(name: str | None, sample: DriftSample) -> torch.Tensor:
            """log-softmax over the vocabulary at each sampled position, shape [T, V]."""
            ids_1_S = torch.tensor([sample.prompt_ids + sample.token_ids])
            keep = len(sample.token_ids) + 1
            if name is None:
                with model.disable_adapter():
                    logits_1_K_V = model(input_ids=ids_1_S, logits_to_keep=keep).logits
            else:
                model.set_adapter(name)
                logits_1_K_V = model(input_ids=ids_1_S, logits_to_keep=keep).logits
            return torch.log_softmax(logits_1_K_V[0, :-1].float(), dim=-1)

        totals = {key: [0.0, 0.0, 0] for key in references}
        try:
            for sample in samples:
                if not sample.token_ids:
                    continue
                cand_T_V = logprobs("candidate", sample)
                chosen_T = cand_T_V.gather(-1, torch.tensor(sample.token_ids)[:, None])[:, 0]
                gap = float((chosen_T - torch.tensor(sample.logprobs[vllm_key])).abs().sum())
                for key in references:
                    ref_T_V = logprobs(names.get(key), sample)
                    totals[key][0] += float((cand_T_V.exp() * (cand_T_V - ref_T_V)).sum())
                    totals[key][1] += gap
                    totals[key][2] += len(sample.token_ids)
        finally:
            self.model = model.unload()  # the base model again, without LoRA layers
        return {
            key: {"kl": kl / n if n else 0.0, "engine_gap": gap / n if n else 0.0, "tokens": float(n)}
            for key, (kl, gap, n) in totals.items()
        }
