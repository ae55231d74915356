"""What the controller should do, as pure functions of what it observed.

- ``retained``: the last ``retention`` versions the alias was routed to (the served champion and
  the one before it) stay loaded, so a rollback is only a route flip.
- ``keep_versions``: the desired version, those, and versions that open sessions or in-flight
  requests still use (newest first, up to ``max_loaded_versions``).
- ``choose_alias``: the alias moves to the desired version only once a replica serves it,
  verified; until then it stays where it is.
- ``build_routes``: a replica serves a version only when it is healthy, has it loaded and
  verified, and the version is kept; a canary (a champion on trial) is named once a replica
  serves it; it serves the base model through the zero adapter when it
  has that loaded and verified (``base`` in its verified set). The routes name the zero adapter
  only while some healthy replica serves it: with none, base requests go to the plain model.
- ``unloadable``: a loaded version that is not kept is unloaded only once every proxy follows the
  current routes (which no longer list it) and reports no request in flight on it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from learner.store import BASE, version_number  # BASE: the base model's key in counts and verified sets
from serving.replicas import Observation
from serving.routing import Canary, Replica, Routes


@dataclass(frozen=True)
class ProxyReport:
    url: str
    generation: int
    inflight: dict[str, int]
    open_sessions: dict[str, int]

    @classmethod
    def from_state(cls, url: str, state: dict) -> ProxyReport:
        return cls(url, int(state["generation"]), dict(state["inflight"]), dict(state["open_sessions"]))


def newest_first(versions) -> list[str]:
    return sorted(set(versions), key=version_number, reverse=True)


def note_served(history: list[str | None], routed: str | None, limit: int = 100) -> list[str | None]:
    """The history of versions the alias was routed to, with ``routed`` appended if it moved."""
    if history and history[-1] == routed:
        return history
    return [*history, routed][-limit:]


def retained(history: list[str | None], retention: int) -> list[str]:
    """The last ``retention`` distinct adapter versions the alias was routed to, the current one first."""
    out: list[str] = []
    for version in reversed(history):
        if len(out) >= retention:
            break
        if version is not None and version not in out:
            out.append(version)
    return out


def keep_versions(
    desired: str | None,
    retain: list[str],
    reports: list[ProxyReport | None],
    loaded: set[str],
    max_loaded: int,
) -> list[str]:
    """Versions to keep loaded, in the order to load them. A proxy that did not report (None) may
    still be using anything: then every loaded version is kept."""
    keep = [desired] if desired is not None else []
    keep += [v for v in retain if v != desired]
    if any(r is None for r in reports):
        return keep + [v for v in newest_first(loaded) if v not in keep]
    held = {
        v for r in reports for counts in (r.inflight, r.open_sessions) for v, n in counts.items() if n > 0
    }
    held.discard(BASE)
    room = max(0, max_loaded - len(keep))
    return keep + [v for v in newest_first(held) if v not in keep][:room]


def choose_alias(desired: str | None, current: str | None, serving: dict[str, set[str]]) -> str | None:
    """Where the alias points: the desired version once a replica serves it verified, else unchanged."""
    if desired is None or any(desired in versions for versions in serving.values()):
        return desired
    return current


def build_routes(
    alias: str,
    version: str | None,
    observations: list[Observation],
    verified: dict[str, set[str]],
    keep: list[str],
    generation: int,
    base_adapter: str | None = None,
    canary: tuple[str, float] | None = None,
) -> Routes:
    """The routes; ``base_adapter``: the zero adapter's vLLM name (None: the base model is the plain
    model); ``canary``: a version on trial and its share of new sessions, named only once a healthy
    replica serves it verified."""
    replicas = tuple(
        Replica(
            o.url,
            o.healthy,
            frozenset(verified.get(o.url, set()) & o.loaded & set(keep)) if o.healthy else frozenset(),
            bool(base_adapter) and o.healthy and o.base_loaded and BASE in verified.get(o.url, set()),
        )
        for o in observations
    )
    if not any(r.base for r in replicas):
        base_adapter = None
        replicas = tuple(dataclasses.replace(r, base=False) for r in replicas)
    trial = {}
    if canary is not None and canary[0] != version and any(canary[0] in (r.versions or ()) for r in replicas):
        trial = {alias: Canary(*canary)}
    return Routes({alias: version}, replicas, generation, base_adapter=base_adapter, canary=trial)


def unloadable(
    observations: list[Observation],
    keep: list[str],
    reports: list[ProxyReport | None],
    generation: int,
) -> list[tuple[str, str]]:
    """(replica url, version) pairs that may be unloaded now."""
    if any(r is None or r.generation != generation for r in reports):
        return []  # a proxy may still route to a version the current routes dropped
    busy = {v for r in reports for v, n in r.inflight.items() if n > 0}
    return [
        (o.url, v)
        for o in observations
        if o.healthy
        for v in newest_first(o.loaded)
        if v not in keep and v not in busy
    ]
