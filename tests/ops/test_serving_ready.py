"""`ratchet up` reports the serving controller up only after its first reconcile pass: before it, the
routes file may be an earlier run's and name versions a restarted vLLM no longer holds."""

import pytest
from prometheus_client import start_http_server

from ops.pipeline import reconcile_passes, serving_ready
from serving.controller import Metrics
from tests.conftest import free_port


def test_the_pass_count_is_read_from_the_metrics_text():
    assert reconcile_passes("") == 0
    text = "# HELP x\nratchet_serving_reconcile_passes_created 1.7e9\nratchet_serving_reconcile_passes_total 4.0\n"
    assert reconcile_passes(text) == 4
    with pytest.raises(ValueError):
        reconcile_passes("<html>not metrics</html>\n")


def test_serving_is_ready_once_a_pass_completed_and_not_when_unreachable():
    metrics, port = Metrics(), free_port()
    url = f"http://127.0.0.1:{port}"
    assert not serving_ready(url)  # nothing listening
    server, thread = start_http_server(port, "127.0.0.1", metrics.registry)
    try:
        assert not serving_ready(url)  # answering, no pass yet
        metrics.passes.inc()
        assert serving_ready(url)
    finally:
        server.shutdown()
        thread.join(10)
