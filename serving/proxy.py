"""The capture proxy: OpenAI-compatible completions in front of vLLM that record sessions.

``POST /v1/chat/completions`` and ``POST /v1/completions`` forward the request
to vLLM on the routed model, asking for token ids and per-token logprobs, and
return vLLM's response without what the client did not ask for. Each request
carrying ``X-Ratchet-Session`` (required; ``X-Ratchet-Task`` optional, taken
from a session's first request; the tenant is the bearer token's, see Auth) appends its
turns to that session's journal, fsynced before the response is sent. A
session stays on the route (adapter version) its first request was given, even
when the alias moves on. ``POST /v1/sessions/{id}/end`` builds the ``Session``
record (with the turns of its ``messages``: what the agent did after the model's
last turn, such as the tool calls it ran and their output), produces it to
``sessions.v1`` and only then deletes the journal; a record that breaks the
contract is answered 422 and dead-lettered, and the session stays open so the client can end it again correctly. Sessions idle for
``session_idle_timeout_s`` are closed as ``timeout`` (one that cannot be closed
validly is dead-lettered and removed). A restarted proxy resumes open sessions
from the journal.

Replicas: the routes file written by the serving controller (see
``serving.routing``) names the replicas and the adapter versions each has
loaded and verified; it is re-read whenever it is replaced. A request goes to
the least busy healthy replica that serves its version. A replica that drops
the connection, answers 5xx, or no longer knows the adapter is skipped for
``replica_eject_s`` (or until new routes) and the request is retried on
another replica of the same version, so a replica that dies mid-request costs
no failed request while another one serves that version; with none, the answer
is 503 naming the version. The base model goes to the routes' zero adapter
(``base_adapter``) on the replicas that verified it, or to the plain model when
the routes name none; its turns record adapter version null. Each response
names what served it: ``X-Ratchet-Adapter-Version`` (``base`` for the base model),
``X-Ratchet-Served-Model`` (vLLM's own ``model`` field), ``X-Ratchet-Replica``
and ``X-Ratchet-Routes-Generation``.

``GET /admin/state`` (bearer ``proxy_admin_token`` when set) reports the routes
generation this proxy follows and, per version, the requests in flight and the
open sessions pinned to it. The controller unloads a version only after every
proxy follows a generation without it and reports none in flight: routing a
request and counting it in flight happen under one lock, so a report of zero
at that generation means no request can still reach the version.

Auth: every request but ``/health``, ``/metrics`` and ``/admin/state`` needs
``Authorization: Bearer <token>`` (an OpenAI client's ``api_key``), a token of
the ingest API's own setting ``ingest_tokens`` (``RATCHET_INGEST_TOKENS``), and
the token names the session's tenant. No token or an unknown one is 401; an
``X-Ratchet-Tenant`` header, an end request's ``tenant`` or an in-line outcome
or feedback naming another tenant is 403, and so is any request on a session
another tenant started (only its own tenant may add turns, end it, or attach an
outcome or feedback). A refused request records and produces nothing.

Streaming: a request with ``stream: true`` is relayed as server-sent events,
chunk by chunk as vLLM sends them, each chunk cut to what the client asked for
as a whole response is (``capture.client_view``), ending with ``[DONE]``; the
headers are those of a whole response. The proxy assembles the turn from the
chunks' token ids and logprobs (``capture.StreamedTokens``) and journals it
when vLLM's stream has ended, before relaying ``[DONE]``: the recorded session
is the one the same tokens sent whole would give. The session's lock is held
for the whole stream. An error before the first chunk (an answer >= 400, a
replica that does not answer) is answered as for a whole response, retried on
another replica alike. A stream that does not end whole is not recorded at all
(neither its assistant turn nor the request's new user and tool turns: the
contract has no mark for an incomplete turn, and a client that asks again
sends the same messages): when the client goes away the proxy stops reading
from vLLM (closing the upstream connection aborts the request there); when vLLM
fails mid-stream the client gets an ``error`` event and no ``[DONE]``. Both
count in ``ratchet_proxy_streams_interrupted_total`` (``cause``: ``client`` or
``upstream``).

Refused with a 400 naming the reason, as a session records one whole
completion per request: ``n``/``best_of`` > 1, batched prompts and ``echo``.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import httpx
from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from starlette.types import Receive, Scope, Send

from ingest import topics
from ingest.auth import Unauthorized, check_tokens, tenant_of
from ingest.contract import ContractError, DeadLetter, Id, Session, SessionStatus, parse_obj
from ingest.producer import BrokerUnavailable, Outgoing, RecordProducer
from serving import capture
from serving.journal import JournalError, SessionJournal
from serving.routing import Replica, Route, RoutingTable, UnknownModel
from serving.settings import ProxySettings

SESSION_HEADER = "X-Ratchet-Session"
TENANT_HEADER = "X-Ratchet-Tenant"
TASK_HEADER = "X-Ratchet-Task"
TASK_FAMILY_HEADER = "X-Ratchet-Task-Family"
ENDED_REMEMBERED = 100_000
BASE = "base"  # the key of the base model in per-version counts
_ID = TypeAdapter(Id)
# Failures after which the same request may be sent to another replica: the replica never answered.
RETRYABLE = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)


class ProxyError(Exception):
    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None, **extra):
        super().__init__(reason)
        self.status, self.reason, self.headers, self.extra = status, reason, headers, extra

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.reason, "type": "ratchet_proxy", "code": self.status}, **self.extra}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


class EndRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: SessionStatus
    tenant: str | None = None  # if given, the token's tenant
    task_id: str | None = None
    task_family: str | None = None
    outcome: dict | None = None  # an Outcome; session_id, tenant and outcome_id may be left out
    feedback: dict | None = None  # a Feedback; session_id, tenant and feedback_id may be left out
    # what happened after the model's last turn, as an OpenAI client would send it next (the tool
    # calls the agent ran and their outputs, a closing user message): recorded as the last turns
    messages: list[dict] | None = None


@dataclass
class OpenSession:
    session_id: str
    tenant: str | None
    task_id: str | None
    model: str  # the model name the client asked for
    route: Route
    started_at: float
    last_at: float
    turns: list[dict] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    task_family: str | None = None

    def header(self) -> dict:
        return {
            "session_id": self.session_id,
            "tenant": self.tenant,
            "task_id": self.task_id,
            "task_family": self.task_family,
            "model": self.model,
            "vllm_model": self.route.model,
            "adapter_version": self.route.adapter_version,
            "started_at": self.started_at,
        }

    @classmethod
    def from_entries(cls, entries: list[dict]) -> OpenSession:
        h = entries[0]
        route = Route(h["vllm_model"], h["adapter_version"])
        session = cls(
            h["session_id"], h["tenant"], h["task_id"], h["model"], route, h["started_at"], h["started_at"],
            task_family=h.get("task_family"),
        )  # fmt: skip
        for entry in entries[1:]:
            session.apply(entry)
        return session

    def apply(self, entry: dict) -> None:
        self.turns.extend(entry["turns"])
        self.tokens += entry["tokens"]
        self.seconds += entry["seconds"]
        self.last_at = entry["at"]


def session_record(
    session: OpenSession,
    end: EndRequest,
    tenant: str,
    task: tuple[str | None, str | None],
    base_model: str,
) -> dict:
    """The ``Session`` record (as JSON-ready dict) of an open session being ended."""
    sid = session.session_id
    inline = {}
    for name, model_id in (("outcome", "outcome_id"), ("feedback", "feedback_id")):
        value = getattr(end, name)
        if value is not None:
            inline[name] = {model_id: f"{sid}:{name}", "session_id": sid, "tenant": tenant, **value}
    return {
        "session_id": sid,
        "tenant": tenant,
        "task_id": task[0],
        "task_family": task[1],
        "policy": {"base_model": base_model, "adapter_version": session.route.adapter_version},
        "turns": session.turns + capture.message_turns(end.messages or [], len(session.turns)),
        "status": end.status.value,
        "cost": {"tokens": session.tokens, "seconds": round(session.seconds, 6)},
        **inline,
        "metadata": {"source": "capture-proxy", "model": session.model[:1024]},
        "created_at": datetime.fromtimestamp(session.started_at, UTC).isoformat(),
    }


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "ratchet_proxy_requests", "Completion requests by endpoint and status", ["endpoint", "status"],
            registry=self.registry,
        )  # fmt: skip
        self.turns = Counter("ratchet_proxy_turns", "Turns recorded", ["role"], registry=self.registry)
        self.sessions = Counter(
            "ratchet_proxy_sessions", "Session records produced", ["status"], registry=self.registry
        )
        self.dead_letters = Counter(
            "ratchet_proxy_dead_letters", "Sessions dead-lettered", registry=self.registry
        )
        self.latency = Histogram(
            "ratchet_proxy_upstream_seconds", "vLLM request latency", registry=self.registry,
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
        )  # fmt: skip
        self.streams_interrupted = Counter(
            "ratchet_proxy_streams_interrupted",
            "Streamed completions ended before vLLM's stream did (their turns are not recorded)",
            ["cause"],
            registry=self.registry,
        )
        self.open_sessions = Gauge(
            "ratchet_proxy_open_sessions", "Open sessions in memory", registry=self.registry
        )


@dataclass
class Answer:
    """vLLM's answer to a request: its JSON (or error), or the first chunk of a stream and the rest."""

    status: int
    data: dict
    latency_s: float
    replica: str
    response: httpx.Response | None = None  # a stream's, open
    lines: Iterator[str] | None = None  # a stream's lines after its first chunk
    started: float = 0.0  # a stream's time.perf_counter() when it was sent


