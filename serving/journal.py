"""Append-only journal of open sessions: one JSONL file per session, fsynced per entry.

The first line of a file is the session's header (``kind: "start"``); every
later line adds the turns of one request (``kind: "turns"``). A crash can tear
only the last line, which was never acknowledged to the client, so a torn last
line is ignored on reading. A file is deleted only after its session record is
acknowledged by the broker (or dead-lettered).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ingest.durable import append_durable


class JournalError(RuntimeError):
    pass


class SessionJournal:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, session_id: str) -> Path:
        # Session ids may hold "/" and be 128 chars long: name files by a hash of the id.
        return self.folder / f"{hashlib.sha256(session_id.encode()).hexdigest()[:32]}.jsonl"

    def start(self, header: dict) -> None:
        line = json.dumps({"kind": "start", **header}) + "\n"
        append_durable(self.path(header["session_id"]), line.encode(), new=True)

    def append(self, session_id: str, entry: dict) -> None:
        append_durable(self.path(session_id), (json.dumps({"kind": "turns", **entry}) + "\n").encode())

    def read(self, session_id: str) -> list[dict] | None:
        """The entries of an open session (header first), or None if it has no journal.

        A torn last line is cut off the file, so later appends start on a clean line."""
        path = self.path(session_id)
        if not path.exists():
            return None
        data = path.read_bytes()
        complete, _, torn = data.rpartition(b"\n")
        if torn:
            os.truncate(path, len(complete) + 1 if complete else 0)
        if not complete:
            path.unlink()  # only a torn header: that session never got an answer
            return None
        entries = []
        for i, line in enumerate(complete.split(b"\n")):
            try:
                entries.append(json.loads(line))
            except ValueError:
                raise JournalError(f"{path}: line {i + 1} is not JSON") from None
        if entries[0].get("kind") != "start" or entries[0].get("session_id") != session_id:
            raise JournalError(f"{path}: the first line is not the header of session {session_id!r}")
        return entries

    def delete(self, session_id: str) -> None:
        self.path(session_id).unlink(missing_ok=True)

    def headers(self) -> list[dict]:
        """The header of every session with a journal."""
        headers = []
        for path in sorted(self.folder.glob("*.jsonl")):
            with path.open() as fh:
                first = fh.readline()
            try:
                header = json.loads(first)
                header["session_id"]  # noqa: B018
            except (ValueError, KeyError, TypeError):
                continue  # a header torn by a crash: that session never got an answer
            headers.append(header)
        return headers

    def session_ids(self) -> list[str]:
        """Ids of every session with a journal."""
        return [h["session_id"] for h in self.headers()]
