"""Shell command lines as simple commands: heredocs, operators, prefixes, redirections, variables.

Pure text handling, no state: :mod:`rewards.trace.commands` says what each simple command
does, :mod:`rewards.trace.walker` keeps the state (working directory, variables, files).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][\w-]*)\2")
_OPERATORS = {"&&", "||", ";", "|", "&", ";;", "(", ")", "|&", ";&", "((", "))", "$("}
_KEYWORDS = {"!", "{", "then", "do", "else", "elif", "if", "while", "until"}
_SKIPPED = {"for", "case", "in", "esac", "fi", "done", "}", "select"}
_RUNNERS = {"run", "exec"}  # uv run, poetry run, pipenv run, pdm run, hatch run, conda run
_ENV_TOOLS = {"uv", "poetry", "pipenv", "pdm", "hatch", "rye", "conda", "mamba", "micromamba", "pixi"}
_VALUE_OPTIONS = {
    "sudo": {"-u", "-g", "-C", "-h", "-p"},
    "env": {"-u", "-C", "-S"},
    "nice": {"-n"},
    "timeout": {"-s", "-k", "--signal", "--kill-after"},
    "xargs": {"-I", "-n", "-P", "-d", "-E", "-L", "-s", "-a"},
    "conda": {"-n", "-p", "--name", "--prefix"},
}


@dataclass
class Simple:
    """One simple command: its words (heredoc bodies as ``__HEREDOC<n>__`` tokens)."""

    words: list[str]
    piped: bool = False  # its standard input is the previous command's output
    via_xargs: bool = False  # its file arguments come from standard input


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
        elif ch == "\n" or ch == "`":
            out.append(" ; ")
            continue
        out.append(ch)
    return "".join(out)


_TOKEN = re.compile(
    r"""(?P<space>\s+)|(?P<op>[;&|()<>]+)|(?P<word>(?:[^\s;&|()<>'"\\]+|'[^']*'|"(?:[^"\\]|\\.)*"|\\.|['"\\])+)""",
    re.S,
)
_PART = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)|([^'"\\]+)|(.)""", re.S)
_DQ_ESCAPE = re.compile(r"""\\([\\"$`])""")


def _unquote(word: str) -> str:
    out = []
    for m in _PART.finditer(word):
        single, double, escaped, plain, stray = m.groups()
        if single is not None:
            out.append(single)
        elif double is not None:
            out.append(_DQ_ESCAPE.sub(r"\1", double))
        else:
            out.append(escaped or plain or stray or "")
    return "".join(out)


def _tokens(text: str) -> list[str]:
    """Words (quotes removed) and operator runs, the way a POSIX shell splits them."""
    out = []
    for m in _TOKEN.finditer(text):
        if m.lastgroup == "op":
            out.append(m.group())
        elif m.lastgroup == "word":
            out.append(_unquote(m.group()))
    return out


# Where toolchains keep installed packages, asked of the tool: their default locations, a path
# instead of a command substitution the parser would split off (outside the workspace)
_LOCATIONS = {"GOMODCACHE": "~/go/pkg/mod", "GOPATH": "~/go", "npm": "/usr/local/lib/node_modules"}
_LOCATION = re.compile(r"\$\(\s*(?:go\s+env\s+(GOMODCACHE|GOPATH)|(npm)\s+root\s+-g)\s*\)")


def _lift_process_substitutions(text: str) -> str:
    """``diff <(make out) expected.txt`` as ``diff /dev/fd/63 expected.txt ; make out``: each process
    substitution a word of its command (a file it reads or writes) and a command of its own."""
    out, lifted, i, quote = [], [], 0, None
    while i < len(text):
        ch = text[i]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "<>" and text.startswith("(", i + 1) and (i == 0 or text[i - 1] in " \t"):
            depth, j = 1, i + 2
            while j < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                j += 1
            if depth == 0:
                lifted.append(_lift_process_substitutions(text[i + 2 : j - 1]))
                out.append("/dev/fd/63")
                i = j
                continue
        out.append(ch)
        i += 1
    return "".join(out) + "".join(f" ; {c}" for c in lifted)


