"""Paths: normalising, resolving against a working directory, glob matching, finding them in text."""

from __future__ import annotations

import posixpath
import re

MAX_PATH_CHARS = 4096


def norm_path(path: str) -> str:
    path = path.strip().strip("'\"")
    if not path:
        return path
    out = posixpath.normpath(path)
    return out[2:] if out.startswith("./") else out


def resolve(path: str, cwd: str) -> str:
    """``path`` as the session names it, made absolute when it is relative to a known directory."""
    path = norm_path(path)
    if not path or not cwd or path.startswith(("/", "~", "$")):
        return path
    return norm_path(posixpath.join(cwd, path))


def _glob_regex(pattern: str) -> str:
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
    return "".join(out)


_GLOBS: dict[str, re.Pattern] = {}


def _compiled(pattern: str) -> re.Pattern:
    rx = _GLOBS.get(pattern)
    if rx is None:
        body = _glob_regex(pattern)
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


def same_file(a: str, b: str) -> bool:
    """``a`` and ``b`` name one file: equal, or one a suffix of the other at a directory boundary."""
    if a == b:
        return True
    long, short = (a, b) if len(a) > len(b) else (b, a)
    if not short or short.startswith("/") or not long.endswith("/" + short):
        return False
    # ``../upstream/src/x.py`` leaves the working folder: another checkout's file, not ``src/x.py``
    return ".." not in long[: -len(short)].split("/")


def lookup(known: dict[str, str] | set[str], path: str) -> str | None:
    """The key of ``known`` naming the same file as ``path``."""
    if path in known:
        return path
    for key in known:
        if same_file(key, path):
            return key
    return None


def looks_like_path(word: str) -> bool:
    if not word or word.startswith("-") or "://" in word or word.startswith("__HEREDOC"):
        return False
    if len(word) > MAX_PATH_CHARS or any(c in word for c in " \n(){}<>|;,'\"=") and not word.startswith("/"):
        return False
    return "/" in word or bool(re.search(r"\.[A-Za-z0-9]{1,8}$", word))


_PATH_IN_TEXT = re.compile(
    r"(?<![\w:/.$*?\]-])(/?(?:[\w.~-]+/)+[\w.*-]+/?|/[A-Za-z_][\w.-]*(?=['\"\s)]|$)"  # not inside a glob
    r"|[\w-]+\.(?:py|json|txt|yaml|yml|toml|ini|cfg|sh|md|csv|out|ans|expected|patch|diff))"
)


def paths_in_text(text: str) -> list[str]:
    """Path-like substrings of free text (scripts, quoted arguments, unknown tools' arguments)."""
    return [
        m.group(1)
        for m in _PATH_IN_TEXT.finditer(text[:100_000])
        if "://" not in text[max(0, m.start() - 3) : m.start()] and not m.group(1).startswith("//")
    ]


def parents(path: str, depth: int = 64) -> list[str]:
    """The directories above ``path``, nearest first. Of a path more than ``depth`` folders deep
    (no file system's), only the ``depth`` nearest the root: each parent is a copy of the path
    up to it, so all of them would cost the square of its length."""
    out = []
    if path.count("/") > depth:
        cut = -1
        for _ in range(depth + 1):
            cut = path.index("/", cut + 1)
        path = path[:cut]
        out.append(path)
    while "/" in path.strip("/"):
        path = posixpath.dirname(path.rstrip("/"))
        out.append(path)
    return out
