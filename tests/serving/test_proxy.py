"""The capture proxy against the real vLLM and the real broker."""

import dataclasses
import json
import time
import uuid

import httpx
import pytest

from ingest import topics
from ingest.contract import DeadLetter, Session
from serving.journal import SessionJournal
from serving.proxy import create_app
from serving.routing import RoutingTable
from serving.vllm_admin import VLLMClient
from tests.serving.conftest import AUTH, read_record, serving, write_lora_adapter


def new_id() -> str:
    return f"proxy-test-{uuid.uuid4().hex[:12]}"


def proxy_client(url: str, headers: dict | None = None) -> httpx.Client:
    """A client of the proxy at ``url`` with tenant acme's token (or only ``headers``)."""
    return httpx.Client(base_url=url, headers=AUTH if headers is None else headers, timeout=120)


def chat(
    client: httpx.Client, session_id: str, messages: list, model: str = "policy", **params
) -> httpx.Response:
    body = {"model": model, "messages": messages, "max_tokens": 12, "temperature": 0, **params}
    return client.post("/v1/chat/completions", headers={"X-Ratchet-Session": session_id}, json=body)


def ok(resp: httpx.Response) -> dict:
    assert resp.status_code == 200, resp.text
    return resp.json()


def served(response: dict) -> tuple[list[int], list[int], list[float]]:
    choice = response["choices"][0]
    return (
        response["prompt_token_ids"],
        choice["token_ids"],
        [t["logprob"] for t in choice["logprobs"]["content"]],
    )


def recorded(turn) -> tuple[list[int], list[int], list[float]]:
    return turn.prompt_token_ids, turn.completion_token_ids, turn.behaviour_logprobs


def test_a_three_turn_conversation_is_recorded_exactly_as_vllm_served_it(
    proxy_settings, broker, served_model
):
    sid = new_id()
    headers = {"X-Ratchet-Session": sid, "X-Ratchet-Tenant": "acme", "X-Ratchet-Task": "calc-17"}
    call = {
        "id": "call-1",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"x": "17*23"}'},
    }
    with serving(create_app(proxy_settings)) as url, proxy_client(url) as client:

        def ask(messages, **params):
            body = {"model": "policy", "messages": messages, "max_tokens": 12, "temperature": 0, **params}
            resp = client.post("/v1/chat/completions", headers=headers, json=body)
            assert resp.headers.get("X-Ratchet-Adapter-Version") == "base"
            return ok(resp)

        messages = [
            {"role": "system", "content": "You can call a calculator."},
            {"role": "user", "content": "What is 17*23?"},
        ]
        first = ask(messages, logprobs=True, return_token_ids=True)
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call-1", "content": "391"},
        ]
        second = ask(messages)  # asks for neither logprobs nor token ids: gets none
        assert second["choices"][0]["logprobs"] is None
        assert "token_ids" not in second["choices"][0] and "prompt_token_ids" not in second
        assert second["model"] == "policy"
        messages += [
            {"role": "assistant", "content": second["choices"][0]["message"]["content"]},
            {"role": "user", "content": "Thanks. And 391 + 9?"},
        ]
        third = ask(messages, logprobs=True, return_token_ids=True, temperature=0.5, top_p=0.9)
        assert (
            proxy_settings.journal_dir / SessionJournal(proxy_settings.journal_dir).path(sid).name
        ).exists()

        outcome = {"verifiers_passed": 1, "verifiers_total": 1}
        ended = ok(client.post(f"/v1/sessions/{sid}/end", json={"status": "completed", "outcome": outcome}))

    session = read_record(broker, Session, topics.SESSIONS, ended["partition"], ended["offset"])
    assert (session.session_id, session.tenant, session.task_id) == (sid, "acme", "calc-17")
    assert [t.role for t in session.turns] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert session.turns[0].text == "What is 17*23?" and session.turns[4].text == "Thanks. And 391 + 9?"
    tool = session.turns[2]
    assert (tool.name, tool.arguments, tool.output) == ("calculator", '{"x": "17*23"}', "391")
    a1, a3, a5 = session.assistant_turns()
    assert recorded(a1) == served(first)
    assert recorded(a5) == served(third)
    assert len(a3.behaviour_logprobs) == len(a3.completion_token_ids) == second["usage"]["completion_tokens"]
    assert a3.text == second["choices"][0]["message"]["content"]
    assert a3.prompt_token_ids[: len(a1.prompt_token_ids)] == a1.prompt_token_ids  # the same conversation
    assert (a1.sampling.temperature, a5.sampling.temperature, a5.sampling.top_p) == (0.0, 0.5, 0.9)
    assert {t.logprobs_mode.value for t in (a1, a3, a5)} == {"processed"}
    assert session.policy.base_model == served_model and session.policy.adapter_version is None
    assert session.outcome.verifiers_passed == 1 and session.outcome.session_id == sid
    assert session.cost.tokens == sum(r["usage"]["total_tokens"] for r in (first, second, third))
    assert all(t.latency_s > 0 for t in (a1, a3, a5))
    assert list(proxy_settings.journal_dir.iterdir()) == []  # deleted once the broker acknowledged


