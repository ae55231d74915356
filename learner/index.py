"""The learner's bounded memory of what it has seen and trained.

De-duplication needs the ``(session_id, revision)`` pairs already decided, and
amendments need what each session was trained with. Neither has to reach
further back than the time bound: a record of a session recorded more than
``max_staleness_s`` seconds ago is dropped as ``stale`` by the planner whatever
the index says, and the clock only moves forward. So once a session is that old
it is forgotten: a redelivery, an upstream duplicate or a late revision of it is
still never trained, it is recorded as ``stale`` (or ``excluded``) instead of
``duplicate`` or ``amended``.

The version bound (``max_staleness`` versions from the learner's head) does not
forget anything: it is not monotone. When the gate rejects a line and the
learner rebases on the champion, sessions that were too many versions behind
the old head are close to the new one again, and a late revision of one that
was trained must still be recognised as an amendment, not trained afresh.

The index is rebuilt on restart from the ledger, reading only from
:meth:`SessionIndex.live_from`, the ledger position of the oldest line of a
session still remembered (recorded in each checkpoint), so neither memory nor
restart time grows with the ledger.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from learner.advantages import Advantage
from learner.batching import Trained


@dataclass
class Remembered:
    first_pos: int  # ledger position at or before the session's first line
    expires_at: float  # created_at + max_staleness_s
    revisions: set[int] = field(default_factory=set)
    trained: Trained | None = None


def trained_of(entry: dict[str, Any]) -> Trained | None:
    if entry["outcome"] not in ("trained", "amended"):
        return None
    masked = tuple(tuple(span) for span in entry["masked"])
    return Trained(entry["revision"], Advantage.of(entry["advantage"]), masked, entry["excluded"])


class SessionIndex:
    """Seen pairs and trained sessions, forgotten once stale; insertion order is ledger order."""

    def __init__(self, max_staleness_s: float):
        self.max_staleness_s = max_staleness_s
        self._sessions: dict[str, Remembered] = {}
        self._by_time: list[tuple[float, str]] = []
        self._end = 0  # the ledger position after the last line remembered

    def __len__(self) -> int:
        return len(self._sessions)

    # --- what the planner needs for one micro-batch -------------------------------------

    def view(self, session_ids: Iterable[str]) -> tuple[dict[str, Trained], set[tuple[str, int]]]:
        """The trained map and seen pairs of these sessions (the planner's inputs)."""
        trained: dict[str, Trained] = {}
        seen: set[tuple[str, int]] = set()
        for sid in set(session_ids):
            if (known := self._sessions.get(sid)) is not None:
                seen.update((sid, r) for r in known.revisions)
                if known.trained is not None:
                    trained[sid] = known.trained
        return trained, seen

    # --- remembering and forgetting ------------------------------------------------------

    def add(self, entry: dict[str, Any], pos: int) -> None:
        """One ledger line (``pos``: its position, or that of its batch)."""
        if entry["outcome"] in ("malformed", "quarantined") or entry.get("session_id") is None:
            return
        sid = entry["session_id"]
        expires_at = float(entry.get("created_at", float("inf"))) + self.max_staleness_s
        known = self._sessions.get(sid)
        if known is None:
            known = self._sessions[sid] = Remembered(pos, expires_at)
            heapq.heappush(self._by_time, (expires_at, sid))
        elif expires_at > known.expires_at:
            known.expires_at = expires_at
            heapq.heappush(self._by_time, (expires_at, sid))
        known.revisions.add(entry["revision"])
        if (done := trained_of(entry)) is not None:
            known.trained = done

    def evict(self, now: float) -> int:
        """Forget the sessions that are stale at ``now``."""
        before = len(self._sessions)
        while self._by_time and self._by_time[0][0] < now:
            expires_at, sid = heapq.heappop(self._by_time)
            known = self._sessions.get(sid)
            if known is not None and known.expires_at == expires_at:
                del self._sessions[sid]
        if len(self._by_time) > 2 * len(self._sessions) + 64:  # drop stale heap items now and then
            self._by_time = [(e, s) for e, s in self._by_time if self._sessions.get(s, None) is not None]
            heapq.heapify(self._by_time)
        return before - len(self._sessions)

    def remember(self, entries: list[dict[str, Any]], pos: int, end: int) -> None:
        """A micro-batch's ledger lines, appended at ``pos`` (the ledger ends at ``end`` after them)."""
        for entry in entries:
            self.add(entry, pos)
        self._end = end

    def live_from(self) -> int:
        """The ledger position a restart has to read from to rebuild this index."""
        for known in self._sessions.values():
            return known.first_pos
        return self._end

    @classmethod
    def rebuild(cls, path: Path, start: int, end: int, max_staleness_s: float) -> SessionIndex:
        index = cls(max_staleness_s)
        for pos, entry in read_lines(path, start, end):
            index.add(entry, pos)
        index._end = end
        return index


def read_lines(path: Path, start: int, end: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(position, entry)`` of each ledger line in ``[start, end)``, streamed."""
    with Path(path).open("rb") as fh:
        fh.seek(start)
        pos = start
        while pos < end:
            line = fh.readline()
            if not line:
                break
            if line.strip():
                yield pos, json.loads(line)
            pos += len(line)
