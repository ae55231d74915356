"""The demo report: what the loop did, as ``report.json`` and ``report.png``.

Pure functions over what the run collected (sessions, rewarded records,
learner ledger, adapter versions, gate decisions), so the numbers can be
checked without a running stack.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RunData:
    started_at: float
    ended_at: float
    sessions: dict[str, float] = field(default_factory=dict)  # session_id -> ingest time (broker timestamp)
    rewards: list[tuple[float, float]] = field(default_factory=list)  # (time, reward) of revision-0 records
    rewarded_ids: set[str] = field(default_factory=set)
    hack_flagged: int = 0  # rewarded sessions with at least one hack flag
    honeypot_sessions: int = 0
    honeypot_shortcuts: int = 0
    trained: dict[str, str] = field(
        default_factory=dict
    )  # session_id -> adapter version it was first trained into
    versions: list[dict[str, Any]] = field(default_factory=list)  # {"version", "parent", "created_at"}
    decisions: list[dict[str, Any]] = field(default_factory=list)  # decision log entries, in order
    heldout_base: float | None = None
    simulator: dict[str, Any] = field(default_factory=dict)


def _lineage(version: str, parents: dict[str, str | None]) -> list[str]:
    out, seen = [], set()
    while version and version not in seen:
        seen.add(version)
        out.append(version)
        version = parents.get(version)
    return out


def freshness_s(data: RunData) -> list[float]:
    """Seconds from a session's ingestion to the first promotion of a version that includes its training."""
    parents = {v["version"]: v.get("parent") for v in data.versions}
    promoted_at: dict[str, float] = {}
    for d in data.decisions:
        if d.get("decision") in ("promote", "approve") and d["version"] not in promoted_at:
            promoted_at[d["version"]] = d["time"]
    # a session trained into version v is served once v or any descendant of v is promoted
    first_serving: dict[str, float] = {}
    for version, at in promoted_at.items():
        for ancestor in _lineage(version, parents):
            first_serving[ancestor] = min(at, first_serving.get(ancestor, at))
    out = []
    for sid, version in data.trained.items():
        if version in first_serving and sid in data.sessions:
            out.append(first_serving[version] - data.sessions[sid])
    return out


def build_report(data: RunData, run_id: str, mlflow_url: str | None) -> dict[str, Any]:
    decisions = [
        {
            "version": d["version"],
            "decision": d["decision"],
            "reasons": d.get("reasons", []),
            "champion_before": d.get("champion"),
            "heldout_candidate": d.get("heldout_candidate"),
            "heldout_champion": d.get("heldout_champion"),
            "time_s": round(d["time"] - data.started_at, 1),
            "by": d.get("by", "gate"),
        }
        for d in data.decisions
    ]
    promoted = [d for d in data.decisions if d.get("decision") in ("promote", "approve")]
    champion = promoted[-1] if promoted else None
    fresh = freshness_s(data)
    rewarded = len(data.rewarded_ids)
    return {
        "run_id": run_id,
        "duration_s": round(data.ended_at - data.started_at, 1),
        "sessions_ingested": len(data.sessions),
        "sessions_rewarded": rewarded,
        "sessions_trained": len(data.trained),
        "versions": [v["version"] for v in data.versions],
        "decisions": decisions,
        "heldout": {
            "base": data.heldout_base,
            "champion": champion.get("heldout_candidate") if champion else data.heldout_base,
            "champion_version": champion["version"] if champion else None,
            "promoted": {d["version"]: d.get("heldout_candidate") for d in promoted},
        },
        "hack_rate": round(data.hack_flagged / rewarded, 4) if rewarded else 0.0,
        "honeypot_shortcut_rate": (
            round(data.honeypot_shortcuts / data.honeypot_sessions, 4) if data.honeypot_sessions else None
        ),
        "freshness_median_s": round(statistics.median(fresh), 1) if fresh else None,
        "simulator": data.simulator,
        "mlflow_url": mlflow_url,
    }


