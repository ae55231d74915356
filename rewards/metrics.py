"""Prometheus metrics of the rewards worker (``/metrics`` on 127.0.0.1, ``rewards_metrics_port``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REWARD_BUCKETS = (-3.0, -2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.consumed = Counter(
            "ratchet_rewards_records_consumed", "Input records read", ["topic"], registry=r
        )
        self.sessions = Counter("ratchet_rewards_sessions_consumed", "Sessions read", registry=r)
        self.emitted = Counter(
            "ratchet_rewards_rewarded",
            "Rewarded records produced, by revision (3+ grouped)",
            ["revision"],
            registry=r,
        )
        self.amendments = Counter("ratchet_rewards_amendments", "Revisions after the first", registry=r)
        self.dead_letters = Counter(
            "ratchet_rewards_dead_letters", "Records sent to dlq.v1", ["reason"], registry=r
        )
        self.flags = Counter("ratchet_rewards_flags", "Hack flags on rewarded records", ["kind"], registry=r)
        self.reward = Histogram("ratchet_rewards_reward", "Scalar reward", buckets=REWARD_BUCKETS, registry=r)
        self.open_joins = Gauge("ratchet_rewards_open_joins", "Joins with their session, open", registry=r)
        self.orphans = Gauge("ratchet_rewards_orphans", "Signals waiting for their session", registry=r)
        self.lag = Gauge(
            "ratchet_rewards_lag_seconds",
            "Wall clock minus the partition's event-time clock",
            ["partition"],
            registry=r,
        )
        self.replay = Gauge(
            "ratchet_rewards_replay_records",
            "Records read but not yet committable (what a restart re-reads)",
            ["partition"],
            registry=r,
        )
        self.partitions = Gauge("ratchet_rewards_partitions", "Input partitions owned", registry=r)
        self.batch_seconds = Histogram(
            "ratchet_rewards_batch_seconds", "Time to process one fetched batch", registry=r
        )
        self._children: dict[tuple[Counter, str], Counter] = {}  # labelled counters, looked up once

    def serve(self, host: str, port: int) -> None:
        if port:
            start_http_server(port, addr=host, registry=self.registry)

    def rewarded(self, revision: int, reward: float, flag_kinds: list[str]) -> None:
        self._child(self.emitted, str(revision) if revision < 3 else "3+").inc()
        if revision > 0:
            self.amendments.inc()
        self.reward.observe(reward)
        for kind in flag_kinds:
            self._child(self.flags, kind).inc()

    def _child(self, counter: Counter, label: str) -> Counter:
        key = (counter, label)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(label)
        return child

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when absent), e.g. ``value("ratchet_rewards_rewarded_total", revision="0")``."""
        return self.registry.get_sample_value(name, labels) or 0.0
