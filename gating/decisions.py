"""The append-only decision log: every gate decision and manual override, one JSON line each.

MLflow aliases keep no history, so this file is the record of what the
champion was and why. Each entry carries the alias state it leads to
(``state``: champion and challenger), so the aliases in MLflow can always be
rebuilt from the last entry (:func:`gating.records.Registry.reconcile`). Lines
are written whole and fsynced under an exclusive lock; a line torn by a crash is
ignored when reading and cut off before the next append.

Alias semantics (``None`` champion means the base model):

- a promotion (gate or ``approve``) makes the version champion and clears the challenger;
- a gate rejection makes the version the challenger: the latest candidate awaiting review;
- a manual ``reject`` clears it from challenger, and if it was champion, hands the
  title back to the champion it replaced (skipping any rejected since);
- ``rollback`` makes an earlier champion (or ``base``) champion again.

A canary (the gate's ``canary`` setting): a promotion makes the version champion
*on trial* (``state.canary``); the serving controller then gives it a share of new
sessions next to the version it served before, until a ``canary`` entry confirms it
(``promote``: the trial ends, it serves everything) or a ``rollback`` entry by the
canary judge hands the title back to the champion before it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from learner.store import BASE

ACTIONS = ("evaluate", "approve", "reject", "rollback", "canary")


class LogError(ValueError):
    """An override that the log's history does not allow (the message says why)."""


@dataclass(frozen=True)
class State:
    champion: str | None = None
    challenger: str | None = None
    canary: str | None = None  # the champion while it is on trial (a canary), else None


@dataclass(frozen=True)
class Entry:
    decision_id: str
    version: str
    action: str  # evaluate | approve | reject | rollback
    decision: str  # promote | reject
    actor: str
    reasons: list[dict[str, str]]
    champion_before: str | None
    state: State
    time: float = field(default_factory=time.time)
    content_hash: str | None = None
    run_id: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    suites: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if out["state"]["canary"] is None:  # lines as they were before canaries
            del out["state"]["canary"]
        out["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.time))
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entry:
        data = {k: v for k, v in data.items() if k != "at"}
        data["state"] = State(**data["state"])
        return cls(**data)


def next_state(entries: list[Entry], version: str, action: str, decision: str, canary: bool = False) -> State:
    """The champion, challenger and canary after ``action`` on ``version``, given the log so far;
    ``canary``: a promotion puts the version on trial."""
    state = entries[-1].state if entries else State()
    target = None if version == BASE else version
    if action in ("evaluate", "approve") and decision == "promote":
        return State(champion=target, challenger=None, canary=target if canary and target else None)
    if action == "evaluate":
        return State(champion=state.champion, challenger=target, canary=state.canary)
    if action == "canary":
        if state.canary != target or target is None:
            raise LogError(f"{version} is not on trial (the canary is {state.canary or 'none'})")
        if decision != "promote":
            raise LogError("a canary ends in promote (confirmed) or in a rollback to the champion before it")
        return State(champion=state.champion, challenger=state.challenger, canary=None)
    if action == "rollback":
        return State(champion=target, challenger=state.challenger, canary=None)
    if action == "reject":
        challenger = None if state.challenger == target else state.challenger
        champion = fallback(entries, target) if state.champion == target else state.champion
        canary = state.canary if champion == state.champion else None
        return State(champion=champion, challenger=challenger, canary=canary)
    raise LogError(f"unknown action {action!r}")


def _revoked(entries: list[Entry], version: str) -> bool:
    """Whether ``version`` was rejected by hand after it was last promoted."""
    for entry in reversed(entries):
        if entry.version == version and entry.action == "reject":
            return True
        if entry.version == version and entry.decision == "promote":
            return False
    return False


def fallback(entries: list[Entry], version: str | None) -> str | None:
    """The most recent earlier champion other than ``version`` not rejected since; None is the base model."""
    for entry in reversed(entries):
        for champion in (entry.state.champion, entry.champion_before):
            if champion == version:
                continue
            if champion is None or not _revoked(entries, champion):
                return champion
    return None


def past_champions(entries: list[Entry]) -> set[str]:
    return {BASE} | {e.state.champion for e in entries if e.state.champion is not None}


class DecisionLog:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(exist_ok=True)

    def entries(self) -> list[Entry]:
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(Entry.from_json(json.loads(line)))
            except (json.JSONDecodeError, TypeError, KeyError):
                continue  # a torn line: the decision it held was never completed
        return out

    def state(self) -> State:
        entries = self.entries()
        return entries[-1].state if entries else State()

    def find(self, decision_id: str) -> Entry | None:
        return next((e for e in self.entries() if e.decision_id == decision_id), None)

    def latest_for(self, version: str, action: str | None = None) -> Entry | None:
        for entry in reversed(self.entries()):
            if entry.version == version and (action is None or entry.action == action):
                return entry
        return None

    @contextlib.contextmanager
    def locked(self) -> Iterator[list[Entry]]:
        """Hold the log's exclusive lock; yields the entries as they are under it."""
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield self.entries()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def append(self, entry: Entry) -> Entry:
        """Write one entry durably; call while holding :meth:`locked`."""
        with self.path.open("rb+") as fh:
            data = fh.read()
            if data and not data.endswith(b"\n"):
                fh.truncate(data.rfind(b"\n") + 1)  # cut a torn last line
            fh.seek(0, os.SEEK_END)
            fh.write((json.dumps(entry.to_json(), sort_keys=True, ensure_ascii=False) + "\n").encode())
            fh.flush()
            os.fsync(fh.fileno())
        return entry


def describe(entry: Entry) -> str:
    """One readable line (plus reasons) for ``ratchet gate log``."""
    champion = entry.state.champion or BASE
    head = (
        f"{entry.to_json()['at']}  {entry.version:<6} {entry.action:<9} {entry.decision:<8} "
        f"by {entry.actor:<10} champion {entry.champion_before or BASE} -> {champion}"
    )
    if entry.state.challenger:
        head += f"  challenger {entry.state.challenger}"
    if entry.state.canary:
        head += "  (on trial: canary)"
    lines = [head] + [f"    - {r['message']}" for r in entry.reasons]
    return "\n".join(lines)
