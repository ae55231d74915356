"""Streamed completions through the capture proxy, against the real vLLM and the real broker."""

import dataclasses
import json
import uuid

import httpx
import openai
import pytest

from ingest import topics
from ingest.contract import Session
from serving.proxy import SESSION_HEADER, create_app
from serving.routing import Replica, Routes, write_routes
from tests.conftest import free_port
from tests.serving.conftest import AUTH, TOKENS, read_record, serving

QUESTION = [{"role": "user", "content": "Name three colours of the rainbow."}]
SAMPLING = {"model": "policy", "max_tokens": 16, "temperature": 0, "seed": 7}


def new_id() -> str:
    return f"stream-test-{uuid.uuid4().hex[:12]}"


def openai_client(url: str, sid: str, token: str = TOKENS["acme"]) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{url}/v1", api_key=token, default_headers={SESSION_HEADER: sid}, max_retries=0
    )


def end(url: str, sid: str) -> dict:
    resp = httpx.post(f"{url}/v1/sessions/{sid}/end", headers=AUTH, json={"status": "completed"}, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def recorded(broker: str, ended: dict) -> Session:
    return read_record(broker, Session, topics.SESSIONS, ended["partition"], ended["offset"])


def without_latency(session: Session) -> list[dict]:
    return [t.model_dump(exclude={"latency_s"}) for t in session.turns]


def test_a_streamed_chat_is_relayed_chunk_by_chunk_and_recorded_as_if_sent_whole(proxy_settings, broker):
    streamed_id, whole_id = new_id(), new_id()
    with serving(create_app(proxy_settings)) as url:
        streaming = openai_client(url, streamed_id)
        raw = streaming.chat.completions.with_raw_response.create(messages=QUESTION, stream=True, **SAMPLING)
        assert raw.headers["X-Ratchet-Session"] == streamed_id
        assert raw.headers["X-Ratchet-Adapter-Version"] == "base"
        assert raw.headers["content-type"].startswith("text/event-stream")
        plain = [chunk.to_dict() for chunk in raw.parse()]
        assert len([c for c in plain if c["choices"] and c["choices"][0]["delta"].get("content")]) > 2
        assert {c["model"] for c in plain} == {"policy"}
        for chunk in plain:  # asked for neither token ids, logprobs nor usage: none shown
            assert "prompt_token_ids" not in chunk and "usage" not in chunk
            assert "token_ids" not in chunk["choices"][0] and chunk["choices"][0].get("logprobs") is None
        answer = "".join(c["choices"][0]["delta"].get("content") or "" for c in plain)

        conversation = [
            *QUESTION,
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "More?"},
        ]
        asked = {"logprobs": True, "extra_body": {"return_token_ids": True}}
        full = [
            chunk.to_dict()
            for chunk in streaming.chat.completions.create(
                messages=conversation,
                stream=True,
                stream_options={"include_usage": True},
                **asked,
                **SAMPLING,
            )
        ]
        assert full[-1]["choices"] == [] and full[-1]["usage"]["completion_tokens"] > 0
        ids = [i for c in full if c["choices"] for i in c["choices"][0].get("token_ids") or []]
        logprobs = [t["logprob"] for c in full if c["choices"] for t in (c["choices"][0]["logprobs"] or {}).get("content") or []]  # fmt: skip
        prompt_ids = full[0]["prompt_token_ids"]

        whole = openai_client(url, whole_id)
        first = whole.chat.completions.create(messages=QUESTION, **SAMPLING)
        assert first.choices[0].message.content == answer
        whole.chat.completions.create(messages=conversation, **SAMPLING)
        ended_streamed, ended_whole = end(url, streamed_id), end(url, whole_id)

    streamed, sent_whole = recorded(broker, ended_streamed), recorded(broker, ended_whole)
    assert [t.role for t in streamed.turns] == ["user", "assistant", "user", "assistant"]
    assert without_latency(streamed) == without_latency(sent_whole)
    assert streamed.cost.tokens == sent_whole.cost.tokens
    second = streamed.turns[3]
    assert (second.prompt_token_ids, second.completion_token_ids, second.behaviour_logprobs) == (
        prompt_ids,
        ids,
        logprobs,
    )
    assert streamed.turns[1].text == answer and all(t.latency_s > 0 for t in streamed.assistant_turns())


