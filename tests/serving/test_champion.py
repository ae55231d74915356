"""Only what the gate signed is served: the champion reading against the real MLflow, written by the
gate's own Registry from decision-log entries and moved by hand with a plain MlflowClient (as anyone
with MLflow access could), and the controller's pass over it (its only replica down: no vLLM needed)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import uuid
from pathlib import Path

import pytest

from gating.decisions import DecisionLog, Entry, State, next_state
from gating.records import (
    SIGNATURE,
    Registry,
    Statement,
    create_decision_key,
    read_decision_key,
    sign,
)
from learner.store import AdapterStore
from ops.stack import free_port
from serving.champion import Champion, Refusal, check_version, desired, read_champion
from serving.routing import Routes, write_routes
from serving.settings import ControllerSettings

GATE_TAGS = ("gate.decision", "gate.action", "gate.decision_id", SIGNATURE)


@dataclasses.dataclass
class World:
    url: str
    name: str
    key_file: Path
    key: bytes
    store: AdapterStore
    registry: Registry  # the gate's
    log: DecisionLog
    client: object  # a plain MlflowClient: what the controller reads, and what an attacker writes with

    def decide(self, version: str, action: str, decision: str) -> Entry:
        """Record a decision as the gate and the review API do: run, version, log entry, then aliases."""
        with self.log.locked() as entries:
            state = entries[-1].state if entries else State()
            decision_id = f"d-{len(entries)}-{uuid.uuid4().hex[:6]}"
            stored = None if version == "base" else self.store.get(version)
            run_id = self.registry.log_run(
                decision_id, f"{action}-{version}", {}, {}, {"gate.decision": decision}, {}
            )
            if stored is not None:
                self.registry.ensure_version(version, stored.manifest.content_hash, run_id)
            entry = self.log.append(
                Entry(
                    decision_id,
                    version,
                    action,
                    decision,
                    "gate",
                    [],
                    state.champion,
                    next_state(entries, version, action, decision),
                    content_hash=stored.manifest.content_hash if stored else None,
                    run_id=run_id,
                )  # fmt: skip
            )
        self.reconcile()
        return entry

    def reconcile(self) -> None:
        self.registry.reconcile(self.log.state(), self.log.entries())

    def stored_hash(self, version: str) -> str:
        return self.store.get(version).manifest.content_hash

    def read(self, key: bytes | None = None) -> Champion:
        return read_champion(self.client, self.name, "champion", key or self.key, self.stored_hash)

    def number(self, version: str) -> str:
        return self.registry.model_version(version).version

    def tags(self, number: str) -> dict[str, str]:
        return self.client.get_model_version(self.name, number).tags

    def point_alias(self, number: str) -> None:
        self.client.set_registered_model_alias(self.name, "champion", number)

    def register(self, tags: dict[str, str]) -> str:
        """A version registered by hand, with whatever tags."""
        run_id = self.client.search_runs([self.registry.experiment_id], max_results=1)[0].info.run_id
        return self.client.create_model_version(
            self.name, f"runs:/{run_id}/adapter", run_id, tags=tags
        ).version


@pytest.fixture
def world(mlflow_url, tmp_path):
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    store = AdapterStore(tmp_path / "store")
    for i in (1, 2, 3):
        folder = tmp_path / f"adapter-{i}"
        folder.mkdir()
        (folder / "adapter_model.safetensors").write_bytes(f"weights {i}".encode())
        (folder / "adapter_config.json").write_text(json.dumps({"r": i}))
        store.publish(folder, base_model="base")
    name = f"test-signature-{uuid.uuid4().hex[:10]}"
    key_file = create_decision_key(tmp_path / "secrets" / "decision.key")
    key = read_decision_key(key_file)
    registry = Registry(mlflow_url, name, name, decision_key=key)
    client = MlflowClient(mlflow_url, mlflow_url)
    yield World(
        mlflow_url,
        name,
        key_file,
        key,
        store,
        registry,
        DecisionLog(tmp_path / "gate" / "decisions.jsonl"),
        client,
    )
    with contextlib.suppress(MlflowException):
        client.delete_registered_model(name)
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        client.delete_experiment(experiment.experiment_id)


def test_the_gates_promotion_is_served_and_an_alias_moved_by_hand_is_refused(world):
    world.decide("v1", "evaluate", "promote")
    v1 = world.number("v1")
    assert world.read() == Champion("v1", v1)
    world.decide("v2", "evaluate", "reject")  # the challenger: rejected, awaiting review
    v2 = world.number("v2")
    assert world.read() == Champion("v1", v1)
    assert SIGNATURE in world.tags(v1) and SIGNATURE not in world.tags(v2)

    world.point_alias(v2)  # a candidate the gate rejected
    refused = world.read()
    assert (refused.version, refused.number) == ("v2", v2)
    assert refused.refusal == Refusal("unsigned", "no gate signature")
    assert desired(refused, "v1") == "v1"
    assert read_champion(world.client, world.name).version == "v2"  # without the key: served unchecked

    never = world.register({"adapter_version": "v3", "content_hash": world.stored_hash("v3")})
    world.point_alias(never)  # a version the gate never decided
    assert world.read().refusal.code == "unsigned"

    copied = {k: world.tags(v1)[k] for k in GATE_TAGS}
    for k, value in copied.items():  # v1's signature and decision tags onto the rejected v2
        world.client.set_model_version_tag(world.name, v2, k, value)
    world.point_alias(v2)
    refused = world.read()
    assert refused.version == "v2" and refused.refusal.code == "bad_signature", refused
    assert desired(refused, "v1") == "v1"

    clone = world.register({"adapter_version": "v1", "content_hash": world.stored_hash("v1"), **copied})
    world.point_alias(clone)  # v1's tags, signature included, on another version number
    assert world.read().refusal.code == "bad_signature"
    assert world.read(key=b"another key, 32 bytes or longer!").version == "v1"
    assert world.read(key=b"another key, 32 bytes or longer!").refusal.code == "bad_signature"

    world.reconcile()  # the gate puts the alias back where its log says
    assert world.read() == Champion("v1", v1)


def test_a_former_champion_or_a_removed_alias_needs_a_logged_decision(world):
    world.decide("v1", "evaluate", "promote")
    world.decide("v2", "approve", "promote")
    v1, v2 = world.number("v1"), world.number("v2")
    assert world.read() == Champion("v2", v2)
    assert SIGNATURE not in world.tags(v1)  # removed once the alias left it

    world.point_alias(v1)
    assert world.read().refusal == Refusal("unsigned", "no gate signature")
    world.client.delete_registered_model_alias(world.name, "champion")  # the base model, by hand
    refused = world.read()
    assert refused.version is None and refused.refusal.code == "unsigned"
    assert desired(refused, "v2") == "v2"  # no fall back to the base model

    world.decide("v1", "rollback", "promote")
    assert world.read() == Champion("v1", v1)
    assert world.tags(v1)["gate.action"] == "rollback" and SIGNATURE not in world.tags(v2)

    world.decide("base", "rollback", "promote")
    assert world.read() == Champion(None)
    world.point_alias(v1)
    assert world.read().refusal.code == "unsigned"
    world.reconcile()
    assert world.read() == Champion(None)


def test_the_signature_is_bound_to_the_content_the_store_holds(world, tmp_path):
    world.decide("v1", "evaluate", "promote")
    v1 = world.number("v1")
    other = read_champion(
        world.client, world.name, key=world.key, stored_hash=lambda v: world.stored_hash("v2")
    )
    assert other.version == "v1" and other.refusal.code == "bad_signature"
    empty = AdapterStore(tmp_path / "empty")
    gone = read_champion(
        world.client, world.name, key=world.key, stored_hash=lambda v: empty.get(v).manifest.content_hash
    )
    assert gone.refusal.code == "not_in_store" and "not in the store" in gone.refusal.reason
    assert world.read() == Champion("v1", v1)


def test_a_validly_signed_decision_that_does_not_promote_is_refused():
    tags = {
        "adapter_version": "v2",
        "gate.decision_id": "d-1",
        "gate.action": "evaluate",
        "gate.decision": "reject",
    }
    key = b"k" * 32
    tags[SIGNATURE] = sign(key, Statement.of(tags, "m", "5", "v2", "sha256:x"))
    refusal = check_version(key, "m", "5", tags, "sha256:x")
    assert refusal.code == "not_promoted" and "evaluate -> reject" in refusal.reason
    promoted = {**tags, "gate.decision": "promote"}
    promoted[SIGNATURE] = sign(key, Statement.of(promoted, "m", "5", "v2", "sha256:x"))
    assert check_version(key, "m", "5", promoted, "sha256:x") is None
    assert check_version(key, "m", "6", promoted, "sha256:x").code == "bad_signature"


def test_the_desired_version_follows_the_alias_unless_it_is_refused():
    refusal = Refusal("unsigned", "no gate signature")
    assert desired(Champion("v2", "5"), "v1") == "v2"
    assert desired(Champion(None), "v1") is None  # a signed rollback to the base model
    assert desired(Champion("v2", "5", refusal), "v1") == "v1"
    assert desired(Champion(None, refusal=refusal), "v1") == "v1"
    assert desired(Champion("v2", "5", refusal), None) is None


def test_the_controller_keeps_serving_the_held_version_and_reports_a_refusal_once(world, tmp_path, capsys):
    from ops.commands.serving import print_status, status_report
    from serving.controller import Controller

    world.decide("v1", "evaluate", "promote")
    world.decide("v2", "evaluate", "reject")
    settings = ControllerSettings(
        vllm_urls=(f"http://127.0.0.1:{free_port()}",), proxy_urls=(), adapter_store_dir=world.store.root,
        model_dir=tmp_path, mlflow_url=world.url, registered_model=world.name,
        state_dir=tmp_path / "controller", zero_adapter_base=False, decision_key_file=world.key_file,
    )  # fmt: skip
    write_routes(settings.routes_path, Routes({"policy": "v1"}, (), 1))  # it serves v1
    lines: list[str] = []
    controller = Controller(settings, log=lines.append)
    try:
        gauge = controller.metrics.registry.get_sample_value
        assert gauge("ratchet_serving_reconcile_passes_total") == 0  # not ready: the routes are a file's
        controller.reconcile()
        assert gauge("ratchet_serving_reconcile_passes_total") == 1
        status = json.loads((settings.serving_dir / "status.json").read_text())
        assert status["champion"] == "v1" and status["champion_refused"] is None
        assert status["signatures_checked"] is True

        world.point_alias(world.number("v2"))
        controller.reconcile()
        controller.reconcile()
        assert gauge("ratchet_serving_reconcile_passes_total") == 3
        status = json.loads((settings.serving_dir / "status.json").read_text())
        assert status["champion"] == "v1" and controller.routes.aliases == {"policy": "v1"}
        assert status["champion_refused"] == {
            "version": "v2",
            "model_version": world.number("v2"),
            "code": "unsigned",
            "reason": "no gate signature",
            "serving": "v1",
        }
        assert "champion alias -> v2 REFUSED: no gate signature (still serving v1)" in status["problems"]
        assert len([line for line in lines if "REFUSED" in line]) == 1, lines
        assert gauge("ratchet_serving_champion_refused", {"reason": "unsigned"}) == 1.0
        assert gauge("ratchet_serving_champion_refused", {"reason": "bad_signature"}) == 0.0
        report = status_report(settings)  # `ratchet serving status`
        assert report["champion_refused"]["code"] == "unsigned" and report["signatures_checked"] is True
        capsys.readouterr()
        print_status(report)
        assert (
            "!! champion alias -> v2 REFUSED: no gate signature (still serving v1)" in capsys.readouterr().out
        )

        world.reconcile()
        controller.reconcile()
        status = json.loads((settings.serving_dir / "status.json").read_text())
        assert status["champion"] == "v1" and status["champion_refused"] is None
        assert gauge("ratchet_serving_champion_refused", {"reason": "unsigned"}) == 0.0
        assert not any("no decision key" in line for line in lines)
    finally:
        controller.close()

    unchecked = Controller(dataclasses.replace(settings, decision_key_file=None), log=lines.append)
    unchecked.close()
    assert any("no decision key" in line and "moved by hand" in line for line in lines)
    assert unchecked.metrics.registry.get_sample_value("ratchet_serving_signatures_checked") == 0.0
