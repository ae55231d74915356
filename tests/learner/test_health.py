"""The /health and /metrics server of the worker stages, and the learner's (a real learner on a real broker)."""

from __future__ import annotations

import contextlib
import threading
import time

import httpx

from ingest.health import Health
from learner.loop import run
from ops.stack import free_port
from tests.learner.conftest import produce, rewarded, tiny_settings


def test_health_answers_200_while_the_loop_beats_and_503_once_it_stops():
    fresh, stuck = Health("learner", stale_s=60.0), Health("gate", stale_s=0.0)
    fresh.beat(updates=3, head="v2", ok=True)
    ports = fresh.serve("127.0.0.1", 0), stuck.serve("127.0.0.1", 0)
    try:
        answer = httpx.get(f"http://127.0.0.1:{ports[0]}/health")
        assert answer.status_code == 200
        body = answer.json()
        assert body["status"] == "ok" and body["updates"] == 3 and body["head"] == "v2"
        metrics = httpx.get(f"http://127.0.0.1:{ports[0]}/metrics").text
        assert "ratchet_learner_updates 3\n" in metrics and "ratchet_learner_ok 1\n" in metrics
        assert "ratchet_learner_head" not in metrics  # not a number
        stale = httpx.get(f"http://127.0.0.1:{ports[1]}/health")
        assert stale.status_code == 503 and stale.json()["status"] == "stale"
        assert httpx.get(f"http://127.0.0.1:{ports[0]}/other").status_code == 404
    finally:
        fresh.close()
        stuck.close()


def test_the_learner_reports_its_progress_on_health(broker, topic, model_dir, tmp_path):
    port = free_port()
    settings = tiny_settings(tmp_path, broker, topic, model_dir, learner_health_port=port, batch_sessions=4)
    produce(broker, topic, [rewarded(f"h{i}", float(i % 2), task_id="t0") for i in range(4)])
    stop = threading.Event()
    worker = threading.Thread(
        target=run, kwargs={"settings": settings, "stop": stop.is_set, "progress": print}
    )
    worker.start()
    try:
        deadline, body = time.monotonic() + 300, {}
        while time.monotonic() < deadline and body.get("records") != 4:
            with contextlib.suppress(httpx.HTTPError):  # not serving yet
                body = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()
            stop.wait(0.2)
        assert body.get("records") == 4 and body["updates"] == 1 and body["status"] == "ok", body
        assert body["offsets"] and sum(body["offsets"].values()) == 4
        # a version every 2 updates: the one update is trained and not yet published
        assert body["unpublished"] == 1 and body["published"] is None, body
    finally:
        stop.set()
        worker.join(timeout=60)
    assert not worker.is_alive()
