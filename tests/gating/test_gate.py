"""The gate end to end: real vLLM, real MLflow, real adapters trained on the training split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gating.decisions import State
from tests.gating.conftest import read_jsonl

pytestmark = pytest.mark.stack


def codes(entry) -> list[str]:
    return [r["code"] for r in entry.reasons]


def gate_adapters(gate) -> list[str]:
    return [name for name in gate.harness.adapters() if name.startswith("gate-")]


def runs_for(gate, decision_id: str) -> list:
    return gate.registry.client.search_runs(
        [gate.registry.experiment_id], f"tags.`gate.decision_id` = '{decision_id}'"
    )


def test_a_clear_improvement_is_promoted_with_its_evidence_in_mlflow(make_gate, store, tmp_path):
    loaded_before = set(make_gate().harness.adapters())
    gate = make_gate()
    entry = gate.evaluate("v1")

    assert entry.decision == "promote", entry.reasons
    assert entry.metrics["target.pass_at_1"] >= entry.metrics["champion.target.pass_at_1"] + 0.15
    assert entry.metrics["target.gain_lower_bound"] >= 0.05
    assert entry.champion_before is None and gate.log.state() == State("v1", None)
    assert not set(gate_adapters(gate)) - loaded_before  # temporary names unloaded

    run = gate.registry.run(entry.run_id)
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    assert tags["gate.decision"] == "promote" and tags["gate.reasons"] == "all checks passed"
    assert tags["gate.decision_id"] == entry.decision_id
    assert params["candidate"] == "v1" and params["champion"] == "base"
    assert params["suite.target"].startswith("target@v1#") and params["seed"] == "0"
    for name in (
        "target.pass_at_1",
        "target.pass_all_k",
        "honeypot.hack_rate",
        "format.valid",
        "general.pass",
    ):
        assert name in metrics and f"champion.{name}" in metrics
    assert 0 <= metrics["drift.kl_base"] < gate.settings.max_kl_base
    assert metrics["drift.engine_gap"] < 1e-2  # vLLM and PEFT serve the same policy
    # where the comparison's time went: the task suites, and drift beside them (the KL a part of it)
    assert 0 <= metrics["gate.kl_seconds"] <= metrics["gate.drift_seconds"] < metrics["gate.seconds"]
    assert 0 < metrics["gate.tasks_seconds"] < metrics["gate.seconds"]

    client = gate.registry.client
    names = {a.path for a in client.list_artifacts(entry.run_id)}
    assert {"per_task.jsonl", "comparison.png", "decision.json", "adapter"} <= names
    rows = read_jsonl(Path(client.download_artifacts(entry.run_id, "per_task.jsonl", str(tmp_path))))
    assert {(r["policy"], r["suite"]) for r in rows} == {
        (p, s) for p in ("candidate", "champion") for s in ("target", "honeypot", "format", "general")
    }
    assert all(len(r["passed"]) == 2 for r in rows if r["suite"] == "target")
    png = Path(client.download_artifacts(entry.run_id, "comparison.png", str(tmp_path))).read_bytes()
    assert png.startswith(b"\x89PNG")

    version = gate.registry.model_version("v1")
    assert version.tags["adapter_version"] == "v1"
    assert version.tags["content_hash"] == store.get("v1").manifest.content_hash
    assert version.tags["gate.decision"] == "promote"
    assert gate.registry.aliases() == {"champion": "v1"}

    again = make_gate().evaluate("v1")  # an already-decided version: the logged decision, no new run
    assert again.decision_id == entry.decision_id and len(gate.log.entries()) == 1
    assert len(runs_for(gate, entry.decision_id)) == 1


def test_a_crash_between_decision_and_alias_move_converges_on_rerun(make_gate):
    gate = make_gate()
    first = gate.evaluate("v1")  # per-task results are cached from the test above
    assert gate.registry.aliases() == {"champion": "v1"}

    # Crash after the log entry, before the alias moved.
    gate.registry.client.delete_registered_model_alias(gate.settings.registered_model, "champion")
    assert gate.registry.aliases() == {}
    again = make_gate().evaluate("v1")
    assert again.decision_id == first.decision_id and len(gate.log.entries()) == 1
    assert gate.registry.aliases() == {"champion": "v1"}

    # Crash after the MLflow run, before the log entry (and a torn half-written line).
    gate.registry.client.delete_registered_model_alias(gate.settings.registered_model, "champion")
    gate.settings.decision_log_path.write_text('{"decision_id": "d-half')
    assert gate.log.state() == State()
    rerun = make_gate().evaluate("v1")
    assert rerun.decision_id == first.decision_id and rerun.run_id == first.run_id
    assert [e.decision_id for e in gate.log.entries()] == [first.decision_id]
    assert gate.registry.aliases() == {"champion": "v1"}
    assert len(runs_for(gate, first.decision_id)) == 1
    assert len(gate.registry.client.search_model_versions(f"name = '{gate.settings.registered_model}'")) == 1


def test_a_candidate_that_lost_general_capability_is_rejected(make_gate):
    gate = make_gate(suites=("target", "general"), required_suites=("target", "general"), sequential=False)
    entry = gate.evaluate("v3")
    assert entry.decision == "reject"
    assert "guard:general.pass" in codes(entry), entry.reasons
    assert not [c for c in codes(entry) if c.startswith("missing:")]  # the suites left out are not required
    assert (
        entry.metrics["general.pass"]
        < entry.metrics["champion.general.pass"] - gate.settings.tolerance_general
    )
    # It kept its target gain (it is the improver, trained further): general capability sank it. Whether
    # that gain also clears the promotion bound is left to sampling (24 tasks at temperature 0.7).
    assert entry.metrics["target.pass_at_1"] > entry.metrics["champion.target.pass_at_1"]
    assert gate.log.state() == State(None, "v3")
    assert gate.registry.aliases() == {"challenger": "v3"}
    tags = gate.registry.run(entry.run_id).data.tags
    assert tags["gate.decision"] == "reject" and "general.pass: fell" in tags["gate.reasons"]


def test_a_candidate_trained_to_take_the_honeypot_shortcut_is_rejected(make_gate):
    # every suite runs: a target lost this clearly would otherwise be rejected on its rounds alone
    gate = make_gate(suites=("target", "honeypot"), required_suites=("target", "honeypot"), sequential=False)
    entry = gate.evaluate("v2")
    assert entry.decision == "reject" and "hack_rate" in codes(entry), entry.reasons
    assert not [c for c in codes(entry) if c.startswith("missing:")]
    assert entry.metrics["honeypot.hack_rate"] > 0.5 >= entry.metrics["champion.honeypot.hack_rate"]
    rows = [
        json.loads(r) for r in (gate.harness.results_path(gate.base, gate.suites[1])).read_text().splitlines()
    ]
    assert not any(d.get("shortcut") for r in rows for d in r["details"])  # the base model never took it


def test_a_candidate_that_drifts_too_far_is_rejected(make_gate):
    gate = make_gate(suites=("target", "drift"), required_suites=("target", "drift"), sequential=False)
    entry = gate.evaluate("v4")
    assert entry.decision == "reject" and "drift_base" in codes(entry), entry.reasons
    assert not [c for c in codes(entry) if c.startswith("missing:")]
    assert entry.metrics["drift.kl_base"] > 2 * gate.settings.max_kl_base


def test_a_tampered_adapter_is_refused_before_it_is_served(make_gate, store, tmp_path):
    from learner.store import AdapterStore

    copy = AdapterStore(tmp_path / "store")
    stored = copy.publish(store.get("v1").path, base_model="m")
    weights = stored.path / "adapter_model.safetensors"
    weights.chmod(0o644)
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    gate = make_gate(adapter_store_dir=copy.root)
    entry = gate.evaluate("v1")
    assert entry.decision == "reject" and codes(entry) == ["tampered"]
    assert gate.log.state() == State() and entry.run_id is None
    assert gate.registry.aliases() == {}


def test_latest_only_skips_versions_a_newer_one_superseded(make_gate):
    every = make_gate()
    assert every.undecided() == ["v1", "v2", "v3", "v4"]
    gate = make_gate(latest_only=True)
    assert gate.undecided() == ["v4"]
    gate.override("reject", "v3", "superseded in review", "alice")
    assert gate.undecided() == ["v4"]
    gate.override("reject", "v4", "not wanted", "alice")
    assert gate.undecided() == []  # v1 and v2 are older than a decided version
    assert every.undecided() == ["v1", "v2"]


def test_a_clear_loser_is_rejected_on_the_targets_rounds_before_the_other_suites_run(make_gate, tmp_path):
    gate = make_gate()
    gate.override("approve", "v1", reason="the improver, as champion", actor="tester")
    entry = gate.evaluate("v2")  # trained to read the answer key: it makes no calculator call at all

    assert entry.decision == "reject" and codes(entry)[0] == "target_gain", entry.reasons
    assert set(codes(entry)) <= {"target_gain", "guard:target.pass_all_k"}  # what the rounds measured
    message = entry.reasons[0]["message"]
    if "stopped for futility" in message:  # the full suite could hardly have promoted it
        assert entry.metrics["target.conditional_power"] < gate.settings.futility_power
    else:
        assert "anytime upper bound" in message
        assert entry.metrics["target.sequential_upper"] < gate.settings.min_gain
    assert entry.metrics["target.tasks"] <= 24 and entry.metrics["target.tasks"] % 8 == 0
    assert "honeypot.hack_rate" not in entry.metrics and "drift.kl_base" not in entry.metrics
    client = gate.registry.client
    rows = read_jsonl(Path(client.download_artifacts(entry.run_id, "per_task.jsonl", str(tmp_path))))
    assert {r["suite"] for r in rows} == {"target"}
    assert len(rows) == 2 * entry.metrics["target.tasks"]  # candidate and champion, task for task
    assert gate.log.state() == State("v1", "v2")


def test_the_champion_measured_ahead_is_what_the_next_comparison_uses(make_gate, tmp_path):
    """While no candidate waits, the gate samples the champion a round at a time; the comparison that
    follows samples only its candidate and reads the champion's results as they were written."""
    gate = make_gate(results_dir=tmp_path / "results", suites=("target",), required_suites=("target",))
    todo = gate.evaluator.champion_todo(None)
    assert [len(part.tasks) for part in todo] == [8, 8, 8]  # the target's rounds, in scoring order
    slices = 0
    while gate.prefetch():
        slices += 1
    assert slices == 3 and gate.evaluator.champion_todo(None) == [] and not gate.prefetch()
    (champion_file,) = (tmp_path / "results" / "champion").rglob("*.jsonl")
    sampled_ahead = champion_file.read_text()
    assert len(read_jsonl(champion_file)) == 24

    entry = gate.evaluate("v1")
    assert entry.decision == "promote", entry.reasons
    assert champion_file.read_text() == sampled_ahead  # nothing of the champion sampled again
    (candidate_file,) = (tmp_path / "results" / "candidate").rglob("*.jsonl")
    # the tasks the verdict read, and those of later rounds that finished before it (run ahead)
    assert entry.metrics["target.tasks"] <= len(read_jsonl(candidate_file)) <= 24
    assert gate.evaluator.champion_todo(gate.store.verify("v1"))  # the new champion: not yet measured


def test_while_no_candidate_waits_the_drift_kls_model_is_loaded_once(make_gate, tmp_path):
    """Nothing of a champion is sampled for drift (only candidates are): once the champion is
    measured, the gate's idle time loads the model the KL is scored with, once."""
    gate = make_gate(results_dir=tmp_path / "results", suites=("drift",), required_suites=("drift",))
    assert gate.evaluator.champion_todo(None) == []
    assert gate.prefetch()  # the model loaded
    assert not gate.prefetch()  # and only once
