"""Rewarded sessions as MLflow traces, and human assessments back as feedback, against the real
MLflow server and the real broker."""

from __future__ import annotations

import itertools
import uuid

import mlflow
import pytest
from confluent_kafka import Producer
from mlflow.entities import AssessmentSource

from ingest import topics
from ingest.brokers import client_config
from ingest.contract import Feedback, Outcome, parse
from ingest.producer import Outgoing, RecordProducer
from ingest.topics import TopicSpec, ensure_topics
from rewards.scoring import RewardSettings, reward_session
from rewards.traces import TraceExporter, TraceSettings, find_trace, key_of, sampled, verdict
from tests.ingest.conftest import read_topic
from tests.rewards.hand_made import bash, read, say, session


def rewarded_hack(sid: str):
    """A session whose agent edits the test and reads hidden tests: flagged, with an outcome."""
    s = session(
        read("tests/test_a.py", "def test_a():\n    assert f(2) == 4\n"),
        bash("sed -i 's/== 4/== 5/' tests/test_a.py && cat /eval/hidden_tests/test_a.py", "ok"),
        say("Done: the test passes now."),
        session_id=sid,
        task_id="fix-17",
    )
    outcome = Outcome(outcome_id=f"o-{sid}", session_id=sid, tenant="acme", tests_passed=1, tests_total=1)
    return reward_session(s, [], [outcome], RewardSettings())


@pytest.fixture
def exporter(broker, mlflow_url):
    topic = f"test-rewarded-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker, [TopicSpec(topic, 1, 3_600_000)])
    settings = TraceSettings(
        kafka_bootstrap=broker,
        mlflow_url=mlflow_url,
        traces_topic=topic,
        traces_group=f"traces-{uuid.uuid4().hex[:8]}",
        traces_experiment=f"sessions-{uuid.uuid4().hex[:8]}",
        traces_session_timeout_s=4.0,
    )
    made = [TraceExporter(settings, progress=lambda m: None)]
    yield settings, made
    for e in made:
        e.close()


def produce(broker: str, topic: str, *rewarded) -> None:
    producer = RecordProducer(broker, 10.0)
    try:
        assert all(
            d.ok for d in producer.produce([Outgoing(topic, r.session_id, r.to_json()) for r in rewarded])
        )
    finally:
        producer.close()


def drain(e: TraceExporter, want_read: int) -> None:
    for _ in range(60):  # each step waits up to 1 s for records
        if e.counts["read"] >= want_read:
            return
        e.step()
    raise AssertionError(f"read {e.counts['read']} of {want_read} records")


def test_a_rewarded_session_becomes_one_trace_with_its_turns_and_assessments(exporter, broker):
    settings, made = exporter
    rewarded = rewarded_hack(f"trace-{uuid.uuid4().hex[:8]}")
    assert rewarded.flags  # the session is flagged: its evidence must reach MLflow
    marker = Producer(client_config(broker))  # a reward worker's position marker comes first
    marker.produce(settings.traces_topic, b"{}", key=b"m", headers=[(topics.REWARDED_MARKER_HEADER, b"w")])
    assert marker.flush(10) == 0
    produce(broker, settings.traces_topic, rewarded)
    drain(made[0], 2)
    assert made[0].counts["invalid"] == 0 and made[0].counts["logged"] == 1

    trace_id = find_trace(made[0].experiment_id, key_of(rewarded))
    assert trace_id is not None
    trace = mlflow.get_trace(trace_id)
    spans = trace.data.spans
    root = next(s for s in spans if s.parent_id is None)
    children = sorted((s for s in spans if s.parent_id is not None), key=lambda s: s.start_time_ns)
    assert [s.name.split()[0] for s in children] == [t.role for t in rewarded.session.turns]
    assert (
        root.attributes["ratchet.tenant"] == "acme" and root.attributes["ratchet.reward"] == rewarded.reward
    )
    llm = next(s for s in children if s.name.startswith("assistant"))
    first = rewarded.session.assistant_turns()[0]
    assert llm.attributes["ratchet.completion_tokens"] == len(first.completion_token_ids)
    tool = next(s for s in children if s.name == "tool bash")
    assert "sed -i" in tool.inputs["arguments"]
    assert all(a.end_time_ns <= b.start_time_ns for a, b in itertools.pairwise(children))  # one after another
    assert root.start_time_ns <= children[0].start_time_ns and children[-1].end_time_ns <= root.end_time_ns

    tags = trace.info.tags
    assert tags["ratchet.session_id"] == rewarded.session_id and tags["ratchet.task_id"] == "fix-17"
    assert set(tags["ratchet.flags"].split(",")) == {f.kind.value for f in rewarded.flags}
    assessments = {a.name: a for a in trace.info.assessments}
    assert assessments["reward"].feedback.value == pytest.approx(rewarded.reward)
    for name, value in rewarded.components.items():
        assert assessments[f"reward/{name}"].feedback.value == pytest.approx(value)
    for flag in rewarded.flags:
        hack = assessments[f"hack/{flag.kind.value}"]
        assert hack.feedback.value is True and flag.evidence[:50] in hack.rationale


