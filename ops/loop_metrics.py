"""`ratchet status` as Prometheus metrics: the same figures, as gauges.

:func:`families` turns the dict ``ratchet status --json`` prints into metric
families (pure). A figure that could not be read becomes
``ratchet_status_unknown{section=...} 1`` instead of a gauge, so an alert can
tell "the lag is 0" from "nobody knows the lag". :class:`StatusCollector`
computes the status afresh on every scrape; ``ratchet status --serve PORT``
serves it on ``/metrics`` and ``ratchet status --prometheus`` prints one
exposition (for a node exporter's textfile collector, say).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

PREFIX = "ratchet"


def _unknown(section: Any) -> str | None:
    return section.get("unknown") if isinstance(section, dict) else None


def families(out: dict[str, Any]) -> list[Metric]:
    """Gauges of one status dict (the keys ``ops.commands.loop.status`` builds)."""
    g: dict[str, GaugeMetricFamily] = {}

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
        if name not in g:
            g[name] = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels))
        return g[name]

    unknown = gauge("status_unknown", "1 where a section of the status could not be read", ("section",))

    def known(section_name: str, section: Any) -> bool:
        if section is None or _unknown(section):
            unknown.add_metric([section_name], 1.0)
            return False
        return True

    up = gauge("component_up", "1 where the component answers its health check", ("component",))
    for row in out.get("components", []):
        up.add_metric([row["component"]], 1.0 if row.get("healthy") else 0.0)

    lag = out.get("lag", {})
    per_partition = gauge(
        "consumer_lag_records",
        "records past the stage's position (rewards: its committed offsets; learner: its checkpoint)",
        ("stage", "topic", "partition"),
    )
    total = gauge("consumer_lag_records_total", "a stage's lag over all its partitions", ("stage",))
    for stage in ("rewards", "learner"):
        section = lag.get(stage, lag)
        if not known(f"lag.{stage}", section):
            continue
        for row in section["partitions"]:
            if row["lag"] is not None:
                per_partition.add_metric([stage, row["topic"], str(row["partition"])], float(row["lag"]))
        if section["total"] is not None:
            total.add_metric([stage], float(section["total"]))
        else:
            unknown.add_metric([f"lag.{stage}.total"], 1.0)

    rates = out.get("rates", {})
    per_minute = gauge(
        "topic_records_per_minute", "records per minute on the topic over the last window", ("topic",)
    )
    for topic in ("sessions.v1", "rewarded.v1"):
        section = rates.get(topic, rates)
        if known(f"rates.{topic}", section):
            per_minute.add_metric([topic], float(section["per_minute"]))

    learner = out.get("learner", {})
    ckpt = learner.get("checkpoint")
    if known("learner.checkpoint", ckpt):
        gauge("learner_updates", "updates in the learner's newest checkpoint").add_metric(
            [], float(ckpt["updates"])
        )
        gauge("learner_last_update_timestamp_seconds", "when the learner's last update ran").add_metric(
            [], float(ckpt["last_update_at"])
        )
        gauge("learner_head", "1 for the version the learner trains on", ("version",)).add_metric(
            [str(ckpt["head"])], 1.0
        )
    if "staleness_s" in learner:
        gauge("learner_staleness_seconds", "seconds since the learner's last update").add_metric(
            [], float(learner["staleness_s"])
        )
    published = learner.get("published")
    if known("learner.published", published):
        gauge("learner_published_versions", "versions in the adapter store").add_metric(
            [], float(len(published["versions"]))
        )
    health = learner.get("health")
    if known("learner.health", health):
        gauge("learner_healthy", "1 where the learner's /health says ok").add_metric(
            [], 1.0 if health.get("status") == "ok" else 0.0
        )

    gate = out.get("gate", {})
    evaluating = gate.get("evaluating")
    if evaluating is None or known("gate.evaluating", evaluating):
        busy = gauge("gate_evaluating", "1 while the gate evaluates a candidate", ("version",))
        if evaluating:
            busy.add_metric([str(evaluating["version"])], 1.0)
            gauge("gate_tasks_done", "candidate tasks with results, of the one under evaluation").add_metric(
                [], float(evaluating["tasks_done"])
            )
            if evaluating.get("tasks_total") is not None:
                gauge("gate_tasks_total", "candidate tasks the evaluation runs").add_metric(
                    [], float(evaluating["tasks_total"])
                )
    decisions = out.get("decisions") or []
    gauge("gate_decisions_shown", "decisions in the status (the last five)").add_metric(
        [], float(len(decisions))
    )
    last = gate.get("last_decision")
    if known("gate.last_decision", last):
        gauge(
            "gate_last_decision", "1 for the gate's last decision", ("version", "action", "decision")
        ).add_metric([str(last["version"]), str(last["action"]), str(last["decision"])], 1.0)

    replicas = out.get("replicas", {})
    rows = replicas.get("replicas")
    if known("replicas", rows):
        serving = gauge("replica_serving", "1 for the policy version each replica serves", ("url", "version"))
        healthy = gauge("replica_up", "1 where the replica answers", ("url",))
        champion = (replicas.get("logged_champion") or {}).get("version")
        disagrees = gauge(
            "replica_disagrees_with_decision_log",
            "1 where the replica serves another version than the decision log's champion",
            ("url",),
        )
        for r in rows:
            healthy.add_metric([r["url"]], 1.0 if r.get("healthy") else 0.0)
            if r.get("serves"):
                serving.add_metric([r["url"], r["serves"]], 1.0)
            if champion is not None:
                disagrees.add_metric([r["url"]], 0.0 if r.get("serves") == champion else 1.0)
    gauge("status_warnings", "warnings `ratchet status` prints").add_metric(
        [], float(len(out.get("warnings", [])))
    )
    return list(g.values())


class StatusCollector:
    """A prometheus_client collector that reads the status on every scrape."""

    def __init__(self, read: Callable[[], dict[str, Any]]):
        self.read = read

    def collect(self) -> Iterator[Metric]:
        yield from families(self.read())


def exposition(out: dict[str, Any]) -> str:
    """One status dict in the Prometheus text format."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(lambda: out))
    return generate_latest(registry).decode()