def plot_report(data: RunData, report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = data.started_at
    fig, (ax_success, ax_reward) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)

    base = report["heldout"]["base"]
    points = [(0.0, base)] if base is not None else []
    for d in data.decisions:
        if d.get("decision") in ("promote", "approve") and d.get("heldout_candidate") is not None:
            points.append(((d["time"] - t0) / 60, d["heldout_candidate"]))
    if points:
        xs, ys = zip(*points, strict=True)
        end = (data.ended_at - t0) / 60
        ax_success.step([*xs, end], [*ys, ys[-1]], where="post", color="tab:blue", label="served policy")
        ax_success.plot(xs, ys, "o", color="tab:blue")
    for d in data.decisions:
        x = (d["time"] - t0) / 60
        y = d.get("heldout_candidate")
        if y is None:
            continue
        promoted = d.get("decision") in ("promote", "approve")
        ax_success.plot(
            [x], [y], "^" if promoted else "x", color="tab:green" if promoted else "tab:red", ms=9
        )
        ax_success.annotate(d["version"], (x, y), textcoords="offset points", xytext=(4, 6), fontsize=8)
    if base is not None:
        ax_success.axhline(base, color="grey", ls=":", label=f"base model {base:.2f}")
    ax_success.set_ylabel("held-out target success")
    ax_success.set_ylim(0, 1)
    ax_success.set_title("Held-out success of each candidate (▲ promoted, × rejected)")
    ax_success.legend(loc="lower right")

    if data.rewards:
        rewards = sorted(data.rewards)
        xs = [(t - t0) / 60 for t, _ in rewards]
        ys = [r for _, r in rewards]
        window = max(1, len(ys) // 15)
        rolling = [statistics.fmean(ys[max(0, i - window + 1) : i + 1]) for i in range(len(ys))]
        ax_reward.plot(xs, ys, ".", color="tab:orange", alpha=0.25, label="session reward")
        ax_reward.plot(xs, rolling, color="tab:orange", label=f"rolling mean ({window})")
    for d in data.decisions:
        if d.get("decision") in ("promote", "approve"):
            for ax in (ax_success, ax_reward):
                ax.axvline((d["time"] - t0) / 60, color="tab:green", alpha=0.3)
    ax_reward.set_ylabel("reward")
    ax_reward.set_xlabel("minutes since start")
    ax_reward.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(data: RunData, run_dir: Path, run_id: str, mlflow_url: str | None) -> dict[str, Any]:
    run_dir.mkdir(parents=True, exist_ok=True)
    report = build_report(data, run_id, mlflow_url)
    (run_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    plot_report(data, report, run_dir / "report.png")
    return report


def log_report(
    report: dict[str, Any], run_dir: Path, mlflow_url: str, experiment: str = "ratchet-demo"
) -> str:
    """Record the run in MLflow beside the learner's and the gate's runs: one metric per stage
    (sessions ingested, rewarded, trained; versions, decisions and promotions; held-out success;
    hack rate; freshness), the served champion, and report.json / report.png as artifacts.
    Returns the MLflow run id."""
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_url, mlflow_url)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    decisions = report["decisions"]
    run = client.create_run(
        experiment_id,
        run_name=f"demo-{report['run_id']}",
        tags={
            "ratchet.run_id": report["run_id"],
            "ratchet.champion": report["heldout"].get("champion_version") or "base",
            "ratchet.decisions": "; ".join(f"{d['version']} {d['decision']}" for d in decisions),
        },
    )
    metrics = {
        "ingest.sessions": report["sessions_ingested"],
        "rewards.sessions": report["sessions_rewarded"],
        "learner.sessions": report["sessions_trained"],
        "learner.versions": len(report["versions"]),
        "gate.decisions": len(decisions),
        "gate.promotions": sum(d["decision"] == "promote" for d in decisions),
        "heldout.base": report["heldout"].get("base"),
        "heldout.champion": report["heldout"].get("champion"),
        "rewards.hack_rate": report["hack_rate"],
        "freshness_median_s": report["freshness_median_s"],
        "duration_s": report["duration_s"],
    }
    for key, value in metrics.items():
        if value is not None:
            client.log_metric(run.info.run_id, key, float(value))
    for name in ("report.json", "report.png"):
        client.log_artifact(run.info.run_id, str(run_dir / name))
    client.set_terminated(run.info.run_id)
    return run.info.run_id
