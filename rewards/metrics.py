"""Prometheus metrics of the rewards worker (``/metrics`` on 127.0.0.1, ``rewards_metrics_port``)."""

from __future__ import annotations

import collections
from bisect import bisect_left
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics_core import Metric

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
        self.reward = LoopHistogram("ratchet_rewards_reward", "Scalar reward", REWARD_BUCKETS, registry=r)
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

    def rewarded(self, records: Iterable[tuple[int, float, Iterable[str]]]) -> None:
        """Count one batch's rewarded records, each (revision, reward, flag kinds): every counter
        moves once per batch, not once per record (each move takes a lock)."""
        revisions: collections.Counter[str] = collections.Counter()
        kinds: collections.Counter[str] = collections.Counter()
        observe = self.reward.observe
        for revision, reward, flag_kinds in records:
            revisions[str(revision) if revision < 3 else "3+"] += 1
            observe(reward)
            kinds.update(flag_kinds)
        for label, n in revisions.items():
            self._child(self.emitted, label).inc(n)
        amendments = sum(n for label, n in revisions.items() if label != "0")
        if amendments:
            self.amendments.inc(amendments)
        for kind, n in kinds.items():
            self._child(self.flags, kind).inc(n)

    def _child(self, counter: Counter, label: str) -> Counter:
        key = (counter, label)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(label)
        return child

    def count(self, counter: Counter, label: str, n: int = 1) -> None:
        """``counter.labels(label).inc(n)``, the child looked up once."""
        self._child(counter, label).inc(n)

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when absent), e.g. ``value("ratchet_rewards_rewarded_total", revision="0")``."""
        return self.registry.get_sample_value(name, labels) or 0.0


class LoopHistogram:
    """A histogram observed from the worker's event loop only, without the lock a
    ``prometheus_client.Histogram`` takes per observation (the rewards worker observes every
    reward). A scrape, from the metrics server's thread, reads the counts as they are."""

    def __init__(self, name: str, documentation: str, buckets: Iterable[float], registry: CollectorRegistry):
        self.name, self.documentation = name, documentation
        self.bounds = tuple(sorted(float(b) for b in buckets))
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self.sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # a bucket counts values <= its bound
        self.sum += value

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, "histogram")]

    def collect(self) -> list[Metric]:
        # the samples prometheus_client's Histogram exposes: _sum only when no bound is negative (a
        # sum that can fall is not a counter), _count always (HistogramMetricFamily omits both)
        counts, total, cumulative = list(self.counts), self.sum, 0
        family = Metric(self.name, self.documentation, "histogram")
        for bound, n in zip((*self.bounds, float("inf")), counts, strict=True):
            cumulative += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            family.add_sample(f"{self.name}_bucket", {"le": le}, float(cumulative))
        family.add_sample(f"{self.name}_count", {}, float(cumulative))
        if self.bounds[0] >= 0:
            family.add_sample(f"{self.name}_sum", {}, total)
        return [family]
