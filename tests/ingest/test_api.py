"""The ingest API over real HTTP against a real broker."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from ingest import topics
from ingest.api import create_app
from ingest.config import load
from ingest.contract import MAX_TEXT_CHARS, DeadLetter, Session, parse
from ingest.examples import example_feedback, example_outcome, example_session
from ingest.intake import ENDPOINTS, Problem, judge, split_lines
from ingest.producer import Outgoing, RecordProducer
from ingest.settings import IngestSettings
from ops.stack import Stack, StackSettings
from tests.conftest import free_port
from tests.ingest.conftest import ACME, JSON, JSONL, TOKENS, metric, read_topic, serving

SESSIONS = ENDPOINTS[0]


def at_least(n: int):
    return lambda found: len(found) >= n


def nonce() -> str:
    return uuid.uuid4().hex[:12]


def session_bytes(session_id: str, tenant: str = "acme") -> bytes:
    return example_session(session_id=session_id, tenant=tenant).to_json()


# --- pure logic ---------------------------------------------------------------------------


def test_split_lines_numbers_lines_and_skips_blank_ones():
    assert split_lines(b'{"a":1}\n\n  \r\n{"b":2}\r\n') == [(0, b'{"a":1}'), (3, b'{"b":2}')]
    assert split_lines(b"") == []


def test_judge_rejects_contract_breaks_duplicates_and_other_tenants():
    lines = list(
        enumerate(
            [
                session_bytes("s-1"),
                session_bytes("s-1"),
                b'{"session_id": "s-2", "tenant": "acme"}',
                session_bytes("s-3", tenant="beta"),
                b'{"session_id": "s-4", "tenant": "beta", "turns": 3}',
            ]
        )
    )
    verdicts = judge(SESSIONS, lines, "acme", max_record_bytes=1 << 20)
    assert [v.problem for v in verdicts] == [
        None,
        Problem.DUPLICATE_ID,
        Problem.CONTRACT,
        Problem.TENANT_MISMATCH,
        Problem.TENANT_MISMATCH,
    ]
    assert [v.session_id for v in verdicts] == ["s-1", "s-1", "s-2", "s-3", "s-4"]
    assert "first at index 0" in verdicts[1].reason
    assert "policy: Field required" in verdicts[2].reason
    assert "tenant 'beta'" in verdicts[3].reason and "tenant 'acme'" in verdicts[3].reason
    assert verdicts[0].report() == {"index": 0, "session_id": "s-1", "status": "accepted"}


def test_settings_read_tenant_tokens_from_the_environment():
    env = {"RATCHET_INGEST_TOKENS": "acme=s3cret, beta=0ther", "RATCHET_INGEST_DELIVERY_TIMEOUT_S": "2.5"}
    settings = load(IngestSettings, "ingest", env=env)
    assert settings.ingest_tokens == {"acme": "s3cret", "beta": "0ther"}
    assert settings.ingest_delivery_timeout_s == 2.5
    with pytest.raises(ValueError, match="empty token"):
        create_app(IngestSettings(ingest_tokens={"acme": ""}))


# --- round trip ---------------------------------------------------------------------------


def test_every_endpoint_round_trips_byte_exact(api, broker):
    tag = nonce()
    session = session_bytes(f"s-{tag}")
    batch = [session_bytes(f"s-{tag}-{i}") for i in range(3)]
    feedback = [example_feedback(f"s-{tag}", feedback_id=f"f-{tag}-{i}").to_json() for i in range(2)]
    outcome = example_outcome(f"s-{tag}", outcome_id=f"o-{tag}").to_json()

    single = api.post("/v1/sessions", content=session, headers={**ACME, **JSON})
    assert single.status_code == 202, single.text
    assert single.json() == {
        "accepted": 1,
        "rejected": 0,
        "records": [{"index": 0, "session_id": f"s-{tag}", "status": "accepted"}],
    }
    many = api.post("/v1/sessions", content=b"\n".join(batch) + b"\n", headers={**ACME, **JSONL})
    assert many.status_code == 202 and many.json()["accepted"] == 3
    assert (
        api.post("/v1/feedback", content=b"\n".join(feedback), headers={**ACME, **JSONL}).status_code == 202
    )
    assert api.post("/v1/outcomes", content=outcome, headers={**ACME, **JSON}).status_code == 202

    for topic, sent in [
        (topics.SESSIONS, [session, *batch]),
        (topics.FEEDBACK, feedback),
        (topics.OUTCOMES, [outcome]),
    ]:
        got = read_topic(
            broker,
            topic,
            keep=lambda k, v: tag.encode() in v,
            done=at_least(len(sent)),
        )
        assert sorted(v for _, v in got) == sorted(sent)  # byte-exact, each exactly once
        assert all(k.decode() == json.loads(v)["session_id"] for k, v in got)  # keyed by session id
    assert api.get("/healthz").status_code == 200
    assert metric(api, "ratchet_ingest_records_accepted_total", endpoint="feedback") >= 2


# --- auth ---------------------------------------------------------------------------------


def test_auth_failures_produce_nothing(api, broker):
    sid = f"s-auth-{nonce()}"
    own, beta = session_bytes(sid), session_bytes(sid, tenant="beta")
    refused_before = metric(
        api, "ratchet_ingest_requests_refused_total", endpoint="sessions", reason="unauthorized"
    )
    cases = [
        ({}, own, JSON, 401),
        ({"Authorization": "Bearer not-a-token"}, own, JSON, 401),
        ({"Authorization": f"Basic {TOKENS['acme']}"}, own, JSON, 401),
        (ACME, beta, JSON, 403),  # the token is acme's, the record beta's
        (ACME, session_bytes(f"{sid}-ok") + b"\n" + beta, JSONL, 403),  # one foreign record refuses the batch
        (ACME, beta.replace(b'"turns"', b'"turnz"'), JSON, 403),  # invalid, but its tenant is still foreign
    ]
    for auth, body, kind, status in cases:
        resp = api.post("/v1/sessions", content=body, headers={**auth, **kind})
        assert resp.status_code == status, resp.text
        assert resp.json()["detail"]
        if status == 401:
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert metric(
        api, "ratchet_ingest_requests_refused_total", endpoint="sessions", reason="unauthorized"
    ) == (refused_before + 3)

    # Markers produced after the refusals, with the same keys (same partitions): anything the
    # refused requests had produced would be read before them.
    producer = RecordProducer(broker, 10.0)
    marker = f"marker-{sid}".encode()
    producer.produce(
        [Outgoing(t, k, marker) for t in (topics.SESSIONS, topics.DLQ) for k in (sid, f"{sid}-ok")]
    )
    producer.close()
    for topic in (topics.SESSIONS, topics.DLQ):
        got = read_topic(
            broker,
            topic,
            keep=lambda k, v: k in (sid.encode(), f"{sid}-ok".encode()),
            done=lambda found: sum(v == marker for _, v in found) == 2,
        )
        assert [v for _, v in got] == [marker, marker], f"{topic} holds records of refused requests"


# --- malformed input ----------------------------------------------------------------------


def malformed(i: int, tag: str) -> bytes:
    """Malformed payload number ``i``; its id ``m-<tag>-<i>`` survives in every one of them."""
    sid = f"m-{tag}-{i}"
    obj = json.loads(session_bytes(sid))
    assistant = obj["turns"][1]
    match i % 13:
        case 0:  # truncated JSON
            raw = json.dumps(obj)
            return raw[: len(raw) // 2].encode()
        case 1:  # wrong types
            obj["turns"] = "many"
        case 2:
            assistant["prompt_token_ids"] = ["one", "two"]
        case 3:  # NaN logprob
            assistant["behaviour_logprobs"][0] = float("nan")
        case 4:  # positive logprob
            assistant["behaviour_logprobs"][-1] = 0.25
        case 5:  # mismatched lengths
            assistant["behaviour_logprobs"].pop()
        case 6:  # huge strings
            obj["task_id"] = "t" * 5000
        case 7:
            obj["metadata"] = {"note": "x" * 4096}
        case 8 if i < 26:  # a text over the limit (only twice: they are large)
            obj["turns"][0]["text"] = "y" * (MAX_TEXT_CHARS + 1)
        case 8:  # unknown turn role
            obj["turns"][0]["role"] = "narrator"
        case 9:  # unknown schema_version
            obj["schema_version"] = 2
        case 10:  # duplicate ids (turn ids within a session)
            obj["turns"][2]["turn_id"] = obj["turns"][1]["turn_id"]
        case 11:  # unknown field, unknown enum value
            obj["colour"] = "blue"
            obj["status"] = "finished"
        case 12:  # not an object
            return json.dumps([sid, 1, None]).encode()
    return json.dumps(obj).encode()


def dead_letters(broker: str, pattern: str, expected: int) -> dict[str, list[DeadLetter]]:
    found = read_topic(
        broker,
        topics.DLQ,
        keep=lambda k, v: pattern.encode() in v,
        done=at_least(expected),
        timeout_s=60,
    )
    by_id: dict[str, list[DeadLetter]] = {}
    for _, value in found:
        letter = parse(DeadLetter, value)
        (sid,) = set(re.findall(rf"{pattern}-\d+", letter.payload))
        by_id.setdefault(sid, []).append(letter)
    return by_id


def test_malformed_single_records_get_422_and_a_dead_letter_each(api, broker):
    tag = nonce()
    payloads = [malformed(i, tag) for i in range(1000)]

    def post(raw: bytes) -> httpx.Response:
        return api.post("/v1/sessions", content=raw, headers={**ACME, **JSON})

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(post, payloads))
    for i, resp in enumerate(responses):
        assert resp.status_code == 422, (i, resp.text)
        body = resp.json()
        assert body["detail"] and body["records"][0]["status"] == "rejected", body
    reasons = [r.json()["detail"] for r in responses]
    assert "Invalid JSON" in reasons[0] and "behaviour_logprobs[0] is nan" in reasons[3]
    assert (
        "a log-probability must be <= 0" in reasons[4]
        and "has 12 tokens but behaviour_logprobs has 11" in reasons[5]
    )
    assert (
        "at most 128 characters" in reasons[6]
        and "schema_version" in reasons[9]
        and "duplicated" in reasons[10]
    )
    assert f"at most {MAX_TEXT_CHARS} characters" in reasons[8]

    letters = dead_letters(broker, f"m-{tag}", 1000)
    assert sorted(letters) == sorted(f"m-{tag}-{i}" for i in range(1000))
    assert all(len(v) == 1 for v in letters.values())  # one dead letter each
    first = letters[f"m-{tag}-3"][0]
    assert first.source == "ingest.api:/v1/sessions" and first.tenant == "acme" and first.reason == reasons[3]
    assert first.payload.encode() == payloads[3]
    assert api.get("/healthz").status_code == 200  # still serving


def test_batch_produces_the_valid_records_and_dead_letters_the_rest(api, broker):
    tag = nonce()
    lines, expected = [], []
    for i in range(1000):
        valid = session_bytes(f"v-{tag}-{i}")
        lines += [
            valid,
            malformed(i, tag) if i % 10 else valid,
        ]  # every tenth: a duplicate of the line before
        expected += ["accepted", "rejected"]
    records = []
    for start in range(0, len(lines), 400):
        resp = api.post(
            "/v1/sessions", content=b"\n".join(lines[start : start + 400]), headers={**ACME, **JSONL}
        )
        assert resp.status_code == 202, resp.text
        records += resp.json()["records"]
    assert [r["status"] for r in records] == expected
    assert all(r["reason"] for r in records if r["status"] == "rejected")
    assert "duplicated in this batch" in records[1]["reason"]

    produced = read_topic(
        broker,
        topics.SESSIONS,
        keep=lambda k, v: f"v-{tag}-".encode() in v,
        done=at_least(1000),
    )
    assert sorted(v for _, v in produced) == sorted(lines[0::2])  # each valid record once, byte-exact
    letters = dead_letters(broker, f"m-{tag}", 900)
    assert len(letters) == 900 and all(len(v) == 1 for v in letters.values())
    duplicates = read_topic(
        broker,
        topics.DLQ,
        keep=lambda k, v: f"v-{tag}-".encode() in v,
        done=at_least(100),
    )
    assert sorted(k.decode() for k, _ in duplicates) == sorted(f"v-{tag}-{i}" for i in range(0, 1000, 10))


def test_oversized_unsupported_and_empty_requests_are_refused(broker):
    settings = IngestSettings(
        kafka_bootstrap=broker,
        ingest_tokens=TOKENS,
        ingest_max_record_bytes=64 * 1024,
        ingest_max_batch_bytes=256 * 1024,
        ingest_max_batch_records=10,
        ingest_delivery_timeout_s=5,
    )
    with serving(settings) as api:
        big = b'{"session_id": "' + b"x" * 70_000 + b'"}'
        assert api.post("/v1/sessions", content=big, headers={**ACME, **JSON}).status_code == 413
        chunked = api.post(
            "/v1/sessions", content=iter([big[:40_000], big[40_000:]]), headers={**ACME, **JSON}
        )
        assert chunked.status_code == 413  # no Content-Length: counted while read
        huge_batch = b"\n".join([session_bytes("s-1")] * 100)
        assert api.post("/v1/sessions", content=huge_batch, headers={**ACME, **JSONL}).status_code == 413
        eleven = b"\n".join(session_bytes(f"s-{i}") for i in range(11))
        resp = api.post("/v1/sessions", content=eleven, headers={**ACME, **JSONL})
        assert resp.status_code == 413 and "over the limit of 10" in resp.json()["detail"]
        assert (
            metric(api, "ratchet_ingest_requests_refused_total", endpoint="sessions", reason="too_large") == 4
        )

        # In a batch, one record over the record limit is rejected alone.
        batch = session_bytes(f"s-{nonce()}") + b"\n" + big
        resp = api.post("/v1/sessions", content=batch, headers={**ACME, **JSONL})
        assert resp.status_code == 202
        assert [r["status"] for r in resp.json()["records"]] == ["accepted", "rejected"]
        assert "over the limit of 65536 bytes" in resp.json()["records"][1]["reason"]

        resp = api.post(
            "/v1/sessions", content=session_bytes("s-1"), headers={**ACME, "Content-Type": "text/plain"}
        )
        assert resp.status_code == 415 and "application/x-ndjson" in resp.json()["detail"]
        assert api.post("/v1/sessions", content=session_bytes("s-1"), headers=ACME).status_code == 415
        assert api.post("/v1/sessions", content=b"\n\n", headers={**ACME, **JSONL}).status_code == 422


# --- broker outage ------------------------------------------------------------------------


def test_broker_stopped_is_503_and_nothing_acknowledged_is_lost(tmp_path, lazy_stack):
    stack = Stack(
        StackSettings(
            state_dir=tmp_path / "state", cache_dir=lazy_stack.settings.cache_dir, broker_port=free_port()
        ),
        progress=print,
    )
    stack.up(["broker"])
    tag = nonce()
    acked: list[str] = []
    unavailable: list[httpx.Response] = []
    progress = threading.Condition()
    stop = threading.Event()
    try:
        broker_process = stack._owned_process("broker")
        settings = IngestSettings(
            kafka_bootstrap=stack.settings.kafka_bootstrap, ingest_tokens=TOKENS, ingest_delivery_timeout_s=2
        )
        with serving(settings) as api:

            def post_continuously() -> None:
                for n in range(10_000):
                    if stop.is_set():
                        return
                    ids = [f"s-{tag}-{n}-{j}" for j in range(5)]
                    body = b"\n".join(session_bytes(s) for s in ids)
                    resp = api.post("/v1/sessions", content=body, headers={**ACME, **JSONL})
                    with progress:
                        if resp.status_code == 202:
                            acked.extend(
                                r["session_id"] for r in resp.json()["records"] if r["status"] == "accepted"
                            )
                        else:
                            unavailable.append(resp)
                        progress.notify_all()

            def wait_for(condition) -> None:
                with progress:
                    assert progress.wait_for(condition, timeout=60), "no progress"

            poster = threading.Thread(target=post_continuously)
            poster.start()
            try:
                wait_for(lambda: len(acked) >= 15)
                broker_process.send_signal(signal.SIGSTOP)
                wait_for(lambda: unavailable)
                assert api.get("/healthz").status_code == 503
                broker_process.send_signal(signal.SIGCONT)
                with progress:
                    resumed_from = len(acked)
                wait_for(lambda: len(acked) >= resumed_from + 15)
            finally:
                stop.set()
                broker_process.send_signal(signal.SIGCONT)
                poster.join(60)
            refused = unavailable[0]
            assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
            assert "nothing was accepted" in refused.json()["detail"]
            assert api.get("/healthz").status_code == 200
            assert metric(api, "ratchet_ingest_requests_refused_total", reason="broker_unavailable") >= 1

        on_topic = read_topic(
            stack.settings.kafka_bootstrap,
            topics.SESSIONS,
            keep=lambda k, v: tag.encode() in v,
            done=lambda found: set(acked) <= {k.decode() for k, _ in found},
        )
        assert all(parse(Session, v).session_id == k.decode() for k, v in on_topic)
    finally:
        stack.down()


# --- the CLI ------------------------------------------------------------------------------


def test_cli_serve_needs_tokens():
    env = {**os.environ, "RATCHET_INGEST_TOKENS": "", "RATCHET_INGEST_PORT": str(free_port())}
    out = subprocess.run(
        [sys.executable, "-m", "ops.cli", "ingest", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "no tenant tokens configured" in out.stderr


def healthy(client: httpx.Client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False


def test_cli_serve_accepts_sessions_over_http(broker):
    port = free_port()
    env = {
        **os.environ,
        "RATCHET_KAFKA_BOOTSTRAP": broker,
        "RATCHET_INGEST_TOKENS": ",".join(f"{t}={k}" for t, k in TOKENS.items()),
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "ops.cli", "ingest", "serve", "--port", str(port), "--no-access-log"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            deadline = time.monotonic() + 60
            while not healthy(client):
                assert server.poll() is None, server.stderr.read()
                assert time.monotonic() < deadline, "ratchet ingest serve did not answer"
                with contextlib.suppress(subprocess.TimeoutExpired):
                    server.wait(0.05)
            resp = client.post(
                "/v1/sessions", content=session_bytes(f"s-{nonce()}"), headers={**ACME, **JSON}
            )
            assert resp.status_code == 202, resp.text
    finally:
        server.terminate()
        server.wait(30)
    assert f"serving http://127.0.0.1:{port} for tenants acme, beta" in server.stderr.read()
