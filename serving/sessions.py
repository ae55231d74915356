"""The capture proxy's open sessions: kept in its journal, and built into ``Session`` records.

Each request of a session appends its turns to that session's journal
(:mod:`serving.journal`), fsynced before the response is sent. A session stays
on the route (adapter version) its first request was given. Ending a session
builds its ``Session`` record (with the turns of the end request's
``messages``: what the agent did after the model's last turn); the journal is
deleted only once the record is produced or dead-lettered. A restarted proxy
resumes open sessions from the journal. Ended session ids are remembered (the
latest ``ENDED_REMEMBERED``) so that a late request cannot reopen one.
"""

from __future__ import annotations

import collections
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ingest.contract import SessionStatus
from serving import capture
from serving.balancer import version_key
from serving.journal import SessionJournal
from serving.routing import Route

ENDED_REMEMBERED = 100_000


class EndRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: SessionStatus
    tenant: str | None = None  # if given, the token's tenant
    task_id: str | None = None
    task_family: str | None = None
    outcome: dict | None = None  # an Outcome; session_id, tenant and outcome_id may be left out
    feedback: dict | None = None  # a Feedback; session_id, tenant and feedback_id may be left out
    # what happened after the model's last turn, as an OpenAI client would send it next (the tool
    # calls the agent ran and their outputs, a closing user message): recorded as the last turns
    messages: list[dict] | None = None


@dataclass
class OpenSession:
    session_id: str
    tenant: str | None
    task_id: str | None
    model: str  # the model name the client asked for
    route: Route
    started_at: float
    last_at: float
    turns: list[dict] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    task_family: str | None = None

    def header(self) -> dict:
        return {
            "session_id": self.session_id,
            "tenant": self.tenant,
            "task_id": self.task_id,
            "task_family": self.task_family,
            "model": self.model,
            "vllm_model": self.route.model,
            "adapter_version": self.route.adapter_version,
            "started_at": self.started_at,
        }

    @classmethod
    def from_entries(cls, entries: list[dict]) -> OpenSession:
        h = entries[0]
        route = Route(h["vllm_model"], h["adapter_version"])
        session = cls(
            h["session_id"], h["tenant"], h["task_id"], h["model"], route, h["started_at"], h["started_at"],
            task_family=h.get("task_family"),
        )  # fmt: skip
        for entry in entries[1:]:
            session.apply(entry)
        return session

    def apply(self, entry: dict) -> None:
        self.turns.extend(entry["turns"])
        self.tokens += entry["tokens"]
        self.seconds += entry["seconds"]
        self.last_at = entry["at"]


def request_entry(
    session: OpenSession, kind: str, body: dict, served: dict, usage: dict | None, latency_s: float, at: float
) -> dict:
    """The journal entry of one request of ``session``: its turns, tokens and seconds."""
    turns = capture.request_turns(
        kind, body, served, len(session.turns), session.route.adapter_version, latency_s
    )
    tokens = (usage or {}).get("total_tokens") or len(served["prompt_token_ids"]) + len(
        served["completion_token_ids"]
    )
    return {"turns": turns, "tokens": tokens, "seconds": latency_s, "at": at}


def session_record(
    session: OpenSession,
    end: EndRequest,
    tenant: str,
    task: tuple[str | None, str | None],
    base_model: str,
) -> dict:
    """The ``Session`` record (as JSON-ready dict) of an open session being ended."""
    sid = session.session_id
    inline = {}
    for name, model_id in (("outcome", "outcome_id"), ("feedback", "feedback_id")):
        value = getattr(end, name)
        if value is not None:
            inline[name] = {model_id: f"{sid}:{name}", "session_id": sid, "tenant": tenant, **value}
    return {
        "session_id": sid,
        "tenant": tenant,
        "task_id": task[0],
        "task_family": task[1],
        "policy": {"base_model": base_model, "adapter_version": session.route.adapter_version},
        "turns": session.turns + capture.message_turns(end.messages or [], len(session.turns)),
        "status": end.status.value,
        "cost": {"tokens": session.tokens, "seconds": round(session.seconds, 6)},
        **inline,
        "metadata": {"source": "capture-proxy", "model": session.model[:1024]},
        "created_at": datetime.fromtimestamp(session.started_at, UTC).isoformat(),
    }


class SessionStore:
    """Open sessions in memory and in the journal, one lock per session.

    Hold a session's :meth:`lock` around reading it (:meth:`load`) and changing it
    (:meth:`append`, :meth:`forget`); the store's own lock guards only its maps."""

    def __init__(self, journal_dir: Path):
        self.journal = SessionJournal(journal_dir)
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._open: dict[str, OpenSession] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._pinned = {h["session_id"]: h.get("adapter_version") for h in self.journal.headers()}

    def lock(self, sid: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(sid, threading.Lock())

    def ended(self, sid: str) -> bool:
        return sid in self._ended

    def load(self, sid: str) -> OpenSession | None:
        """The open session ``sid`` from memory or its journal; call with the session's lock held."""
        with self._lock:
            session = self._open.get(sid)
        if session is None:
            entries = self.journal.read(sid)
            if entries is None:
                return None
            session = OpenSession.from_entries(entries)
            with self._lock:
                self._open[sid] = session
        return session

    def append(self, session: OpenSession, entry: dict, new: bool) -> None:
        """Journal ``entry`` (a ``new`` session's header first), then add it to the session."""
        sid = session.session_id
        if new:
            self.journal.start(session.header())
        self.journal.append(sid, entry)
        session.apply(entry)
        with self._lock:
            self._open[sid] = session
            self._pinned[sid] = session.route.adapter_version

    def forget(self, sid: str) -> None:
        """An ended session: its journal deleted, its id remembered as ended."""
        self.journal.delete(sid)
        with self._lock:
            self._open.pop(sid, None)
            self._locks.pop(sid, None)
            self._pinned.pop(sid, None)
            self._ended[sid] = None
            while len(self._ended) > ENDED_REMEMBERED:
                self._ended.popitem(last=False)

    def open_session_ids(self) -> list[str]:
        with self._lock:
            in_memory = set(self._open)
        return sorted(in_memory | set(self.journal.session_ids()))

    def in_memory(self) -> int:
        return len(self._open)

    def pinned(self) -> dict[str, int]:
        """Open sessions per version key (``base`` for the base model)."""
        with self._lock:
            return dict(collections.Counter(version_key(v) for v in self._pinned.values()))
