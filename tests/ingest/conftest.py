"""Fixtures for the ingest API: a real uvicorn server in a thread, a real broker, topic readers."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from ingest import topics
from ingest.api import create_app
from ingest.settings import IngestSettings
from tests.conftest import free_port

TOKENS = {"acme": "acme-secret", "beta": "beta-secret"}
ACME = {"Authorization": f"Bearer {TOKENS['acme']}"}
JSON = {"Content-Type": "application/json"}
JSONL = {"Content-Type": "application/x-ndjson"}


@contextlib.contextmanager
def serving(settings: IngestSettings) -> Iterator[httpx.Client]:
    """The ingest app served by uvicorn on a free port; yields a client for it."""
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=free_port(), log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the ingest server did not start"
        thread.join(0.01)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.config.port}", timeout=60) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def api(broker) -> Iterator[httpx.Client]:
    with serving(
        IngestSettings(kafka_bootstrap=broker, ingest_tokens=TOKENS, ingest_delivery_timeout_s=5)
    ) as client:
        yield client


def read_topic(
    bootstrap: str,
    topic: str,
    keep: Callable[[bytes | None, bytes], bool],
    done: Callable[[list[tuple[bytes, bytes]]], bool],
    timeout_s: float = 30.0,
) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record of ``topic`` that ``keep`` accepts, read from the beginning of
    every partition until ``done`` holds for them (see ``ingest.topics.read_topic``)."""
    found: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + timeout_s
    with contextlib.closing(topics.read_topic(bootstrap, topic, poll_s=0.5)) as batches:
        while not done(found):
            assert time.monotonic() < deadline, (
                f"{topic}: condition not met after {timeout_s}s ({len(found)} kept)"
            )
            found += [(m.key(), m.value()) for m in next(batches) if keep(m.key(), m.value())]
    return found


def metric(client: httpx.Client, name: str, **labels: str) -> float:
    """The value of one sample of the app's /metrics (0 when absent)."""
    text = client.get("/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0