class TurnStream:
    """A streamed completion on its way to the client, as server-sent events.

    Iterating relays vLLM's chunks (as the client may see them) while the turn is assembled, and
    records it with ``record`` when vLLM's stream has ended whole, before relaying ``[DONE]``.
    It holds the session's lock and the request's place in flight (``held``) until
    :meth:`close`, which stops reading from vLLM: a stream closed before its end (the client went
    away) or ended by a failure records nothing and is counted as interrupted."""

    def __init__(
        self,
        kind: str,
        body: dict,
        answer: Answer,
        record: Callable[[dict, dict | None, float], None],
        metrics: Metrics,
        held: contextlib.ExitStack,
    ):
        self.kind, self.body, self.answer = kind, body, answer
        self._record, self._metrics, self._held = record, metrics, held
        self.tokens = capture.StreamedTokens(kind)
        self.recorded = False
        self._events = self._relay()
        self._closed = False

    def __iter__(self) -> TurnStream:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._events)
        except StopIteration:
            self.close()
            raise

    def _relay(self) -> Iterator[bytes]:
        chunk = self.answer.data
        try:
            for data in itertools.chain([None], _events(self.answer.lines)):
                if data == "[DONE]":
                    break
                if data is not None:
                    chunk = json.loads(data)
                if "error" in chunk:
                    raise ValueError(f"vLLM failed the stream: {json.dumps(chunk['error'])[:2000]}")
                self.tokens.add(chunk)
                yield _sse(json.dumps(capture.client_view(chunk, self.body, self.kind)))
            else:
                raise ValueError("vLLM's stream ended without [DONE]")
            served = self.tokens.served()
        except (httpx.HTTPError, ValueError) as exc:  # the stream has begun: it ends here, unrecorded
            self._end("upstream")
            print(f"proxy: stream from {self.answer.replica} failed: {exc!r}", flush=True)
            error = {"message": f"the stream failed and was not recorded: {exc}", "type": "ratchet_proxy"}
            yield _sse(json.dumps({"error": {**error, "code": 502}}))
            return
        latency_s = time.perf_counter() - self.answer.started
        self._metrics.latency.observe(latency_s)
        self._record(served, self.tokens.usage, latency_s)
        self.recorded = True
        yield _sse("[DONE]")

    def close(self) -> None:
        """Stop reading from vLLM and let the session go; before the end, the turn is not recorded."""
        self._end(None if self.recorded else "client")

    def _end(self, interrupted: str | None) -> None:
        if self._closed:
            return
        self._closed = True
        if interrupted is not None:
            self._metrics.streams_interrupted.labels(interrupted).inc()
        self.answer.response.close()
        self._held.close()


