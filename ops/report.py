"""The demo report: what one run of the loop did, as ``report.json`` and ``report.png``.

Pure functions over what the run collected (:class:`RunData`). The broker's topics, the
learner's ledger, the adapter store and the decision log outlive a run, so ``RunData``
may hold earlier runs' records too; :func:`scope` keeps this run's: the sessions its
simulator sent (and their rewards and ledger lines), the versions created and the
decisions made since it started, and the champion at its start (the decision log's
state before the run's first entry) as the run's *base* policy. Held-out success is
measured afresh after the run (``gating.heldout``) and handed in as ``RunData.heldout``;
the gate's own numbers, the sample that selected each candidate, stay in the decision
entries as ``gate_heldout_candidate`` / ``gate_heldout_champion``.

Besides the counts per stage, ``report.json`` has: ``promotions`` and ``rollbacks``
(entries of the decision log; a rollback is an entry with action ``rollback``, or one
with a reason coded ``canary...`` that changed the champion), ``served_share`` and
``served_share_over_time`` (of this run's sessions, by the version that served them; per
minute since the start),
``heldout_by_version`` (fresh mean and 95 % interval of the base policy and of each
version promoted), ``gate_seconds_median`` (how long the gate measured a candidate),
``sessions_skipped`` (sessions the learner did not train, by the ledger's reason) and
``sessions_unaccounted`` (rewarded sessions with no ledger line). Versions are labelled
``base`` for the base model.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gating.decisions import BASE, Entry

TRAINED = ("trained", "amended")  # ledger outcomes of a record that went into an update


@dataclass(frozen=True)
class Served:
    """One session of the run's simulator: when it ended, and the version that served it (None: base)."""

    ended_at: float
    version: str | None


@dataclass(frozen=True)
class Rewarded:
    """A session's revision-0 reward record: when it was written, its reward, whether a hack was flagged."""

    at: float
    reward: float
    flagged: bool = False


@dataclass
class RunData:
    started_at: float
    ended_at: float
    served: dict[str, Served] = field(default_factory=dict)  # the run's sessions (the simulator's results)
    sessions: dict[str, float] = field(default_factory=dict)  # session_id -> ingest time (broker timestamp)
    rewarded: dict[str, Rewarded] = field(default_factory=dict)  # session_id -> its reward record
    ledger: list[dict[str, Any]] = field(default_factory=list)  # the learner's ledger lines, in order
    # {"version", "parent", "created_at", "updates"}: every version of the adapter store
    versions: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[Entry] = field(default_factory=list)  # the whole decision log, in order
    heldout: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> {"mean", "lo", "hi", "tasks"}
    heldout_suite: str = "target"
    heldout_samples: int | None = None  # completions per held-out task
    honeypot_sessions: int = 0
    honeypot_shortcuts: int = 0
    simulator: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    """The part of :class:`RunData` that belongs to the run."""

    sessions: dict[str, float]
    rewarded: dict[str, Rewarded]
    ledger: list[dict[str, Any]]
    versions: list[dict[str, Any]]
    decisions: list[Entry]
    base: str | None  # the champion at the run's start (None: the base model)

    @property
    def champion(self) -> str | None:
        """The champion at the end of the run."""
        return self.decisions[-1].state.champion if self.decisions else self.base


def scope(data: RunData) -> Run:
    run_ids = set(data.served)
    first = next((i for i, e in enumerate(data.decisions) if e.time >= data.started_at), len(data.decisions))
    return Run(
        sessions={sid: t for sid, t in data.sessions.items() if sid in run_ids},
        rewarded={sid: r for sid, r in data.rewarded.items() if sid in run_ids},
        ledger=[line for line in data.ledger if line.get("session_id") in run_ids],
        versions=[v for v in data.versions if v["created_at"] >= data.started_at],
        decisions=data.decisions[first:],
        base=data.decisions[first - 1].state.champion if first else None,
    )


