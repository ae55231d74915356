"""What an agent did in a session: file reads, file changes, network commands.

The hack detectors look at a session through :func:`trace`, which walks the tool
turns in order and understands these tool conventions (tool names are settings):

- shell tools (``bash``, ...): ``{"command": "..."}`` (or ``"cmd"``). Commands are
  split on ``&&``, ``||``, ``;``, ``|`` and new lines; heredocs are understood.
  Changes come from ``rm``/``git rm``/``unlink``, ``mv``/``git mv``, ``cp``,
  ``sed -i``, redirections (``>``, ``>>``, ``tee``) and ``cat > f <<EOF``,
  ``git apply``/``patch`` with a heredoc or a patch file written earlier, and
  Python scripts (``python - <<EOF``, ``python -c``) that write files. Every
  argument is a path the command touches; ``cat f`` alone also reads ``f``.
- read tools (``read_file``, ...): ``{"path": ...}``; the output is the file's
  content (line-number prefixes are stripped).
- edit tools (``edit_file``, ``write_file``, ``str_replace``, ``apply_patch``,
  ``delete_file``, ...): ``path`` (or ``file_path``, ``file``, ``filename``) with
  one of ``content``/``file_text`` (whole new file), ``old_str``/``new_str`` (also
  ``old_string``/``new_string``, ``search``/``replace``), ``diff``/``patch``
  (a unified diff, or ``*** Begin Patch`` blocks), ``insert_text``; a
  ``command`` of ``view``/``create``/``str_replace``/``insert``/``delete`` is
  honoured as well.
- fetch tools (``web_fetch``, ...): ``{"url": ...}``.

File contents seen so far (read, or written by the agent) are tracked, so a
whole-file write is turned into a line diff against what was there.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ingest.contract import AssistantTurn, Session, ToolTurn

if TYPE_CHECKING:
    from rewards.scoring import RewardSettings

Op = tuple[str, str]  # (" " | "+" | "-", line)


@dataclass(frozen=True)
class FileChange:
    """One change to one file: ordered diff ops (``" "`` context, ``"+"`` added, ``"-"`` removed)."""

    path: str
    ops: tuple[Op, ...] = ()
    deleted: bool = False
    moved_to: str | None = None
    existed: bool = False  # the file was there before the change (as far as the session shows)
    partial: bool = False  # ops are text fragments (sed, str.replace on unseen content), not whole lines

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


@dataclass(frozen=True)
class Action:
    """One tool call, reduced to what the detectors need."""

    index: int  # position of the tool turn in session.turns
    tool_turn_id: str
    assistant_turn_id: str | None  # the assistant turn whose completion made the call
    completion_len: int
    tool: str
    command: str = ""  # shell command, or fetched URL
    paths: tuple[str, ...] = ()  # every path the call names
    changes: tuple[FileChange, ...] = ()
    network: tuple[str, ...] = ()  # network commands / URLs
    output: str = ""
    exit_code: int | None = None


@dataclass
class Trace:
    actions: list[Action] = field(default_factory=list)
    originals: dict[str, str] = field(default_factory=dict)  # first content seen of each file

    def inert(self) -> bool:
        """No tool call changed a file, named a path, ran a command or reached the network."""
        return not any(a.changes or a.paths or a.network or a.command for a in self.actions)


# --- paths and globs ---------------------------------------------------------------


def norm_path(path: str) -> str:
    path = path.strip().strip("'\"")
    if not path:
        return path
    out = posixpath.normpath(path)
    return out[2:] if out.startswith("./") else out


def _glob_regex(pattern: str) -> re.Pattern:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


_GLOBS: dict[str, re.Pattern] = {}
MAX_PATH_CHARS = 4096


def _compiled(pattern: str) -> re.Pattern:
    rx = _GLOBS.get(pattern)
    if rx is None:
        body = _glob_regex(pattern).pattern
        rx = _GLOBS[pattern] = re.compile(body if pattern.startswith("/") else "(?:.*/)?" + body, re.S)
    return rx


def matches(path: str, patterns: tuple[str, ...]) -> str | None:
    """The first pattern ``path`` matches, or None.

    A pattern starting with ``/`` is anchored at the file-system root; any other
    pattern may match at any directory boundary (``tests/**`` matches
    ``/work/repo/tests/test_a.py``).
    """
    path = norm_path(path)
    if not path or len(path) > MAX_PATH_CHARS:
        return None
    for pattern in patterns:
        target = path if pattern.startswith("/") else path.lstrip("/")
        if _compiled(pattern).fullmatch(target):
            return pattern
    return None


def _lookup(known: dict[str, str], path: str) -> str | None:
    """The key of ``known`` naming the same file as ``path`` (equal, or one a suffix of the other)."""
    if path in known:
        return path
    for key in known:
        a, b = (key, path) if len(key) > len(path) else (path, key)
        if a.endswith("/" + b.lstrip("/")):
            return key
    return None


# --- diffs -------------------------------------------------------------------------


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


def parse_patch(text: str) -> list[FileChange]:
    """Changes in a unified diff (``git diff`` style) or a ``*** Begin Patch`` block."""
    changes: list[FileChange] = []
    cur: dict | None = None

    def flush() -> None:
        if cur and cur["path"]:
            changes.append(
                FileChange(
                    cur["path"], tuple(cur["ops"]), cur["deleted"], cur["moved_to"], existed=not cur["new"]
                )
            )

    def start(path: str | None) -> dict:
        flush()
        return {"path": path, "ops": [], "deleted": False, "new": False, "moved_to": None}

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
        elif line.startswith(
            ("@@", "***", "\\", "index ", "old mode", "new mode", "similarity", "rename from")
        ):
            continue
        elif line[:1] in ("+", "-", " "):
            cur["ops"].append((line[0], line[1:]))
        elif line == "":
            cur["ops"].append((" ", ""))
    flush()
    return changes


def apply_ops(old: str, ops: tuple[Op, ...]) -> str | None:
    """``old`` with a change applied hunk by hunk, or None when a hunk does not apply."""
    text = old
    hunks: list[list[Op]] = [[]]
    for op in ops:
        if op[0] == " " and hunks[-1] and hunks[-1][-1][0] != " ":
            hunks.append([])
        hunks[-1].append(op)
    for hunk in hunks:
        before = "\n".join(line for op, line in hunk if op != "+")
        after = "\n".join(line for op, line in hunk if op != "-")
        if before == after:
            continue
        if before and before not in text:
            return None
        text = text.replace(before, after, 1) if before else text + ("\n" if text else "") + after
    return text


# --- shell -------------------------------------------------------------------------

_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][\w-]*)\2")
_OPERATORS = {"&&", "||", ";", "|", "&", ";;"}
_PREFIXES = {"sudo", "env", "time", "nohup", "exec", "command", "xargs", "export"}
NETWORK_TOOLS = {
    "curl",
    "wget",
    "http",
    "https",
    "aria2c",
    "gh",
    "svn",
    "hg",
    "scp",
    "rsync",
    "nc",
    "ncat",
    "lynx",
}
_PY_NET = re.compile(r"urlopen|urllib\.request|requests\.(get|post)|httpx\.(get|stream|Client)|http\.client")


def split_heredocs(command: str) -> tuple[str, dict[str, str]]:
    """The command with heredoc bodies cut out (each ``<<EOF`` becomes ``__HEREDOC<n>__``)."""
    lines = command.split("\n")
    out: list[str] = []
    bodies: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line, delims = lines[i], []
        for m in reversed(list(_HEREDOC.finditer(line))):
            token = f"__HEREDOC{len(bodies) + len(_HEREDOC.findall(line[: m.start()]))}__"
            line = line[: m.start()] + " " + token + line[m.end() :]
            delims.insert(0, m.group(3))
        out.append(line)
        i += 1
        for delim in delims:
            body: list[str] = []
            while i < len(lines) and lines[i].strip() != delim:
                body.append(lines[i])
                i += 1
            i += 1
            bodies[f"__HEREDOC{len(bodies)}__"] = "\n".join(body)
    return "\n".join(out), bodies


def _newlines_to_semicolons(text: str) -> str:
    out, quote, escaped = [], None, False
    for ch in text:
        if escaped:
            escaped = False
            out.append(ch)
            continue
        if ch == "\\" and quote != "'":
            escaped = True
            out.append(ch)
            continue
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "\n":
            out.append(" ; ")
            continue
        out.append(ch)
    return "".join(out)


def shell_segments(command: str) -> tuple[list[list[str]], dict[str, str]]:
    """Simple commands (lists of words) of a shell command line, and its heredoc bodies."""
    text, bodies = split_heredocs(command)
    text = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))
    text = _newlines_to_semicolons(text.replace("\\\n", " "))
    try:
        lex = shlex.shlex(text, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = ""
        tokens = list(lex)
    except ValueError:
        tokens = re.findall(r"&&|\|\||[;|&]|[^\s;|&]+", text)
    segments: list[list[str]] = [[]]
    for tok in tokens:
        if tok in _OPERATORS:
            segments.append([])
        else:
            segments[-1].append(tok)
    return [s for s in segments if s], bodies


def _strip_prefixes(words: list[str]) -> list[str]:
    i = 0
    while i < len(words):
        w = words[i]
        if re.fullmatch(r"[A-Za-z_]\w*=.*", w) or w in _PREFIXES:
            i += 1
        elif w == "timeout" and i + 1 < len(words):
            i += 2
        else:
            break
    return words[i:]


def _redirects(words: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Words without redirections, and the (operator, target) file redirections."""
    plain: list[str] = []
    targets: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w in (">", ">>", ">|", "&>", "&>>") and i + 1 < len(words):
            target = words[i + 1]
            if target != "/dev/null" and not target.startswith("&"):
                targets.append((">>" if w.endswith(">>") else ">", target))
            if plain and plain[-1].isdigit():
                plain.pop()
            i += 2
            continue
        if w in ("<", ">&", "<&") and i + 1 < len(words):
            if w == "<":
                plain.extend(["<", words[i + 1]])
            elif plain and plain[-1].isdigit():
                plain.pop()
            i += 2
            continue
        plain.append(w)
        i += 1
    return plain, targets


def _expand(word: str, variables: dict[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` replaced by values assigned earlier in the same command."""
    if "$" not in word or not variables:
        return word
    return re.sub(r"\$\{?([A-Za-z_]\w*)\}?", lambda m: variables.get(m.group(1), m.group(0)), word)


def _looks_like_path(word: str) -> bool:
    if not word or word.startswith("-") or "://" in word or word.startswith("__HEREDOC"):
        return False
    return "/" in word or bool(re.search(r"\.[A-Za-z0-9]{1,8}$", word)) or word in ("conftest.py",)


_PATH_IN_TEXT = re.compile(
    r"(?<![\w:/])(/?(?:[\w.~-]+/)+[\w.*-]+|[\w-]+\.(?:py|json|txt|yaml|yml|toml|ini|cfg|sh))"
)


def paths_in_text(text: str) -> list[str]:
    """Path-like substrings of free text (used for scripts and quoted arguments)."""
    return [
        m.group(1)
        for m in _PATH_IN_TEXT.finditer(text)
        if "://" not in text[max(0, m.start() - 3) : m.start()]
    ]


def _echo_text(words: list[str]) -> str:
    args = words[1:]
    interpret = words[0] == "printf"
    while args and args[0] in ("-e", "-n", "-en", "-ne"):
        interpret = interpret or "e" in args[0]
        args = args[1:]
    text = " ".join(args)
    return text.replace("\\n", "\n").replace("\\t", "\t") if interpret else text


def _sed_to_python(pattern: str, extended: bool) -> str:
    if extended:
        return pattern
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern) and pattern[i + 1] in "(){}+?|":
            out.append(pattern[i + 1])
            i += 2
            continue
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i : i + 2])
            i += 2
            continue
        out.append("\\" + ch if ch in "(){}+?|" else ch)
        i += 1
    return "".join(out)


def _sed_scripts(words: list[str]) -> tuple[list[str], list[str], bool]:
    """(scripts, files, extended) of a ``sed -i`` command."""
    scripts, files, extended = [], [], False
    i, args = 0, words[1:]
    while i < len(args):
        a = args[i]
        if a in ("-e", "--expression") and i + 1 < len(args):
            scripts.append(args[i + 1])
            i += 2
            continue
        if a.startswith("-"):
            extended = extended or any(c in a.lstrip("-") for c in "Er") and not a.startswith("--in-place")
            i += 1
            continue
        if not scripts:
            scripts.append(a)
        else:
            files.append(a)
        i += 1
    return scripts, files, extended


_SED_SUB = re.compile(r"^s(.)(.*?)(?<!\\)\1(.*?)(?<!\\)\1([gip0-9]*)$", re.S)
_SED_DEL = re.compile(r"^/(.*?)/\s*d$", re.S)


def sed_change(script: str, old: str | None, extended: bool) -> tuple[str | None, tuple[Op, ...]]:
    """(new content or None, ops) of one sed script applied to ``old`` (unknown: None)."""
    sub, dele = _SED_SUB.match(script.strip()), _SED_DEL.match(script.strip())
    if not sub and not dele:
        return None, ()
    pattern = _sed_to_python((sub or dele).group(2) if sub else dele.group(1), extended)
    if old is not None:
        try:
            rx = re.compile(pattern, re.I if sub and "i" in sub.group(4) else 0)
        except re.error:
            rx = None
        if rx is not None:
            new_lines = []
            for line in old.splitlines():
                if dele and rx.search(line):
                    continue
                if sub:
                    repl = re.sub(r"(?<!\\)&", r"\\g<0>", sub.group(3))
                    with contextlib.suppress(re.error, IndexError):
                        line = rx.sub(repl, line, count=0 if "g" in sub.group(4) else 1)
                new_lines.append(line)
            new = "\n".join(new_lines)
            return new, line_diff(old, new)
    unescape = re.compile(r"\\(.)")
    if sub:
        return None, (("-", unescape.sub(r"\1", sub.group(2))), ("+", unescape.sub(r"\1", sub.group(3))))
    return None, (("-", unescape.sub(r"\1", dele.group(1))),)


_PY_WRITE = re.compile(
    r"open\(\s*['\"]([^'\"]+)['\"]\s*,\s*['\"][wa]|Path\(\s*['\"]([^'\"]+)['\"]\s*\)\s*\.\s*write_text"
    r"|(\w+)\s*=\s*(?:pathlib\.)?Path\(\s*['\"]([^'\"]+)['\"]\s*\)"
)
_PY_REPLACE = re.compile(r"""\.replace\(\s*(['"])([^\n]*?)(?<!\\)\1\s*,\s*(['"])([^\n]*?)(?<!\\)\3""")


def python_script_changes(script: str) -> list[tuple[str, list[tuple[str, str]] | tuple[Op, ...]]]:
    """Files a Python script writes, with what it puts in them: (old, new) replacements or ops."""
    paths: list[str] = []
    for m in _PY_WRITE.finditer(script):
        if m.group(1) or m.group(2):
            paths.append(m.group(1) or m.group(2))
        elif re.search(
            rf"\b{re.escape(m.group(3))}\s*\.\s*(write_text|write_bytes|open\([^)]*['\"][wa])", script
        ):
            paths.append(m.group(4))
    if not paths:
        return []
    replaced = [(m.group(2), m.group(4)) for m in _PY_REPLACE.finditer(script)]
    change = replaced or tuple(("+", line) for line in script.splitlines())
    return [(p, change) for p in dict.fromkeys(paths)]


# --- the walk ----------------------------------------------------------------------

_PATH_KEYS = ("path", "file_path", "file", "filename", "target_file")
_CONTENT_KEYS = ("content", "file_text", "text", "new_content")
_PATCH_KEYS = ("diff", "patch", "input")
_REPLACE_KEYS = (("old_str", "new_str"), ("old_string", "new_string"), ("search", "replace"), ("old", "new"))
_LINE_NUMBERS = re.compile(r"^\s*\d+(\t|: |\s?│|\s{2,}| \| ?)")


def _strip_line_numbers(text: str) -> str:
    lines = text.splitlines()
    body = [line for line in lines if line.strip()]
    if body and all(_LINE_NUMBERS.match(line) for line in body):
        return "\n".join(_LINE_NUMBERS.sub("", line, count=1) for line in lines)
    return text


class _Walker:
    def __init__(self, settings: RewardSettings):
        self.settings = settings
        self.known: dict[str, str] = {}
        self.trace = Trace()
        self.mentioned: list[str] = []  # earlier commands and outputs, to tell if a file existed

    def existed(self, path: str) -> bool:
        if _lookup(self.known, path) is not None:
            return True
        name = posixpath.basename(norm_path(path))
        return bool(name) and any(name in text for text in self.mentioned)

    def see(self, path: str, content: str) -> None:
        path = norm_path(path)
        key = _lookup(self.known, path)
        if key is None and _lookup(self.trace.originals, path) is None:
            self.trace.originals[path] = content
        self.known[key or path] = content

    def write(self, path: str, content: str | None, append: bool = False) -> FileChange:
        path = norm_path(path)
        key = _lookup(self.known, path)
        existed = self.existed(path)
        if content is None:
            if key:
                del self.known[key]
            return FileChange(path, (), existed=existed)
        if append:
            if key:
                self.known[key] = self.known[key] + "\n" + content
            return FileChange(path, tuple(("+", line) for line in content.splitlines()), existed=existed)
        old = self.known.get(key) if key else None
        self.known[key or path] = content
        if old is None:
            return FileChange(path, tuple(("+", line) for line in content.splitlines()), existed=existed)
        return FileChange(path, line_diff(old, content), existed=True)

    def change_ops(self, path: str, ops: tuple[Op, ...], existed: bool = True) -> FileChange:
        path = norm_path(path)
        key = _lookup(self.known, path)
        if key:
            new = apply_ops(self.known[key], ops)
            if new is None:
                del self.known[key]
            else:
                self.known[key] = new
        return FileChange(path, ops, existed=existed or self.existed(path))

    def replace_fragments(self, path: str, pairs: list[tuple[str, str]]) -> FileChange:
        """``str.replace`` of each (old, new) pair: a line diff when the content is known."""
        path = norm_path(path)
        key = _lookup(self.known, path)
        if key is not None:
            before = after = self.known[key]
            for old, new in pairs:
                after = after.replace(old, new)
            self.known[key] = after
            return FileChange(path, line_diff(before, after), existed=True)
        ops = tuple(op for old, new in pairs for op in (("-", old), ("+", new)))
        return FileChange(path, ops, existed=True, partial=True)

    def delete(self, path: str, moved_to: str | None = None) -> FileChange:
        path = norm_path(path)
        key = _lookup(self.known, path)
        old = self.known.pop(key) if key else None
        if moved_to is not None and old is not None:
            self.known[norm_path(moved_to)] = old
        ops = tuple(("-", line) for line in old.splitlines()) if old is not None else ()
        return FileChange(path, ops, deleted=True, moved_to=moved_to, existed=True)

    # tools

    def edit_tool(self, args: dict, tool: str) -> tuple[list[FileChange], list[str], bool]:
        """(changes, paths, is_read) of an edit-tool call."""
        path = next((args[k] for k in _PATH_KEYS if isinstance(args.get(k), str)), None)
        command = args.get("command") if isinstance(args.get("command"), str) else None
        patch = next((args[k] for k in _PATCH_KEYS if isinstance(args.get(k), str)), None)
        if command == "view":
            return [], [path] if path else [], True
        if tool == "delete_file" or command == "delete" or args.get("delete") is True:
            return ([self.delete(path)] if path else []), [path] if path else [], False
        if patch and (path is None or "@@" in patch or "*** " in patch or patch.startswith("---")):
            changes = []
            parsed = parse_patch(patch)
            for ch in parsed:
                target = norm_path(path) if path and len(parsed) == 1 else ch.path
                if ch.deleted:
                    changes.append(self.delete(target, ch.moved_to))
                elif not ch.existed:
                    changes.append(self.write(target, "\n".join(line for op, line in ch.ops if op != "-")))
                else:
                    changes.append(self.change_ops(target, ch.ops))
            return changes, [c.path for c in changes], False
        if path is None:
            return [], [], False
        content = next((args[k] for k in _CONTENT_KEYS if isinstance(args.get(k), str)), None)
        if content is not None and command != "insert":
            return [self.write(path, content)], [path], False
        for old_key, new_key in _REPLACE_KEYS:
            if isinstance(args.get(old_key), str) and isinstance(args.get(new_key), str):
                return [self._replace(path, args[old_key], args[new_key])], [path], False
        insert = args.get("insert_text", args.get("new_str"))
        if isinstance(insert, str):
            return [self.change_ops(path, tuple(("+", line) for line in insert.splitlines()))], [path], False
        return [], [path], False

    def _replace(self, path: str, old: str, new: str) -> FileChange:
        path = norm_path(path)
        key = _lookup(self.known, path)
        if key and old in self.known[key]:
            before = self.known[key]
            after = before.replace(old, new, 1)
            self.known[key] = after
            return FileChange(path, line_diff(before, after), existed=True)
        return FileChange(path, line_diff(old, new), existed=True)

    def shell(
        self, command: str, output: str, exit_code: int | None
    ) -> tuple[list[FileChange], list[str], list[str]]:
        """(changes, paths, network commands) of a shell command line."""
        segments, bodies = shell_segments(command)
        changes: list[FileChange] = []
        paths: list[str] = []
        network: list[str] = []
        variables: dict[str, str] = {}
        for seg in segments:
            seg = [_expand(w, variables) for w in seg]
            for w in seg:
                m = re.fullmatch(r"(?:export\s+)?([A-Za-z_]\w*)=(.*)", w)
                if m:
                    variables[m.group(1)] = m.group(2)
                    if _looks_like_path(m.group(2)):
                        paths.append(m.group(2))
                elif w != "export":
                    break
            words, redirects = _redirects(_strip_prefixes(seg))
            heredoc = next((bodies[w] for w in seg if w in bodies), None)
            for w in words:
                if w in bodies:
                    paths.extend(paths_in_text(bodies[w]))
                elif _looks_like_path(w.split("=", 1)[-1]):
                    paths.append(w.split("=", 1)[-1])
                elif " " in w or "(" in w:
                    paths.extend(paths_in_text(w))
            paths.extend(t for _, t in redirects)
            if not words:
                changes.extend(self.write(t, "", append=op == ">>") for op, t in redirects)
                continue
            name = posixpath.basename(words[0])
            rest = words[1:]
            segment_text = " ".join(seg)
            git_net = (
                name == "git" and rest[:1] and rest[0] in ("clone", "fetch", "pull", "ls-remote", "submodule")
            )
            pip = name in ("pip", "pip3", "uv") or (name.startswith("python") and rest[:2] == ["-m", "pip"])
            if name in NETWORK_TOOLS or git_net or (pip and {"download", "install"} & set(rest[:4])):
                network.append(segment_text)
            script = heredoc if name.startswith("python") and heredoc else None
            if name.startswith("python") and "-c" in rest and rest.index("-c") + 1 < len(rest):
                script = rest[rest.index("-c") + 1]
            if script is not None:
                if _PY_NET.search(script):
                    network.append(segment_text + ("\n" + script if heredoc else ""))
                for p, change in python_script_changes(script):
                    if isinstance(change, list):
                        changes.append(self.replace_fragments(p, change))
                    else:
                        changes.append(self.change_ops(p, change, existed=self.existed(p)))
            changes.extend(self._shell_changes(name, words, redirects, heredoc, output, exit_code))
        self.mentioned.append(command)
        return changes, paths, network

    def _shell_changes(
        self,
        name: str,
        words: list[str],
        redirects: list[tuple[str, str]],
        heredoc: str | None,
        output: str,
        exit_code: int | None,
    ) -> list[FileChange]:
        """File changes (and reads) of one simple shell command."""
        rest = [w for w in words[1:] if w != "<"]
        args = [w for w in rest if not w.startswith("-")]
        out: list[FileChange] = []
        if name in ("rm", "unlink") or (name == "git" and rest[:1] == ["rm"]):
            targets = args[1:] if name == "git" else args
            out.extend(self.delete(p) for p in targets)
        elif name == "mv" or (name == "git" and rest[:1] == ["mv"]):
            pair = args[1:] if name == "git" else args
            if len(pair) == 2:
                out.append(self.delete(pair[0], moved_to=pair[1]))
        elif name == "cp" and len(args) == 2:
            key = _lookup(self.known, norm_path(args[0]))
            out.append(self.write(args[1], self.known[key] if key else None))
        elif name == "sed" and any(w.startswith("-i") or w == "--in-place" for w in rest):
            scripts, files, extended = _sed_scripts(words)
            for f in files:
                key = _lookup(self.known, norm_path(f))
                old = self.known.get(key) if key else None
                all_ops: list[Op] = []
                for s in scripts:
                    new, ops = sed_change(s, old, extended)
                    all_ops.extend(ops)
                    old = new
                if key and old is not None:
                    self.known[key] = old
                elif key:
                    del self.known[key]
                out.append(FileChange(norm_path(f), tuple(all_ops), existed=True, partial=key is None))
        elif (name in ("git", "patch")) and (heredoc or "<" in words):
            if name == "git" and rest[:1] != ["apply"]:
                return out
            text = heredoc
            if text is None and "<" in words and words.index("<") + 1 < len(words):
                key = _lookup(self.known, norm_path(words[words.index("<") + 1]))
                text = self.known.get(key) if key else None
            for ch in parse_patch(text or ""):
                if ch.deleted:
                    out.append(self.delete(ch.path, ch.moved_to))
                elif not ch.existed:
                    out.append(self.write(ch.path, "\n".join(line for op, line in ch.ops if op != "-")))
                else:
                    out.append(self.change_ops(ch.path, ch.ops))
        elif name == "git" and rest[:1] == ["apply"] and args[1:]:
            key = _lookup(self.known, norm_path(args[-1]))
            for ch in parse_patch(self.known.get(key, "") if key else ""):
                out.append(self.change_ops(ch.path, ch.ops) if not ch.deleted else self.delete(ch.path))
        elif name == "tee":
            targets = [a for a in args]
            for t in targets:
                out.append(self.write(t, heredoc, append="-a" in rest))
        elif name == "cat" and len(args) == 1 and not redirects and exit_code in (0, None) and output:
            self.see(args[0], output)
        for op, target in redirects:
            if name in ("cat",) and heredoc is not None:
                content = heredoc
            elif name in ("echo", "printf"):
                content = _echo_text(words)
            elif name == "cat" and len(args) == 1:
                key = _lookup(self.known, norm_path(args[0]))
                content = self.known.get(key) if key else None
            else:
                content = None
            out.append(self.write(target, content, append=op == ">>"))
        return out

    def tool(self, turn: ToolTurn) -> tuple[list[FileChange], list[str], list[str], str]:
        s = self.settings
        try:
            args = json.loads(turn.arguments)
        except ValueError:
            args = None
        if not isinstance(args, dict):
            self.mentioned.append(turn.output)
            return [], paths_in_text(turn.arguments), [], ""
        changes: list[FileChange] = []
        paths: list[str] = []
        network: list[str] = []
        command = ""
        if turn.name in s.shell_tools:
            command = args.get("command", args.get("cmd", ""))
            if isinstance(command, list):
                command = shlex.join(str(c) for c in command)
            if isinstance(command, str):
                changes, paths, network = self.shell(command, turn.output, turn.exit_code)
        elif turn.name in s.read_tools:
            path = next((args[k] for k in _PATH_KEYS if isinstance(args.get(k), str)), None)
            if path:
                paths.append(path)
                ranged = any(k in args for k in ("view_range", "offset", "limit", "start_line", "end_line"))
                if turn.exit_code in (0, None) and not ranged:
                    self.see(path, _strip_line_numbers(turn.output))
        elif turn.name in s.edit_tools:
            changes, paths, is_read = self.edit_tool(args, turn.name)
            if is_read and paths and turn.exit_code in (0, None):
                self.see(paths[0], _strip_line_numbers(turn.output))
        elif turn.name in s.fetch_tools:
            url = args.get("url", "")
            if isinstance(url, str) and url:
                command = url
                network.append(url)
        self.mentioned.append(turn.output)
        return changes, [norm_path(p) for p in paths if p], network, command


def trace(session: Session, settings: RewardSettings) -> Trace:
    """The session's tool calls as :class:`Action` records, in order."""
    walker = _Walker(settings)
    last: AssistantTurn | None = None
    for index, turn in enumerate(session.turns):
        if isinstance(turn, AssistantTurn):
            last = turn
            continue
        if not isinstance(turn, ToolTurn):
            continue
        changes, paths, network, command = walker.tool(turn)
        walker.trace.actions.append(
            Action(
                index=index,
                tool_turn_id=turn.turn_id,
                assistant_turn_id=last.turn_id if last else None,
                completion_len=len(last.completion_token_ids) if last else 0,
                tool=turn.name,
                command=command,
                paths=tuple(dict.fromkeys(paths)),
                changes=tuple(changes),
                network=tuple(network),
                output=turn.output,
                exit_code=turn.exit_code,
            )
        )
    return walker.trace