def test_a_streamed_completion_is_recorded_as_if_sent_whole(proxy_settings, broker):
    streamed_id, whole_id = new_id(), new_id()
    body = {"prompt": "Once upon a time", "logprobs": 0, "extra_body": {"return_token_ids": True}, **SAMPLING}
    with serving(create_app(proxy_settings)) as url:
        chunks = [
            c.to_dict() for c in openai_client(url, streamed_id).completions.create(stream=True, **body)
        ]
        assert len(chunks) > 2 and {c["model"] for c in chunks} == {"policy"}
        whole = openai_client(url, whole_id).completions.create(**body).to_dict()
        plain = {"prompt": "Once upon a time", **SAMPLING, "stream": True}  # asks for no ids nor logprobs
        headers = {**AUTH, SESSION_HEADER: new_id()}
        with httpx.stream("POST", f"{url}/v1/completions", headers=headers, json=plain, timeout=60) as resp:
            events = [line[5:].strip() for line in resp.iter_lines() if line.startswith("data:")]
        assert events[-1] == "[DONE]" and len(events) > 2
        for choice in (json.loads(e)["choices"][0] for e in events[:-1]):
            assert (
                choice["logprobs"] is None and "token_ids" not in choice and "prompt_token_ids" not in choice
            )
        ended_streamed, ended_whole = end(url, streamed_id), end(url, whole_id)

    streamed, sent_whole = recorded(broker, ended_streamed), recorded(broker, ended_whole)
    (turn,) = streamed.turns
    assert without_latency(streamed) == without_latency(sent_whole)
    assert turn.completion_token_ids == [i for c in chunks for i in c["choices"][0]["token_ids"]]
    assert turn.prompt_token_ids == chunks[0]["choices"][0]["prompt_token_ids"] == whole["choices"][0]["prompt_token_ids"]  # fmt: skip
    assert turn.text == "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]


def interrupted(url: str, cause: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(f'ratchet_proxy_streams_interrupted_total{{cause="{cause}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_a_client_that_goes_away_mid_stream_leaves_no_turn(proxy_settings, broker):
    sid = new_id()
    body = {**SAMPLING, "messages": QUESTION, "max_tokens": 400, "stream": True}
    headers = {**AUTH, SESSION_HEADER: sid}
    with serving(create_app(proxy_settings)) as url:
        with httpx.stream(
            "POST", f"{url}/v1/chat/completions", headers=headers, json=body, timeout=60
        ) as resp:
            assert resp.status_code == 200
            first = next(line for line in resp.iter_lines() if line.startswith("data:"))
            assert json.loads(first[5:])["model"] == "policy"
        # The session's next request waits for the interrupted stream to let the session go.
        again = [{"role": "user", "content": "Say only: yes."}]
        answer = openai_client(url, sid).chat.completions.create(
            messages=again, **{**SAMPLING, "max_tokens": 4}
        )
        assert answer.choices[0].message.content
        assert interrupted(url, "client") == 1.0 and interrupted(url, "upstream") == 0.0
        state = httpx.get(f"{url}/admin/state").json()
        assert state["inflight"] == {} and state["replicas"][0]["inflight"] == 0
        session = recorded(broker, end(url, sid))
    assert [(t.role, t.turn_id) for t in session.turns] == [("user", "u0"), ("assistant", "a1")]
    assert session.turns[0].text == "Say only: yes."


def test_refused_and_failed_streams_are_answered_before_streaming_and_record_nothing(
    proxy_settings, vllm_url, tmp_path
):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there: a replica that died
    routes_file = tmp_path / "routes.json"
    replicas = (Replica(dead, True, frozenset()), Replica(vllm_url, True, frozenset()))
    write_routes(routes_file, Routes({"policy": None}, replicas, generation=1))
    settings = dataclasses.replace(proxy_settings, routing_file=routes_file, replica_eject_s=60)
    with serving(create_app(settings)) as url:
        with pytest.raises(openai.AuthenticationError) as refused:
            openai_client(url, new_id(), token="not-a-token").chat.completions.create(
                messages=QUESTION, stream=True, **SAMPLING
            )
        assert refused.value.status_code == 401
        with pytest.raises(openai.BadRequestError):  # vLLM's own 400, before any chunk
            openai_client(url, new_id()).chat.completions.create(
                messages=QUESTION, stream=True, **{**SAMPLING, "max_tokens": 10**9}
            )
        assert httpx.get(f"{url}/health").json()["open_sessions"] == 0
        assert list(settings.journal_dir.iterdir()) == []

        for _ in range(2):  # the dead replica is skipped before the first chunk
            raw = openai_client(url, new_id()).chat.completions.with_raw_response.create(
                messages=QUESTION, stream=True, **SAMPLING
            )
            assert raw.headers["X-Ratchet-Replica"] == vllm_url
            assert [c.choices[0].finish_reason for c in raw.parse() if c.choices][-1] == "length"
        assert interrupted(url, "client") == interrupted(url, "upstream") == 0.0