def label(version: str | None) -> str:
    return version or BASE


def promotions(entries: list[Entry]) -> list[Entry]:
    """Entries that made a candidate champion: the gate's promotions and approvals by hand."""
    return [e for e in entries if e.decision == "promote" and e.action in ("evaluate", "approve")]


def is_rollback(entry: Entry) -> bool:
    """A ``rollback`` entry, or one with a ``canary...`` reason that took the title from the champion
    (a canary's confirmation leaves the champion as it was)."""
    canary = any(r.get("code", "").startswith("canary") for r in entry.reasons)
    return entry.action == "rollback" or (canary and entry.state.champion != entry.champion_before)


def policies_to_measure(data: RunData) -> list[str]:
    """Labels to measure afresh: the run's base policy, each version promoted, and the final champion."""
    return _measured(scope(data))


def _measured(run: Run) -> list[str]:
    labels = [label(run.base), *(e.version for e in promotions(run.decisions)), label(run.champion)]
    return list(dict.fromkeys(labels))


def trained_sessions(ledger: list[dict[str, Any]]) -> set[str]:
    return {line["session_id"] for line in ledger if line.get("outcome") in TRAINED}


def trained_into(ledger: list[dict[str, Any]], versions: list[dict[str, Any]]) -> dict[str, str]:
    """session_id -> the first version published after the update that trained it."""
    by_updates = sorted((v.get("updates", 0), i, v["version"]) for i, v in enumerate(versions))
    out: dict[str, str] = {}
    for line in ledger:
        if line.get("outcome") not in TRAINED or line.get("update") is None or line["session_id"] in out:
            continue
        version = next((v for u, _, v in by_updates if u >= line["update"]), None)
        if version:
            out[line["session_id"]] = version
    return out


def sessions_skipped(ledger: list[dict[str, Any]]) -> dict[str, int]:
    """Sessions of which no record was trained, counted by the outcome of their first ledger line."""
    first: dict[str, str] = {}
    for line in ledger:
        first.setdefault(line["session_id"], str(line.get("outcome")))
    trained = trained_sessions(ledger)
    return dict(Counter(reason for sid, reason in first.items() if sid not in trained).most_common())


def served_share(served: list[Served]) -> dict[str, float]:
    """Share of the sessions served by each version (``base``: the base model); sums to 1."""
    counts = Counter(label(s.version) for s in served)
    return {v: round(n / len(served), 4) for v, n in sorted(counts.items(), key=lambda kv: _order(kv[0]))}


