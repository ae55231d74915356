"""Atomic checkpoints and the append-only ledger.

    <state>/checkpoints/ckpt-00000012/adapter/        the trainable adapter (PEFT folder)
                                     /optimizer.pt      AdamW state
                                     /state.json        offsets, update count, baselines, ledger length, window
    <state>/ledger.jsonl                                one line per consumed record and what became of it

A checkpoint is written under a temporary name, flushed to disk and renamed
into place, so a reader sees a whole checkpoint or none. The ledger is
appended (and flushed) before the checkpoint that covers its lines; the
checkpoint records the ledger's length, and a restart cuts the ledger back to
that length, so lines of work that no checkpoint covers disappear with it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ingest.durable import append_durable, fsync_path, fsync_tree

CKPT_RE = re.compile(r"^ckpt-([0-9]{8})$")


@dataclass
class LearnerState:
    checkpoint: int = 0
    updates: int = 0
    offsets: dict[int, int] = field(default_factory=dict)  # partition → next offset to consume
    ledger_bytes: int = 0
    ledger_live_from: int = 0  # ledger position of the oldest line the de-duplication index still needs
    baselines: dict[str, dict[str, float]] = field(default_factory=dict)
    records: int = 0  # records consumed so far
    window: dict[str, Any] = field(default_factory=dict)  # the current publishing window's run and sums
    head: str = ""  # the version the weights descend from ("base": none; "": not recorded yet)
    rebases: int = 0  # times the learner went back to the champion (learner/lineage.py)
    last_records: dict[int, list] = field(default_factory=dict)  # partition -> [offset, digest] consumed last
    resets: int = 0  # explicit restarts at a recreated topic's first offsets (learner/positions.py)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LearnerState:
        data = json.loads(text)
        data["offsets"] = {int(p): int(o) for p, o in data["offsets"].items()}
        data["last_records"] = {int(p): r for p, r in data.get("last_records", {}).items()}
        return cls(**data)


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    state: LearnerState

    @property
    def adapter_dir(self) -> Path:
        return self.path / "adapter"

    @property
    def optimizer_path(self) -> Path:
        return self.path / "optimizer.pt"


def checkpoints_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "checkpoints"


def latest(state_dir: Path) -> Checkpoint | None:
    root = checkpoints_dir(state_dir)
    if not root.exists():
        return None
    names = sorted(p.name for p in root.iterdir() if CKPT_RE.match(p.name))
    if not names:
        return None
    path = root / names[-1]
    return Checkpoint(path, LearnerState.from_json((path / "state.json").read_text()))


def save(
    state_dir: Path, state: LearnerState, save_adapter, optimizer: torch.optim.Optimizer, keep: int = 2
) -> Checkpoint:
    """Write checkpoint ``state.checkpoint`` atomically; ``save_adapter(folder)`` writes the adapter."""
    root = checkpoints_dir(state_dir)
    root.mkdir(parents=True, exist_ok=True)
    partial = root / f".partial-{state.checkpoint:08d}-{os.getpid()}"
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir()
    save_adapter(partial / "adapter")
    torch.save(optimizer.state_dict(), partial / "optimizer.pt")
    (partial / "state.json").write_text(state.to_json())
    fsync_tree(partial)
    target = root / f"ckpt-{state.checkpoint:08d}"
    partial.rename(target)
    fsync_path(root)
    for old in sorted(p for p in root.iterdir() if CKPT_RE.match(p.name))[:-keep]:
        shutil.rmtree(old)
    return Checkpoint(target, state)


def clean_partials(state_dir: Path) -> int:
    """Remove checkpoints that were being written when the learner died; returns how many."""
    root = checkpoints_dir(state_dir)
    leftovers = list(root.glob(".partial-*")) if root.exists() else []
    for path in leftovers:
        shutil.rmtree(path)
    return len(leftovers)


class Ledger:
    """Append-only JSON lines, durable on return from :meth:`append`."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(exist_ok=True)

    def truncate(self, size: int) -> None:
        with self.path.open("r+b") as fh:
            fh.truncate(size)
            os.fsync(fh.fileno())

    def append(self, entries: list[dict[str, Any]]) -> int:
        """Append ``entries``; returns the ledger's new length in bytes."""
        return append_durable(
            self.path, b"".join(json.dumps(e, sort_keys=True).encode() + b"\n" for e in entries)
        )

    def read(self) -> list[dict[str, Any]]:
        return read_ledger(self.path)


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """A ledger's entries, for any reader: none when there is no file; a torn last line (a write the
    learner was killed in, cut off when it starts again) is left out."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except FileNotFoundError:
        return []
    entries = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except ValueError:
            if i < len(lines) - 1:
                raise
    return entries