def test_a_restarted_exporter_logs_a_revision_once(exporter, broker):
    settings, made = exporter
    rewarded = rewarded_hack(f"trace-{uuid.uuid4().hex[:8]}")
    produce(broker, settings.traces_topic, rewarded)
    drain(made[0], 1)
    made[0].close()
    made.clear()
    # a crash before the commit: the same record is read again by a new exporter of the group
    produce(broker, settings.traces_topic, rewarded)
    again = TraceExporter(settings, progress=lambda m: None)
    made.append(again)
    drain(again, 1)
    assert again.counts["already_logged"] == 1 and again.counts["logged"] == 0
    found = mlflow.search_traces(
        locations=[again.experiment_id],
        filter_string=f"tag.`ratchet.session_id` = '{rewarded.session_id}'",
        return_type="list",
    )
    assert len(found) == 1


def test_a_reviewers_thumbs_down_in_mlflow_becomes_feedback_once(exporter, broker):
    settings, made = exporter
    rewarded = rewarded_hack(f"trace-{uuid.uuid4().hex[:8]}")
    produce(broker, settings.traces_topic, rewarded)
    drain(made[0], 1)
    trace_id = find_trace(made[0].experiment_id, key_of(rewarded))
    human = mlflow.log_feedback(
        trace_id=trace_id,
        name="thumbs",
        value=False,
        source=AssessmentSource(source_type="HUMAN", source_id="reviewer@acme"),
        rationale="it edited the test instead of the code",
    )
    assert made[0].forward_feedback() == 1
    assert made[0].forward_feedback() == 0  # tagged as forwarded: not sent again

    key = rewarded.session_id.encode()
    (record,) = read_topic(broker, topics.FEEDBACK, keep=lambda k, v: k == key, done=lambda f: len(f) >= 1)
    feedback = parse(Feedback, record[1])
    assert (feedback.session_id, feedback.tenant, feedback.kind.value) == (
        rewarded.session_id,
        "acme",
        "reject",
    )
    assert feedback.feedback_id == f"mlflow-{human.assessment_id}"
    assert feedback.comment == "it edited the test instead of the code"


def test_sampling_is_by_session_id_and_stable():
    ids = [f"s-{i}" for i in range(2000)]
    picked = [i for i in ids if sampled(i, 0.25)]
    assert 0.2 < len(picked) / len(ids) < 0.3
    assert picked == [i for i in ids if sampled(i, 0.25)]
    assert not any(sampled(i, 0.0) for i in ids) and all(sampled(i, 1.0) for i in ids)


@pytest.mark.parametrize(
    ("value", "kind"), [(True, "accept"), (False, "reject"), ("Edit", "edit"), ("great", None), (0.7, None)]
)
def test_what_a_reviewers_value_means(value, kind):
    assert (verdict(value).value if verdict(value) else None) == kind


def test_the_exporter_runs_as_a_stage_with_health_and_stops_on_sigterm(broker, mlflow_url, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    import httpx

    from tests.conftest import free_port

    port = free_port()
    env = {
        **os.environ,
        "RATCHET_KAFKA_BOOTSTRAP": broker,
        "RATCHET_MLFLOW_URL": mlflow_url,
        "RATCHET_TRACES_EXPERIMENT": f"sessions-{uuid.uuid4().hex[:8]}",
        "RATCHET_TRACES_GROUP": f"traces-{uuid.uuid4().hex[:8]}",
        "RATCHET_TRACES_HEALTH_PORT": str(port),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "ops.cli", "traces", "run"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the exporter's /health never answered"
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                if health.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)  # polling a port with a deadline, not waiting for an effect
        assert health.json()["stage"] == "traces"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert "traces: stopped" in out


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("traces_sample_rate", 1.5, "traces_sample_rate must be in"),
        ("traces_session_timeout_s", 0.0, "at least 1"),
    ],
)
def test_an_exporter_refuses_settings_it_cannot_run_with(field, value, says):
    from ingest.config import ConfigError

    with pytest.raises(ConfigError, match=says):
        TraceExporter(TraceSettings(**{field: value}), progress=lambda m: None)