def served_share_over_time(served: dict[str, Served], started_at: float) -> dict[str, dict[str, float]]:
    """:func:`served_share` per minute since the start, by when each session ended (minutes without one
    are left out); keyed by the minute as a string, as JSON keys are."""
    by_minute: dict[int, list[Served]] = {}
    for s in served.values():
        by_minute.setdefault(int(max(0.0, s.ended_at - started_at) // 60), []).append(s)
    return {str(m): served_share(by_minute[m]) for m in sorted(by_minute)}


def live_success(results: list[Any]) -> dict[str, dict[str, dict[str, float]]]:
    """The traffic's own outcomes (its verifier's pass) per served version and task family:
    ``{version: {family: {"sessions", "success"}}}``, versions in order (``base`` first). Traffic is no
    held-out measure (its tasks repeat, its sessions overlap promotions), but it is what users saw."""
    cells: dict[str, dict[str, list[bool]]] = {}
    for r in results:
        cells.setdefault(label(r.adapter_version), {}).setdefault(r.family, []).append(bool(r.passed))
    return {
        version: {
            family: {"sessions": len(passed), "success": round(sum(passed) / len(passed), 3)}
            for family, passed in sorted(cells[version].items())
        }
        for version in sorted(cells, key=_order)
    }


def _order(version: str) -> tuple[int, str]:
    """Sort key: the base model first, then versions by number."""
    digits = version.lstrip("v")
    return (-1, "") if version == BASE else (int(digits) if digits.isdigit() else 1 << 30, version)


def freshness_s(data: RunData) -> list[float]:
    """Seconds from a session's ingestion to the first promotion of a version that includes its training."""
    run = scope(data)
    parents = {v["version"]: v.get("parent") for v in data.versions}
    promoted_at: dict[str, float] = {}
    for e in promotions(run.decisions):
        promoted_at.setdefault(e.version, e.time)
    # a session trained into version v is served once v or any descendant of v is promoted
    first_serving: dict[str, float] = {}
    for version, at in promoted_at.items():
        for ancestor in _lineage(version, parents):
            first_serving[ancestor] = min(at, first_serving.get(ancestor, at))
    out = []
    for sid, version in trained_into(run.ledger, data.versions).items():
        if version in first_serving and sid in run.sessions:
            out.append(first_serving[version] - run.sessions[sid])
    return out


def _lineage(version: str, parents: dict[str, str | None]) -> list[str]:
    out, seen = [], set()
    while version and version not in seen:
        seen.add(version)
        out.append(version)
        version = parents.get(version)
    return out


def gate_heldout(entry: Entry, prefix: str = "") -> float | None:
    """The gate's own target pass@1 in a decision entry (``prefix`` ``champion.``: the champion's)."""
    for key in (f"{prefix}target.pass_at_1", f"{prefix}target.pass@1", f"{prefix}target"):
        if key in entry.metrics:
            return entry.metrics[key]
    return None


def _mean(heldout: dict[str, dict[str, Any]], version: str | None) -> float | None:
    return heldout.get(label(version), {}).get("mean")


def build_report(data: RunData, run_id: str, mlflow_url: str | None) -> dict[str, Any]:
    run = scope(data)
    t0 = data.started_at
    decisions = [
        {
            "version": e.version,
            "action": e.action,
            "decision": e.decision,
            "reasons": [r.get("message", "") for r in e.reasons],
            "champion_before": e.champion_before,
            "gate_heldout_candidate": gate_heldout(e),
            "gate_heldout_champion": gate_heldout(e, "champion."),
            "time_s": round(e.time - t0, 1),
            "by": e.actor,
        }
        for e in run.decisions
    ]
    promoted = promotions(run.decisions)
    heldout_by_version = {x: data.heldout[x] for x in _measured(run) if x in data.heldout}
    gate_seconds = [e.metrics["gate.seconds"] for e in run.decisions if "gate.seconds" in e.metrics]
    trained = trained_sessions(run.ledger)
    in_ledger = {line["session_id"] for line in run.ledger}
    fresh = freshness_s(data)
    rewarded = len(run.rewarded)
    flagged = sum(r.flagged for r in run.rewarded.values())
    return {
        "run_id": run_id,
        "duration_s": round(data.ended_at - t0, 1),
        "sessions_ingested": len(run.sessions),
        "sessions_rewarded": rewarded,
        "sessions_trained": len(trained),
        "sessions_skipped": sessions_skipped(run.ledger),
        "sessions_unaccounted": len(set(run.rewarded) - in_ledger),
        "versions": [v["version"] for v in run.versions],
        "decisions": decisions,
        "promotions": [
            {
                "version": e.version,
                "time_s": round(e.time - t0, 1),
                "champion_before": label(e.champion_before),
            }
            for e in promoted
        ],
        "rollbacks": [
            {
                "version": label(e.champion_before) if e.action == "rollback" else e.version,
                "time_s": round(e.time - t0, 1),
                "to": label(e.state.champion),
                "by": e.actor,
                "reasons": [r.get("message", "") for r in e.reasons],
            }
            for e in run.decisions
            if is_rollback(e)
        ],
        "heldout": {
            "base": _mean(data.heldout, run.base),
            "base_version": run.base,
            "champion": _mean(data.heldout, run.champion),
            "champion_version": run.champion,
            "promoted": {e.version: _mean(data.heldout, e.version) for e in promoted},
            "suite": data.heldout_suite,
            "samples": data.heldout_samples,
        },
        "heldout_by_version": heldout_by_version,
        "served_share": served_share(list(data.served.values())) if data.served else {},
        "served_share_over_time": served_share_over_time(data.served, t0),
        "gate_seconds_median": round(statistics.median(gate_seconds), 1) if gate_seconds else None,
        "hack_rate": round(flagged / rewarded, 4) if rewarded else 0.0,
        "honeypot_shortcut_rate": (
            round(data.honeypot_shortcuts / data.honeypot_sessions, 4) if data.honeypot_sessions else None
        ),
        "freshness_median_s": round(statistics.median(fresh), 1) if fresh else None,
        "simulator": data.simulator,
        "mlflow_url": mlflow_url,
    }


def plot_report(data: RunData, report: dict[str, Any], path: Path) -> None:
    """Three panels over minutes since the start: held-out success of the served policy, reward, traffic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = scope(data)
    t0, end = data.started_at, (data.ended_at - data.started_at) / 60
    versions = sorted(
        {label(run.base), *report["served_share"], *report["heldout_by_version"]}
        | {x for share in report["served_share_over_time"].values() for x in share},
        key=_order,
    )
    palette = plt.get_cmap("tab10").colors
    colour = {v: "0.55" if v == BASE else palette[i % len(palette)] for i, v in enumerate(versions)}
    fig, (ax_success, ax_reward, ax_share) = plt.subplots(
        3, 1, figsize=(10, 10), sharex=True, gridspec_kw={"height_ratios": [3, 2, 2]}
    )

    # top: the served policy's fresh held-out success, a step at each change of champion
    heldout = report["heldout_by_version"]
    changes = [(0.0, label(run.base))]
    for e in run.decisions:
        if label(e.state.champion) != changes[-1][1]:
            changes.append(((e.time - t0) / 60, label(e.state.champion)))
    xs = [x for x, _ in changes] + [end]
    ys = [heldout.get(v, {}).get("mean", float("nan")) for _, v in changes]
    ax_success.step(xs, [*ys, ys[-1]], where="post", color="tab:blue", lw=2, label="served policy (champion)")
    for x, v in changes:
        h = heldout.get(v)
        if not h or h.get("mean") is None:
            continue
        err = [[h["mean"] - h["lo"]], [h["hi"] - h["mean"]]] if h.get("lo") is not None else None
        ax_success.errorbar([x], [h["mean"]], yerr=err, fmt="o", color=colour[v], capsize=5, ms=7)
        text = f"{v} {h['mean']:.2f}" + (" (at start)" if x == 0 else "")
        ax_success.annotate(text, (x, h["mean"]), textcoords="offset points", xytext=(6, 6), fontsize=9)
    if heldout:
        ax_success.plot([], [], "o", color="0.3", label="fresh mean when it began serving (bars: 95 %)")
    samples = f" × {data.heldout_samples} samples" if data.heldout_samples else ""
    tasks = max((h.get("tasks", 0) for h in heldout.values()), default=0)
    ax_success.set_title(
        f"Held-out {data.heldout_suite} success of the served policy, measured after the run "
        f"({tasks} tasks{samples}; bars: 95 % interval)",
        fontsize=10,
    )
    ax_success.set_ylabel("held-out pass@1")
    ax_success.set_ylim(0, 1)
    if not heldout:
        ax_success.text(0.5, 0.5, "not measured", transform=ax_success.transAxes, ha="center", color="grey")

    # middle: reward, with promotions and rollbacks marked on every panel
    rewards = sorted((r.at, r.reward) for r in run.rewarded.values())
    if rewards:
        rx = [(t - t0) / 60 for t, _ in rewards]
        ry = [r for _, r in rewards]
        window = max(1, len(ry) // 15)
        rolling = [statistics.fmean(ry[max(0, i - window + 1) : i + 1]) for i in range(len(ry))]
        ax_reward.plot(rx, ry, ".", color="tab:orange", alpha=0.25, label="session reward")
        ax_reward.plot(rx, rolling, color="tab:orange", lw=2, label=f"rolling mean (last {window})")
    marks = [(p["time_s"] / 60, "tab:green", "-", f"promoted {p['version']}") for p in report["promotions"]]
    marks += [(r["time_s"] / 60, "tab:red", "--", f"rolled back to {r['to']}") for r in report["rollbacks"]]
    marks += [
        ((e.time - t0) / 60, "0.5", ":", f"rejected {e.version}")
        for e in run.decisions
        if e.decision == "reject" and not is_rollback(e)
    ]
    for i, (x, c, ls, text) in enumerate(sorted(marks)):
        for ax in (ax_success, ax_reward, ax_share):
            ax.axvline(x, color=c, ls=ls, alpha=0.5)
        ax_reward.annotate(text, (x, 1), xycoords=("data", "axes fraction"), xytext=(3, -12 - 11 * (i % 3)),
                           textcoords="offset points", fontsize=8, color=c)  # fmt: skip
    ax_reward.set_title(
        "Reward of this run's sessions (green: promotion, red: rollback, grey: rejection)", fontsize=10
    )
    ax_reward.set_ylabel("reward")
    if rewards:
        ax_reward.legend(loc="lower right", fontsize=8)

    # bottom: share of the sessions served by each version, per minute
    over_time = report["served_share_over_time"]
    if over_time:
        minutes = list(range(max(int(m) for m in over_time) + 1))  # a minute without sessions: blank
        shares = [[over_time.get(str(m), {}).get(v, 0.0) for m in minutes] for v in versions]
        ax_share.stackplot([*minutes, minutes[-1] + 1], [[*y, y[-1]] for y in shares], labels=versions,
                           colors=[colour[v] for v in versions], alpha=0.85, step="post")  # fmt: skip
        ax_share.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="version")
    ax_share.set_title("Share of this run's sessions served by each version (per minute)", fontsize=10)
    ax_share.set_ylabel("share of sessions")
    ax_share.set_ylim(0, 1)
    ax_share.set_xlabel("minutes since the run started")
    ax_share.set_xlim(-0.02 * max(end, 1.0), max(end, 1e-3) * 1.02)
    ax_success.legend(loc="lower right", fontsize=8)
    fig.suptitle(f"Ratchet demo run {report['run_id']}", fontsize=12)
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
    (sessions ingested, rewarded, trained, skipped, unaccounted; versions, decisions, promotions
    and rollbacks; the gate's median seconds; fresh held-out success of the base, the champion
    and each version measured; hack rate; freshness), the served champion, and report.json /
    report.png as artifacts. Returns the MLflow run id."""
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
            "ratchet.champion": report["heldout"].get("champion_version") or BASE,
            "ratchet.decisions": "; ".join(f"{d['version']} {d['decision']}" for d in decisions),
        },
    )
    metrics = {
        "ingest.sessions": report["sessions_ingested"],
        "rewards.sessions": report["sessions_rewarded"],
        "learner.sessions": report["sessions_trained"],
        "learner.skipped": sum(report["sessions_skipped"].values()),
        "learner.unaccounted": report["sessions_unaccounted"],
        "learner.versions": len(report["versions"]),
        "gate.decisions": len(decisions),
        "gate.promotions": len(report["promotions"]),
        "gate.rollbacks": len(report["rollbacks"]),
        "gate.seconds_median": report["gate_seconds_median"],
        "heldout.base": report["heldout"].get("base"),
        "heldout.champion": report["heldout"].get("champion"),
        **{f"heldout.{v}": h.get("mean") for v, h in report["heldout_by_version"].items() if v != BASE},
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
