"""The capture proxy: OpenAI-compatible completions in front of vLLM that record sessions.

``POST /v1/chat/completions`` and ``POST /v1/completions`` forward the request
to vLLM on the routed model, asking for token ids and per-token logprobs, and
return vLLM's response without what the client did not ask for. Each request
carrying ``X-Ratchet-Session`` (required; ``X-Ratchet-Tenant`` and
``X-Ratchet-Task`` optional, taken from a session's first request) appends its
turns to that session's journal, fsynced before the response is sent. A
session stays on the route (adapter version) its first request was given, even
when the alias moves on. ``POST /v1/sessions/{id}/end`` builds the ``Session``
record, produces it to ``sessions.v1`` and only then deletes the journal; a
record that breaks the contract is answered 422 and dead-lettered, and the
session stays open so the client can end it again correctly. Sessions idle for
``session_idle_timeout_s`` are closed as ``timeout`` (one that cannot be closed
validly is dead-lettered and removed). A restarted proxy resumes open sessions
from the journal.

Streaming is refused with a 400 naming the reason: a session records each
completion whole (token ids and logprobs), so ``stream`` must be false; so are
``n``/``best_of`` > 1, batched prompts and ``echo``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import httpx
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from ingest import topics
from ingest.contract import ContractError, DeadLetter, Id, Session, SessionStatus, parse_obj
from ingest.producer import BrokerUnavailable, Outgoing, RecordProducer
from serving import capture
from serving.journal import JournalError, SessionJournal
from serving.routing import Route, RoutingTable, UnknownModel
from serving.settings import ProxySettings

SESSION_HEADER = "X-Ratchet-Session"
TENANT_HEADER = "X-Ratchet-Tenant"
TASK_HEADER = "X-Ratchet-Task"
ENDED_REMEMBERED = 100_000
_ID = TypeAdapter(Id)


class ProxyError(Exception):
    def __init__(self, status: int, reason: str, **extra):
        super().__init__(reason)
        self.status, self.reason, self.extra = status, reason, extra

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.reason, "type": "ratchet_proxy", "code": self.status}, **self.extra}
        return JSONResponse(body, status_code=self.status)


class EndRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: SessionStatus
    tenant: str | None = None
    task_id: str | None = None
    outcome: dict | None = None  # an Outcome; session_id, tenant and outcome_id may be left out
    feedback: dict | None = None  # a Feedback; session_id, tenant and feedback_id may be left out


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

    def header(self) -> dict:
        return {
            "session_id": self.session_id,
            "tenant": self.tenant,
            "task_id": self.task_id,
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
            h["session_id"], h["tenant"], h["task_id"], h["model"], route, h["started_at"], h["started_at"]
        )
        for entry in entries[1:]:
            session.apply(entry)
        return session

    def apply(self, entry: dict) -> None:
        self.turns.extend(entry["turns"])
        self.tokens += entry["tokens"]
        self.seconds += entry["seconds"]
        self.last_at = entry["at"]


def session_record(
    session: OpenSession, end: EndRequest, tenant: str, task_id: str | None, base_model: str
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
        "task_id": task_id,
        "policy": {"base_model": base_model, "adapter_version": session.route.adapter_version},
        "turns": session.turns,
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
        self.open_sessions = Gauge(
            "ratchet_proxy_open_sessions", "Open sessions in memory", registry=self.registry
        )


class CaptureProxy:
    def __init__(self, settings: ProxySettings, producer: RecordProducer, routing: RoutingTable):
        self.settings = settings
        self.producer = producer
        self.routing = routing
        self.journal = SessionJournal(settings.journal_dir)
        self.vllm = httpx.Client(base_url=settings.vllm_url.rstrip("/"), timeout=settings.vllm_timeout_s)
        self.metrics = Metrics()
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._open: dict[str, OpenSession] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()
        self.metrics.open_sessions.set_function(lambda: len(self._open))

    def close(self) -> None:
        self.vllm.close()

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
            self._ended[sid] = None
            while len(self._ended) > ENDED_REMEMBERED:
                self._ended.popitem(last=False)

    def open_session_ids(self) -> list[str]:
        with self._lock:
            in_memory = set(self._open)
        return sorted(in_memory | set(self.journal.session_ids()))

    # --- completions ------------------------------------------------------------

    def complete(self, kind: str, body: object, headers: dict[str, str]) -> tuple[int, dict, dict[str, str]]:
        """Forward one completion request and record its turns; returns (status, body, headers)."""
        try:
            capture.check_request(body, kind)
        except capture.BadRequest as exc:
            raise ProxyError(400, str(exc)) from None
        sid = _header_id(headers, SESSION_HEADER, required=True)
        tenant = _header_id(headers, TENANT_HEADER)
        task_id = _header_id(headers, TASK_HEADER)
        with self._session_lock(sid):
            if sid in self._ended:
                raise ProxyError(409, f"session {sid!r} has ended; start a new session id")
            session = self._load(sid)
            if session is not None and session.model != body["model"]:
                raise ProxyError(
                    409, f"session {sid!r} started on model {session.model!r}, not {body['model']!r}"
                )
            try:
                route = session.route if session is not None else self.routing.resolve(body["model"])
            except UnknownModel as exc:
                raise ProxyError(404, str(exc)) from None

            status, data, latency_s = self._forward(kind, body, route)
            if status >= 400:
                return status, data, {}
            try:
                served = capture.served_tokens(data, kind)
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise ProxyError(502, f"vLLM's response cannot be recorded: {exc!r}") from None

            now = time.time()
            new = session is None
            if new:
                session = OpenSession(sid, tenant, task_id, body["model"], route, now, now)
            turns = capture.request_turns(
                kind, body, served, len(session.turns), route.adapter_version, latency_s
            )
            tokens = (data.get("usage") or {}).get("total_tokens") or len(served["prompt_token_ids"]) + len(
                served["completion_token_ids"]
            )
            entry = {"turns": turns, "tokens": tokens, "seconds": latency_s, "at": now}
            if new:
                self.journal.start(session.header())
            self.journal.append(sid, entry)
            session.apply(entry)
            with self._lock:
                self._open[sid] = session
        for turn in turns:
            self.metrics.turns.labels(turn["role"]).inc()
        out_headers = {
            "X-Ratchet-Session": sid,
            "X-Ratchet-Adapter-Version": route.adapter_version or "base",
        }
        return 200, capture.client_view(data, body, kind), out_headers

    def _forward(self, kind: str, body: dict, route: Route) -> tuple[int, dict, float]:
        """vLLM's status, JSON answer and latency for the request on ``route``."""
        path = "/v1/chat/completions" if kind == capture.CHAT else "/v1/completions"
        started = time.perf_counter()
        try:
            resp = self.vllm.post(path, json=capture.upstream_body(body, kind, route.model))
        except httpx.HTTPError as exc:
            raise ProxyError(502, f"vLLM at {self.settings.vllm_url} did not answer: {exc}") from None
        latency_s = time.perf_counter() - started
        self.metrics.latency.observe(latency_s)
        if resp.status_code >= 400:
            return resp.status_code, _json_or_error(resp), latency_s
        return resp.status_code, resp.json(), latency_s

    # --- ending ------------------------------------------------------------------

    def end(self, sid: str, end: EndRequest) -> dict:
        """Produce the session record; on a contract error dead-letter it and raise 422 (it stays open)."""
        with self._session_lock(sid):
            session = self._load(sid)
            if session is None:
                raise ProxyError(404, f"no open session {sid!r}")
            return self._end(session, end, "serving.proxy:/v1/sessions/end", discard_invalid=False)

    def _end(self, session: OpenSession, end: EndRequest, source: str, discard_invalid: bool) -> dict:
        sid = session.session_id
        tenant = _agree(sid, "tenant", session.tenant, end.tenant) or self.settings.default_tenant
        task_id = _agree(sid, "task_id", session.task_id, end.task_id)
        record = session_record(session, end, tenant, task_id, self.settings.base_model)
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


def _json_or_error(resp: httpx.Response) -> dict:
    try:
        return resp.json()
    except ValueError:
        return {"error": {"message": resp.text[:2000], "type": "upstream", "code": resp.status_code}}


def create_app(
    settings: ProxySettings, producer: RecordProducer | None = None, routing: RoutingTable | None = None
) -> FastAPI:
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
        return JSONResponse(out, status_code=status, headers=out_headers)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await forward(capture.CHAT, "chat", request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await forward(capture.COMPLETION, "completions", request)

    @app.post("/v1/sessions/{session_id:path}/end")
    def end_session(session_id: str, end: EndRequest) -> dict:
        return proxy.end(session_id, end)

    @app.get("/v1/models")
    def models() -> dict:
        names = [*proxy.routing.snapshot(), settings.base_model]
        return {
            "object": "list",
            "data": [{"id": n, "object": "model", "owned_by": "ratchet"} for n in names],
        }

    @app.get("/v1/routes")
    def routes() -> dict:
        table = proxy.routing
        return {alias: asdict(table.resolve(alias)) for alias in table.snapshot()}

    @app.get("/health")
    def health() -> dict:
        return {"ok": True, "open_sessions": len(proxy.open_session_ids())}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(proxy.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