class CaptureProxy:
    def __init__(self, settings: ProxySettings, producer: RecordProducer, routing: RoutingTable):
        self.settings = settings
        self.producer = producer
        self.routing = routing
        self.journal = SessionJournal(settings.journal_dir)
        self.metrics = Metrics()
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._open: dict[str, OpenSession] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()
        self.metrics.open_sessions.set_function(lambda: len(self._open))
        # Routing state, under one lock so that routing a request and counting it in flight are atomic.
        self._route_lock = threading.Lock()
        self._clients: dict[str, httpx.Client] = {}
        self._inflight = collections.Counter()  # version key -> requests in flight
        self._replica_inflight = collections.Counter()  # replica url -> requests in flight
        self._ejected: dict[tuple[str, str | None], float] = {}  # (url, version or None) -> until
        self._ejected_generation = routing.generation
        self._turn = 0
        self._pinned = {h["session_id"]: h.get("adapter_version") for h in self.journal.headers()}

    def close(self) -> None:
        with self._route_lock:
            clients = list(self._clients.values())
        for client in clients:
            client.close()

    def _client(self, url: str) -> httpx.Client:
        with self._route_lock:
            client = self._clients.get(url)
            if client is None:
                client = self._clients[url] = httpx.Client(base_url=url, timeout=self.settings.vllm_timeout_s)
            return client

    # --- routing ------------------------------------------------------------------

    def _admit(
        self, model: str, pinned: Route | None, session_id: str | None = None
    ) -> tuple[Route, list[Replica], int]:
        """Route a request (a new session by its id, for a canary) and count it in flight; pair with
        :meth:`_release`."""
        with self._route_lock:
            self.routing.refresh()
            try:
                if pinned is not None and pinned.adapter_version is None:
                    route = self.routing.base_route()  # the base model, however it is served now
                else:
                    route = pinned or self.routing.resolve(model, session_id)
            except UnknownModel as exc:
                raise ProxyError(404, str(exc)) from None
            generation = self.routing.generation
            if generation != self._ejected_generation:  # new routes: the controller has looked again
                self._ejected.clear()
                self._ejected_generation = generation
            candidates = self._order(self.routing.replicas_for(route), self._eject_key(route))
            if not candidates:
                what = (
                    f"adapter version {route.adapter_version}" if route.adapter_version else "the base model"
                )
                raise ProxyError(
                    503,
                    f"no healthy replica serves {what} of {model!r} right now"
                    + (" (the version this session started on)" if pinned else "")
                    + "; retry shortly",
                )
            self._inflight[_key(route.adapter_version)] += 1
            return route, candidates, generation

    def _release(self, route: Route) -> None:
        with self._route_lock:
            self._inflight[_key(route.adapter_version)] -= 1

    def _order(self, replicas: list[Replica], version: str | None) -> list[Replica]:
        """Replicas not recently failed, least busy first (rotating among equals); else all of them."""
        now = time.monotonic()
        fresh = [
            r
            for r in replicas
            if self._ejected.get((r.url, None), 0) <= now and self._ejected.get((r.url, version), 0) <= now
        ]
        pool = fresh or replicas
        self._turn += 1
        rotated = pool[self._turn % len(pool) :] + pool[: self._turn % len(pool)] if pool else []
        return sorted(rotated, key=lambda r: self._replica_inflight[r.url])

    def _eject_key(self, route: Route) -> str | None:
        """What a replica that does not know ``route``'s vLLM model is skipped for: its adapter version,
        or the base model's zero adapter; None: the plain base model, known to every replica."""
        if route.adapter_version is None and route.model != self.routing.base_model:
            return BASE
        return route.adapter_version

    def _eject(self, url: str, version: str | None, reason: str) -> None:
        with self._route_lock:
            self._ejected[(url, version)] = time.monotonic() + self.settings.replica_eject_s
        what = f" for {version}" if version else ""
        print(
            f"proxy: skipping replica {url}{what} for {self.settings.replica_eject_s:g}s: {reason}",
            flush=True,
        )

    def admin_state(self) -> dict:
        """The routes generation followed, and per version the requests in flight and pinned sessions."""
        with self._route_lock:
            self.routing.refresh()
            routes = self.routing.routes()
            inflight = {k: v for k, v in self._inflight.items() if v}
            replica_inflight = dict(self._replica_inflight)
            now = time.monotonic()
            ejected = {
                f"{u}{'#' + v if v else ''}": round(t - now, 3)
                for (u, v), t in self._ejected.items()
                if t > now
            }
        with self._lock:
            sessions = collections.Counter(_key(v) for v in self._pinned.values())
        return {
            "generation": routes.generation,
            "routes_file": str(self.routing.routes_file) if self.routing.routes_file else None,
            "aliases": routes.aliases,
            "base_model": self.routing.base_route().model,
            "inflight": inflight,
            "open_sessions": dict(sessions),
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

    # --- sessions ------------------------------------------------------------

    def _session_lock(self, sid: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(sid, threading.Lock())

    def _load(self, sid: str) -> OpenSession | None:
        """The open session ``sid`` from memory or its journal; call with the session's lock held."""
        with self._lock:
            session = self._open.get(sid)
        if session is None:
            entries = self.journal.read(sid)
            if entries is None:
                return None
            session = OpenSession.from_entries(entries)
            with self._lock:
                self._open[sid] = session
        return session

    def _forget(self, sid: str) -> None:
        self.journal.delete(sid)
        with self._lock:
            self._open.pop(sid, None)
            self._locks.pop(sid, None)
            self._pinned.pop(sid, None)
            self._ended[sid] = None
            while len(self._ended) > ENDED_REMEMBERED:
                self._ended.popitem(last=False)

    def open_session_ids(self) -> list[str]:
        with self._lock:
            in_memory = set(self._open)
        return sorted(in_memory | set(self.journal.session_ids()))

    # --- auth -----------------------------------------------------------------------

    def authenticate(self, headers: Mapping[str, str]) -> str:
        """The tenant whose bearer token ``headers`` carry (looked up by lower-case name): 401
        without a known token, 403 when an ``X-Ratchet-Tenant`` header names another tenant."""
        tokens = self.settings.ingest_tokens
        try:
            tenant = tenant_of(headers.get("authorization"), tokens)
        except Unauthorized as exc:
            how = (
                "no tenant tokens are configured on this proxy (RATCHET_INGEST_TOKENS)"
                if not tokens
                else "send your tenant's token as Authorization: Bearer <token> (an OpenAI client's api_key)"
            )
            raise ProxyError(401, f"{exc.detail}: {how}", headers=exc.headers) from None
        claimed = headers.get(TENANT_HEADER.lower())
        if claimed is not None and claimed != tenant:
            raise ProxyError(
                403, f"the {TENANT_HEADER} header names tenant {claimed[:200]!r}, the token is {tenant!r}'s"
            )
        return tenant

    @staticmethod
    def _check_owner(session: OpenSession, tenant: str) -> None:
        if session.tenant is not None and session.tenant != tenant:
            raise ProxyError(
                403,
                f"session {session.session_id!r} belongs to another tenant: only its own tenant's token may "
                "add to it, end it or attach an outcome or feedback",
            )

    # --- completions ------------------------------------------------------------

    def complete(
        self, kind: str, body: object, headers: dict[str, str]
    ) -> tuple[int, dict | TurnStream, dict[str, str]]:
        """Forward one completion request and record its turns; returns (status, body, headers).

        A streamed request's body is a :class:`TurnStream` holding the session's lock until it ends."""
        tenant = self.authenticate(headers)
        try:
            capture.check_request(body, kind)
        except capture.BadRequest as exc:
            raise ProxyError(400, str(exc)) from None
        sid = _header_id(headers, SESSION_HEADER, required=True)
        task_id = _header_id(headers, TASK_HEADER)
        task_family = _header_id(headers, TASK_FAMILY_HEADER)
        with contextlib.ExitStack() as held:
            held.enter_context(self._session_lock(sid))
            if sid in self._ended:
                raise ProxyError(409, f"session {sid!r} has ended; start a new session id")
            session = self._load(sid)
            if session is not None:
                self._check_owner(session, tenant)
            if session is not None and session.model != body["model"]:
                raise ProxyError(
                    409, f"session {sid!r} started on model {session.model!r}, not {body['model']!r}"
                )
            route, candidates, generation = self._admit(
                body["model"], session.route if session is not None else None, sid
            )
            held.callback(self._release, route)
            stream = bool(body.get("stream"))
            answer = self._forward(kind, body, route, candidates, stream)
            if answer.status >= 400:
                return answer.status, answer.data, {}
            out_headers = {
                "X-Ratchet-Session": sid,
                "X-Ratchet-Adapter-Version": route.adapter_version or BASE,
                "X-Ratchet-Served-Model": answer.data["model"],
                "X-Ratchet-Replica": answer.replica,
                "X-Ratchet-Routes-Generation": str(generation),
            }

            def record(served: dict, usage: dict | None, latency_s: float) -> None:
                new = session is None
                now = time.time()
                opened = session or OpenSession(
                    sid, tenant, task_id, body["model"], route, now, now, task_family=task_family
                )
                turns = capture.request_turns(
                    kind, body, served, len(opened.turns), route.adapter_version, latency_s
                )
                tokens = (usage or {}).get("total_tokens") or len(served["prompt_token_ids"]) + len(
                    served["completion_token_ids"]
                )
                entry = {"turns": turns, "tokens": tokens, "seconds": latency_s, "at": now}
                if new:
                    self.journal.start(opened.header())
                self.journal.append(sid, entry)
                opened.apply(entry)
                with self._lock:
                    self._open[sid] = opened
                    self._pinned[sid] = route.adapter_version
                for turn in turns:
                    self.metrics.turns.labels(turn["role"]).inc()

            if stream:
                held.callback(self._release_replica, answer.replica)
                relay = TurnStream(kind, body, answer, record, self.metrics, held.pop_all())
                return 200, relay, out_headers
            try:
                served = capture.served_tokens(answer.data, kind)
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise ProxyError(502, f"vLLM's response cannot be recorded: {exc!r}") from None
            record(served, answer.data.get("usage"), answer.latency_s)
        return 200, capture.client_view(answer.data, body, kind), out_headers

    def _forward(self, kind: str, body: dict, route: Route, replicas: list[Replica], stream: bool) -> Answer:
        """vLLM's answer to the request on ``route``: its whole JSON, or the first chunk of its stream.

        Tries the replicas in order while one fails without answering (see ``RETRYABLE``), answers
        5xx, or does not know the adapter; the last failure is what the client gets. A stream's
        replica stays counted in flight: the caller releases it (:meth:`_release_replica`)."""
        path = "/v1/chat/completions" if kind == capture.CHAT else "/v1/completions"
        upstream = capture.upstream_body(body, kind, route.model)
        failure: ProxyError | Answer | None = None
        for replica in replicas:
            with self._route_lock:
                self._replica_inflight[replica.url] += 1
            started = time.perf_counter()
            client = self._client(replica.url)
            resp, streaming = None, False
            try:
                resp = client.send(client.build_request("POST", path, json=upstream), stream=True)
                if stream and resp.status_code < 400:
                    lines = resp.iter_lines()
                    first = _first_event(lines, replica.url)
                    streaming = True
                else:
                    resp.read()
            except RETRYABLE as exc:
                self._eject(replica.url, None, repr(exc))
                failure = ProxyError(502, f"vLLM at {replica.url} did not answer: {exc!r}")
                continue
            except httpx.HTTPError as exc:
                raise ProxyError(502, f"vLLM at {replica.url} did not answer: {exc!r}") from None
            finally:
                if not streaming:
                    if resp is not None:
                        resp.close()
                    self._release_replica(replica.url)
            latency_s = time.perf_counter() - started
            if streaming:
                if first.get("model") != route.model:
                    resp.close()
                    self._release_replica(replica.url)
                    raise ProxyError(
                        502, f"vLLM at {replica.url} streamed as {first.get('model')!r}, not {route.model!r}"
                    )
                return Answer(200, first, latency_s, replica.url, resp, lines, started)
            self.metrics.latency.observe(latency_s)
            if resp.status_code >= 400:
                error = _json_or_error(resp)
                if resp.status_code >= 500:
                    self._eject(replica.url, None, f"answered {resp.status_code}")
                    failure = Answer(resp.status_code, error, latency_s, replica.url)
                elif resp.status_code == 404 and self._eject_key(route) and "does not exist" in resp.text:
                    self._eject(replica.url, self._eject_key(route), f"does not know {route.model}")
                    what = (
                        f"adapter version {route.adapter_version}"
                        if route.adapter_version
                        else f"the base model's adapter {route.model}"
                    )
                    failure = ProxyError(503, f"no replica has {what} loaded now; retry shortly")
                else:
                    return Answer(resp.status_code, error, latency_s, replica.url)
                continue
            data = resp.json()
            if data.get("model") != route.model:
                raise ProxyError(
                    502, f"vLLM at {replica.url} answered as {data.get('model')!r}, not {route.model!r}"
                )
            return Answer(resp.status_code, data, latency_s, replica.url)
        if isinstance(failure, ProxyError):
            raise failure
        return failure

    def _release_replica(self, url: str) -> None:
        with self._route_lock:
            self._replica_inflight[url] -= 1

    # --- ending ------------------------------------------------------------------

    def end(self, sid: str, end: EndRequest, tenant: str) -> dict:
        """Produce the session record; on a contract error dead-letter it and raise 422 (it stays open).

        ``tenant`` is the request's (its token's): only the session's own tenant may end it."""
        named = {
            "tenant": end.tenant,
            **{n: (getattr(end, n) or {}).get("tenant") for n in ("outcome", "feedback")},
        }
        foreign = [name for name, value in named.items() if value is not None and value != tenant]
        if foreign:
            raise ProxyError(
                403,
                f"the end request's {', '.join(foreign)} names another tenant than the token's ({tenant!r})",
            )
        with self._session_lock(sid):
            session = self._load(sid)
            if session is None:
                raise ProxyError(404, f"no open session {sid!r}")
            self._check_owner(session, tenant)
            if session.tenant is None:  # begun before the proxy knew tenants: its first authenticated end
                end = end.model_copy(update={"tenant": tenant})
            return self._end(session, end, "serving.proxy:/v1/sessions/end", discard_invalid=False)

    def _end(self, session: OpenSession, end: EndRequest, source: str, discard_invalid: bool) -> dict:
        sid = session.session_id
        tenant = _agree(sid, "tenant", session.tenant, end.tenant)
        task_id = _agree(sid, "task_id", session.task_id, end.task_id)
        task_family = _agree(sid, "task_family", session.task_family, end.task_family)
        record = session_record(session, end, tenant, (task_id, task_family), self.settings.base_model)
        try:
            parsed = parse_obj(Session, record)
        except ContractError as exc:
            letter = DeadLetter.of(source, exc.reason, json.dumps(record), session_id=sid, tenant=tenant)
            delivery = self._produce(self.producer.dead_letter(letter))
            self.metrics.dead_letters.inc()
            if discard_invalid:
                self._forget(sid)
            dead = {"topic": delivery.topic, "partition": delivery.partition, "offset": delivery.offset}
            raise ProxyError(
                422, f"session {sid!r} breaks the contract: {exc.reason}", dead_letter=dead
            ) from None
        delivery = self._produce(Outgoing(topics.SESSIONS, sid, parsed.to_json()))
        self._forget(sid)
        self.metrics.sessions.labels(end.status.value).inc()
        return {
            "session_id": sid,
            "status": end.status.value,
            "turns": len(parsed.turns),
            "adapter_version": parsed.policy.adapter_version,
            "topic": delivery.topic,
            "partition": delivery.partition,
            "offset": delivery.offset,
        }

    def _produce(self, outgoing: Outgoing):
        try:
            return self.producer.produce([outgoing])[0]
        except BrokerUnavailable as exc:
            raise ProxyError(
                503, f"the broker did not acknowledge; the session stays open, retry: {exc}"
            ) from None

    def close_idle(self, now: float | None = None) -> list[dict]:
        """Close every session idle past the timeout as ``timeout``.

        Returns one result per session closed: where its record went, or its dead letter."""
        now = time.time() if now is None else now
        timeout = EndRequest(status=SessionStatus.TIMEOUT)
        closed = []
        for sid in self.open_session_ids():
            with self._session_lock(sid):
                try:
                    session = self._load(sid)
                except JournalError as exc:  # kept for an operator; the other sessions go on
                    print(f"proxy: cannot read the journal of session {sid!r}: {exc}", flush=True)
                    continue
                if session is None or now - session.last_at < self.settings.session_idle_timeout_s:
                    continue
                try:
                    closed.append(
                        self._end(session, timeout, "serving.proxy:idle-timeout", discard_invalid=True)
                    )
                except ProxyError as exc:
                    if exc.status == 422:
                        closed.append({"session_id": sid, "error": exc.reason, **exc.extra})
                    else:  # the broker is away: retried on the next sweep
                        print(f"proxy: could not close idle session {sid!r}: {exc.reason}", flush=True)
        return closed


def _key(version: str | None) -> str:
    return version or BASE


def _header_id(headers: dict[str, str], name: str, required: bool = False) -> str | None:
    value = headers.get(name.lower())
    if value is None:
        if required:
            raise ProxyError(
                400, f"the {name} header is required: it names the session this request belongs to"
            )
        return None
    try:
        return _ID.validate_python(value)
    except ValidationError:
        raise ProxyError(
            400,
            f"the {name} header {value[:200]!r} is not a valid id ([A-Za-z0-9][A-Za-z0-9._:@/-]*, <= 128 chars)",
        ) from None


def _agree(sid: str, name: str, started: str | None, ended: str | None) -> str | None:
    if started is not None and ended is not None and started != ended:
        raise ProxyError(
            409, f"session {sid!r} started with {name} {started!r}, the end request says {ended!r}"
        )
    return started if started is not None else ended


def _first_event(lines: Iterator[str], url: str) -> dict:
    """The first chunk of vLLM's event stream; a stream that fails before one is a ProxyError."""
    for data in _events(lines):
        try:
            chunk = json.loads(data) if data != "[DONE]" else {}
        except ValueError:
            raise ProxyError(
                502, f"vLLM at {url} streamed an event that is not JSON: {data[:200]!r}"
            ) from None
        error = chunk.get("error")
        if error is not None:
            code = error.get("code") if isinstance(error, dict) else None
            status = code if isinstance(code, int) and 400 <= code < 600 else 502
            raise ProxyError(status, f"vLLM at {url} failed the stream: {json.dumps(error)[:2000]}")
        if not chunk.get("choices") and not chunk.get("usage"):
            raise ProxyError(502, f"vLLM at {url} ended its stream without a chunk")
        return chunk
    raise ProxyError(502, f"vLLM at {url} ended its stream without a chunk")


def _events(lines: Iterator[str]) -> Iterator[str]:
    """The data of each server-sent event (vLLM's events are one ``data:`` line each)."""
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()


def _sse(data: str) -> bytes:
    return f"data: {data}\n\n".encode()


def _json_or_error(resp: httpx.Response) -> dict:
    try:
        return resp.json()
    except ValueError:
        return {"error": {"message": resp.text[:2000], "type": "upstream", "code": resp.status_code}}


class Relay(StreamingResponse):
    """A :class:`TurnStream` as a response; closed however the response ends (a client that goes
    away cancels the relay at its next chunk)."""

    def __init__(self, stream: TurnStream, headers: dict[str, str]):
        super().__init__(stream, headers=headers, media_type="text/event-stream")
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.stream.close()


def create_app(
    settings: ProxySettings, producer: RecordProducer | None = None, routing: RoutingTable | None = None
) -> FastAPI:
    check_tokens(settings.ingest_tokens)
    own_producer = producer is None
    producer = producer or RecordProducer(
        settings.kafka_bootstrap, delivery_timeout_s=settings.delivery_timeout_s
    )
    proxy = CaptureProxy(settings, producer, routing or RoutingTable.from_settings(settings))
    stop = threading.Event()

    def sweep() -> None:
        interval = max(1.0, min(60.0, settings.session_idle_timeout_s / 4))
        while not stop.wait(interval):
            proxy.close_idle()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        sweeper = threading.Thread(target=sweep, name="proxy-idle-sweep", daemon=True)
        sweeper.start()
        yield
        stop.set()
        sweeper.join(timeout=5)
        proxy.close()
        if own_producer:
            producer.close()

    app = FastAPI(title="Ratchet capture proxy", lifespan=lifespan)
    app.state.proxy = proxy

    @app.exception_handler(ProxyError)
    async def proxy_error(request: Request, exc: ProxyError) -> JSONResponse:
        return exc.response()

    def tenant_of_request(request: Request) -> str:
        """The request's tenant, from its bearer token (resolved before the body is validated)."""
        return proxy.authenticate(request.headers)

    async def forward(kind: str, endpoint: str, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            status, out, out_headers = await run_in_threadpool(proxy.complete, kind, body, headers)
        except ProxyError as exc:
            proxy.metrics.requests.labels(endpoint, str(exc.status)).inc()
            raise
        proxy.metrics.requests.labels(endpoint, str(status)).inc()
        if isinstance(out, TurnStream):
            return Relay(out, out_headers)
        return JSONResponse(out, status_code=status, headers=out_headers)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await forward(capture.CHAT, "chat", request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await forward(capture.COMPLETION, "completions", request)

    @app.post("/v1/sessions/{session_id:path}/end")
    def end_session(session_id: str, end: EndRequest, tenant: str = Depends(tenant_of_request)) -> dict:
        return proxy.end(session_id, end, tenant)

    @app.get("/v1/models", dependencies=[Depends(tenant_of_request)])
    def models() -> dict:
        names = [*proxy.routing.snapshot(), settings.base_model]
        return {
            "object": "list",
            "data": [{"id": n, "object": "model", "owned_by": "ratchet"} for n in names],
        }

    @app.get("/v1/routes", dependencies=[Depends(tenant_of_request)])
    def routes() -> dict:
        table = proxy.routing
        return {alias: asdict(table.resolve(alias)) for alias in table.snapshot()}

    @app.get("/admin/state")
    def admin_state(request: Request) -> dict:
        token = settings.proxy_admin_token
        if token and request.headers.get("authorization") != f"Bearer {token}":
            raise ProxyError(401, "GET /admin/state needs the proxy's admin bearer token")
        return proxy.admin_state()

    @app.get("/health")
    def health() -> dict:
        return {"ok": True, "open_sessions": len(proxy.open_session_ids())}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(proxy.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
