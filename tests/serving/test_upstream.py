"""Forwarding to the replicas, against replicas simulated in process (httpx.MockTransport): which
failures are retried on the next replica, which replica is skipped afterwards, and what the client gets."""

import httpx
import pytest
from prometheus_client import CollectorRegistry, Histogram

from serving.balancer import Balancer
from serving.capture import CHAT
from serving.routing import Replica, Route, Routes, RoutingTable, write_routes
from serving.upstream import ProxyError, Upstream

A = Replica("http://a", True, frozenset({"v3"}))
B = Replica("http://b", True, frozenset({"v3"}))
V3 = Route("policy-v3", "v3")
BODY = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}


def completion(model: str = "policy-v3") -> dict:
    return {"model": model, "choices": [{"message": {"content": "hello"}, "token_ids": [1]}]}


def upstream(tmp_path, answers: dict[str, object]) -> tuple[Upstream, Balancer, list[str]]:
    """Replica host -> its answer: an httpx.Response, or an exception it raises (it never answered)."""
    write_routes(tmp_path / "routes.json", Routes({"policy": "v3"}, (A, B), generation=1))
    balancer = Balancer(RoutingTable("base-model", {}, routes_file=tmp_path / "routes.json"), 30.0)
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.host)
        assert request.url.path == "/v1/chat/completions"
        assert request.read() and b'"policy-v3"' in request.content  # the routed model's name
        found = answers[request.url.host]
        if isinstance(found, Exception):
            raise found
        return found

    latency = Histogram("latency", "latency", registry=CollectorRegistry())
    return Upstream(balancer, 5.0, latency, httpx.MockTransport(answer)), balancer, asked


def in_flight(balancer: Balancer) -> dict[str, int]:
    return {r["url"]: r["inflight"] for r in balancer.state(dict)["replicas"]}


def test_a_replica_that_never_answers_is_skipped_and_the_next_one_serves(tmp_path):
    up, balancer, asked = upstream(
        tmp_path, {"a": httpx.ConnectError("refused"), "b": httpx.Response(200, json=completion())}
    )
    answer = up.forward(CHAT, BODY, V3, [A, B], stream=False)
    assert (answer.status, answer.replica, answer.data) == (200, "http://b", completion())
    assert asked == ["a", "b"] and set(balancer.state(dict)["ejected_s"]) == {"http://a"}
    assert in_flight(balancer) == {"http://a": 0, "http://b": 0}


def test_a_5xx_is_retried_and_when_every_replica_fails_the_last_failure_is_the_answer(tmp_path):
    error = {"error": {"message": "engine dead"}}
    up, balancer, asked = upstream(
        tmp_path, {"a": httpx.Response(500, json=error), "b": httpx.Response(502, json=error)}
    )
    answer = up.forward(CHAT, BODY, V3, [A, B], stream=False)
    assert (answer.status, answer.replica, answer.data) == (502, "http://b", error)
    assert asked == ["a", "b"] and set(balancer.state(dict)["ejected_s"]) == {"http://a", "http://b"}
    up, _, _ = upstream(tmp_path, {"a": httpx.ConnectError("refused"), "b": httpx.ConnectError("refused")})
    with pytest.raises(ProxyError, match="vLLM at http://b did not answer") as failed:
        up.forward(CHAT, BODY, V3, [A, B], stream=False)
    assert failed.value.status == 502


def test_a_replica_that_lost_the_adapter_is_skipped_for_that_version_only(tmp_path):
    unknown = httpx.Response(404, json={"error": {"message": "The model `policy-v3` does not exist."}})
    up, balancer, _ = upstream(tmp_path, {"a": unknown, "b": httpx.Response(200, json=completion())})
    assert up.forward(CHAT, BODY, V3, [A, B], stream=False).replica == "http://b"
    assert set(balancer.state(dict)["ejected_s"]) == {"http://a#v3"}
    with pytest.raises(
        ProxyError, match="no replica has adapter version v3 loaded now; retry shortly"
    ) as failed:
        up.forward(CHAT, BODY, V3, [A], stream=False)
    assert failed.value.status == 503


def test_a_refusal_of_the_request_itself_is_the_answer_without_a_retry(tmp_path):
    bad = {"error": {"message": "max_tokens is too large"}}
    up, balancer, asked = upstream(
        tmp_path, {"a": httpx.Response(400, json=bad), "b": httpx.Response(200, json=completion())}
    )
    answer = up.forward(CHAT, BODY, V3, [A, B], stream=False)
    assert (answer.status, answer.data, asked) == (400, bad, ["a"])
    assert balancer.state(dict)["ejected_s"] == {}


def test_an_answer_from_another_model_is_refused(tmp_path):
    up, _, _ = upstream(tmp_path, {"a": httpx.Response(200, json=completion("policy-v2"))})
    with pytest.raises(ProxyError, match="answered as 'policy-v2', not 'policy-v3'") as failed:
        up.forward(CHAT, BODY, V3, [A], stream=False)
    assert failed.value.status == 502
