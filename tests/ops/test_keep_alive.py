"""Idle connections outlive the clients' pools, on every server the loop's clients reuse connections to.

httpx (and so the OpenAI client, the simulator, the proxy's and the gate's clients to vLLM) keeps an
idle connection 5 s. uvicorn's and vLLM's servers close one after 5 s too, so a request sent on a
pooled connection at that moment meets a closing socket and fails with ReadError, a lost request
(seen once in an end-to-end run under live traffic). The servers must keep idle connections longer.
"""

from __future__ import annotations

import dataclasses
import select
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx

from ops.pipeline import on_free_ports, pipeline

CLIENT_EXPIRY_S = httpx.Limits().keepalive_expiry  # the pools' default: 5 s


def closed_after(url: str, path: str, watch_s: float) -> float | None:
    """Send one keep-alive request on a fresh connection, read its whole answer, then watch the idle
    connection for ``watch_s``: the seconds after which the server closed it, or None if it is open."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            assert chunk, f"{url}{path} closed the connection before answering"
            answer += chunk
        head, body = answer.split(b"\r\n\r\n", 1)
        status = head.split(b"\r\n")[0]
        assert b" 200 " in status, f"{url}{path}: {status!r}"
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            chunk = sock.recv(65536)
            assert chunk, f"{url}{path} closed the connection in the middle of its answer"
            body += chunk
        idle_since = time.monotonic()
        readable, _, _ = select.select([sock], [], [], watch_s)  # a close makes the socket readable
        if readable and sock.recv(1) == b"":
            return time.monotonic() - idle_since
        return None


def test_idle_connections_outlive_the_clients_pools(lazy_stack, broker, vllm_url, tmp_path):
    settings = dataclasses.replace(lazy_stack.settings, state_dir=tmp_path / "state")
    ps = on_free_ports()
    stack = pipeline(settings, ps, progress=print)
    try:
        stack.up(["ingest", "proxy"])  # the commands the loop runs, with their default settings
        servers = {
            "ingest API": (f"http://{settings.host}:{ps.ingest_port}", "/healthz"),
            "capture proxy": (f"http://{settings.host}:{ps.proxy_port}", "/health"),
            "vLLM": (vllm_url, "/health"),
        }
        closed: dict[str, float | None] = {}

        def watch(name: str) -> None:
            closed[name] = closed_after(*servers[name], watch_s=CLIENT_EXPIRY_S + 1.5)

        threads = [threading.Thread(target=watch, args=(name,)) for name in servers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert set(closed) == set(servers)  # every watch ran to its end (a failed one raised in its thread)
        early = {name: round(s, 2) for name, s in closed.items() if s is not None}
        assert not early, f"idle connections closed before the clients' {CLIENT_EXPIRY_S:g} s expiry: {early}"
    finally:
        stack.down()