@functools.lru_cache(maxsize=1024)
def parse(command: str) -> tuple[tuple[Simple, ...], dict[str, str]]:
    """The simple commands of a shell command line, in order, and its heredoc bodies (cached:
    callers must not change them)."""
    text, bodies = split_heredocs(command)
    text = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))
    if "$" in text:
        text = _LOCATION.sub(lambda m: _LOCATIONS[m.group(1) or m.group(2)], text)
    text = _newlines_to_semicolons(text.replace("\\\n", " "))
    if "(" in text:
        text = _lift_process_substitutions(text).replace("$(", " ( ")
    out: list[Simple] = []
    words: list[str] = []
    piped = False
    for tok in _tokens(text):
        if tok in _OPERATORS or (tok and set(tok) <= set(";&|()") and tok not in ("&>", "&>>")):
            if words:
                out.append(Simple(words, piped))
            words = []
            piped = tok in ("|", "|&")
        else:
            words.append(tok)
    if words:
        out.append(Simple(words, piped))
    simple = []
    for s in out:
        while s.words and s.words[0] in _KEYWORDS:
            s.words = s.words[1:]
        if s.words and s.words[0] not in _SKIPPED:
            simple.append(s)
    return tuple(simple), bodies


def shell_segments(command: str) -> tuple[list[list[str]], dict[str, str]]:
    """Simple commands (lists of words) of a shell command line, and its heredoc bodies."""
    simple, bodies = parse(command)
    return [s.words for s in simple], bodies


def strip_prefixes(words: list[str]) -> tuple[list[str], bool]:
    """The command after wrappers (``sudo``, ``env X=1``, ``timeout 5``, ``uv run``, ``xargs``...),
    and whether ``xargs`` feeds it."""
    i, via_xargs = 0, False
    while i < len(words):
        w = words[i]
        if re.fullmatch(r"[A-Za-z_]\w*=.*", w, re.S):
            i += 1
        elif w in ("sudo", "env", "time", "nohup", "exec", "command", "builtin", "nice", "stdbuf", "xargs"):
            via_xargs = via_xargs or w == "xargs"
            values = _VALUE_OPTIONS.get(w, set())
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in values else 1
        elif w == "timeout":
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in _VALUE_OPTIONS["timeout"] else 1
            i += 1  # the duration
        elif w in _ENV_TOOLS and i + 1 < len(words) and words[i + 1] in _RUNNERS:
            i += 2
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in _VALUE_OPTIONS["conda"] else 1
        else:
            break
    return words[i:], via_xargs


def redirects(words: list[str]) -> tuple[list[str], list[tuple[str, str]], str | None]:
    """Words without redirections, the (operator, target) file redirections, and a here-string."""
    plain: list[str] = []
    targets: list[tuple[str, str]] = []
    here: str | None = None
    i = 0
    while i < len(words):
        w = words[i]
        if w in (">", ">>", ">|", "&>", "&>>") and i + 1 < len(words):
            target = words[i + 1]
            stderr = bool(plain) and plain[-1] == "2"
            if target != "/dev/null" and not target.startswith("&") and not stderr:
                targets.append((">>" if w.endswith(">>") else ">", target))
            if plain and plain[-1].isdigit():
                plain.pop()
            i += 2
            continue
        if w == "<<<" and i + 1 < len(words):
            here = words[i + 1]
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
    return plain, targets, here


_VARIABLE = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")


def expand(word: str, variables: dict[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` replaced by values assigned earlier in the session."""
    if "$" not in word or not variables:
        return word
    return _VARIABLE.sub(lambda m: variables.get(m.group(1), m.group(0)), word)


def echo_text(words: list[str]) -> str:
    args = words[1:]
    interpret = words[0] == "printf"
    while args and args[0] in ("-e", "-n", "-en", "-ne"):
        interpret = interpret or "e" in args[0]
        args = args[1:]
    text = " ".join(args)
    return text.replace("\\n", "\n").replace("\\t", "\t") if interpret else text


def inline_script(words: list[str], flags: tuple[str, ...] = ("-c",)) -> str | None:
    """The script text of ``python -c CODE``, ``bash -lc CODE``, ``perl -e CODE`` (any flag cluster)."""
    for i, w in enumerate(words[1:-1], start=1):
        if w in flags or (
            re.fullmatch(r"-[a-zA-Z]+", w) and any(f.lstrip("-") in w[1:] for f in flags if len(f) == 2)
        ):
            return words[i + 1]
    return None
