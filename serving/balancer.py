"""Which replica a proxy request goes to, and what is in flight where: the drain contract.

The routes file written by the serving controller (see ``serving.routing``)
names the replicas and the adapter versions each has loaded and verified. A
request goes to the least busy healthy replica that serves its version
(rotating among equals). A replica that failed a request is skipped for
``eject_s`` (the proxy's ``replica_eject_s``) or until new routes (the
controller has looked at the replicas again): for every version, or for the
one version it no longer knows.

Drain contract with the serving controller: it unloads a version only after
every proxy follows a routes generation without it and reports none of its
requests in flight (``state``). Routing a request and counting it in flight
happen under one lock (:meth:`Balancer.admit`), so a report of zero at that
generation means no request can still reach the version.

No I/O but reading the routes file (``RoutingTable.refresh``); the clock is passed in.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from learner.store import BASE
from serving.routing import Replica, Route, RoutingTable


class NoReplica(LookupError):
    """No healthy replica serves the request's version now (HTTP 503); the message says which."""


def version_key(version: str | None) -> str:
    """The key of a version in per-version counts: ``base`` for the base model."""
    return version or BASE


class Balancer:
    def __init__(self, routing: RoutingTable, eject_s: float, clock: Callable[[], float] = time.monotonic):
        self.routing = routing
        self.eject_s = eject_s
        self._clock = clock
        self._lock = threading.Lock()  # routing a request and counting it in flight are one step
        self._inflight = collections.Counter()  # version key -> requests in flight
        self._replica_inflight = collections.Counter()  # replica url -> requests in flight
        self._ejected: dict[tuple[str, str | None], float] = {}  # (url, version or None) -> until
        self._ejected_generation = routing.generation
        self._turn = 0

    def admit(
        self, model: str, pinned: Route | None, session_id: str | None = None
    ) -> tuple[Route, list[Replica], int]:
        """Route a request and count it in flight: its route (the session's ``pinned`` one, else
        ``model``'s now, a new session by its id for a canary), the replicas to try in order and the
        routes generation. Pair with :meth:`release`. Raises ``UnknownModel`` or :class:`NoReplica`."""
        with self._lock:
            self.routing.refresh()
            if pinned is not None and pinned.adapter_version is None:
                route = self.routing.base_route()  # the base model, however it is served now
            else:
                route = pinned or self.routing.resolve(model, session_id)
            generation = self.routing.generation
            if generation != self._ejected_generation:  # new routes: the controller has looked again
                self._ejected.clear()
                self._ejected_generation = generation
            candidates = self._order(self.routing.replicas_for(route), self.eject_key(route))
            if not candidates:
                what = (
                    f"adapter version {route.adapter_version}" if route.adapter_version else "the base model"
                )
                raise NoReplica(
                    f"no healthy replica serves {what} of {model!r} right now"
                    + (" (the version this session started on)" if pinned else "")
                    + "; retry shortly"
                )
            self._inflight[version_key(route.adapter_version)] += 1
            return route, candidates, generation

    def release(self, route: Route) -> None:
        with self._lock:
            self._inflight[version_key(route.adapter_version)] -= 1

    def take_replica(self, url: str) -> None:
        """Count a request sent to replica ``url``; pair with :meth:`release_replica`."""
        with self._lock:
            self._replica_inflight[url] += 1

    def release_replica(self, url: str) -> None:
        with self._lock:
            self._replica_inflight[url] -= 1

    def _order(self, replicas: list[Replica], version: str | None) -> list[Replica]:
        """Replicas not recently failed, least busy first (rotating among equals); else all of them."""
        now = self._clock()
        fresh = [
            r
            for r in replicas
            if self._ejected.get((r.url, None), 0) <= now and self._ejected.get((r.url, version), 0) <= now
        ]
        pool = fresh or replicas
        self._turn += 1
        rotated = pool[self._turn % len(pool) :] + pool[: self._turn % len(pool)] if pool else []
        return sorted(rotated, key=lambda r: self._replica_inflight[r.url])

    def eject_key(self, route: Route) -> str | None:
        """What a replica that does not know ``route``'s vLLM model is skipped for: its adapter version,
        or the base model's zero adapter; None: the plain base model, known to every replica."""
        if route.adapter_version is None and route.model != self.routing.base_model:
            return BASE
        return route.adapter_version

    def eject(self, url: str, version: str | None, reason: str) -> None:
        """Skip replica ``url`` for ``eject_s`` (for ``version`` only, unless None)."""
        with self._lock:
            self._ejected[(url, version)] = self._clock() + self.eject_s
        what = f" for {version}" if version else ""
        print(f"proxy: skipping replica {url}{what} for {self.eject_s:g}s: {reason}", flush=True)

    def state(self, open_sessions: Callable[[], dict[str, int]]) -> dict:
        """What ``GET /admin/state`` reports: the routes generation followed, per version the
        requests in flight and the open sessions pinned to it (counted after the requests: a request
        pins its session before it leaves flight), the replicas and those skipped."""
        with self._lock:
            self.routing.refresh()
            routes = self.routing.routes()
            inflight = {k: v for k, v in self._inflight.items() if v}
            replica_inflight = dict(self._replica_inflight)
            now = self._clock()
            ejected = {
                f"{u}{'#' + v if v else ''}": round(t - now, 3)
                for (u, v), t in self._ejected.items()
                if t > now
            }
        return {
            "generation": routes.generation,
            "routes_file": str(self.routing.routes_file) if self.routing.routes_file else None,
            "aliases": routes.aliases,
            "base_model": self.routing.base_route().model,
            "inflight": inflight,
            "open_sessions": open_sessions(),
            "replicas": [
                {
                    "url": r.url,
                    "healthy": r.healthy,
                    "versions": None if r.versions is None else sorted(r.versions),
                    "base": r.serves(None, routes.base_adapter is not None),
                    "inflight": replica_inflight.get(r.url, 0),
                }
                for r in routes.replicas
            ],
            "ejected_s": ejected,
        }
