"""A small client for one vLLM replica's OpenAI-compatible and admin endpoints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx


class VLLMError(RuntimeError):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Completion:
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str | None
    model: str


class VLLMClient:
    def __init__(
        self,
        base_url: str,
        timeout_s: float | httpx.Timeout = 120.0,
        transport: httpx.BaseTransport | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self.http.close()

    def _post(self, path: str, body: dict) -> httpx.Response:
        resp = self.http.post(path, json=body)
        if resp.status_code >= 400:
            raise VLLMError(
                f"{self.base_url}{path} answered {resp.status_code}: {resp.text[:500]}", resp.status_code
            )
        return resp

    def healthy(self) -> bool:
        try:
            return self.http.get("/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def models(self, timeout_s: float | None = None) -> list[str]:
        resp = self.http.get("/v1/models", **({"timeout": timeout_s} if timeout_s else {}))
        resp.raise_for_status()
        return [m["id"] for m in resp.json()["data"]]

    def load_adapter(self, name: str, path: Path) -> None:
        """Load a LoRA adapter folder under ``name``. vLLM refuses a name that is already loaded."""
        self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})

    def unload_adapter(self, name: str) -> None:
        self._post("/v1/unload_lora_adapter", {"lora_name": name})

    def complete(
        self, model: str, prompt: list[int] | str, max_tokens: int, temperature: float = 0.0, **extra
    ) -> Completion:
        """A single completion with its token ids and per-token behaviour logprobs."""
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "logprobs": 0,
            "return_token_ids": True,
            **extra,
        }
        data = self._post("/v1/completions", body).json()
        choice = data["choices"][0]
        return Completion(
            prompt_token_ids=choice.get("prompt_token_ids") or data.get("prompt_token_ids") or [],
            token_ids=choice["token_ids"],
            logprobs=[float(x) for x in choice["logprobs"]["token_logprobs"]],
            text=choice["text"],
            finish_reason=choice.get("finish_reason"),
            model=data["model"],
        )
