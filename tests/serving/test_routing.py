"""The routing table: alias -> adapter version -> vLLM model name."""

import json
import threading

import pytest

from serving.routing import (
    Canary,
    Replica,
    Route,
    Routes,
    RoutesFileError,
    RoutingTable,
    UnknownModel,
    parse_routes,
    read_routes,
    write_routes,
)
from serving.settings import ProxySettings


def test_alias_base_model_and_adapter_names_resolve():
    table = RoutingTable("smollm2", {"policy": "v3", "canary": None})
    assert table.resolve("policy") == Route("policy-v3", "v3")
    assert table.resolve("canary") == Route("smollm2", None)
    assert table.resolve("smollm2") == Route("smollm2", None)
    assert table.resolve("policy-v12") == Route("policy-v12", "v12")
    with pytest.raises(UnknownModel, match="'gpt-4o' is not served here"):
        table.resolve("gpt-4o")
    with pytest.raises(UnknownModel):
        table.resolve("policy-latest")


def test_set_moves_an_alias_and_refuses_bad_versions():
    table = RoutingTable("smollm2", {"policy": None})
    threads = [threading.Thread(target=table.set, args=("policy", f"v{i}")) for i in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert table.resolve("policy").adapter_version in {f"v{i}" for i in range(1, 9)}
    table.set("policy", "v9")
    assert table.resolve("policy") == Route("policy-v9", "v9")
    with pytest.raises(ValueError, match="must look like v7"):
        table.set("policy", "9")
    with pytest.raises(ValueError, match="base model"):
        table.set("smollm2", "v1")


def test_table_from_settings_and_from_a_routing_file(tmp_path):
    table = RoutingTable.from_settings(
        ProxySettings(base_model="b", policy_alias="prod", policy_version="v2", state_dir=tmp_path)
    )
    assert table.snapshot() == {"prod": "v2"} and table.resolve("prod") == Route("policy-v2", "v2")
    path = tmp_path / "routes.json"
    path.write_text(json.dumps({"policy": "v4", "shadow": None}))
    table = RoutingTable.from_settings(
        ProxySettings(base_model="b", routing_file=path, adapter_prefix="acme")
    )
    assert table.resolve("policy") == Route("acme-v4", "v4") and table.resolve("shadow") == Route("b", None)


def test_the_controllers_routes_file_is_followed_when_replaced(tmp_path):
    path = tmp_path / "serving" / "routes.json"
    settings = ProxySettings(base_model="b", vllm_urls=("http://static:1/",), state_dir=tmp_path)
    table = RoutingTable.from_settings(settings)
    assert table.generation == 0 and table.replicas_for(Route("policy-v3", "v3")) == [
        Replica("http://static:1")
    ]

    a = Replica("http://a", True, frozenset({"v2", "v3"}))
    b = Replica("http://b", True, frozenset({"v2"}))
    down = Replica("http://c", False, frozenset())
    write_routes(path, Routes({"policy": "v3"}, (a, b, down), generation=4))
    assert read_routes(path) == Routes({"policy": "v3"}, (a, b, down), 4)
    assert table.refresh() and not table.refresh()  # re-read once per replacement
    assert table.generation == 4 and table.resolve("policy") == Route("policy-v3", "v3")
    assert table.replicas_for(table.resolve("policy")) == [a]
    assert table.replicas_for(Route("policy-v2", "v2")) == [a, b]
    assert table.replicas_for(Route("b", None)) == [a, b]  # the base model: every healthy replica
    assert table.replicas_for(Route("policy-v1", "v1")) == []

    path.write_text("{broken")  # a bad edit keeps the last good routes
    assert not table.refresh() and table.generation == 4
    write_routes(path, Routes({"policy": "v2"}, (b,), generation=5))
    assert table.refresh() and table.resolve("policy") == Route("policy-v2", "v2")


def test_routes_files_with_faults_are_refused_with_the_reason():
    with pytest.raises(RoutesFileError, match="replicas\\[0\\].*must look like v7"):
        parse_routes({"aliases": {"policy": "v1"}, "replicas": [{"url": "u", "versions": ["../x"]}]}, ())
    with pytest.raises(RoutesFileError, match="needs a 'url'"):
        parse_routes({"aliases": {}, "replicas": [{"versions": []}]}, ())
    with pytest.raises(RoutesFileError, match="alias 'policy'"):
        parse_routes({"policy": "latest"}, ())


def test_the_base_model_goes_to_the_zero_adapter_on_replicas_that_verified_it(tmp_path):
    path = tmp_path / "routes.json"
    a = Replica("http://a", True, frozenset({"v2"}), base=True)
    b = Replica("http://b", True, frozenset({"v2"}), base=False)  # restarted: no zero adapter yet
    down = Replica("http://c", False, frozenset(), base=False)
    routes = Routes({"policy": None, "canary": "v2"}, (a, b, down), 3, base_adapter="policy-base")
    data = routes.to_json()
    assert data["base_adapter"] == "policy-base" and [r["base"] for r in data["replicas"]] == [
        True,
        False,
        False,
    ]
    write_routes(path, routes)
    assert read_routes(path) == routes
    table = RoutingTable("smollm2", {}, routes_file=path)
    base = Route("policy-base", None)  # the zero adapter's vLLM name; the session records no version
    assert table.resolve("policy") == base and table.resolve("smollm2") == base
    assert table.resolve("policy-base") == base and table.base_route() == base
    assert table.replicas_for(base) == [a]
    assert table.replicas_for(table.resolve("canary")) == [a, b]  # adapters: as before
    assert table.replicas_for(Route("smollm2", None)) == [a, b]  # the plain model, if asked for
    assert not routes.same_routing(Routes(routes.aliases, routes.replicas, 3))


def test_routes_without_a_base_adapter_serve_the_plain_model_as_before(tmp_path):
    path = tmp_path / "routes.json"
    old = {
        "generation": 2,
        "aliases": {"policy": None},
        "replicas": [{"url": "http://a", "healthy": True, "versions": ["v1"]}],
    }
    path.write_text(json.dumps(old))
    table = RoutingTable("smollm2", {}, routes_file=path)
    assert table.resolve("policy") == Route("smollm2", None)
    assert table.replicas_for(table.resolve("policy")) == [Replica("http://a", True, frozenset({"v1"}))]
    with pytest.raises(UnknownModel):
        table.resolve("policy-base")
    assert "base_adapter" not in read_routes(path).to_json()  # written back unchanged
    assert "base" not in read_routes(path).to_json()["replicas"][0]
    with pytest.raises(RoutesFileError, match="'base_adapter' must be a vLLM model name"):
        parse_routes({**old, "base_adapter": 7}, ())
    # an older proxy's reader sees a newer file as routes plus notes it carries unchanged
    newer = {**old, "base_adapter": "policy-base"}
    assert parse_routes(newer, ()).base_adapter == "policy-base"


def test_a_canary_takes_its_share_of_new_sessions_always_the_same_ones(tmp_path):
    path = tmp_path / "routes.json"
    a = Replica("http://a", True, frozenset({"v2", "v3"}))
    routes = Routes({"policy": "v2"}, (a,), 7, canary={"policy": Canary("v3", 0.25)})
    write_routes(path, routes)
    assert read_routes(path) == routes and read_routes(path).to_json()["canary"] == {
        "policy": {"version": "v3", "share": 0.25}
    }
    table = RoutingTable("b", {}, routes_file=path)
    sessions = [f"s-{i}" for i in range(2000)]
    routed = [table.resolve("policy", sid).adapter_version for sid in sessions]
    share = routed.count("v3") / len(routed)
    assert set(routed) == {"v2", "v3"} and 0.21 < share < 0.29, share
    assert [table.resolve("policy", sid).adapter_version for sid in sessions] == routed  # sticky
    assert table.resolve("policy").adapter_version == "v2"  # no session: the alias's version
    assert not routes.same_routing(Routes({"policy": "v2"}, (a,), 7))
    none = Routes({"policy": "v2"}, (a,), 8, canary={"policy": Canary("v3", 0.0)})
    write_routes(path, none)
    assert table.refresh() and {table.resolve("policy", sid).adapter_version for sid in sessions} == {"v2"}


@pytest.mark.parametrize(
    "canary, message",
    [
        ({"other": {"version": "v3", "share": 0.5}}, "canary 'other' needs an alias"),
        ({"policy": {"version": "v3", "share": 1.5}}, "'share' in \\[0, 1\\]"),
        ({"policy": {"version": "../v3", "share": 0.5}}, "must look like v7"),
        ({"policy": {"version": None, "share": 0.5}}, "needs an adapter version"),
    ],
)
def test_a_canary_with_a_fault_is_refused_with_the_reason(canary, message):
    with pytest.raises(RoutesFileError, match=message):
        parse_routes({"aliases": {"policy": "v2"}, "canary": canary, "replicas": []}, ())