def test_a_restarted_proxy_resumes_and_ends_sessions_begun_before(proxy_settings, broker):
    ended_id, idle_id = new_id(), new_id()
    with serving(create_app(proxy_settings)) as url, proxy_client(url) as client:
        first = ok(chat(client, ended_id, [{"role": "user", "content": "Name a colour."}], return_token_ids=True,
                        logprobs=True))  # fmt: skip
        body = {
            "model": "policy",
            "prompt": "Once upon a time",
            "max_tokens": 6,
            "logprobs": 0,
            "return_token_ids": True,
        }
        prose = ok(client.post("/v1/completions", headers={"X-Ratchet-Session": idle_id}, json=body))
    with SessionJournal(proxy_settings.journal_dir).path(ended_id).open("a") as fh:
        fh.write('{"kind": "turns", "turns": [{"role": "ass')  # killed in the middle of a write

    app = create_app(proxy_settings)  # a new process on the same journal
    with serving(app) as url, proxy_client(url) as client:
        assert ok(client.get("/health"))["open_sessions"] == 2
        ended = ok(client.post(f"/v1/sessions/{ended_id}/end", json={"status": "completed"}))
        assert client.post(f"/v1/sessions/{ended_id}/end", json={"status": "completed"}).status_code == 404
        reused = chat(client, ended_id, [{"role": "user", "content": "again"}])
        assert reused.status_code == 409 and "has ended" in reused.json()["error"]["message"]
        assert app.state.proxy.close_idle() == []  # not idle yet
        later = time.time() + proxy_settings.session_idle_timeout_s + 1
        (timed_out,) = app.state.proxy.close_idle(now=later)

    session = read_record(broker, Session, topics.SESSIONS, ended["partition"], ended["offset"])
    assert session.tenant == "acme"  # the token's
    assert [t.role for t in session.turns] == ["user", "assistant"]
    assert recorded(session.turns[1]) == served(first)
    idle = read_record(broker, Session, topics.SESSIONS, timed_out["partition"], timed_out["offset"])
    assert (idle.session_id, idle.status.value) == (idle_id, "timeout")
    (turn,) = idle.turns  # a completion request records only the assistant turn
    choice = prose["choices"][0]
    assert recorded(turn) == (
        choice["prompt_token_ids"],
        choice["token_ids"],
        choice["logprobs"]["token_logprobs"],
    )
    assert list(proxy_settings.journal_dir.iterdir()) == []


