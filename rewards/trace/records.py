"""What the walk over a session produces: tool calls, the file changes they made, the trace."""

from __future__ import annotations

from dataclasses import dataclass, field

Op = tuple[str, str]  # (" " | "+" | "-", line)


@dataclass(frozen=True)
class FileChange:
    """One change to one file: ordered diff ops (``" "`` context, ``"+"`` added, ``"-"`` removed).

    ``before`` and ``after`` hold the whole file when the session shows it (read earlier, or
    written whole), else None.
    """

    path: str
    ops: tuple[Op, ...] = ()
    deleted: bool = False
    moved_to: str | None = None
    # the file was there before the change (as far as the session shows); for a deletion, before the
    # session: removing a scratch file the session made itself removes nothing of the project's
    existed: bool = False
    partial: bool = False  # ops are text fragments (sed, str.replace on unseen content), not whole lines
    before: str | None = None
    after: str | None = None
    hunks: tuple[int, ...] = ()  # where a patch's hunks start in ``ops`` (``@@`` lines)

    @property
    def opaque(self) -> bool:
        """The file was overwritten with content the session does not show."""
        return not self.ops and not self.deleted

    @property
    def added(self) -> list[str]:
        return [line for op, line in self.ops if op == "+"]

    @property
    def removed(self) -> list[str]:
        return [line for op, line in self.ops if op == "-"]


@dataclass(slots=True)
class Call:
    """One tool call, reduced to what the detectors need: what it named, changed, fetched and ran.

    Not changed after the walk that makes it. Not frozen: a frozen dataclass sets each of its 14
    fields through ``object.__setattr__``, which made constructing one 4 times as slow (1.6 µs
    against 0.4), paid for every tool call of every session the reward worker scores."""

    index: int  # position of the tool turn in session.turns
    tool_turn_id: str
    assistant_turn_id: str | None  # the assistant turn whose completion made the call
    completion_len: int
    tool: str
    role: str = "other"  # shell | read | edit | search | fetch | other: what the call does
    command: str = ""  # shell command line, or fetched URL
    paths: tuple[str, ...] = ()  # every path the call names, resolved against its working directory
    changes: tuple[FileChange, ...] = ()
    network: tuple[str, ...] = ()  # network commands, URLs, web queries
    runs: tuple[str, ...] = ()  # programs and scripts it executes (test runners, ./run_tests.sh, make)
    output: str = ""
    exit_code: int | None = None
    cwd: str = ""  # its working directory, where the session shows it


@dataclass
class Trace:
    calls: list[Call] = field(default_factory=list)
    originals: dict[str, str] = field(default_factory=dict)  # first content seen of each file
    files: dict[str, str] = field(default_factory=dict)  # content of each file at the end, where known
    created: set[str] = field(default_factory=set)  # files the session created (were not there before)
    checkouts: set[str] = field(default_factory=set)  # absolute folders where it ran the tests or git

    def inert(self) -> bool:
        """No tool call changed a file, named a path, ran a command or reached the network."""
        return not any(c.changes or c.paths or c.network or c.command for c in self.calls)

    def changes(self):
        """(call, change) of every file change, in order."""
        for call in self.calls:
            for change in call.changes:
                yield call, change
