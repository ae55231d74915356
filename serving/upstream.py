"""vLLM behind the capture proxy: a request sent to the replicas in the balancer's order, a stream relayed.

:meth:`Upstream.forward` tries the replicas :class:`serving.balancer.Balancer`
chose, in order. A replica that drops the connection, answers 5xx, or no longer
knows the adapter is ejected (skipped for a while) and the request is retried
on the next one, so a replica that dies mid-request costs no failed request
while another one serves that version; the last failure is what the client
gets. A streamed request is retried alike until its first chunk; after that,
:class:`TurnStream` relays the chunks as server-sent events, each cut to what
the client asked for (``capture.client_view``), while ``capture.StreamedTokens``
assembles the turn, which is recorded when vLLM's stream has ended whole,
before ``[DONE]`` is relayed. A stream that does not end whole records nothing:
the client going away stops the reading from vLLM (closing the upstream
connection aborts the request there); vLLM failing mid-stream ends it with an
``error`` event and no ``[DONE]``. Both count as interrupted (``cause``:
``client`` or ``upstream``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
from fastapi.responses import JSONResponse
from prometheus_client import Counter, Histogram

from serving import capture
from serving.balancer import Balancer
from serving.routing import Replica, Route

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
    """An answer the proxy gives in place of vLLM's: an HTTP status and why, in OpenAI's error shape."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None, **extra):
        super().__init__(reason)
        self.status, self.reason, self.headers, self.extra = status, reason, headers, extra

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.reason, "type": "ratchet_proxy", "code": self.status}, **self.extra}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


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


class Upstream:
    """The replicas' HTTP clients (one per replica) and requests sent through them."""

    def __init__(
        self,
        balancer: Balancer,
        timeout_s: float,
        latency: Histogram,
        transport: httpx.BaseTransport | None = None,  # None: HTTP (tests pass httpx.MockTransport)
    ):
        self.balancer, self.timeout_s, self.latency, self.transport = balancer, timeout_s, latency, transport
        self._lock = threading.Lock()
        self._clients: dict[str, httpx.Client] = {}

    def close(self) -> None:
        with self._lock:
            clients = list(self._clients.values())
        for client in clients:
            client.close()

    def _client(self, url: str) -> httpx.Client:
        with self._lock:
            client = self._clients.get(url)
            if client is None:
                client = httpx.Client(base_url=url, timeout=self.timeout_s, transport=self.transport)
                self._clients[url] = client
            return client

    def forward(self, kind: str, body: dict, route: Route, replicas: list[Replica], stream: bool) -> Answer:
        """vLLM's answer to the request on ``route``: its whole JSON, or the first chunk of its stream.

        Tries the replicas in order while one fails without answering (see ``RETRYABLE``), answers
        5xx, or does not know the adapter; the last failure is what the client gets. A stream's
        replica stays counted in flight: the caller releases it (``Balancer.release_replica``)."""
        balancer = self.balancer
        path = "/v1/chat/completions" if kind == capture.CHAT else "/v1/completions"
        upstream = capture.upstream_body(body, kind, route.model)
        failure: ProxyError | Answer | None = None
        for replica in replicas:
            balancer.take_replica(replica.url)
            started = time.perf_counter()
            client = self._client(replica.url)
            resp, streaming = None, False
            try:
                resp = client.send(client.build_request("POST", path, json=upstream), stream=True)
                if stream and resp.status_code < 400:
                    lines = resp.iter_lines()
                    first = first_event(lines, replica.url)
                    streaming = True
                else:
                    resp.read()
            except RETRYABLE as exc:
                balancer.eject(replica.url, None, repr(exc))
                failure = ProxyError(502, f"vLLM at {replica.url} did not answer: {exc!r}")
                continue
            except httpx.HTTPError as exc:
                raise ProxyError(502, f"vLLM at {replica.url} did not answer: {exc!r}") from None
            finally:
                if not streaming:
                    if resp is not None:
                        resp.close()
                    balancer.release_replica(replica.url)
            latency_s = time.perf_counter() - started
            if streaming:
                if first.get("model") != route.model:
                    resp.close()
                    balancer.release_replica(replica.url)
                    raise ProxyError(
                        502, f"vLLM at {replica.url} streamed as {first.get('model')!r}, not {route.model!r}"
                    )
                return Answer(200, first, latency_s, replica.url, resp, lines, started)
            self.latency.observe(latency_s)
            if resp.status_code >= 400:
                error = _json_or_error(resp)
                eject_key = balancer.eject_key(route)
                if resp.status_code >= 500:
                    balancer.eject(replica.url, None, f"answered {resp.status_code}")
                    failure = Answer(resp.status_code, error, latency_s, replica.url)
                elif resp.status_code == 404 and eject_key and "does not exist" in resp.text:
                    balancer.eject(replica.url, eject_key, f"does not know {route.model}")
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


class TurnStream:
    """A streamed completion on its way to the client, as server-sent events.

    Iterating relays vLLM's chunks (as the client may see them) while the turn is assembled, and
    records it with ``record`` when vLLM's stream has ended whole, before relaying ``[DONE]``.
    It holds the session's lock and the request's place in flight (``held``) until
    :meth:`close`, which stops reading from vLLM: a stream closed before its end (the client went
    away) or ended by a failure records nothing and is counted in ``interrupted``."""

    def __init__(
        self,
        kind: str,
        body: dict,
        answer: Answer,
        record: Callable[[dict, dict | None, float], None],
        latency: Histogram,
        interrupted: Counter,
        held: contextlib.ExitStack,
    ):
        self.kind, self.body, self.answer = kind, body, answer
        self._record, self._latency, self._interrupted, self._held = record, latency, interrupted, held
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
            for data in itertools.chain([None], events(self.answer.lines)):
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
        self._latency.observe(latency_s)
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
            self._interrupted.labels(interrupted).inc()
        self.answer.response.close()
        self._held.close()


def first_event(lines: Iterator[str], url: str) -> dict:
    """The first chunk of vLLM's event stream; a stream that fails before one is a ProxyError."""
    for data in events(lines):
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


def events(lines: Iterator[str]) -> Iterator[str]:
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