def test_a_session_stays_on_the_adapter_version_it_started_with(
    proxy_settings, broker, vllm_url, model_dir, tmp_path
):
    prefix = f"proxytest{uuid.uuid4().hex[:6]}"
    settings = dataclasses.replace(proxy_settings, adapter_prefix=prefix, policy_version="v1")
    vllm = VLLMClient(vllm_url)
    vllm.load_adapter(f"{prefix}-v1", write_lora_adapter(model_dir, tmp_path / "v1"))
    try:
        routing = RoutingTable.from_settings(settings)
        pinned, fresh = new_id(), new_id()
        messages = [{"role": "user", "content": "Say something about the sea."}]
        with (
            serving(create_app(settings, routing=routing)) as url,
            proxy_client(url) as client,
        ):
            assert chat(client, pinned, messages, max_tokens=6).headers["X-Ratchet-Adapter-Version"] == "v1"
            routing.set("policy", None)  # the alias moves back to the base model
            messages += [{"role": "assistant", "content": "It is big."}, {"role": "user", "content": "More?"}]
            again = chat(client, pinned, messages, max_tokens=6, logprobs=True, return_token_ids=True)
            assert again.headers["X-Ratchet-Adapter-Version"] == "v1"
            assert (
                chat(client, fresh, messages[:1], max_tokens=6).headers["X-Ratchet-Adapter-Version"] == "base"
            )
            ended = ok(client.post(f"/v1/sessions/{pinned}/end", json={"status": "completed"}))
            assert (
                ok(client.post(f"/v1/sessions/{fresh}/end", json={"status": "completed"}))["adapter_version"]
                is None
            )

        session = read_record(broker, Session, topics.SESSIONS, ended["partition"], ended["offset"])
        assert session.policy.adapter_version == "v1"
        assert [t.adapter_version for t in session.assistant_turns()] == ["v1", "v1"]
        # The adapter really served the second turn: replaying its prompt on the adapter gives the
        # recorded tokens and logprobs, while the base model gives something else.
        turn = session.assistant_turns()[1]
        n = len(turn.completion_token_ids)
        on_adapter = vllm.complete(f"{prefix}-v1", turn.prompt_token_ids, max_tokens=n, temperature=0.0)
        on_base = vllm.complete(settings.base_model, turn.prompt_token_ids, max_tokens=n, temperature=0.0)
        assert on_adapter.token_ids == turn.completion_token_ids
        assert on_adapter.logprobs == pytest.approx(turn.behaviour_logprobs, abs=1e-4)
        assert on_base.token_ids != turn.completion_token_ids or on_base.logprobs != pytest.approx(
            turn.behaviour_logprobs, abs=1e-3
        )
    finally:
        vllm.unload_adapter(f"{prefix}-v1")


def test_an_invalid_end_is_dead_lettered_and_the_session_stays_open(proxy_settings, broker):
    sid = new_id()
    with serving(create_app(proxy_settings)) as url, proxy_client(url) as client:
        ok(chat(client, sid, [{"role": "user", "content": "Hi"}], max_tokens=4))
        bad = client.post(
            f"/v1/sessions/{sid}/end",
            json={"status": "completed", "outcome": {"tests_passed": 5, "tests_total": 3}},
        )
        assert bad.status_code == 422
        reason = bad.json()["error"]["message"]
        assert "outcome" in reason and "tests_passed (5) exceeds tests_total (3)" in reason
        where = bad.json()["dead_letter"]
        letter = read_record(broker, DeadLetter, where["topic"], where["partition"], where["offset"])
        assert letter.session_id == sid and "tests_passed (5) exceeds tests_total (3)" in letter.reason
        assert json.loads(letter.payload)["turns"][1]["role"] == "assistant"  # the whole attempted record

        ended = ok(
            client.post(f"/v1/sessions/{sid}/end", json={"status": "error"})
        )  # still open: fixed and retried
    session = read_record(broker, Session, topics.SESSIONS, ended["partition"], ended["offset"])
    assert session.status.value == "error" and session.outcome is None


def test_what_the_agent_did_after_the_last_model_turn_is_recorded_once_at_the_end(proxy_settings, broker):
    sid = new_id()
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'},
    }
    after = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    with serving(create_app(proxy_settings)) as url, proxy_client(url) as client:
        ok(chat(client, sid, [{"role": "user", "content": "What is 6*7?"}], max_tokens=4))
        bad = client.post(  # refused: the session stays open and its turns as they were
            f"/v1/sessions/{sid}/end",
            json={"status": "completed", "messages": after, "outcome": {"tests_passed": 2, "tests_total": 1}},
        )
        assert bad.status_code == 422
        ended = ok(client.post(f"/v1/sessions/{sid}/end", json={"status": "completed", "messages": after}))
    session = read_record(broker, Session, topics.SESSIONS, ended["partition"], ended["offset"])
    assert [t.role for t in session.turns] == ["user", "assistant", "tool"]
    tool = session.turns[2]
    assert (tool.turn_id, tool.name, tool.arguments, tool.output) == (
        "t2",
        "calculator",
        call["function"]["arguments"],
        "42",
    )


