"""Diffs: line diffs of two versions, unified and ``*** Begin Patch`` patches, applying hunks."""

from __future__ import annotations

import difflib
import re
from typing import NamedTuple

from rewards.trace.paths import norm_path
from rewards.trace.records import FileChange, Op


def line_diff(old: str, new: str) -> tuple[Op, ...]:
    a, b = old.splitlines(), new.splitlines()
    ops: list[Op] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            ops.extend((" ", line) for line in a[i1:i2])
        else:
            ops.extend(("-", line) for line in a[i1:i2])
            ops.extend(("+", line) for line in b[j1:j2])
    return tuple(ops)


class ShownDiff(NamedTuple):
    ops: tuple[Op, ...]
    hunks: tuple[int, ...]  # where each hunk starts in ops
    cut: bool  # the tool cut the diff short ("... (+36 lines)"): lines it changed are not shown


# an edit tool's note that it shows only part of the diff: ``... (+36 lines)``, ``... 12 more lines``,
# or a bare ``...`` in the first column (where no line of a diff starts)
_CUT_SHORT = re.compile(r"^(?:[+ ]?\s*\.\.\.\s*\(?\+?\d+ (?:more )?lines?\)?|\.\.\.)\s*$")


def shown_diff(output: str) -> ShownDiff | None:
    """The hunks of a diff an edit tool's output shows of the edit it applied (``@@ -37,10 +37,14 @@``,
    then context, ``-`` and ``+`` lines, up to the first other line), or None when it shows no
    removed or added line. A note that the diff is cut short is no line of it."""
    lines = output.splitlines()
    kept = [line for line in lines if not _CUT_SHORT.match(line)]
    cut, lines = len(kept) < len(lines), kept
    first = next((i for i, line in enumerate(lines) if line.startswith("@@")), len(lines))
    # a first hunk shown without its ``@@`` line, the later ones with theirs
    ops: list[Op] = _headless_diff("\n".join(lines[:first]))
    hunks: list[int] = [0] if ops else []
    inside = False
    for line in lines[first:]:
        if line.startswith("@@"):
            hunks.append(len(ops))
            inside = True
        elif inside and line[:1] in (" ", "-", "+", "") and not line.startswith(("--- ", "+++ ")):
            ops.append((line[:1] or " ", line[1:]))
        else:
            inside = False  # the fence or the words after the diff
    if not any(op != " " for op, _ in ops):
        return None
    return ShownDiff(tuple(ops), tuple(hunks), cut)


def _headless_diff(output: str) -> list[Op]:
    """One hunk without its ``@@`` line, as some edit tools show it: the lines after the line that
    introduces it (``... made the following changes to the file:``, or a fence), every one context,
    ``-`` or ``+``, up to the first other line."""
    ops: list[Op] = []
    inside = False
    for line in output.splitlines():
        if not inside:
            inside = line.rstrip().endswith(":") or line.startswith("```")
        elif line[:1] in (" ", "-", "+", "") and not line.startswith(("--- ", "+++ ")):
            ops.append((line[:1] or " ", line[1:]))
        elif ops:
            break
        else:
            inside = line.rstrip().endswith(":") or line.startswith("```")
    while ops and ops[-1] == (" ", ""):
        ops.pop()
    while ops and ops[0] == (" ", ""):
        ops.pop(0)
    return ops if any(op == "+" for op, _ in ops) and any(op in "- " and x.strip() for op, x in ops) else []


def parse_patch(text: str) -> list[FileChange]:
    """Changes in a unified diff (``git diff`` style) or a ``*** Begin Patch`` block."""
    changes: list[FileChange] = []
    cur: dict | None = None

    def flush() -> None:
        if cur and cur["path"]:
            changes.append(
                FileChange(
                    cur["path"],
                    tuple(cur["ops"]),
                    cur["deleted"],
                    cur["moved_to"],
                    existed=not cur["new"],
                    hunks=tuple(dict.fromkeys(cur["hunks"])),
                )
            )

    def start(path: str | None) -> dict:
        flush()
        return {"path": path, "ops": [], "deleted": False, "new": False, "moved_to": None, "hunks": []}

    lines = text.splitlines()
    for i, line in enumerate(lines):
        codex = re.match(r"\*\*\* (Update|Add|Delete) File: (.+)$", line)
        if codex:
            cur = start(norm_path(codex.group(2)))
            cur["new"], cur["deleted"] = codex.group(1) == "Add", codex.group(1) == "Delete"
        elif line.startswith("diff --git "):
            m = re.match(r"diff --git a/(\S+) b/(\S+)", line)
            cur = start(norm_path(m.group(1)) if m else None)
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            src = line[4:].split("\t")[0].strip()
            if cur is None or cur["ops"]:
                cur = start(None)
            if src == "/dev/null":
                cur["new"] = True
            else:
                cur["path"] = norm_path(re.sub(r"^a/", "", src))
        elif line.startswith("+++ ") and cur is not None and not cur["ops"]:
            dst = line[4:].split("\t")[0].strip()
            if dst == "/dev/null":
                cur["deleted"] = True
            else:
                cur["path"] = norm_path(re.sub(r"^b/", "", dst))
        elif cur is None:
            continue
        elif line.startswith("*** Move to: "):
            cur["moved_to"] = norm_path(line[len("*** Move to: ") :])
        elif line.startswith("new file mode"):
            cur["new"] = True
        elif line.startswith("deleted file mode"):
            cur["deleted"] = True
        elif line.startswith("rename to "):
            cur["moved_to"] = norm_path(line[len("rename to ") :])
        elif line.startswith("@@"):
            cur["hunks"].append(len(cur["ops"]))
        elif line.startswith(("***", "\\", "index ", "old mode", "new mode", "similarity", "rename from")):
            continue
        elif line[:1] in ("+", "-", " "):
            cur["ops"].append((line[0], line[1:]))
        elif line == "":
            cur["ops"].append((" ", ""))
    flush()
    return changes


def _apply_hunk(text: str, hunk: list[Op]) -> str | None:
    before = "\n".join(line for op, line in hunk if op != "+")
    after = "\n".join(line for op, line in hunk if op != "-")
    if before == after:
        return text
    if before and before not in text:
        return None
    return text.replace(before, after, 1) if before else text + ("\n" if text else "") + after


def apply_ops(old: str, ops: tuple[Op, ...], starts: tuple[int, ...] = ()) -> str | None:
    """``old`` with a change applied hunk by hunk (hunks start at ``starts``, else after each run of
    changed lines), or None when a hunk does not apply."""
    text: str | None = old
    cuts = sorted({0, *starts, len(ops)})
    for a, b in zip(cuts, cuts[1:], strict=False):
        whole = list(ops[a:b])
        applied = _apply_hunk(text, whole) if starts else None
        if applied is None:
            pieces: list[list[Op]] = [[]]
            for op in whole:
                if op[0] == " " and pieces[-1] and pieces[-1][-1][0] != " ":
                    pieces.append([])
                pieces[-1].append(op)
            applied = text
            for piece in pieces:
                applied = _apply_hunk(applied, piece) if applied is not None else None
        if applied is None:
            return None
        text = applied
    return text
