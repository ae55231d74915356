"""``/health`` and ``/metrics`` for the worker stages that have no HTTP API of their own (learner, gate).

A stage calls :meth:`Health.beat` from its main loop (each poll, each batch) and
:meth:`Health.set` for what it wants to show. ``GET /health`` answers 200 with
the stage's status as JSON while the last beat is younger than ``stale_s``, and
503 with the same JSON once the loop has stopped beating (stuck in a call,
deadlocked, or gone). ``GET /metrics`` serves the same numbers for Prometheus
(``ratchet_<stage>_<name>``, plus ``ratchet_<stage>_heartbeat_age_seconds``).
Long work inside one beat (a gate evaluation, a training step) should beat as
it goes, or set ``stale_s`` above its longest step.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Health:
    def __init__(self, stage: str, stale_s: float):
        self.stage, self.stale_s = stage, stale_s
        self.started = time.time()
        self._beat = time.monotonic()
        self._values: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def beat(self, **values: Any) -> None:
        with self._lock:
            self._beat = time.monotonic()
            self._values.update(values)

    def set(self, **values: Any) -> None:
        with self._lock:
            self._values.update(values)

    def status(self) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            age = time.monotonic() - self._beat
            values = dict(self._values)
        ok = age <= self.stale_s
        body = {
            "stage": self.stage,
            "status": "ok" if ok else "stale",
            "heartbeat_age_s": round(age, 3),
            "stale_after_s": self.stale_s,
            "uptime_s": round(time.time() - self.started, 1),
            **values,
        }
        return ok, body

    def metrics(self) -> str:
        _, body = self.status()
        lines = [f"ratchet_{self.stage}_heartbeat_age_seconds {body['heartbeat_age_s']}"]
        for name, value in sorted(body.items()):
            if isinstance(value, bool):
                value = int(value)
            if isinstance(value, int | float) and name not in ("heartbeat_age_s", "stale_after_s"):
                lines.append(f"ratchet_{self.stage}_{name} {value}")
        return "\n".join(lines) + "\n"

    def serve(self, host: str, port: int) -> int:
        """Serve on ``host:port`` in a daemon thread (port 0: a free one); returns the port."""
        health = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                if self.path == "/health":
                    ok, body = health.status()
                    self._answer(200 if ok else 503, "application/json", json.dumps(body))
                elif self.path == "/metrics":
                    self._answer(200, "text/plain; version=0.0.4", health.metrics())
                else:
                    self._answer(404, "text/plain", "GET /health or /metrics\n")

            def _answer(self, code: int, kind: str, text: str) -> None:
                data = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=self._server.serve_forever, name=f"{self.stage}-health", daemon=True).start()
        return self._server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
