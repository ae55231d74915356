"""The capture proxy's bearer tokens per tenant, against the real vLLM and the real broker."""

import dataclasses
import os
import subprocess
import sys
import uuid

import httpx
import pytest

from ingest import topics
from ingest.auth import Unauthorized, check_tokens, tenant_of
from ingest.contract import Session
from ingest.producer import Outgoing, RecordProducer
from serving.journal import SessionJournal
from serving.proxy import create_app
from tests.conftest import free_port
from tests.ingest.conftest import read_topic
from tests.serving.conftest import AUTH, BETA, TOKENS, read_record, serving

HI = [{"role": "user", "content": "Say hi."}]


def new_id() -> str:
    return f"proxy-auth-{uuid.uuid4().hex[:12]}"


def chat(client: httpx.Client, sid: str, headers: dict | None = None) -> httpx.Response:
    body = {"model": "policy", "messages": HI, "max_tokens": 3, "temperature": 0}
    return client.post(
        "/v1/chat/completions", headers={"X-Ratchet-Session": sid, **(headers or {})}, json=body
    )


def refused(resp: httpx.Response, status: int, reason: str) -> None:
    assert resp.status_code == status, resp.text
    assert reason in resp.json()["error"]["message"], resp.text
    if status == 401:
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")


def assert_nothing_produced(broker: str, *session_ids: str) -> None:
    """Nothing keyed by ``session_ids`` is on sessions.v1 or dlq.v1: markers produced now with the same
    keys (so to the same partitions) are the first records read for them."""
    marker = f"marker-{uuid.uuid4().hex}".encode()
    producer = RecordProducer(broker, 10.0)
    producer.produce([Outgoing(t, sid, marker) for t in (topics.SESSIONS, topics.DLQ) for sid in session_ids])
    producer.close()
    keys = {sid.encode() for sid in session_ids}
    for topic in (topics.SESSIONS, topics.DLQ):
        got = read_topic(
            broker,
            topic,
            keep=lambda k, v: k in keys,
            done=lambda found: sum(v == marker for _, v in found) == len(keys),
        )
        assert [v for _, v in got] == [marker] * len(keys), f"{topic} holds records of refused requests"


def test_the_token_check_is_the_ingest_apis():
    tokens = {"acme": "a-token", "beta": "b-token"}
    assert tenant_of("Bearer b-token", tokens) == "beta"
    assert tenant_of("bearer  a-token ", tokens) == "acme"
    for header, reason in [
        (None, "missing bearer token"),
        ("Basic a-token", "missing bearer token"),
        ("Bearer ", "missing bearer token"),
        ("Bearer c-token", "unknown token"),
    ]:
        with pytest.raises(Unauthorized, match=reason):
            tenant_of(header, tokens)
    with pytest.raises(ValueError, match="empty token"):
        check_tokens({"acme": ""})
    with pytest.raises(ValueError, match="'acme' and 'beta' have the same token"):
        check_tokens({"acme": "same", "beta": "same"})


def test_requests_without_a_known_token_are_refused_and_produce_nothing(proxy_settings, broker):
    sid, never = new_id(), new_id()
    app = create_app(proxy_settings)
    with serving(app) as url, httpx.Client(base_url=url, timeout=120) as anonymous:
        assert chat(anonymous, sid, AUTH).status_code == 200  # acme's session, open
        no_token = chat(anonymous, never)
        refused(no_token, 401, "missing bearer token")
        assert "api_key" in no_token.json()["error"]["message"]  # says how to pass one
        refused(chat(anonymous, never, {"Authorization": "Bearer not-a-token"}), 401, "unknown token")
        refused(chat(anonymous, never, {"Authorization": f"Basic {TOKENS['acme']}"}), 401, "missing bearer")
        refused(chat(anonymous, sid), 401, "missing bearer token")  # not even a turn of an open session
        outcome = {"verifiers_passed": 1, "verifiers_total": 1}
        for headers in ({}, {"Authorization": "Bearer not-a-token"}):
            end = anonymous.post(
                f"/v1/sessions/{sid}/end", headers=headers, json={"status": "completed", "outcome": outcome}
            )
            refused(end, 401, "token")
        refused(anonymous.post(f"/v1/sessions/{sid}/end", json={"status": "bogus"}), 401, "token")
        refused(anonymous.get("/v1/models"), 401, "missing bearer token")
        refused(anonymous.get("/v1/routes"), 401, "missing bearer token")
        assert anonymous.get("/health").json()["open_sessions"] == 1  # open without a token
        metrics = anonymous.get("/metrics").text
        assert 'ratchet_proxy_requests_total{endpoint="chat",status="401"} 4.0' in metrics
        assert SessionJournal(proxy_settings.journal_dir).session_ids() == [sid]

        assert_nothing_produced(broker, sid, never)
        ended = anonymous.post(f"/v1/sessions/{sid}/end", headers=AUTH, json={"status": "completed"})
        assert ended.status_code == 200, ended.text  # the refusals left it open
    session = read_record(broker, Session, topics.SESSIONS, ended.json()["partition"], ended.json()["offset"])
    assert session.tenant == "acme" and [t.role for t in session.turns] == ["user", "assistant"]

    without = dataclasses.replace(proxy_settings, ingest_tokens={})
    with serving(create_app(without)) as url, httpx.Client(base_url=url, timeout=120) as client:
        refused(chat(client, new_id(), AUTH), 401, "no tenant tokens are configured on this proxy")


