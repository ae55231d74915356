"""The controller's decisions (pure), the probe comparison and loading only from the store."""

import json

import pytest

from learner.store import AdapterStore, StoreError, TamperedAdapter
from serving.probe import ProbeMismatch, ProbeResult, check, compare
from serving.reconcile import (
    ProxyReport,
    build_routes,
    choose_alias,
    keep_versions,
    note_served,
    retained,
    unloadable,
)
from serving.replicas import Observation, from_store, loaded_versions
from serving.routing import Canary, Replica


def report(generation=1, inflight=None, sessions=None, url="http://p"):
    return ProxyReport(url, generation, inflight or {}, sessions or {})


def test_history_keeps_the_served_version_and_the_previous_one_through_a_rollback():
    history = []
    for routed in ("v1", "v2", "v2", "v1"):
        history = note_served(history, routed)
    assert history == ["v1", "v2", "v1"]
    assert retained(history, 2) == ["v1", "v2"]
    assert retained(history, 1) == ["v1"]
    assert retained([None, "v3", None], 2) == ["v3"]  # the base model needs no adapter
    assert note_served(["v1"] * 3 + ["v2"], "v3", limit=2) == ["v2", "v3"]


def test_versions_in_use_stay_loaded_up_to_the_cap_and_unknown_use_keeps_everything():
    retain = ["v5", "v4"]
    used = report(inflight={"v2": 1, "base": 3}, sessions={"v1": 2, "v3": 1, "v4": 1})
    assert keep_versions("v5", retain, [used], {"v1", "v2", "v3"}, max_loaded=4) == ["v5", "v4", "v3", "v2"]
    assert keep_versions("v5", retain, [used], set(), max_loaded=2) == ["v5", "v4"]
    # a new champion comes first; the served one and the one before stay until it is served
    assert keep_versions("v6", retain, [report()], {"v4", "v5"}, max_loaded=4) == ["v6", "v5", "v4"]
    assert keep_versions(None, retain, [report()], set(), max_loaded=4) == ["v5", "v4"]
    # a proxy that did not report may be using anything that is loaded
    assert keep_versions("v5", retain, [report(), None], {"v1", "v9"}, max_loaded=2) == [
        "v5",
        "v4",
        "v9",
        "v1",
    ]


def test_the_alias_moves_only_to_a_version_a_replica_serves_verified():
    assert choose_alias("v2", "v1", {"a": {"v1", "v2"}, "b": {"v1"}}) == "v2"
    assert choose_alias("v2", "v1", {"a": {"v1"}, "b": set()}) == "v1"
    assert choose_alias(None, "v1", {"a": {"v1"}}) is None  # no champion: the base model
    assert choose_alias("v2", None, {}) is None


def test_a_replica_is_routed_only_for_versions_loaded_verified_and_kept():
    observations = [
        Observation("a", True, frozenset({"v1", "v2", "v3"})),
        Observation("b", True, frozenset({"v2"})),  # restarted: lost v1
        Observation("c", False, frozenset(), "ConnectError"),
    ]
    verified = {"a": {"v1", "v2", "v3"}, "b": {"v1"}, "c": {"v2"}}
    routes = build_routes("policy", "v2", observations, verified, ["v2", "v1"], generation=7)
    assert routes.aliases == {"policy": "v2"} and routes.generation == 7
    assert routes.replicas == (
        Replica("a", True, frozenset({"v1", "v2"})),
        Replica("b", True, frozenset()),
        Replica("c", False, frozenset()),
    )
    assert json.loads(json.dumps(routes.to_json()))["replicas"][0]["versions"] == ["v1", "v2"]


def test_a_canary_is_routed_only_once_a_healthy_replica_serves_it_verified():
    observations = [Observation("a", True, frozenset({"v1", "v2"})), Observation("b", False, frozenset())]
    keep = ["v2", "v1"]
    unverified = build_routes("policy", "v1", observations, {"a": {"v1"}}, keep, 3, canary=("v2", 0.25))
    assert unverified.aliases == {"policy": "v1"} and unverified.canary == {}
    verified = {"a": {"v1", "v2"}, "b": {"v2"}}
    routes = build_routes("policy", "v1", observations, verified, keep, 4, canary=("v2", 0.25))
    assert routes.aliases == {"policy": "v1"} and routes.canary == {"policy": Canary("v2", 0.25)}
    assert build_routes("policy", "v1", observations, verified, ["v1"], 5, canary=("v2", 0.25)).canary == {}
    assert build_routes("policy", "v2", observations, verified, keep, 5, canary=("v2", 0.25)).canary == {}


