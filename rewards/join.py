"""The join: one session and its late signals, by session id, for one input partition.

Pure: no I/O and no clock. The caller feeds it the records of one partition
number of ``sessions.v1``, ``feedback.v1`` and ``outcomes.v1`` (co-partitioned,
keyed by session id) with their offsets and timestamps, takes the emissions
that are due, and asks which input offsets may be committed.

Life of a join:

- *orphan*: signals without their session wait up to ``orphan_ttl_s``, then
  become dead letters;
- *waiting*: the session is in; revision 0 is due when the expected signals
  are in (``expect_feedback``, ``expect_outcome``; in-line ones count) or
  ``join_wait_s`` after the session's timestamp;
- *emitted*: every signal that arrives later is due as revision n+1, until
  ``amend_window_s`` after the wait;
- *closed*: only its last revision and signal ids are kept, for
  ``orphan_ttl_s`` more, so a replayed or duplicated record is recognised, and
  a signal too late to amend becomes a dead letter, never a silent drop.

Restart safety. A join holds, per topic, the offset of its first record there;
a topic's committable offset is the smallest offset held, so replaying from
the committed offsets rebuilds every open join. A join (and a closed summary)
also has a *floor*: the end of ``rewarded.v1`` when it opened, or the offset of
its last revision when that came from history. No revision of anything that a
replay can rebuild lies below :meth:`Partition.floor`, so the worker reads
``rewarded.v1`` from there to learn what is already out. A rebuilt join emits
again only when its signals are a strict superset of its last revision's: a
replay never re-emits what is out, nor an amendment that lacks signals the
replay has not yet re-read.

Time is the partition's clock (:meth:`Partition.clock`): per topic, the newest
record timestamp while records keep arriving, else the caller's wall clock;
the partition's clock is the smallest. A restarted worker thus replays in
event time: waits that expired long ago expire at once, and no wait expires
before the records written before its end are read.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from ingest import topics
from ingest.contract import Feedback, Outcome, Session, parse

INPUTS = (topics.SESSIONS, topics.FEEDBACK, topics.OUTCOMES)
Signal = tuple[str, str]  # ("feedback" | "outcome", id)


@dataclass(frozen=True)
class JoinRules:
    join_wait_s: float = 60.0
    amend_window_s: float = 600.0
    orphan_ttl_s: float = 600.0
    expect_feedback: bool = False
    expect_outcome: bool = True
    clock_idle_s: float = 2.0  # a topic with no record for this long follows the wall clock

    def __post_init__(self) -> None:
        for name in ("join_wait_s", "amend_window_s", "orphan_ttl_s", "clock_idle_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class Emitted:
    """What the last rewarded revision of a session covered."""

    revision: int
    feedback_ids: frozenset[str]
    outcome_ids: frozenset[str]

    @property
    def signals(self) -> frozenset[Signal]:
        return frozenset(
            {("feedback", i) for i in self.feedback_ids} | {("outcome", i) for i in self.outcome_ids}
        )


@dataclass(frozen=True, slots=True)
class Emission:
    """A revision to score and produce to ``rewarded.v1`` (same partition number)."""

    partition: int
    session: Session
    feedback: tuple[Feedback, ...]  # late records; the in-line one stays in the session
    outcomes: tuple[Outcome, ...]
    emitted: Emitted
    session_json: bytes | None = None  # JSON that parses back to ``session`` (see SessionCopy)

    @property
    def revision(self) -> int:
        return self.emitted.revision


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record that goes to the dead-letter topic, with its reason."""

    kind: str  # low-cardinality label: orphan_expired, late_signal, tenant_mismatch
    reason: str
    payload: bytes
    session_id: str | None
    tenant: str | None


@dataclass(frozen=True, slots=True)
class Closed:
    emitted: Emitted
    floor: int
    token: int


@dataclass(slots=True)
class SessionCopy:
    """A joined session. Given its raw bytes, only JSON is kept once it was emitted (a parsed
    session is several times larger); an amendment parses it again. That JSON is the raw bytes when
    they parse back to the same session (:meth:`Session.stamped`), else the session serialised, so
    that every revision carries the same session."""

    tenant: str
    inline: frozenset[Signal]
    raw: bytes | None
    parsed: Session | None

    @classmethod
    def of(cls, session: Session, raw: bytes | None) -> SessionCopy:
        inline = set()
        if session.feedback is not None:
            inline.add(("feedback", session.feedback.feedback_id))
        if session.outcome is not None:
            inline.add(("outcome", session.outcome.outcome_id))
        if raw is not None and not session.stamped():
            raw = session.to_json()
        return cls(session.tenant, frozenset(inline), raw, session)

    def get(self) -> Session:
        if self.parsed is None:
            self.parsed = parse(Session, self.raw)
        return self.parsed

    def release(self) -> None:
        if self.raw is not None:
            self.parsed = None