def test_another_tenants_token_cannot_touch_a_session_and_produces_nothing(proxy_settings, broker):
    sid, other = new_id(), new_id()
    outcome = {"verifiers_passed": 0, "verifiers_total": 1}
    with serving(create_app(proxy_settings)) as url, httpx.Client(base_url=url, timeout=120) as client:
        first = chat(client, sid, {**AUTH, "X-Ratchet-Tenant": "acme"})  # a header that agrees is fine
        assert first.status_code == 200, first.text

        def end(headers: dict, **body) -> httpx.Response:
            return client.post(
                f"/v1/sessions/{sid}/end", headers=headers, json={"status": "completed", **body}
            )

        mismatch = "names tenant 'beta', the token is 'acme'"
        refused(chat(client, other, {**AUTH, "X-Ratchet-Tenant": "beta"}), 403, mismatch)
        refused(chat(client, sid, {**AUTH, "X-Ratchet-Tenant": "beta"}), 403, mismatch)
        refused(chat(client, sid, BETA), 403, "belongs to another tenant")  # no turn for beta
        refused(end(BETA), 403, "belongs to another tenant")
        refused(end(BETA, outcome=outcome), 403, "belongs to another tenant")
        refused(end(BETA, feedback={"kind": "reject"}), 403, "belongs to another tenant")
        refused(end({**AUTH, "X-Ratchet-Tenant": "beta"}), 403, mismatch)
        refused(end(AUTH, tenant="beta"), 403, "tenant names another tenant")
        refused(end(AUTH, outcome={**outcome, "tenant": "beta"}), 403, "outcome names another tenant")
        refused(end(AUTH, feedback={"kind": "accept", "tenant": "beta"}), 403, "feedback names another")
        assert sorted(SessionJournal(proxy_settings.journal_dir).session_ids()) == [sid]

        assert_nothing_produced(broker, sid, other)
        ended = end(AUTH, outcome=outcome, feedback={"kind": "reject"})  # its own tenant's token
        assert ended.status_code == 200, ended.text
    session = read_record(broker, Session, topics.SESSIONS, ended.json()["partition"], ended.json()["offset"])
    assert (session.tenant, session.outcome.tenant, session.feedback.tenant) == ("acme", "acme", "acme")
    assert session.outcome.verifiers_passed == 0 and session.feedback.kind.value == "reject"
    assert [t.role for t in session.turns] == ["user", "assistant"]  # beta's request added nothing


def test_an_openai_client_passes_its_tenants_token_as_the_api_key(proxy_settings, broker):
    from openai import AuthenticationError, OpenAI, PermissionDeniedError

    sid = new_id()
    messages = [{"role": "user", "content": "What is 2+3?"}]
    with serving(create_app(proxy_settings)) as url:

        def agent(api_key: str, **headers: str) -> OpenAI:
            return OpenAI(
                base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=120,
                default_headers={"X-Ratchet-Session": sid, "X-Ratchet-Task": "sum-2-3", **headers},
            )  # fmt: skip

        beta = agent(TOKENS["beta"])
        assert "policy" in {m.id for m in beta.models.list()}
        raw = beta.chat.completions.with_raw_response.create(
            model="policy", messages=messages, max_tokens=6, temperature=0
        )
        assert raw.headers["X-Ratchet-Adapter-Version"] == "base"
        reply = raw.parse()
        with pytest.raises(AuthenticationError, match="unknown token"):
            agent("not-a-token").chat.completions.create(model="policy", messages=messages, max_tokens=2)
        with pytest.raises(PermissionDeniedError, match="belongs to another tenant"):
            agent(TOKENS["acme"]).chat.completions.create(model="policy", messages=messages, max_tokens=2)
        with pytest.raises(PermissionDeniedError, match="names tenant 'acme'"):
            agent(TOKENS["beta"], **{"X-Ratchet-Tenant": "acme"}).chat.completions.create(
                model="policy", messages=messages, max_tokens=2
            )
        body = {"status": "completed", "outcome": {"verifiers_passed": 1, "verifiers_total": 1}}
        ended = httpx.post(f"{url}/v1/sessions/{sid}/end", headers=BETA, json=body, timeout=60)
        assert ended.status_code == 200, ended.text

    session = read_record(broker, Session, topics.SESSIONS, ended.json()["partition"], ended.json()["offset"])
    assert (session.tenant, session.task_id, session.outcome.tenant) == ("beta", "sum-2-3", "beta")
    assert [t.role for t in session.turns] == ["user", "assistant"]  # only the accepted request
    assert session.turns[1].text == reply.choices[0].message.content
    assert len(session.turns[1].completion_token_ids) == reply.usage.completion_tokens


def test_cli_serve_needs_tokens():
    env = {**os.environ, "RATCHET_INGEST_TOKENS": "", "RATCHET_PROXY_PORT": str(free_port())}
    out = subprocess.run(
        [sys.executable, "-m", "ops.cli", "proxy", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "no tenant tokens configured" in out.stderr