def test_a_version_is_unloaded_only_when_every_proxy_follows_the_routes_and_it_drained():
    observations = [
        Observation("a", True, frozenset({"v1", "v2", "v3"})),
        Observation("b", False, frozenset()),
    ]
    keep = ["v3", "v2"]
    assert unloadable(observations, keep, [report(generation=8)], generation=8) == [("a", "v1")]
    assert unloadable(observations, keep, [report(generation=7)], generation=8) == []  # not applied yet
    assert unloadable(observations, keep, [report(8), None], generation=8) == []  # a proxy is away
    assert unloadable(observations, keep, [report(8), report(8, inflight={"v1": 1})], generation=8) == []
    assert unloadable(observations, keep, [], generation=8) == [("a", "v1")]  # no proxies configured


def test_probe_comparison():
    assert compare([-0.5, -1.0], [-0.5, -1.004]) == pytest.approx(0.004)
    assert compare([-0.5], [-0.5, -1.0]) == float("inf")
    assert compare([], []) == float("inf")  # a replica that served nothing proves nothing
    good = ProbeResult("v3", (1, 2), (3, 4), (-0.5, -1.0), (-0.50002, -1.00001))
    assert check(good, 1e-2) is good
    bad = ProbeResult("v3", (1, 2), (3, 4), (-0.5, -1.0), (-0.6, -1.0))
    with pytest.raises(ProbeMismatch, match=r"v3 differ from the stored adapter's by 0.1 nats"):
        check(bad, 1e-2)


def test_only_our_adapter_names_count_as_loaded():
    names = [
        "smollm2",
        "policy-v3",
        "policy-v12",
        "policy-v3-old",
        "gate-v4-abc",
        "xpolicy-v1",
        "policy-latest",
    ]
    assert loaded_versions(names, "policy") == {"v3", "v12"}


def _publish(store, tmp_path, payload: bytes):
    folder = tmp_path / f"src-{payload.hex()}"
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(payload)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8}))
    return store.publish(folder, base_model="m")


def test_adapters_load_only_from_the_store_after_the_hash_check(tmp_path):
    store = AdapterStore(tmp_path / "store")
    v1 = _publish(store, tmp_path, b"weights-1")
    assert from_store(store, "v1").path == v1.path
    for name in ("../v1", "/tmp/evil", "v1/../../x", "policy-v1"):
        with pytest.raises(StoreError, match="not an adapter version"):
            from_store(store, name)
    with pytest.raises(StoreError, match="not in the store"):
        from_store(store, "v9")
    weights = v1.path / "adapter_model.safetensors"
    weights.chmod(0o644)
    weights.write_bytes(b"weights-X")
    with pytest.raises(TamperedAdapter, match="fails its content check"):
        from_store(store, "v1")
    # a version folder that is a link to files elsewhere is refused even when the hashes match
    outside = _publish(AdapterStore(tmp_path / "other"), tmp_path, b"weights-2").path
    (store.versions_dir / "v2").symlink_to(outside)
    with pytest.raises(StoreError, match="leads outside the store"):
        from_store(store, "v2")


def test_the_base_model_is_routed_to_its_zero_adapter_only_where_it_is_loaded_and_verified():
    observations = [
        Observation("a", True, frozenset({"v1"}), base_loaded=True),
        Observation("b", True, frozenset({"v1"}), base_loaded=True),  # loaded, not verified yet
        Observation("c", True, frozenset({"v1"}), base_loaded=False),  # restarted: lost it
        Observation("d", False, frozenset(), "ConnectError"),
    ]
    verified = {"a": {"v1", "base"}, "b": {"v1"}, "c": {"v1", "base"}, "d": {"base"}}
    routes = build_routes("policy", None, observations, verified, ["v1"], 4, "policy-base")
    assert routes.base_adapter == "policy-base"
    assert [(r.url, r.base, r.versions) for r in routes.replicas] == [
        ("a", True, frozenset({"v1"})),
        ("b", False, frozenset({"v1"})),
        ("c", False, frozenset({"v1"})),
        ("d", False, frozenset()),
    ]
    assert routes.to_json()["replicas"][0]["base"] is True
    # no healthy replica serves it verified: the routes name no zero adapter (the plain model)
    nowhere = build_routes("policy", None, observations[1:], verified, ["v1"], 5, "policy-base")
    assert nowhere.base_adapter is None and not any(r.base for r in nowhere.replicas)
    assert build_routes("policy", None, observations, verified, ["v1"], 6).base_adapter is None
    # the zero adapter is never a version: not counted as loaded, never unloadable
    assert loaded_versions(["policy-base", "policy-v1"], "policy") == {"v1"}
    assert observations[0].held == {"v1", "base"} and observations[2].held == {"v1"}
    assert unloadable(observations, [], [report(generation=4)], generation=4) == [
        ("a", "v1"),
        ("b", "v1"),
        ("c", "v1"),
    ]
