"""The capture proxy: OpenAI-compatible completions in front of vLLM that record sessions.

``POST /v1/chat/completions`` and ``POST /v1/completions`` forward the request
to vLLM on the routed model, asking for token ids and per-token logprobs, and
return vLLM's response without what the client did not ask for. Each request
carrying ``X-Ratchet-Session`` (required; ``X-Ratchet-Task`` optional, taken
from a session's first request; the tenant is the bearer token's, see Auth)
appends its turns to that session's journal before the response is sent, and a
session stays on the route (adapter version) its first request was given, even
when the alias moves on (:mod:`serving.sessions`). ``POST
/v1/sessions/{id}/end`` builds the ``Session`` record, produces it to
``sessions.v1`` and only then deletes the journal; a record that breaks the
contract is answered 422 and dead-lettered, and the session stays open so the
client can end it again correctly. Sessions idle for
``session_idle_timeout_s`` are closed as ``timeout`` (one that cannot be closed
validly is dead-lettered and removed).

Replicas: a request goes to the least busy healthy replica that serves its
version (:mod:`serving.balancer`) and is retried on another one of the same
version when a replica fails it; with none, the answer is 503 naming the
version (:mod:`serving.upstream`). The base model goes to the routes' zero
adapter (``base_adapter``) on the replicas that verified it, or to the plain
model when the routes name none; its turns record adapter version null. Each
response names what served it: ``X-Ratchet-Adapter-Version`` (``base`` for the
base model), ``X-Ratchet-Served-Model`` (vLLM's own ``model`` field),
``X-Ratchet-Replica`` and ``X-Ratchet-Routes-Generation``. ``GET
/admin/state`` (bearer ``proxy_admin_token`` when set) reports the routes
generation this proxy follows and, per version, the requests in flight and the
open sessions pinned to it: the drain contract with the serving controller.

Auth: every request but ``/health``, ``/metrics`` and ``/admin/state`` needs
``Authorization: Bearer <token>`` (an OpenAI client's ``api_key``), a token of
the ingest API's own setting ``ingest_tokens`` (``RATCHET_INGEST_TOKENS``), and
the token names the session's tenant. No token or an unknown one is 401; an
``X-Ratchet-Tenant`` header, an end request's ``tenant`` or an in-line outcome
or feedback naming another tenant is 403, and so is any request on a session
another tenant started (only its own tenant may add turns, end it, or attach an
outcome or feedback). A refused request records and produces nothing.

Streaming: a request with ``stream: true`` is relayed as server-sent events with
the headers of a whole response, and recorded as the same tokens sent whole
would be (:class:`serving.upstream.TurnStream`); the session's lock is held for
the whole stream. A stream that does not end whole is not recorded at all
(neither its assistant turn nor the request's new user and tool turns: the
contract has no mark for an incomplete turn, and a client that asks again sends
the same messages); it counts in ``ratchet_proxy_streams_interrupted_total``.

Refused with a 400 naming the reason, as a session records one whole
completion per request: ``n``/``best_of`` > 1, batched prompts and ``echo``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict

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
from pydantic import TypeAdapter, ValidationError
from starlette.types import Receive, Scope, Send

from ingest import topics
from ingest.auth import Unauthorized, check_tokens, tenant_of
from ingest.contract import ContractError, DeadLetter, Id, Session, SessionStatus, parse_obj
from ingest.producer import BrokerUnavailable, Outgoing, RecordProducer
from learner.store import BASE
from serving import capture
from serving.balancer import Balancer, NoReplica
from serving.journal import JournalError
from serving.routing import RoutingTable, UnknownModel
from serving.sessions import EndRequest, OpenSession, SessionStore, request_entry, session_record
from serving.settings import ProxySettings
from serving.upstream import ProxyError, TurnStream, Upstream

SESSION_HEADER = "X-Ratchet-Session"
TENANT_HEADER = "X-Ratchet-Tenant"
TASK_HEADER = "X-Ratchet-Task"
TASK_FAMILY_HEADER = "X-Ratchet-Task-Family"
_ID = TypeAdapter(Id)


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


class CaptureProxy:
    def __init__(self, settings: ProxySettings, producer: RecordProducer, routing: RoutingTable):
        self.settings = settings
        self.producer = producer
        self.routing = routing
        self.metrics = Metrics()
        self.sessions = SessionStore(settings.journal_dir)
        self.metrics.open_sessions.set_function(self.sessions.in_memory)
        self.balancer = Balancer(routing, settings.replica_eject_s)
        self.upstream = Upstream(self.balancer, settings.vllm_timeout_s, self.metrics.latency)

    def close(self) -> None:
        self.upstream.close()

    def admin_state(self) -> dict:
        """The routes generation followed, and per version the requests in flight and pinned sessions."""
        return self.balancer.state(self.sessions.pinned)

    def open_session_ids(self) -> list[str]:
        return self.sessions.open_session_ids()

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
            held.enter_context(self.sessions.lock(sid))
            if self.sessions.ended(sid):
                raise ProxyError(409, f"session {sid!r} has ended; start a new session id")
            session = self.sessions.load(sid)
            if session is not None:
                self._check_owner(session, tenant)
            if session is not None and session.model != body["model"]:
                raise ProxyError(
                    409, f"session {sid!r} started on model {session.model!r}, not {body['model']!r}"
                )
            try:
                route, candidates, generation = self.balancer.admit(
                    body["model"], session.route if session is not None else None, sid
                )
            except UnknownModel as exc:
                raise ProxyError(404, str(exc)) from None
            except NoReplica as exc:
                raise ProxyError(503, str(exc)) from None
            held.callback(self.balancer.release, route)
            stream = bool(body.get("stream"))
            answer = self.upstream.forward(kind, body, route, candidates, stream)
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
                now = time.time()
                opened = session or OpenSession(
                    sid, tenant, task_id, body["model"], route, now, now, task_family=task_family
                )
                entry = request_entry(opened, kind, body, served, usage, latency_s, now)
                self.sessions.append(opened, entry, new=session is None)
                for turn in entry["turns"]:
                    self.metrics.turns.labels(turn["role"]).inc()

            if stream:
                held.callback(self.balancer.release_replica, answer.replica)
                m = self.metrics
                relay = TurnStream(
                    kind, body, answer, record, m.latency, m.streams_interrupted, held.pop_all()
                )
                return 200, relay, out_headers
            try:
                served = capture.served_tokens(answer.data, kind)
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise ProxyError(502, f"vLLM's response cannot be recorded: {exc!r}") from None
            record(served, answer.data.get("usage"), answer.latency_s)
        return 200, capture.client_view(answer.data, body, kind), out_headers

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
        with self.sessions.lock(sid):
            session = self.sessions.load(sid)
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
                self.sessions.forget(sid)
            dead = {"topic": delivery.topic, "partition": delivery.partition, "offset": delivery.offset}
            raise ProxyError(
                422, f"session {sid!r} breaks the contract: {exc.reason}", dead_letter=dead
            ) from None
        delivery = self._produce(Outgoing(topics.SESSIONS, sid, parsed.to_json()))
        self.sessions.forget(sid)
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
        for sid in self.sessions.open_session_ids():
            with self.sessions.lock(sid):
                try:
                    session = self.sessions.load(sid)
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
