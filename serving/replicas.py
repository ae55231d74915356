"""One vLLM replica as the controller sees it: what it has loaded, loading from the store, probing."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import httpx

from learner.store import BASE, AdapterStore, StoredAdapter, StoreError
from serving.probe import PROBE_PROMPT, ExpectedLogprobs, ProbeResult, check
from serving.vllm_admin import VLLMClient


@dataclass(frozen=True)
class Observation:
    url: str
    healthy: bool
    loaded: frozenset[str]  # adapter versions loaded under this controller's names
    error: str | None = None
    base_loaded: bool = False  # the base model's zero adapter, "<adapter_prefix>-base", is loaded

    @property
    def held(self) -> frozenset[str]:
        """The loaded versions, and ``base`` when the zero adapter is loaded."""
        return (self.loaded | {BASE}) if self.base_loaded else self.loaded


def base_adapter_name(adapter_prefix: str) -> str:
    """The vLLM name of the base model's zero adapter (never a version's name: ``base`` is no vN)."""
    return f"{adapter_prefix}-{BASE}"


def loaded_versions(model_names: list[str], adapter_prefix: str) -> frozenset[str]:
    """The versions among vLLM model names of the form ``<adapter_prefix>-vN`` (others are not ours)."""
    pattern = re.compile(rf"^{re.escape(adapter_prefix)}-(v[0-9]+)$")
    return frozenset(m.group(1) for m in map(pattern.match, model_names) if m)


def observe(client: VLLMClient, adapter_prefix: str) -> Observation:
    try:
        names = client.models(timeout_s=10.0)
    except httpx.HTTPError as exc:
        return Observation(client.base_url, False, frozenset(), f"{type(exc).__name__}: {exc}")
    base = base_adapter_name(adapter_prefix) in names
    return Observation(client.base_url, True, loaded_versions(names, adapter_prefix), base_loaded=base)


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


@dataclass(frozen=True)
class Loadable:
    """What the controller loads under a name: a stored version, or the base model's zero adapter."""

    version: str  # vN, or BASE
    path: Path  # the adapter folder
    expected_from: Path | None  # the adapter PEFT scores the probe with; None: the base model itself

    @classmethod
    def stored(cls, stored: StoredAdapter) -> Loadable:
        return cls(stored.version, Path(stored.path), Path(stored.path))

    @classmethod
    def zero(cls, path: Path) -> Loadable:
        return cls(BASE, Path(path), None)


def load(client: VLLMClient, name: str, adapter: StoredAdapter | Loadable) -> None:
    client.load_adapter(name, adapter.path)


def probe(
    client: VLLMClient,
    name: str,
    adapter: StoredAdapter | Loadable,
    expected: ExpectedLogprobs,
    tolerance: float,
    max_tokens: int,
) -> ProbeResult:
    """Complete the probe prompt greedily on the replica and compare with PEFT (the base model's zero
    adapter: with the base model); raises ProbeMismatch."""
    if isinstance(adapter, StoredAdapter):
        adapter = Loadable.stored(adapter)
    served = client.complete(name, PROBE_PROMPT, max_tokens=max_tokens, temperature=0.0)
    prompt_ids, completion_ids = tuple(served.prompt_token_ids), tuple(served.token_ids)
    want = expected(adapter.version, adapter.expected_from, prompt_ids, completion_ids)
    result = ProbeResult(adapter.version, prompt_ids, completion_ids, tuple(served.logprobs), want)
    return check(result, tolerance)
