"""The canary judge: a champion on trial against the champion before it, on live traffic.

With the gate's ``canary`` setting, a promotion puts the new champion on trial
(:mod:`gating.decisions`): the serving controller sends it ``canary_share`` of new
sessions and the version it served before (the *incumbent*) the rest. Their
sessions come back scored on ``rewarded.v1``, late signals included; the judge
reads them there and compares the two on the same task families:

- a session's *live score* is its reward clipped to [0, 1], for a session that
  has an outcome or a user's verdict (a missing signal is missing: a session
  with neither is left out); a session excluded for a hack scores 0;
- within each task family, the i-th canary session (in the order they were
  recorded) is paired with the i-th incumbent session: d = canary − incumbent,
  in [−1, 1]; a session served by two versions, or recorded before the trial,
  counts for neither;
- after each pair the anytime-valid non-inferiority test of
  :mod:`gating.sequential` (margin ``canary_margin``) is read: **confirm** once
  the lower bound of the mean difference is at least −margin (not worse by
  more than the margin), **roll back** once its upper bound is below −margin
  (worse by more than the margin); at ``canary_max_pairs`` pairs, or
  ``canary_max_s`` after the trial began, without a verdict it is confirmed:
  no harm was shown.

The gate records the verdict like any decision (decision log, MLflow run with
the evidence): a ``canary`` entry that ends the trial, or a ``rollback`` by the
``canary`` actor to the incumbent, whereupon every replica serves the incumbent
again and the learner rebases on it.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from gating.decisions import BASE, Entry
from gating.sequential import sequential_noninferiority
from ingest.contract import ContractError, RewardedSession, parse

INCUMBENT = "incumbent"
CANARY = "canary"


@dataclass(frozen=True)
class Observed:
    """One rewarded session as the judge sees it."""

    session_id: str
    family: str
    version: str | None  # the adapter version that served every assistant turn; None: the base model
    score: float  # live score in [0, 1]
    at: float  # when the session was recorded (seconds since the epoch)


@dataclass(frozen=True)
class Verdict:
    decision: str  # confirm | rollback | continue
    reason: str
    evidence: dict[str, float] = field(default_factory=dict)


def live_score(rs: RewardedSession) -> float | None:
    """The reward clipped to [0, 1]; None for a session with no outcome and no verdict, or excluded for
    a reason other than a hack (a timeout says nothing about the policy's answers)."""
    session = rs.session
    if rs.excluded:
        return 0.0 if rs.flags else None
    if not (rs.outcome_ids or rs.feedback_ids or session.outcome or session.feedback):
        return None
    return min(1.0, max(0.0, float(rs.reward)))


def observe(rs: RewardedSession) -> Observed | None:
    """What the judge keeps of a rewarded session; None when it has no live score or was served by
    more than one version."""
    score = live_score(rs)
    if score is None:
        return None
    turns = rs.session.assistant_turns()
    served = {t.adapter_version or rs.session.policy.adapter_version for t in turns}
    if len(served) != 1:
        return None
    family = rs.session.task_family or (rs.session.metadata or {}).get("task_family") or "default"
    return Observed(rs.session_id, str(family), served.pop(), score, rs.session.created_at.timestamp())


def pairs(observed: Iterable[Observed], canary: str, incumbent: str | None, since: float) -> list[float]:
    """Paired differences canary − incumbent, family by family in recording order, then interleaved
    by the time the later session of each pair was recorded (the order the judge could have read them)."""
    sides: dict[str, dict[str, list[Observed]]] = defaultdict(lambda: {CANARY: [], INCUMBENT: []})
    for o in sorted(observed, key=lambda o: (o.at, o.session_id)):
        if o.at < since:
            continue
        if o.version == canary:
            sides[o.family][CANARY].append(o)
        elif o.version == incumbent:
            sides[o.family][INCUMBENT].append(o)
    out: list[tuple[float, float]] = []
    for side in sides.values():
        for c, i in zip(side[CANARY], side[INCUMBENT], strict=False):
            out.append((max(c.at, i.at), c.score - i.score))
    return [d for _, d in sorted(out)]


def judge(
    observed: Iterable[Observed],
    canary: str,
    incumbent: str | None,
    since: float,
    now: float,
    margin: float,
    alpha: float,
    min_pairs: int,
    max_pairs: int,
    max_s: float,
) -> Verdict:
    """The verdict on ``canary`` (on trial since ``since``) against ``incumbent`` (None: the base model)."""
    kept = [o for o in observed if o.at >= since]
    diffs = np.array(pairs(kept, canary, incumbent, since)[:max_pairs], dtype=float)
    scores = {
        side: [o.score for o in kept if o.version == version]
        for side, version in ((CANARY, canary), (INCUMBENT, incumbent))
    }
    evidence = {
        "canary.pairs": float(len(diffs)),
        "canary.sessions": float(len(scores[CANARY])),
        "canary.incumbent_sessions": float(len(scores[INCUMBENT])),
        "canary.score": float(np.mean(scores[CANARY])) if scores[CANARY] else float("nan"),
        "canary.incumbent_score": float(np.mean(scores[INCUMBENT])) if scores[INCUMBENT] else float("nan"),
        "canary.seconds": round(now - since, 1),
    }
    who = f"{canary} against {incumbent or 'the base model'}"
    if len(diffs):
        test = sequential_noninferiority(diffs, margin, alpha, min_pairs, unit="paired sessions")
        evidence |= {"canary.change": test.change, "canary.lower": test.lower, "canary.upper": test.upper}
        if test.decision == "pass":
            return Verdict("confirm", f"live: {who}: {test.reason}", evidence)
        if test.decision == "fail":
            return Verdict("rollback", f"live: {who}: {test.reason}", evidence)
    if len(diffs) >= max_pairs or now - since >= max_s:
        why = f"{len(diffs)} pairs" if len(diffs) >= max_pairs else f"{now - since:.0f} s"
        change = f", mean change {diffs.mean():+.3f}" if len(diffs) else ""
        return Verdict(
            "confirm",
            f"live: {who}: not shown worse by more than {margin:.2f} after {why} "
            f"({len(diffs)} paired sessions{change})",
            evidence,
        )
    return Verdict("continue", f"live: {who}: {len(diffs)} pairs so far", evidence)


class RewardedReader:
    """Every rewarded session of ``topic`` from ``since`` on, read forward (revision 0 of each session;
    position markers and records that break the contract are skipped)."""

    def __init__(self, bootstrap: str, topic: str, since: float, timeout_s: float = 30.0):
        from confluent_kafka import Consumer, TopicPartition

        from ingest.brokers import client_config

        self.consumer = Consumer(
            {
                **client_config(bootstrap),
                "group.id": f"ratchet-canary-{time.time_ns()}",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
            }
        )
        meta = self.consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        # where the trial's records begin (a Kafka broker answers by time; one that cannot gives 0)
        wanted = [TopicPartition(topic, p, int(since * 1000) - 60_000) for p in sorted(meta.partitions)]
        starts = self.consumer.offsets_for_times(wanted, timeout=timeout_s)
        self.consumer.assign([TopicPartition(topic, tp.partition, max(tp.offset, 0)) for tp in starts])
        self.seen: dict[str, Observed] = {}
        self.skipped = 0

    def poll(self, budget_s: float = 1.0) -> dict[str, Observed]:
        from ingest import topics

        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline:
            messages = self.consumer.consume(num_messages=500, timeout=0.2)
            if not messages:
                break
            for msg in messages:
                if msg.error() is not None:
                    continue
                if any(k == topics.REWARDED_MARKER_HEADER for k, _ in msg.headers() or ()):
                    continue
                try:
                    rs = parse(RewardedSession, msg.value())
                except ContractError:
                    self.skipped += 1
                    continue
                if rs.revision != 0 or rs.session_id in self.seen:
                    continue
                found = observe(rs)
                if found is not None:
                    self.seen[rs.session_id] = found
        return self.seen

    def close(self) -> None:
        self.consumer.close()


@dataclass
class Trial:
    """A champion on trial: the version, the one it is compared with, and when it began."""

    canary: str
    incumbent: str | None
    since: float


def current_trial(entries: list[Entry]) -> Trial | None:
    """The champion on trial by the decision log, the champion it would replace, and when it began."""
    canary = entries[-1].state.canary if entries else None
    if canary is None:
        return None
    began = next(e for e in reversed(entries) if e.version == canary and e.decision == "promote")
    return Trial(canary, began.champion_before, began.time)


def verdict_entry(trial: Trial, verdict: Verdict) -> tuple[str, str, list[dict[str, str]]]:
    """How a verdict is recorded, as (action, version, reasons): a confirmation is a ``canary``
    entry for the version on trial; a rollback puts the incumbent (or ``base``) back."""
    if verdict.decision == "confirm":
        return "canary", trial.canary, [{"code": "canary_confirmed", "message": verdict.reason}]
    reasons = [{"code": "canary_worse", "message": f"{trial.canary} rolled back: {verdict.reason}"}]
    return "rollback", trial.incumbent or BASE, reasons


def watch(
    reader: RewardedReader,
    decide: Callable[[list[Observed], float], Verdict],
    wait: Callable[[float], bool],
    every_s: float = 2.0,
    say: Callable[[str], None] = lambda message: None,
) -> Verdict | None:
    """Read and judge until a verdict (returned) or until ``wait`` says to stop (None)."""
    last = -1
    while True:
        verdict = decide(list(reader.poll().values()), time.time())
        if verdict.decision != "continue":
            return verdict
        pairs_now = int(verdict.evidence.get("canary.pairs", 0))
        if pairs_now != last:
            say(verdict.reason)
            last = pairs_now
        if wait(every_s):  # the stream's polling interval; True: the gate is stopping
            return None
