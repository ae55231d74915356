"""The probe that proves a replica serves an adapter version's weights.

The replica completes a fixed prompt greedily under the version's name; the
same prompt and completion tokens are then scored with PEFT on the CPU from the
adapter store's (hash-verified) files. The replica passes when every token's
logprob agrees within a tolerance (vLLM fp32 and PEFT fp32 agree to ~2e-5; a
different adapter, or the base model, is off by ~0.1 nats or more). Expected
logprobs are computed once per (version, tokens) and cached. The base model's
zero adapter is checked against the base model itself.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

PROBE_PROMPT = "The three most important rules for writing safe code are"


class ProbeMismatch(RuntimeError):
    """A replica's logprobs for a version differ from what the stored adapter gives."""


@dataclass(frozen=True)
class ProbeResult:
    version: str
    prompt_token_ids: tuple[int, ...]
    completion_token_ids: tuple[int, ...]
    served_logprobs: tuple[float, ...]
    expected_logprobs: tuple[float, ...]

    @property
    def max_abs_diff(self) -> float:
        return compare(self.served_logprobs, self.expected_logprobs)


def compare(served: tuple[float, ...] | list[float], expected: tuple[float, ...] | list[float]) -> float:
    """Largest per-token |served - expected|; infinite when the lengths differ or nothing was served."""
    if not served or len(served) != len(expected):
        return float("inf")
    return max(abs(a - b) for a, b in zip(served, expected, strict=True))


def check(result: ProbeResult, tolerance: float) -> ProbeResult:
    """The result, or ProbeMismatch naming the gap."""
    gap = result.max_abs_diff
    if not gap <= tolerance:
        raise ProbeMismatch(
            f"probe logprobs of {result.version} differ from the stored adapter's by {gap:.3g} nats "
            f"(tolerance {tolerance:g}) over {len(result.completion_token_ids)} tokens"
        )
    return result


class ExpectedLogprobs:
    """Per-token logprobs of a completion under a stored adapter, with PEFT on the CPU (cached)."""

    def __init__(self, model_dir: Path):
        self.model_dir = Path(model_dir)
        self._base = None
        self._lock = threading.Lock()
        self._cache: dict[tuple, tuple[float, ...]] = {}

    def __call__(
        self,
        version: str,
        adapter_dir: Path | None,
        prompt_ids: tuple[int, ...],
        completion_ids: tuple[int, ...],
    ) -> tuple[float, ...]:
        """``adapter_dir`` None: the base model's own logprobs (what its zero adapter must give)."""
        key = (version, str(adapter_dir), prompt_ids, completion_ids)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = self._compute(adapter_dir, prompt_ids, completion_ids)
            return self._cache[key]

    def forget(self, version: str) -> None:
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if k[0] != version}

    def _compute(
        self, adapter_dir: Path | None, prompt_ids: tuple[int, ...], completion_ids: tuple[int, ...]
    ) -> tuple[float, ...]:
        import torch
        from peft import PeftModel

        from learner.logprobs import completion_logprobs

        if self._base is None:
            from transformers import AutoModelForCausalLM

            self._base = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32).eval()
        if adapter_dir is None:
            with torch.no_grad():
                logprobs_T = completion_logprobs(self._base, list(prompt_ids), list(completion_ids))
            return tuple(float(x) for x in logprobs_T)
        model = PeftModel.from_pretrained(self._base, adapter_dir).eval()
        try:
            with torch.no_grad():
                logprobs_T = completion_logprobs(model, list(prompt_ids), list(completion_ids))
        finally:
            self._base = model.unload()  # the base model without the adapter's layers, for the next one
        return tuple(float(x) for x in logprobs_T)
