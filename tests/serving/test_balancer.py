"""The proxy's balancer: which replica a request goes to, and the in-flight counts the controller drains by."""

import pytest

from serving.balancer import Balancer, NoReplica
from serving.routing import Canary, Replica, Route, Routes, RoutingTable, UnknownModel, write_routes

A = Replica("http://a", True, frozenset({"v2", "v3"}), base=True)
B = Replica("http://b", True, frozenset({"v3"}))
DOWN = Replica("http://c", False, frozenset({"v2", "v3"}))


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def balancer(tmp_path, routes: Routes, eject_s: float = 30.0) -> tuple[Balancer, Clock]:
    path = tmp_path / "routes.json"
    write_routes(path, routes)
    clock = Clock()
    return Balancer(RoutingTable("base-model", {}, routes_file=path), eject_s, clock), clock


def publish(b: Balancer, routes: Routes) -> None:
    """The controller replaces the routes file (the balancer re-reads it on its next request)."""
    write_routes(b.routing.routes_file, routes)


def urls(replicas: list[Replica]) -> list[str]:
    return [r.url for r in replicas]


def test_a_request_goes_only_to_healthy_replicas_that_verified_its_version(tmp_path):
    b, _ = balancer(tmp_path, Routes({"policy": "v2"}, (A, B, DOWN), generation=3))
    route, candidates, generation = b.admit("policy", None)
    assert route == Route("policy-v2", "v2") and urls(candidates) == ["http://a"] and generation == 3
    route, candidates, _ = b.admit("policy-v3", None)
    assert sorted(urls(candidates)) == ["http://a", "http://b"]


def test_unknown_models_and_versions_no_replica_serves_are_refused_with_the_reason(tmp_path):
    b, _ = balancer(tmp_path, Routes({"policy": "v2"}, (A, B, DOWN), generation=1))
    with pytest.raises(UnknownModel, match="'gpt-4o' is not served here"):
        b.admit("gpt-4o", None)
    with pytest.raises(
        NoReplica, match=r"no healthy replica serves adapter version v9 of 'policy-v9' right now; "
    ):
        b.admit("policy-v9", None)
    pinned = Route("policy-v7", "v7")
    with pytest.raises(NoReplica, match=r"v7 of 'policy' right now \(the version this session started on\)"):
        b.admit("policy", pinned)
    assert b.state(dict)["inflight"] == {}  # a refused request is never counted


def test_a_session_stays_on_its_version_and_a_base_session_follows_how_the_base_is_served(tmp_path):
    b, _ = balancer(tmp_path, Routes({"policy": "v3"}, (A, B), generation=1, base_adapter="policy-base"))
    assert b.admit("policy", Route("policy-v2", "v2"))[0] == Route("policy-v2", "v2")
    route, candidates, _ = b.admit("policy", Route("base-model", None))  # begun on the plain model
    assert route == Route("policy-base", None) and urls(candidates) == ["http://a"]  # now its zero adapter


def test_a_canary_takes_new_sessions_by_their_id(tmp_path):
    canary = {"policy": Canary("v3", 1.0)}
    b, _ = balancer(tmp_path, Routes({"policy": "v2"}, (A, B), generation=1, canary=canary))
    assert b.admit("policy", None, "s-1")[0] == Route("policy-v3", "v3")
    assert b.admit("policy", None)[0] == Route("policy-v2", "v2")  # no session id: the alias's version


def test_in_flight_counts_per_version_until_released(tmp_path):
    b, _ = balancer(tmp_path, Routes({"policy": "v2", "plain": None}, (A, B), generation=5))
    v2, _, _ = b.admit("policy", None)
    b.admit("policy", None)
    base, _, _ = b.admit("plain", None)
    assert b.state(dict)["inflight"] == {"v2": 2, "base": 1}
    b.release(v2)
    b.release(v2)
    b.release(base)
    assert b.state(dict)["inflight"] == {}  # versions with none in flight are left out


