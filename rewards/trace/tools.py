"""What a tool call does, from its name (settings) or else from the shape of its arguments.

Roles: ``shell`` (runs a command line), ``read`` (shows a file), ``edit`` (writes, edits,
patches or deletes files; str_replace editors with a ``command`` verb), ``search`` (grep/glob
style: a pattern over a path), ``fetch`` (a URL or a web query), ``other``.
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any

import pydantic_core

if TYPE_CHECKING:
    from rewards.scoring import RewardSettings

PATH_KEYS = (
    "path", "file_path", "filepath", "file", "filename", "target_file", "absolute_path", "notebook_path",
    "relative_workspace_path", "target", "dir_path", "directory_path",
)  # fmt: skip
CONTENT_KEYS = ("content", "file_text", "text", "new_content", "contents", "code")
FRAGMENT_KEYS = ("code_edit",)  # partial content with "... existing code ..." markers
PATCH_KEYS = ("patch", "diff", "input", "patch_text", "changes")
REPLACE_KEYS = (
    ("old_str", "new_str"),
    ("old_string", "new_string"),
    ("old_text", "new_text"),
    ("search", "replace"),
    ("find", "replace"),
    ("old", "new"),
)
URL_KEYS = ("url", "uri", "href", "link")
COMMAND_KEYS = ("command", "cmd", "commands", "script", "shell_command")
CWD_KEYS = ("workdir", "cwd", "directory", "working_directory", "working_dir", "dir")
RANGE_KEYS = ("view_range", "offset", "limit", "start_line", "end_line", "line_start", "line_end",
              "start_line_one_indexed", "end_line_one_indexed_inclusive", "lines")  # fmt: skip
PATTERN_KEYS = ("pattern", "regex", "query", "glob", "include", "search_term")
EDITOR_VERBS = {"view", "create", "str_replace", "insert", "undo_edit", "delete", "write", "read", "append"}
_KNOWN_KEYS = {
    *PATH_KEYS, *CONTENT_KEYS, *FRAGMENT_KEYS, *PATCH_KEYS, *(k for pair in REPLACE_KEYS for k in pair), *URL_KEYS,
    *COMMAND_KEYS, *PATTERN_KEYS, "edits", "insert_text",
}  # fmt: skip
_PATCH_TEXT = re.compile(r"^(\*\*\* Begin Patch|\*\*\* (Update|Add|Delete) File:|--- |diff --git |@@ )", re.M)


def loads(text: str) -> Any:
    """``json.loads``, parsed by pydantic-core (5x faster on tool arguments); on malformed input
    the standard library parses it again, so the value and the error (``msg``, ``pos``) are its."""
    try:
        return pydantic_core.from_json(text)
    except ValueError:
        return json.loads(text)


@functools.lru_cache(maxsize=256)
def normal(name: str) -> str:
    """``Bash``, ``functions.bash``, ``container.exec`` -> ``bash``, ``bash``, ``container_exec``."""
    name = name.strip().lower()
    if name.startswith(("functions.", "tools.", "default_api.")):
        name = name.split(".", 1)[1]
    return re.sub(r"[^a-z0-9]+", "_", name).strip("_")


@functools.cache
def _keyset(keys: tuple[str, ...]) -> frozenset[str]:
    return frozenset(keys)


def first(args: dict, keys: tuple[str, ...]) -> str | None:
    """The first of ``keys`` (in their order) whose argument is a non-empty string."""
    if args.keys().isdisjoint(_keyset(keys)):  # the usual case, decided without a Python loop
        return None
    return next((args[k] for k in keys if isinstance(args.get(k), str) and args[k]), None)


def is_patch(text: str) -> bool:
    return bool(_PATCH_TEXT.search(text[:4000]))


@functools.lru_cache(maxsize=64)
def _roles(*lists: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for role_name, names in zip(("shell", "edit", "read", "search", "fetch"), lists, strict=True):
        for name in names:
            out.setdefault(normal(name), role_name)
    return out


def role(name: str, args: dict, s: RewardSettings) -> str:
    """The role of a call: by the tool lists in the settings, else by what its arguments hold."""
    n = normal(name)
    by_name = _roles(s.shell_tools, s.edit_tools, s.read_tools, s.search_tools, s.fetch_tools)
    return by_name.get(n) or shape(n, args)


_RUNS_CODE = re.compile(r"python|ipython|jupyter|notebook|run_code|execute_code|code_interpreter|exec")
_RUNS_COMMANDS = re.compile(r"bash|shell|terminal|console|command|cmd|exec|run")


def url_argument(args: dict) -> str | None:
    """A top-level argument that is a URL (a browser's ``target``, a downloader's ``source``)."""
    return next(
        (v.strip() for v in args.values() if isinstance(v, str) and re.match(r"\s*https?://\S+\s*$", v)), None
    )


def raw_arguments(name: str, raw: str, s: RewardSettings) -> dict | None:
    """The arguments a free-form tool input stands for: a patch, a shell tool's command line,
    a fetch tool's URL, a read tool's path (None: nothing to read from it)."""
    by_name = _roles(s.shell_tools, s.edit_tools, s.read_tools, s.search_tools, s.fetch_tools).get(
        normal(name)
    )
    text = raw.strip()
    if is_patch(text):
        return {"patch": text}
    if by_name == "shell":
        return {"command": raw}
    if (by_name == "fetch" or by_name is None) and re.fullmatch(r"https?://\S+", text):
        return {"url": text}
    if by_name == "read" and text and "\n" not in text and not text.startswith("{"):
        return {"path": text}
    return None


def shape(name: str, args: dict) -> str:
    """The role a call's arguments imply, for tools the settings do not name."""
    if isinstance(args.get("code"), str) and not first(args, PATH_KEYS) and _RUNS_CODE.search(name):
        return "python"  # a notebook or code-execution tool
    texts = [v for v in args.values() if isinstance(v, str)]
    if len(texts) == 1 and len(args) <= 2 and _RUNS_COMMANDS.search(name) and not url_argument(args):
        return "shell"  # a terminal that takes one string: the command line
    if args.keys().isdisjoint(_KNOWN_KEYS):
        return "other"
    command = next((args[k] for k in COMMAND_KEYS if k in args), None)
    verb = command if isinstance(command, str) and command in EDITOR_VERBS else None
    if first(args, URL_KEYS) or (first(args, ("query",)) and "web" in name) or url_argument(args):
        return "fetch"
    if verb is not None:
        return "edit"
    if isinstance(command, list) or (isinstance(command, str) and command.strip()):
        return "shell"
    patch = first(args, PATCH_KEYS)
    if patch and is_patch(patch):
        return "edit"
    if first(args, PATH_KEYS) or isinstance(args.get("edits"), list):
        edits = (*CONTENT_KEYS, *FRAGMENT_KEYS, "insert_text", *(k for pair in REPLACE_KEYS for k in pair))
        if any(k in args for k in edits) or isinstance(args.get("edits"), list) or "delete" in name:
            return "edit"
        if first(args, PATTERN_KEYS):
            return "search"
        return "read" if not re.search(r"list|ls|dir|tree", name) else "search"
    if first(args, PATTERN_KEYS):
        return "search"
    return "other"


def strings(value: object) -> list[str]:
    """Every string inside an arguments value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in strings(v)]
    if isinstance(value, list):
        return [t for v in value for t in strings(v)]
    return []


_HEADER = re.compile(
    r"^(Here's the result of running `cat -n` on .*|\[File: .*\]|\(\d+ more lines? (below|above)\)"
    r"|\(this is the (beginning|end) of the file\)|<file>|</file>|File: \S+)\s*$"
)
_LINE_NUMBER = re.compile(r"^\s*L?\d+(\t|\s?→|: ?|\s?│|\s?\|\s?|  )")


def file_text(output: str) -> str:
    """A file's content from a read tool's output: header lines and line-number prefixes removed."""
    lines = [line for line in output.splitlines() if not _HEADER.match(line)]
    body = [line for line in lines if line.strip()]
    if body and all(_LINE_NUMBER.match(line) for line in body):
        lines = [_LINE_NUMBER.sub("", line, count=1) for line in lines]
    text = "\n".join(lines)
    return text + "\n" if output.endswith("\n") and text else text