@dataclass(slots=True)
class Join:
    serial: int
    session_id: str
    floor: int
    emitted: Emitted | None = None
    session: SessionCopy | None = None
    feedback: dict[str, Feedback] = field(default_factory=dict)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)  # topic -> offset of its first record there

    def signals(self) -> set[Signal]:
        found: set[Signal] = set()
        if self.feedback:
            found.update(("feedback", i) for i in self.feedback)
        if self.outcomes:
            found.update(("outcome", i) for i in self.outcomes)
        if self.session is not None:
            found.update(self.session.inline)
        return found


def _kind_and_id(record: Feedback | Outcome) -> Signal:
    if isinstance(record, Feedback):
        return "feedback", record.feedback_id
    return "outcome", record.outcome_id


class Partition:
    """Open joins, closed summaries and offsets of one input partition number."""

    def __init__(
        self,
        partition: int,
        rules: JoinRules,
        rewarded_end: int = 0,
        history: dict[str, tuple[Emitted, int, int]] | None = None,
        now_ms: int = 0,
    ):
        """``history``: session id -> (last revision, its offset in ``rewarded.v1``, its timestamp
        in ms), read at assignment; ``rewarded_end``: the offset after the last record read there.
        Until each input topic has delivered a record or stayed quiet for ``clock_idle_s`` after
        ``now_ms``, the clock stands still: no deadline passes before the replay has begun."""
        self.partition = partition
        self.rules = rules
        self.rewarded_end = rewarded_end
        self.joins: dict[str, Join] = {}
        self.closed: dict[str, Closed] = {}
        self.next_offset: dict[str, int] = {}
        self._newest_ts = {t: 0 for t in INPUTS}
        self._last_seen_ms = {t: now_ms for t in INPUTS}
        self._held: dict[str, list[tuple[int, int, str]]] = {t: [] for t in INPUTS}  # (offset, serial, sid)
        self._floors: list[tuple[int, int, str]] = []  # (floor, serial or token, sid)
        self._deadlines: list[tuple[int, int, str, str]] = []  # (at_ms, serial or token, kind, sid)
        self._touched: set[str] = set()
        self._serials = itertools.count()
        window_ms = self._ms(rules.join_wait_s + rules.amend_window_s)
        for sid, (emitted, offset, ts_ms) in (history or {}).items():
            self._remember(sid, emitted, offset, ts_ms + window_ms)

    @staticmethod
    def _ms(seconds: float) -> int:
        return int(seconds * 1000)

    # -- time

    def clock(self, now_ms: int) -> int:
        idle_ms = self._ms(self.rules.clock_idle_s)
        busy = [ts for t, ts in self._newest_ts.items() if now_ms - self._last_seen_ms[t] < idle_ms]
        return min([*busy, now_ms])

    def _saw(self, topic: str, offset: int, ts_ms: int, now_ms: int) -> None:
        self.next_offset[topic] = offset + 1
        self._newest_ts[topic] = max(ts_ms, self._newest_ts[topic])
        self._last_seen_ms[topic] = now_ms

    def seen(self, topic: str, offset: int) -> bool:
        """Whether ``offset`` of ``topic`` was already read (a re-delivery after a seek)."""
        return offset < self.next_offset.get(topic, -1)

    # -- records in

    def skip(self, topic: str, offset: int, ts_ms: int, now_ms: int) -> None:
        """A record that joins nothing (e.g. a dead letter): only the position moves."""
        self._saw(topic, offset, ts_ms, now_ms)

    def add_session(
        self, offset: int, ts_ms: int, session: Session, now_ms: int, raw: bytes | None = None
    ) -> list[Rejection]:
        """``raw``: the record's bytes, kept instead of the parsed session once it was emitted."""
        self._saw(topics.SESSIONS, offset, ts_ms, now_ms)
        sid = session.session_id
        join = self.joins.get(sid)
        if join is not None and join.session is not None:
            return []  # a duplicate of a session already joined
        if join is None:
            join = self._open(sid)
        join.session = SessionCopy.of(session, raw)
        self._hold(join, topics.SESSIONS, offset)
        rejected = [self._mismatch(join, r) for r in self._foreign_signals(join)]
        wait_at = ts_ms + self._ms(self.rules.join_wait_s)
        self._at(wait_at, join.serial, "wait", sid)
        self._at(wait_at + self._ms(self.rules.amend_window_s), join.serial, "close", sid)
        self._touched.add(sid)
        return rejected

    def add_feedback(self, offset: int, ts_ms: int, feedback: Feedback, now_ms: int) -> list[Rejection]:
        return self._add_signal(topics.FEEDBACK, offset, ts_ms, now_ms, feedback)

    def add_outcome(self, offset: int, ts_ms: int, outcome: Outcome, now_ms: int) -> list[Rejection]:
        return self._add_signal(topics.OUTCOMES, offset, ts_ms, now_ms, outcome)

    def _add_signal(
        self, topic: str, offset: int, ts_ms: int, now_ms: int, record: Feedback | Outcome
    ) -> list[Rejection]:
        self._saw(topic, offset, ts_ms, now_ms)
        sid = record.session_id
        join = self.joins.get(sid)
        if join is None:  # an orphan until its session arrives (for a closed join: never)
            join = self._open(sid)
            self._at(ts_ms + self._ms(self.rules.orphan_ttl_s), join.serial, "orphan", sid)
        kind, signal_id = _kind_and_id(record)
        if (kind, signal_id) in join.signals():
            return []  # a duplicate id
        if join.session is not None and join.session.tenant != record.tenant:
            return [self._mismatch(join, record)]
        (join.feedback if kind == "feedback" else join.outcomes)[signal_id] = record
        self._hold(join, topic, offset)
        self._touched.add(sid)
        return []

    def _open(self, sid: str) -> Join:
        join = Join(serial=next(self._serials), session_id=sid, floor=self.rewarded_end)
        recalled = self.closed.pop(sid, None)
        if recalled is not None:  # a replay, a duplicate or a late record of a closed join
            join.emitted, join.floor = recalled.emitted, min(join.floor, recalled.floor)
        self.joins[sid] = join
        heapq.heappush(self._floors, (join.floor, join.serial, sid))
        return join

    def _hold(self, join: Join, topic: str, offset: int) -> None:
        if topic not in join.held:
            join.held[topic] = offset
            heapq.heappush(self._held[topic], (offset, join.serial, join.session_id))

    def _at(self, at_ms: int, key: int, kind: str, sid: str) -> None:
        heapq.heappush(self._deadlines, (at_ms, key, kind, sid))

    def _foreign_signals(self, join: Join) -> list[Feedback | Outcome]:
        tenant = join.session.tenant
        foreign = [r for r in [*join.feedback.values(), *join.outcomes.values()] if r.tenant != tenant]
        for record in foreign:
            kind, signal_id = _kind_and_id(record)
            del (join.feedback if kind == "feedback" else join.outcomes)[signal_id]
        return foreign

    def _mismatch(self, join: Join, record: Feedback | Outcome) -> Rejection:
        kind, signal_id = _kind_and_id(record)
        reason = (
            f"{kind} {signal_id} has tenant {record.tenant!r} but session {join.session_id} "
            f"has tenant {join.session.tenant!r}"
        )
        return Rejection("tenant_mismatch", reason, record.to_json(), join.session_id, record.tenant)

    # -- emissions

    def _expected_in(self, signals: set[Signal]) -> bool:
        kinds = {kind for kind, _ in signals}
        return (not self.rules.expect_feedback or "feedback" in kinds) and (
            not self.rules.expect_outcome or "outcome" in kinds
        )

    def _emit_if_due(self, join: Join, waited: bool, closing: bool = False) -> Emission | None:
        if join.session is None:
            return None
        signals = join.signals()
        if join.emitted is None:
            if not (waited or self._expected_in(signals)):
                return None
            revision = 0
        else:
            # Only a strict superset: a replay that has not yet re-read every signal of the last
            # revision waits for them. At closing, any signal not yet rewarded goes out anyway.
            new = signals - join.emitted.signals
            if not new or not (closing or signals > join.emitted.signals):
                return None
            revision = join.emitted.revision + 1
        join.emitted = Emitted(
            revision,
            frozenset(i for k, i in signals if k == "feedback"),
            frozenset(i for k, i in signals if k == "outcome"),
        )
        session = join.session.get()
        join.session.release()
        return Emission(
            self.partition,
            session,
            tuple(join.feedback.values()),
            tuple(join.outcomes.values()),
            join.emitted,
            join.session.raw,
        )

    def ready(self) -> list[Emission]:
        """Emissions made due by the records added since the last call (expectations met, amendments)."""
        out = []
        for sid in self._touched:
            join = self.joins.get(sid)
            if join is not None and (emission := self._emit_if_due(join, waited=False)) is not None:
                out.append(emission)
        self._touched.clear()
        return out

    def sweep(self, now_ms: int) -> tuple[list[Emission], list[Rejection]]:
        """:meth:`ready`, then every deadline the partition's clock has passed: waits, closes, orphans."""
        clock = self.clock(now_ms)
        emissions, rejections = self.ready(), []
        while self._deadlines and self._deadlines[0][0] <= clock:
            at_ms, key, kind, sid = heapq.heappop(self._deadlines)
            if kind == "forget":
                if sid in self.closed and self.closed[sid].token == key:
                    del self.closed[sid]
                continue
            join = self.joins.get(sid)
            if join is None or join.serial != key:
                continue
            if kind in ("wait", "close"):
                emission = self._emit_if_due(join, waited=True, closing=kind == "close")
                if emission is not None:
                    emissions.append(emission)
            if kind == "close":
                del self.joins[sid]
                self._remember(sid, join.emitted, join.floor, at_ms)
            elif kind == "orphan" and join.session is None:
                rejections += self._expire_orphan(join, at_ms)
        return emissions, rejections

    def _remember(self, sid: str, emitted: Emitted | None, floor: int, closed_at_ms: int) -> None:
        if emitted is None:
            return
        token = next(self._serials)
        self.closed[sid] = Closed(emitted, floor, token)
        heapq.heappush(self._floors, (floor, token, sid))
        self._at(closed_at_ms + self._ms(self.rules.orphan_ttl_s), token, "forget", sid)

    def _expire_orphan(self, join: Join, at_ms: int) -> list[Rejection]:
        """Signals whose session never came. For a closed join, those its last revision covered are
        replays or duplicates; the others came too late to amend it."""
        del self.joins[join.session_id]
        self._remember(join.session_id, join.emitted, join.floor, at_ms)
        covered = join.emitted.signals if join.emitted is not None else frozenset()
        out = []
        for record in [*join.feedback.values(), *join.outcomes.values()]:
            kind, signal_id = _kind_and_id(record)
            if (kind, signal_id) in covered:
                continue
            if join.emitted is not None:
                label = "late_signal"
                reason = (
                    f"{kind} {signal_id} for session {join.session_id} arrived after its join closed "
                    f"(amend_window_s={self.rules.amend_window_s:g}); no amendment was made"
                )
            else:
                label = "orphan_expired"
                reason = (
                    f"no session {join.session_id} arrived within orphan_ttl_s={self.rules.orphan_ttl_s:g} "
                    f"of {kind} {signal_id} (partition {self.partition})"
                )
            out.append(Rejection(label, reason, record.to_json(), join.session_id, record.tenant))
        return out

    # -- offsets

    def committable(self) -> dict[str, int]:
        """Per topic read so far: the offset below which no record is needed any more."""
        out = {}
        for topic in INPUTS:
            heap = self._held[topic]
            while heap and not self._is_current(heap[0][2], heap[0][1]):
                heapq.heappop(heap)
            if heap:
                out[topic] = heap[0][0]
            elif topic in self.next_offset:
                out[topic] = self.next_offset[topic]
        return out

    def floor(self) -> int:
        """Where in ``rewarded.v1`` the revisions of everything a replay may rebuild begin."""
        heap = self._floors
        while heap and not (
            self._is_current(heap[0][2], heap[0][1])
            or (heap[0][2] in self.closed and self.closed[heap[0][2]].token == heap[0][1])
        ):
            heapq.heappop(heap)
        return min(heap[0][0], self.rewarded_end) if heap else self.rewarded_end

    def _is_current(self, sid: str, serial: int) -> bool:
        join = self.joins.get(sid)
        return join is not None and join.serial == serial

    def produced(self, rewarded_offset: int) -> None:
        """A record this worker produced to ``rewarded.v1`` was acknowledged at ``rewarded_offset``."""
        self.rewarded_end = max(self.rewarded_end, rewarded_offset + 1)

    def counts(self) -> tuple[int, int, int]:
        """(open joins with their session, orphans, closed summaries)."""
        orphans = sum(1 for j in self.joins.values() if j.session is None)
        return len(self.joins) - orphans, orphans, len(self.closed)
