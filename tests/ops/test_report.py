"""The demo report from collected run data (pure: no stack)."""

import dataclasses
import json

import pytest

from gating.decisions import Entry, State
from ops.report import (
    Rewarded,
    RunData,
    Served,
    build_report,
    freshness_s,
    live_success,
    policies_to_measure,
    scope,
    served_share,
    sessions_skipped,
    write_report,
)

T0 = 1000.0


def entry(version, action, decision, at, before, after, actor="gate", reasons=(), **metrics) -> Entry:
    return Entry(
        decision_id=f"d-{version}-{at}",
        version=version,
        action=action,
        decision=decision,
        actor=actor,
        reasons=[{"code": code, "message": message} for code, message in reasons],
        champion_before=before,
        state=State(champion=after),
        time=at,
        metrics=metrics,
    )


def run_data() -> RunData:
    """A run that starts with v1 champion (promoted by an earlier run), promotes v3 and v4, and is rolled
    back to v3 by the canary. The earlier run left a session, its ledger line, v1, v2 and two decisions."""
    data = RunData(started_at=T0, ended_at=T0 + 600)
    data.served = {
        "s1": Served(T0 + 30, None),
        "s2": Served(T0 + 50, None),
        "s3": Served(T0 + 300, "v3"),
        "s4": Served(T0 + 330, "v3"),
        "s5": Served(T0 + 460, "v3"),
        "s6": Served(T0 + 470, "v4"),
    }
    data.sessions = {"old": T0 - 800, "s1": T0 + 10, "s2": T0 + 20, "s3": T0 + 290, "s4": T0 + 320}
    data.sessions |= {"s5": T0 + 450, "s6": T0 + 465}
    data.rewarded = {
        "old": Rewarded(T0 - 790, 0.9, True),
        "s1": Rewarded(T0 + 40, 0.5),
        "s2": Rewarded(T0 + 60, 1.0, True),
        "s3": Rewarded(T0 + 310, 0.0),
        "s4": Rewarded(T0 + 340, 1.5),
        "s5": Rewarded(T0 + 470, 0.5),
        "s6": Rewarded(T0 + 480, 1.0),
    }
    data.ledger = [
        {"session_id": "old", "outcome": "trained", "update": 1},
        {"session_id": None, "outcome": "malformed"},  # no session: cannot belong to any run
        {"session_id": "s1", "outcome": "trained", "update": 3},
        {"session_id": "s2", "outcome": "trained", "update": 8},
        {"session_id": "s1", "outcome": "superseded", "update": None},  # a later revision of a trained one
        {"session_id": "s3", "outcome": "no_signal", "update": None},
        {"session_id": "s4", "outcome": "no_signal", "update": None},
        {"session_id": "s5", "outcome": "stale", "update": None},
        {"session_id": "s5", "outcome": "duplicate", "update": None},
    ]  # s6 is rewarded but not in the ledger
    data.versions = [
        {"version": "v1", "parent": None, "created_at": T0 - 900, "updates": 1},
        {"version": "v2", "parent": "v1", "created_at": T0 - 400, "updates": 2},
        {"version": "v3", "parent": "v1", "created_at": T0 + 200, "updates": 5},
        {"version": "v4", "parent": "v3", "created_at": T0 + 400, "updates": 10},
    ]
    data.decisions = [
        entry("v1", "evaluate", "promote", T0 - 500, None, "v1", **{"gate.seconds": 999.0}),
        entry("v2", "evaluate", "reject", T0 - 300, "v1", "v1", reasons=[("target_gain", "too small")]),
        entry("v3", "evaluate", "promote", T0 + 250, "v1", "v3", **{
            "gate.seconds": 100.0, "target.pass_at_1": 0.5, "champion.target.pass_at_1": 0.3}),
        entry("v4", "evaluate", "promote", T0 + 450, "v3", "v4", **{"gate.seconds": 140.0}),
        entry("v3", "rollback", "promote", T0 + 500, "v4", "v3", actor="canary",
              reasons=[("canary_regression", "canary success 0.2 < champion 0.5")]),
    ]  # fmt: skip
    data.heldout = {
        "v1": {"mean": 0.31, "lo": 0.2, "hi": 0.42, "tasks": 48},
        "v3": {"mean": 0.52, "lo": 0.4, "hi": 0.64, "tasks": 48},
        "v4": {"mean": 0.27, "lo": 0.16, "hi": 0.38, "tasks": 48},
    }
    data.heldout_samples = 2
    return data