def test_bad_requests_get_clear_errors_and_record_nothing(proxy_settings):
    messages = [{"role": "user", "content": "Hi"}]
    with serving(create_app(proxy_settings)) as url, proxy_client(url) as client:
        two = chat(client, new_id(), messages, n=2)
        assert two.status_code == 400 and "n and best_of must be 1" in two.json()["error"]["message"]
        anonymous = client.post("/v1/chat/completions", json={"model": "policy", "messages": messages})
        assert anonymous.status_code == 400 and "X-Ratchet-Session header is required" in anonymous.text
        bad_id = chat(client, "no spaces allowed", messages)
        assert bad_id.status_code == 400 and "not a valid id" in bad_id.text
        unknown = chat(client, new_id(), messages, model="gpt-4o")
        assert unknown.status_code == 404 and "'gpt-4o' is not served here" in unknown.text
        assert client.post(f"/v1/sessions/{new_id()}/end", json={"status": "completed"}).status_code == 404
        assert client.post(f"/v1/sessions/{new_id()}/end", json={"status": "finished"}).status_code == 422
        broken = client.post("/v1/completions", headers={"X-Ratchet-Session": new_id()}, content=b"{not json")
        assert broken.status_code == 400 and "JSON object" in broken.text
        assert "ratchet_proxy_requests_total" in client.get("/metrics").text
    assert list(proxy_settings.journal_dir.iterdir()) == []


def test_requests_go_only_to_replicas_serving_their_version_and_survive_a_dead_one(
    proxy_settings, vllm_url, tmp_path
):
    from serving.routing import Replica, Routes, write_routes
    from tests.conftest import free_port

    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there: a replica that died
    routes_file = tmp_path / "routes.json"
    settings = dataclasses.replace(
        proxy_settings, routing_file=routes_file, replica_eject_s=60, proxy_admin_token="s3cret"
    )
    admin = {"Authorization": "Bearer s3cret"}
    replicas = (Replica(dead, True, frozenset()), Replica(vllm_url, True, frozenset()))
    write_routes(routes_file, Routes({"policy": None}, replicas, generation=3))
    messages = [{"role": "user", "content": "Hi"}]
    with serving(create_app(settings)) as url, proxy_client(url) as client:
        answers = [chat(client, new_id(), messages, max_tokens=2) for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert {a.headers["X-Ratchet-Replica"] for a in answers} == {vllm_url}
        assert {a.headers["X-Ratchet-Routes-Generation"] for a in answers} == {"3"}
        assert client.get("/admin/state").status_code == 401
        state = ok(client.get("/admin/state", headers=admin))
        assert state["generation"] == 3 and state["inflight"] == {} and state["open_sessions"] == {"base": 3}
        assert dead in state["ejected_s"]

        # The alias moves to v1, which only the dead replica claims: never sent to a replica without it.
        pinned = answers[0].headers["X-Ratchet-Session"]
        only_dead = Routes({"policy": "v1"}, (Replica(dead, True, frozenset({"v1"})), replicas[1]), 4)
        write_routes(routes_file, only_dead)
        failed = chat(client, new_id(), messages, max_tokens=2)
        assert failed.status_code == 502 and f"vLLM at {dead} did not answer" in failed.text
        write_routes(routes_file, dataclasses.replace(only_dead, generation=5, replicas=(
            Replica(dead, False, frozenset({"v1"})), replicas[1])))  # fmt: skip
        refused = chat(client, new_id(), messages, max_tokens=2)
        assert refused.status_code == 503
        assert "no healthy replica serves adapter version v1" in refused.json()["error"]["message"]
        again = chat(client, pinned, messages, max_tokens=2)  # a session begun on the base model stays there
        assert again.status_code == 200 and again.headers["X-Ratchet-Adapter-Version"] == "base"
        assert ok(client.get("/admin/state", headers=admin))["generation"] == 5
