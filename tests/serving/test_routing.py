"""The routing table: alias -> adapter version -> vLLM model name."""

import json
import threading

import pytest

from serving.routing import Route, RoutingTable, UnknownModel
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
        ProxySettings(base_model="b", policy_alias="prod", policy_version="v2")
    )
    assert table.snapshot() == {"prod": "v2"} and table.resolve("prod") == Route("policy-v2", "v2")
    path = tmp_path / "routes.json"
    path.write_text(json.dumps({"policy": "v4", "shadow": None}))
    table = RoutingTable.from_settings(
        ProxySettings(base_model="b", routing_file=path, adapter_prefix="acme")
    )
    assert table.resolve("policy") == Route("acme-v4", "v4") and table.resolve("shadow") == Route("b", None)