def test_scope_keeps_only_this_runs_sessions_versions_and_decisions():
    run = scope(run_data())
    assert set(run.sessions) == set(run.rewarded) == {f"s{i}" for i in range(1, 7)}
    assert {line["session_id"] for line in run.ledger} == {"s1", "s2", "s3", "s4", "s5"}
    assert [v["version"] for v in run.versions] == ["v3", "v4"]
    assert [(e.version, e.action) for e in run.decisions] == [
        ("v3", "evaluate"),
        ("v4", "evaluate"),
        ("v3", "rollback"),
    ]
    assert run.base == "v1"  # the champion the earlier run left
    assert run.champion == "v3"


def test_report_leaves_out_other_runs():
    report = build_report(run_data(), "run-1", "http://mlflow")
    assert report["sessions_ingested"] == 6 and report["sessions_rewarded"] == 6
    assert report["versions"] == ["v3", "v4"]
    assert [d["version"] for d in report["decisions"]] == ["v3", "v4", "v3"]
    assert report["hack_rate"] == round(1 / 6, 4)  # the earlier run's flagged session is not counted
    assert report["gate_seconds_median"] == 120.0  # the earlier decision's 999 s is not this run's


def test_a_first_run_starts_from_the_base_model():
    data = run_data()
    data.decisions = [dataclasses.replace(data.decisions[2], champion_before=None), data.decisions[3]]
    data.heldout = {"base": {"mean": 0.2, "lo": 0.1, "hi": 0.3, "tasks": 48}} | data.heldout
    assert scope(data).base is None
    assert policies_to_measure(data) == ["base", "v3", "v4"]
    report = build_report(data, "run-1", None)
    assert report["heldout"]["base"] == 0.2 and report["heldout"]["base_version"] is None
    assert report["heldout"]["champion"] == 0.27 and report["heldout"]["champion_version"] == "v4"
    assert list(report["heldout_by_version"]) == ["base", "v3", "v4"]
    assert report["promotions"][0] == {"version": "v3", "time_s": 250.0, "champion_before": "base"}


def test_heldout_numbers_are_the_fresh_measurement_not_the_gates():
    report = build_report(run_data(), "run-1", None)
    assert report["heldout"]["base"] == 0.31 and report["heldout"]["base_version"] == "v1"
    assert report["heldout"]["champion"] == 0.52 and report["heldout"]["champion_version"] == "v3"
    assert report["heldout"]["promoted"] == {"v3": 0.52, "v4": 0.27}
    assert report["heldout_by_version"] == {x: run_data().heldout[x] for x in ("v1", "v3", "v4")}
    v3 = report["decisions"][0]
    assert v3["gate_heldout_candidate"] == 0.5 and v3["gate_heldout_champion"] == 0.3
    assert "heldout_candidate" not in v3


def test_policies_to_measure_are_the_base_policy_each_promoted_version_and_the_final_champion():
    assert policies_to_measure(run_data()) == ["v1", "v3", "v4"]
    data = run_data()
    data.decisions.append(entry("v2", "rollback", "promote", T0 + 550, "v3", "v2", actor="alice"))
    assert policies_to_measure(data) == ["v1", "v3", "v4", "v2"]


def test_promotions_and_rollbacks_are_listed():
    report = build_report(run_data(), "run-1", None)
    assert report["promotions"] == [
        {"version": "v3", "time_s": 250.0, "champion_before": "v1"},
        {"version": "v4", "time_s": 450.0, "champion_before": "v3"},
    ]
    assert report["rollbacks"] == [
        {
            "version": "v4",
            "time_s": 500.0,
            "to": "v3",
            "by": "canary",
            "reasons": ["canary success 0.2 < champion 0.5"],
        }
    ]


def test_a_canary_reason_makes_a_rollback_whatever_the_action():
    data = run_data()
    data.decisions[-1] = entry("v4", "reject", "reject", T0 + 500, "v4", "v3", actor="canary",
                               reasons=[("canary_error_rate", "errors")])  # fmt: skip
    (rollback,) = build_report(data, "run-1", None)["rollbacks"]
    assert (rollback["version"], rollback["to"], rollback["by"]) == ("v4", "v3", "canary")


def test_a_canary_confirmation_is_no_rollback():
    data = run_data()
    data.decisions[-1] = entry("v4", "canary", "promote", T0 + 500, "v4", "v4", actor="canary",
                               reasons=[("canary_confirmed", "not worse than v3")])  # fmt: skip
    report = build_report(data, "run-1", None)
    assert report["rollbacks"] == [] and len(report["promotions"]) == 2
    assert report["heldout"]["champion_version"] == "v4"


