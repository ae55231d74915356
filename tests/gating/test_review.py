"""Manual review: the CLI and the authenticated HTTP API, recorded exactly like gate decisions."""

from __future__ import annotations

import dataclasses

import pytest
from fastapi.testclient import TestClient

from gating.decisions import DecisionLog, State
from gating.records import Registry
from gating.review_api import create_app
from ops.cli import main as ratchet

pytestmark = pytest.mark.stack
TOKEN = "s3cret-review-token"


@pytest.fixture
def env(settings, monkeypatch):
    for key, value in {
        "RATCHET_MLFLOW_URL": settings.mlflow_url,
        "RATCHET_GATE_VLLM_URL": settings.gate_vllm_url,
        "RATCHET_ADAPTER_STORE_DIR": str(settings.adapter_store_dir),
        "RATCHET_GATE_DIR": str(settings.gate_dir),
        "RATCHET_REGISTERED_MODEL": settings.registered_model,
        "RATCHET_GATE_EXPERIMENT": settings.gate_experiment,
        "RATCHET_MODEL_DIR": str(settings.model_dir),
        "RATCHET_SUITES_DIR": str(settings.suites_dir),
    }.items():
        monkeypatch.setenv(key, value)
    return settings


def registry(settings) -> Registry:
    return Registry(settings.mlflow_url, settings.registered_model, settings.gate_experiment)


def test_cli_overrides_move_aliases_and_are_logged_like_decisions(env, capsys):
    log = DecisionLog(env.decision_log_path)
    assert ratchet(["gate", "approve", "v3", "--reason", "reviewed the transcripts", "--by", "alice"]) == 0
    assert log.state() == State("v3", None)
    assert registry(env).aliases() == {"champion": "v3"}

    assert ratchet(["gate", "approve", "v1", "--reason", "better on target", "--by", "bob"]) == 0
    assert ratchet(["gate", "reject", "v1", "--reason", "users complain", "--by", "carol"]) == 0
    assert log.state() == State("v3", None)  # a rejected champion hands back to the one it replaced
    assert registry(env).aliases() == {"champion": "v3"}

    assert ratchet(["gate", "rollback", "base", "--reason", "incident 42", "--by", "dave"]) == 0
    assert registry(env).aliases() == {} and log.state() == State(None, None)

    entries = log.entries()
    assert [(e.version, e.action, e.decision, e.actor) for e in entries] == [
        ("v3", "approve", "promote", "alice"),
        ("v1", "approve", "promote", "bob"),
        ("v1", "reject", "reject", "carol"),
        ("base", "rollback", "promote", "dave"),
    ]
    run = registry(env).run(entries[2].run_id)
    assert run.data.tags["gate.decision"] == "reject" and run.data.tags["gate.reasons"] == "users complain"
    assert run.data.tags["gate.actor"] == "carol" and run.data.tags["gate.override"] == "true"
    version = registry(env).model_version("v1")
    assert version.tags["gate.decision"] == "reject" and version.tags["gate.action"] == "reject"

    capsys.readouterr()
    assert ratchet(["gate", "log"]) == 0
    out = capsys.readouterr().out
    assert "v1     reject" in out and "by carol" in out and "users complain" in out

    assert ratchet(["gate", "rollback", "v2", "--reason", "x", "--by", "erin"]) == 2
    assert "never champion" in capsys.readouterr().err
    assert ratchet(["gate", "approve", "v99", "--reason", "x", "--by", "erin"]) == 2
    assert "not in the store" in capsys.readouterr().err
    assert len(log.entries()) == 4


def test_http_overrides_need_the_token_and_answer_bad_requests_clearly(settings):
    settings = dataclasses.replace(settings, review_token=TOKEN)
    http = TestClient(create_app(settings))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {"version": "v2", "reason": "looks fine", "by": "alice"}

    assert http.post("/v1/gate/approve", json=body).status_code == 401
    assert (
        http.post("/v1/gate/approve", json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
    )
    assert http.get("/v1/gate/log").status_code == 401
    assert http.get("/health").json() == {"ok": True}

    ok = http.post("/v1/gate/approve", json=body, headers=auth)
    assert ok.status_code == 200 and ok.json()["state"] == {"champion": "v2", "challenger": None}
    assert registry(settings).aliases() == {"champion": "v2"}
    assert http.get("/v1/gate/state", headers=auth).json() == {"champion": "v2", "challenger": None}

    rejected = http.post("/v1/gate/reject", json=body | {"by": "bob", "reason": "hack"}, headers=auth)
    assert rejected.status_code == 200 and rejected.json()["state"]["champion"] is None
    assert registry(settings).aliases() == {}

    back = http.post("/v1/gate/rollback", json=body | {"by": "carol"}, headers=auth)
    assert back.status_code == 200 and registry(settings).aliases() == {"champion": "v2"}

    assert http.post("/v1/gate/rollback", json=body | {"version": "v4"}, headers=auth).status_code == 409
    missing = http.post("/v1/gate/approve", json=body | {"version": "v99"}, headers=auth)
    assert missing.status_code == 404 and "not in the store" in missing.json()["detail"]
    bad = http.post("/v1/gate/approve", json=body | {"version": "../v1"}, headers=auth)
    assert bad.status_code == 400 and "not an adapter version" in bad.json()["detail"]
    assert http.post("/v1/gate/promote", json=body, headers=auth).status_code == 404
    assert http.post("/v1/gate/approve", json={"version": "v2"}, headers=auth).status_code == 422
    assert http.post("/v1/gate/approve", json=body | {"by": "a b"}, headers=auth).status_code == 400

    history = http.get("/v1/gate/log", headers=auth).json()
    assert [(e["action"], e["actor"]) for e in history] == [
        ("approve", "alice"),
        ("reject", "bob"),
        ("rollback", "carol"),
    ]
    assert all(e["run_id"] for e in history)


def test_the_review_api_refuses_to_start_without_a_token(settings):
    with pytest.raises(ValueError, match="RATCHET_REVIEW_TOKEN"):
        create_app(settings)
