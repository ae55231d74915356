"""The product teams' client (ingest/client.py) against the real capture proxy, ingest API, vLLM and
broker: a session driven through its OpenAI client, ended with an in-line outcome, then late
signals; refusals come back as errors that say why."""

from __future__ import annotations

import uuid

import pytest

from ingest import topics
from ingest.client import Ratchet, RatchetError
from ingest.contract import Feedback, Outcome, Session, parse
from ingest.settings import IngestSettings
from serving.proxy import create_app
from tests.ingest.conftest import read_topic
from tests.ingest.conftest import serving as serving_ingest
from tests.serving.conftest import TOKENS, read_record, serving


@pytest.fixture
def endpoints(proxy_settings, broker):
    ingest = IngestSettings(kafka_bootstrap=broker, ingest_tokens=TOKENS, ingest_delivery_timeout_s=10)
    with serving(create_app(proxy_settings)) as proxy_url, serving_ingest(ingest) as ingest_api:
        yield proxy_url, str(ingest_api.base_url).rstrip("/")


def test_a_session_through_the_client_is_recorded_with_its_signals(endpoints, broker):
    proxy_url, ingest_url = endpoints
    with Ratchet("acme", TOKENS["acme"], proxy_url=proxy_url, ingest_url=ingest_url) as ratchet:
        session = ratchet.session(task_id="calc-17", task_family="calc")
        messages = [{"role": "user", "content": "What is 17*23?"}]
        first = session.openai.chat.completions.with_raw_response.create(
            model="policy", messages=messages, max_tokens=8, temperature=0
        )
        assert first.headers["X-Ratchet-Session"] == session.id
        messages += [{"role": "assistant", "content": first.parse().choices[0].message.content or ""}]
        messages += [{"role": "user", "content": "And plus 9?"}]
        session.openai.chat.completions.create(model="policy", messages=messages, max_tokens=8, temperature=0)
        ended = session.end(outcome={"tests_passed": 1, "tests_total": 2})

        late = ratchet.outcome(session.id, tests_passed=2, tests_total=2, details="CI re-run")
        verdict = ratchet.feedback(session.id, "accept", comment="merged")

    record = read_record(broker, Session, topics.SESSIONS, ended["partition"], ended["offset"])
    assert (record.session_id, record.tenant, record.task_id, record.task_family) == (
        session.id,
        "acme",
        "calc-17",
        "calc",
    )
    assert [t.role for t in record.turns] == ["user", "assistant", "user", "assistant"]
    assert (record.outcome.tests_passed, record.outcome.tests_total) == (1, 2)
    assert late["accepted"] == verdict["accepted"] == 1

    key = session.id.encode()
    (outcome,) = read_topic(broker, topics.OUTCOMES, keep=lambda k, v: k == key, done=lambda f: len(f) >= 1)
    (feedback,) = read_topic(broker, topics.FEEDBACK, keep=lambda k, v: k == key, done=lambda f: len(f) >= 1)
    outcome, feedback = parse(Outcome, outcome[1]), parse(Feedback, feedback[1])
    assert (outcome.tests_passed, outcome.details, outcome.tenant) == (2, "CI re-run", "acme")
    assert (feedback.kind.value, feedback.comment) == ("accept", "merged")


def test_refusals_come_back_as_errors_that_say_why(endpoints):
    proxy_url, ingest_url = endpoints
    sid = f"client-{uuid.uuid4().hex[:12]}"
    with Ratchet("acme", "not-a-token", proxy_url=proxy_url, ingest_url=ingest_url) as stranger:
        with pytest.raises(RatchetError) as raised:
            stranger.outcome(sid, tests_passed=1, tests_total=1)
        assert raised.value.status == 401
    with Ratchet("acme", TOKENS["beta"], proxy_url=proxy_url, ingest_url=ingest_url) as wrong_tenant:
        with pytest.raises(RatchetError) as raised:
            wrong_tenant.feedback(sid, "reject")
        assert raised.value.status == 403
    with Ratchet("acme", TOKENS["acme"], proxy_url=proxy_url, ingest_url=ingest_url) as ratchet:
        with pytest.raises(RatchetError) as raised:
            ratchet.outcome(sid, tests_passed=5, tests_total=4)
        assert raised.value.status == 422 and "exceeds tests_total" in raised.value.reason
        with pytest.raises(ValueError, match="is not one of accept, reject, edit"):
            ratchet.feedback(sid, "love-it")
        with pytest.raises(RatchetError) as raised:
            ratchet.session(sid).end()  # never started
        assert raised.value.status == 404
