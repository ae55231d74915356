"""One vLLM replica as the controller sees it: what it has loaded, loading from the store, probing."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import httpx

from learner.store import AdapterStore, StoredAdapter, StoreError
from serving.probe import PROBE_PROMPT, ExpectedLogprobs, ProbeResult, check
from serving.vllm_admin import VLLMClient


@dataclass(frozen=True)
class Observation:
    url: str
    healthy: bool
    loaded: frozenset[str]  # adapter versions loaded under this controller's names
    error: str | None = None


def loaded_versions(model_names: list[str], adapter_prefix: str) -> frozenset[str]:
    """The versions among vLLM model names of the form ``<adapter_prefix>-vN`` (others are not ours)."""
    pattern = re.compile(rf"^{re.escape(adapter_prefix)}-(v[0-9]+)$")
    return frozenset(m.group(1) for m in map(pattern.match, model_names) if m)


def observe(client: VLLMClient, adapter_prefix: str) -> Observation:
    try:
        names = client.models(timeout_s=10.0)
    except httpx.HTTPError as exc:
        return Observation(client.base_url, False, frozenset(), f"{type(exc).__name__}: {exc}")
    return Observation(client.base_url, True, loaded_versions(names, adapter_prefix))


def from_store(store: AdapterStore, version: str) -> StoredAdapter:
    """The version's folder in the store, after its content hash is checked; nothing else is loadable.

    Raises StoreError (``TamperedAdapter`` on a hash mismatch) for a name that is not a version, a
    version missing from the store, or a version folder that leads outside the store."""
    stored = store.verify(version)
    if stored.path.resolve().parent != store.versions_dir.resolve():
        raise StoreError(
            f"adapter {version}: {stored.path} leads outside the store ({stored.path.resolve()})"
        )
    return stored


def load(client: VLLMClient, name: str, stored: StoredAdapter) -> None:
    client.load_adapter(name, stored.path)


def probe(
    client: VLLMClient,
    name: str,
    stored: StoredAdapter,
    expected: ExpectedLogprobs,
    tolerance: float,
    max_tokens: int,
) -> ProbeResult:
    """Complete the probe prompt greedily on the replica and compare with PEFT; raises ProbeMismatch."""
    served = client.complete(name, PROBE_PROMPT, max_tokens=max_tokens, temperature=0.0)
    prompt_ids, completion_ids = tuple(served.prompt_token_ids), tuple(served.token_ids)
    want = expected(stored.version, Path(stored.path), prompt_ids, completion_ids)
    result = ProbeResult(stored.version, prompt_ids, completion_ids, tuple(served.logprobs), want)
    return check(result, tolerance)
