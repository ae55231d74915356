"""The ingest HTTP API: sessions, feedback and outcomes into Kafka.

``POST /v1/sessions``, ``/v1/feedback``, ``/v1/outcomes`` take one record
(``application/json``) or a batch, one record per line (``application/x-ndjson``).

- Auth: ``Authorization: Bearer <token>``; the token names the tenant. A missing
  or unknown token is 401, a record of another tenant makes the whole request
  403. These requests produce nothing at all, not even dead letters: the caller
  is not trusted, and the DLQ is no place for another tenant's data.
- A body over the limit is 413 and is not read; a batch of more records than
  allowed is 413 too. Nothing is produced for either.
- Valid records go to their topic keyed by ``session_id``; every rejected record
  (breaks the contract, or repeats an id within its batch) goes to ``dlq.v1``
  with its reason. The answer is 202 with a verdict per record, except that a
  single invalid record is 422.
- Records and dead letters are produced together and acknowledged by the broker
  (acks=all) before the answer. If the broker does not acknowledge within the
  delivery timeout the answer is 503 with ``Retry-After``, and nothing is
  reported accepted: retry the whole request. Records of a failed request may
  still have reached the broker, so delivery is at least once; downstream
  stages de-duplicate by id.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from ingest.auth import Unauthorized, check_tokens, tenant_of
from ingest.config import load
from ingest.contract import DeadLetter
from ingest.intake import ENDPOINTS, Endpoint, Problem, judge, split_lines
from ingest.producer import BrokerUnavailable, Outgoing, RecordProducer
from ingest.settings import IngestSettings

SINGLE_TYPE = "application/json"
BATCH_TYPES = ("application/x-ndjson", "application/jsonl")


class Refusal(Exception):
    """A request refused as a whole; ``reason`` labels the metric."""

    def __init__(self, status: int, reason: str, detail: str, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status, self.reason, self.detail, self.headers = status, reason, detail, headers or {}


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.accepted = Counter(
            "ratchet_ingest_records_accepted", "records produced", ["endpoint"], registry=self.registry
        )
        self.rejected = Counter(
            "ratchet_ingest_records_rejected",
            "records rejected and dead-lettered",
            ["endpoint", "reason"],
            registry=self.registry,
        )
        self.refused = Counter(
            "ratchet_ingest_requests_refused",
            "requests refused as a whole, nothing accepted",
            ["endpoint", "reason"],
            registry=self.registry,
        )
        self.produce_seconds = Histogram(
            "ratchet_ingest_produce_seconds",
            "time from produce to broker acknowledgement, per request",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )


def create_app(settings: IngestSettings, producer: RecordProducer | None = None) -> FastAPI:
    """The ingest app. A ``producer`` passed in stays the caller's to close."""
    check_tokens(settings.ingest_tokens)
    own_producer = producer is None
    producer = producer or RecordProducer(settings.kafka_bootstrap, settings.ingest_delivery_timeout_s)
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        if own_producer:
            await asyncio.to_thread(producer.close)

    app = FastAPI(title="Ratchet ingest", lifespan=lifespan)

    async def handle(endpoint: Endpoint, request: Request) -> JSONResponse:
        try:
            tenant = tenant_of(request.headers.get("authorization"), settings.ingest_tokens)
        except Unauthorized as exc:
            raise Refusal(401, "unauthorized", exc.detail, exc.headers) from None
        batch = is_batch(request.headers.get("content-type"))
        limit = settings.ingest_max_batch_bytes if batch else settings.ingest_max_record_bytes
        body = await read_body(request, limit)
        lines = split_lines(body) if batch else [(0, body.strip())]
        if len(lines) > settings.ingest_max_batch_records:
            raise Refusal(
                413,
                "too_large",
                f"{len(lines)} records, over the limit of {settings.ingest_max_batch_records}",
            )
        if not lines:
            raise Refusal(422, "empty", "the batch holds no records")
        verdicts = await asyncio.to_thread(judge, endpoint, lines, tenant, settings.ingest_max_record_bytes)
        mismatch = next((v for v in verdicts if v.problem is Problem.TENANT_MISMATCH), None)
        if mismatch is not None:
            raise Refusal(403, "tenant_mismatch", f"index {mismatch.index}: {mismatch.reason}")

        outgoing = [Outgoing(endpoint.topic, v.session_id, v.raw) for v in verdicts if v.accepted]
        outgoing += [
            producer.dead_letter(
                DeadLetter.of(endpoint.source, v.reason, v.raw, session_id=v.session_id, tenant=tenant)
            )
            for v in verdicts
            if not v.accepted
        ]
        started = time.perf_counter()
        try:
            await asyncio.to_thread(producer.produce, outgoing)
        except BrokerUnavailable as exc:
            detail = f"broker unavailable, nothing was accepted; retry the whole request ({exc})"
            raise Refusal(
                503, "broker_unavailable", detail, {"Retry-After": str(settings.ingest_retry_after_s)}
            ) from None
        metrics.produce_seconds.observe(time.perf_counter() - started)

        n_accepted = sum(v.accepted for v in verdicts)
        metrics.accepted.labels(endpoint.name).inc(n_accepted)
        for v in verdicts:
            if not v.accepted:
                metrics.rejected.labels(endpoint.name, v.problem).inc()
        records = [v.report() for v in verdicts]
        if not batch and not verdicts[0].accepted:
            return JSONResponse({"detail": verdicts[0].reason, "records": records}, status_code=422)
        body = {"accepted": n_accepted, "rejected": len(verdicts) - n_accepted, "records": records}
        return JSONResponse(body, status_code=202)

    def route(endpoint: Endpoint):
        async def ingest(request: Request) -> JSONResponse:
            try:
                return await handle(endpoint, request)
            except Refusal as refusal:
                metrics.refused.labels(endpoint.name, refusal.reason).inc()
                return JSONResponse(
                    {"detail": refusal.detail}, status_code=refusal.status, headers=refusal.headers
                )

        return ingest

    for endpoint in ENDPOINTS:
        doc = f"One {endpoint.model.__name__} (application/json) or a JSONL batch (application/x-ndjson)."
        app.add_api_route(
            endpoint.path,
            route(endpoint),
            methods=["POST"],
            status_code=202,
            name=endpoint.name,
            description=doc,
        )

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        up = await asyncio.to_thread(producer.healthy, 1.0)
        status = "ok" if up else "broker unreachable"
        return JSONResponse(
            {"status": status, "broker": settings.kafka_bootstrap}, status_code=200 if up else 503
        )

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def is_batch(content_type: str | None) -> bool:
    media = (content_type or "").partition(";")[0].strip().lower()
    if media in BATCH_TYPES:
        return True
    if media == SINGLE_TYPE:
        return False
    allowed = ", ".join((SINGLE_TYPE, *BATCH_TYPES))
    raise Refusal(415, "unsupported_media_type", f"Content-Type {media or '(none)'!r}; use one of {allowed}")


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Refusal(413, "too_large", f"body of {declared} bytes, over the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refusal(413, "too_large", f"body over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def app_from_environment() -> FastAPI:
    """The app with settings from ``RATCHET_*`` / ``RATCHET_CONFIG`` (a uvicorn factory)."""
    return create_app(load(IngestSettings, "ingest"))