def test_served_share_sums_to_one_overall_and_per_minute():
    report = build_report(run_data(), "run-1", None)
    assert report["served_share"] == {"base": 0.3333, "v3": 0.5, "v4": 0.1667}
    assert sum(report["served_share"].values()) == pytest.approx(1.0, abs=1e-3)
    over_time = report["served_share_over_time"]
    assert over_time == {"0": {"base": 1.0}, "5": {"v3": 1.0}, "7": {"v3": 0.5, "v4": 0.5}}
    for share in over_time.values():
        assert sum(share.values()) == pytest.approx(1.0, abs=1e-3)
    assert served_share([Served(0.0, "v2")] * 3 + [Served(0.0, None)]) == {"base": 0.25, "v2": 0.75}


def test_sessions_skipped_by_reason_and_unaccounted():
    report = build_report(run_data(), "run-1", None)
    assert report["sessions_trained"] == 2  # s1 (a later revision superseded, still trained) and s2
    assert report["sessions_skipped"] == {"no_signal": 2, "stale": 1}  # s5 counted once, by its first line
    assert report["sessions_unaccounted"] == 1  # s6
    accounted = report["sessions_trained"] + sum(report["sessions_skipped"].values())
    assert accounted + report["sessions_unaccounted"] == report["sessions_rewarded"]


def test_sessions_skipped_ignores_sessions_of_which_a_record_was_trained():
    ledger = [
        {"session_id": "a", "outcome": "quarantined"},
        {"session_id": "a", "outcome": "amended"},
        {"session_id": "b", "outcome": "too_long"},
    ]
    assert sessions_skipped(ledger) == {"too_long": 1}


def test_freshness_counts_from_ingestion_to_the_first_promotion_that_serves_the_session():
    # s1 trained into v3 (promoted at +250), s2 into v4 (promoted at +450); the earlier run's session is out
    assert sorted(freshness_s(run_data())) == [240.0, 430.0]
    assert build_report(run_data(), "run-1", None)["freshness_median_s"] == 335.0


def test_report_without_promotions_or_measurement(tmp_path):
    data = run_data()
    data.decisions = data.decisions[:2] + [
        entry("v3", "evaluate", "reject", T0 + 250, "v1", "v1", reasons=[("target_gain", "too small")])
    ]
    data.heldout = {}
    report = write_report(data, tmp_path / "run", "run-2", None)
    assert report["heldout"]["champion"] is None and report["heldout"]["champion_version"] == "v1"
    assert report["promotions"] == [] and report["rollbacks"] == [] and report["heldout_by_version"] == {}
    assert report["freshness_median_s"] is None
    assert json.loads((tmp_path / "run" / "report.json").read_text())["run_id"] == "run-2"


def test_report_files(tmp_path):
    report = write_report(run_data(), tmp_path / "run", "run-1", None)
    on_disk = json.loads((tmp_path / "run" / "report.json").read_text())
    assert on_disk == json.loads(json.dumps(report))
    png = (tmp_path / "run" / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_the_report_is_recorded_in_mlflow_with_a_metric_per_stage(tmp_path):
    from mlflow import MlflowClient

    from ops.report import log_report

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri, uri)
    client.create_experiment("ratchet-demo", artifact_location=(tmp_path / "artifacts").as_uri())
    report = write_report(run_data(), tmp_path / "run", "r1", None)
    run = client.get_run(log_report(report, tmp_path / "run", uri))
    metrics = run.data.metrics
    assert metrics["ingest.sessions"] == 6 and metrics["rewards.sessions"] == 6
    assert metrics["learner.sessions"] == 2 and metrics["learner.versions"] == 2
    assert metrics["learner.skipped"] == 3 and metrics["learner.unaccounted"] == 1
    assert metrics["gate.decisions"] == 3 and metrics["gate.promotions"] == 2
    assert metrics["gate.rollbacks"] == 1 and metrics["gate.seconds_median"] == 120.0
    assert metrics["heldout.base"] == 0.31 and metrics["heldout.champion"] == 0.52
    assert metrics["heldout.v3"] == 0.52 and metrics["heldout.v4"] == 0.27
    assert run.data.tags["ratchet.champion"] == "v3"
    assert run.data.tags["ratchet.decisions"] == "v3 promote; v4 promote; v3 promote"
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"report.json", "report.png"}


def test_live_success_counts_each_served_version_by_family():
    from ops.simulator import SessionResult

    def result(version, family, passed):
        return SessionResult(f"s-{version}-{family}-{passed}", "t", family, passed, False, version, T0)

    results = [
        *(result("v2", "calculator", p) for p in (True, True, False, True)),
        *(result(None, "calculator", p) for p in (True, False, False)),
        result(None, "multistep", False),
        result("v10", "multistep", True),
    ]
    assert live_success(results) == {
        "base": {
            "calculator": {"sessions": 3, "success": 0.333},
            "multistep": {"sessions": 1, "success": 0.0},
        },
        "v2": {"calculator": {"sessions": 4, "success": 0.75}},
        "v10": {"multistep": {"sessions": 1, "success": 1.0}},
    }