def test_the_drain_contract_a_version_dropped_from_the_routes_is_reported_until_its_last_request_ends(
    tmp_path,
):
    b, _ = balancer(tmp_path, Routes({"policy": "v2"}, (A, B), generation=1))
    old, _, _ = b.admit("policy", None)
    moved = Replica("http://a", True, frozenset({"v3"}))
    publish(b, Routes({"policy": "v3"}, (moved, B), generation=2))
    new, _, generation = b.admit("policy", None)
    assert new.adapter_version == "v3" and generation == 2
    state = b.state(dict)
    assert state["generation"] == 2 and state["inflight"] == {"v2": 1, "v3": 1}  # not unloadable yet
    b.release(old)
    assert b.state(dict)["inflight"] == {"v3": 1}  # now the controller may unload v2


def test_the_open_sessions_are_counted_after_the_requests_in_flight(tmp_path):
    """A request pins its session before it leaves flight, so counting sessions second misses none."""
    b, _ = balancer(tmp_path, Routes({"policy": "v2"}, (A,), generation=1))
    route, _, _ = b.admit("policy", None)

    def sessions() -> dict[str, int]:
        b.release(route)  # the request pins its session and ends while the report is being made
        return {"v2": 1}

    state = b.state(sessions)
    assert state["inflight"] == {"v2": 1} and state["open_sessions"] == {"v2": 1}  # seen at least once


def test_the_least_busy_replica_goes_first_rotating_among_equals(tmp_path):
    b, _ = balancer(tmp_path, Routes({"policy": "v3"}, (A, B), generation=1))
    firsts = [urls(b.admit("policy", None)[1])[0] for _ in range(4)]
    assert sorted(firsts) == ["http://a", "http://a", "http://b", "http://b"]  # turns about
    b.take_replica("http://a")
    assert [urls(b.admit("policy", None)[1]) for _ in range(2)] == [["http://b", "http://a"]] * 2
    b.release_replica("http://a")
    assert b.state(dict)["replicas"][0]["inflight"] == 0


def test_a_failed_replica_is_skipped_until_its_time_is_up_or_new_routes(tmp_path):
    b, clock = balancer(tmp_path, Routes({"policy": "v3"}, (A, B), generation=1), eject_s=30)
    b.eject("http://a", None, "answered 500")
    assert [urls(b.admit("policy", None)[1]) for _ in range(2)] == [["http://b"]] * 2
    assert b.state(dict)["ejected_s"] == {"http://a": 30.0}
    clock.now += 30
    assert sorted(urls(b.admit("policy", None)[1])) == ["http://a", "http://b"]
    b.eject("http://a", None, "answered 500")
    publish(b, Routes({"policy": "v3"}, (A, B), generation=2))  # the controller has looked again
    assert sorted(urls(b.admit("policy", None)[1])) == ["http://a", "http://b"]
    assert b.state(dict)["ejected_s"] == {}


def test_a_replica_that_lost_one_version_is_skipped_for_that_version_only(tmp_path):
    b, _ = balancer(tmp_path, Routes({"policy": "v3"}, (A, B), generation=1))
    b.eject("http://a", "v3", "does not know policy-v3")
    assert urls(b.admit("policy-v3", None)[1]) == ["http://b"]
    assert urls(b.admit("policy-v2", None)[1]) == ["http://a"]
    assert b.state(dict)["ejected_s"] == {"http://a#v3": 30.0}


def test_with_every_replica_skipped_all_are_tried_again(tmp_path):
    b, _ = balancer(tmp_path, Routes({"policy": "v3"}, (A, B), generation=1))
    b.eject("http://a", None, "refused")
    b.eject("http://b", None, "refused")
    assert sorted(urls(b.admit("policy", None)[1])) == ["http://a", "http://b"]


def test_what_a_replica_that_does_not_know_a_model_is_skipped_for(tmp_path):
    b, _ = balancer(tmp_path, Routes({"policy": "v3"}, (A, B), generation=1))
    assert b.eject_key(Route("policy-v3", "v3")) == "v3"
    assert b.eject_key(Route("policy-base", None)) == "base"  # the base model's zero adapter
    assert b.eject_key(Route("base-model", None)) is None  # the plain model: every replica knows it
