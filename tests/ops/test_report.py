"""The demo report from collected run data (pure: no stack)."""

import json

from ops.report import RunData, build_report, freshness_s, write_report


def run_data() -> RunData:
    t0 = 1000.0
    data = RunData(started_at=t0, ended_at=t0 + 600)
    data.sessions = {"s1": t0 + 10, "s2": t0 + 20, "s3": t0 + 300}
    data.rewarded_ids = {"s1", "s2", "s3"}
    data.rewards = [(t0 + 30, 0.5), (t0 + 40, 1.0), (t0 + 320, 1.5)]
    data.hack_flagged = 1
    data.trained = {"s1": "v1", "s2": "v1", "s3": "v2"}
    data.versions = [{"version": "v1", "parent": None}, {"version": "v2", "parent": "v1"}]
    data.decisions = [
        {
            "version": "v1",
            "decision": "reject",
            "time": t0 + 200,
            "reasons": ["target gain too small"],
            "heldout_candidate": 0.3,
            "heldout_champion": 0.25,
        },
        {
            "version": "v2",
            "decision": "promote",
            "time": t0 + 500,
            "reasons": [],
            "heldout_candidate": 0.6,
            "heldout_champion": 0.25,
        },
    ]
    data.heldout_base = 0.25
    return data


def test_freshness_counts_from_ingestion_to_the_first_promotion_that_serves_the_session():
    # v1 was rejected, but v2 (its child) was promoted at t0+500: s1, s2 and s3 are all served from then.
    assert sorted(freshness_s(run_data())) == [200.0, 480.0, 490.0]


def test_report_fields():
    report = build_report(run_data(), "run-1", "http://mlflow")
    assert report["sessions_ingested"] == 3
    assert report["sessions_rewarded"] == 3
    assert report["sessions_trained"] == 3
    assert report["versions"] == ["v1", "v2"]
    assert [(d["version"], d["decision"]) for d in report["decisions"]] == [
        ("v1", "reject"),
        ("v2", "promote"),
    ]
    assert report["decisions"][0]["reasons"] == ["target gain too small"]
    assert report["heldout"]["base"] == 0.25 and report["heldout"]["champion"] == 0.6
    assert report["heldout"]["champion_version"] == "v2"
    assert report["hack_rate"] == round(1 / 3, 4)
    assert report["freshness_median_s"] == 480.0


def test_no_promotion_reports_the_base_model_as_champion(tmp_path):
    data = run_data()
    data.decisions = data.decisions[:1]
    report = write_report(data, tmp_path / "run", "run-2", None)
    assert report["heldout"]["champion"] == 0.25 and report["heldout"]["champion_version"] is None
    assert report["freshness_median_s"] is None
    assert json.loads((tmp_path / "run" / "report.json").read_text())["run_id"] == "run-2"
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
    assert metrics["ingest.sessions"] == 3 and metrics["rewards.sessions"] == 3
    assert metrics["learner.sessions"] == 3 and metrics["learner.versions"] == 2
    assert metrics["gate.decisions"] == 2 and metrics["gate.promotions"] == 1
    assert metrics["heldout.base"] == 0.25 and metrics["heldout.champion"] == 0.6
    assert run.data.tags["ratchet.champion"] == "v2"
    assert run.data.tags["ratchet.decisions"] == "v1 reject; v2 promote"
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"report.json", "report.png"}
