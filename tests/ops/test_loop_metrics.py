"""`ratchet status` as Prometheus metrics (ops/loop_metrics.py): the status dict's figures as gauges,
printed once or served on /metrics."""

import os
import subprocess
import sys
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ops import loop_metrics, loop_status
from ops.pipeline import PipelineSettings, last_decisions, serving_report
from ops.stack import StackSettings, free_port
from tests.ops.test_loop_status import write_decisions, write_serving_status


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(name, sorted labels) -> value, parsed back with prometheus_client's own parser."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def a_status(tmp_path) -> dict:
    """A status dict as `ratchet status --json` builds it, from the real section functions where they
    read files (decision log, serving report) and from `lag` on hand-made ends and positions."""
    write_decisions(tmp_path, [("v1", "evaluate", "promote"), ("v2", "evaluate", "promote")])
    decisions = last_decisions(tmp_path, n=100)
    write_serving_status(tmp_path, "v1", {"http://a": ["v1"], "http://b": ["v1", "v2"]})
    replicas = loop_status.replica_status(serving_report(tmp_path), decisions, routed="v1")
    ends = {
        ("sessions.v1", 0): {"end": 40, "first": 0, "reported_end": 31},
        ("sessions.v1", 1): {"end": 12, "first": 0, "reported_end": 12},
        ("rewarded.v1", 0): {"end": 9, "first": 0, "reported_end": 9},
    }
    rewards_lag = loop_status.lag({k: v for k, v in ends.items() if k[0] == "sessions.v1"},
                                  {("sessions.v1", 0): 33, ("sessions.v1", 1): None})  # fmt: skip
    now = time.time()
    return {
        "components": [{"component": "broker", "healthy": True}, {"component": "vllm", "healthy": False}],
        "serving_version": "v1",
        "decisions": decisions[-5:],
        "lag": {
            "rewards": {"group": "g", **rewards_lag},
            "learner": {"unknown": "no learner checkpoint yet"},
        },
        "rates": {
            "sessions.v1": {"per_minute": 55.2, "records": 276, "window_s": 300.0, "truncated": False},
            "rewarded.v1": {"unknown": "not read to the window's start within 3.0s"},
        },
        "learner": {
            "health": {"status": "ok"},
            "checkpoint": {
                "checkpoint": 7,
                "updates": 5,
                "records": 80,
                "head": "v2",
                "offsets": {},
                "written_at": now - 30,
                "last_update_at": now - 42.5,
            },  # fmt: skip
            "staleness_s": 42.5,
            "published": {"versions": ["v1", "v2"], "latest": "v2", "latest_at": now - 60},
        },
        "gate": {
            "health": {"status": "ok"},
            "evaluating": {"version": "v3", "tasks_done": 17, "tasks_total": 60, "by_suite": {}},
            "last_decision": {k: decisions[-1][k] for k in ("version", "action", "decision", "at")},
        },
        "replicas": replicas,
        "warnings": replicas.pop("warnings"),
    }


def test_every_figure_of_the_status_is_a_gauge(tmp_path):
    out = a_status(tmp_path)
    got = samples(loop_metrics.exposition(out))

    assert got[("ratchet_component_up", (("component", "broker"),))] == 1.0
    assert got[("ratchet_component_up", (("component", "vllm"),))] == 0.0
    lag = (("partition", "0"), ("stage", "rewards"), ("topic", "sessions.v1"))
    assert got[("ratchet_consumer_lag_records", lag)] == 40 - 33  # the true end, not the reported 31
    assert got[("ratchet_consumer_lag_records_total", (("stage", "rewards"),))] == 7 + 12
    assert got[("ratchet_status_unknown", (("section", "lag.learner"),))] == 1.0
    assert ("ratchet_consumer_lag_records_total", (("stage", "learner"),)) not in got  # unknown is not 0
    assert got[("ratchet_topic_records_per_minute", (("topic", "sessions.v1"),))] == 55.2
    assert got[("ratchet_status_unknown", (("section", "rates.rewarded.v1"),))] == 1.0
    assert got[("ratchet_learner_updates", ())] == 5.0
    assert got[("ratchet_learner_staleness_seconds", ())] == 42.5
    assert got[("ratchet_learner_published_versions", ())] == 2.0
    assert got[("ratchet_learner_head", (("version", "v2"),))] == 1.0
    assert got[("ratchet_gate_evaluating", (("version", "v3"),))] == 1.0
    assert (got[("ratchet_gate_tasks_done", ())], got[("ratchet_gate_tasks_total", ())]) == (17.0, 60.0)
    last = (("action", "evaluate"), ("decision", "promote"), ("version", "v2"))
    assert got[("ratchet_gate_last_decision", last)] == 1.0
    # the log's champion is v2; both replicas serve v1 (the controller's alias): both disagree
    assert got[("ratchet_replica_serving", (("url", "http://a"), ("version", "v1")))] == 1.0
    assert got[("ratchet_replica_disagrees_with_decision_log", (("url", "http://a"),))] == 1.0
    assert got[("ratchet_status_warnings", ())] == float(len(out["warnings"])) > 0


def test_replicas_that_agree_with_the_log_and_an_idle_gate(tmp_path):
    out = a_status(tmp_path)
    write_serving_status(tmp_path, "v2", {"http://a": ["v2"]})
    out["replicas"] = loop_status.replica_status(serving_report(tmp_path), out["decisions"], routed="v2")
    out["gate"]["evaluating"] = None
    got = samples(loop_metrics.exposition(out))

    assert got[("ratchet_replica_disagrees_with_decision_log", (("url", "http://a"),))] == 0.0
    assert not any(name == "ratchet_gate_evaluating" for name, _ in got)
    assert ("ratchet_gate_tasks_done", ()) not in got
    assert not any(dict(labels).get("section", "").startswith("gate") for _, labels in got)


def stack_env(tmp_path) -> dict[str, str]:
    """Every port of the stack and the loop free (nothing answers), state in ``tmp_path``."""
    fields = [*StackSettings.__dataclass_fields__, *PipelineSettings.__dataclass_fields__]
    ports = {f"RATCHET_{f.upper()}": str(free_port()) for f in fields if f.endswith("_port")}
    return {**os.environ, "RATCHET_STATE_DIR": str(tmp_path), **ports}


def test_cli_prints_the_exposition_and_serves_it_on_each_scrape(tmp_path):
    env = stack_env(tmp_path)
    printed = subprocess.run(
        [sys.executable, "-m", "ops.cli", "status", "--prometheus"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert printed.returncode == 1, printed.stderr  # nothing is healthy
    once = samples(printed.stdout)
    assert once[("ratchet_component_up", (("component", "broker"),))] == 0.0
    assert once[("ratchet_status_unknown", (("section", "lag.rewards"),))] == 1.0
    assert once[("ratchet_status_unknown", (("section", "replicas"),))] == 1.0

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "ops.cli", "status", "--serve", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert "/metrics" in server.stdout.readline()  # printed once it listens
        first = samples(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text)
        assert first == once | {k: v for k, v in first.items() if k not in once}
        write_decisions(tmp_path, [("v1", "evaluate", "promote")])  # read afresh: the next scrape has it
        second = samples(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text)
        last = (("action", "evaluate"), ("decision", "promote"), ("version", "v1"))
        assert ("ratchet_gate_last_decision", last) in second and (
            "ratchet_gate_last_decision",
            last,
        ) not in first
    finally:
        server.terminate()
        server.wait(timeout=10)
