"""Python code as the detectors read it: literal values, code lines without docstrings and comments,
tolerant parsing of whole files and of fragments."""

from __future__ import annotations

import ast
import functools
import io
import operator
import re
import tokenize
from collections.abc import Iterable
from typing import Any


def key(value: Any) -> Any:
    """A hashable, type-tolerant key: 4 == 4.0, lists == tuples."""
    if isinstance(value, bool) or value is None:
        return ("const", value)
    if isinstance(value, int | float):
        return ("num", float(value))
    if isinstance(value, str | bytes):
        return ("str", value)
    if isinstance(value, list | tuple):
        return ("seq", tuple(key(v) for v in value))
    if isinstance(value, set | frozenset):
        return ("set", tuple(sorted(repr(key(v)) for v in value)))
    if isinstance(value, dict):
        return ("map", tuple(sorted((repr(key(k)), repr(key(v))) for k, v in value.items())))
    return ("other", repr(value))


def distinctive(value: Any) -> bool:
    """A value too specific to turn up in a fix by chance."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int):
        return abs(value) >= 11
    if isinstance(value, float):
        return abs(value) >= 11 or not value.is_integer() and abs(value) not in (0.5, 0.25, 0.1)
    if isinstance(value, str | bytes):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        return len(text.strip()) >= 3 and not re.fullmatch(r"[A-Za-z_]+", text)
    if isinstance(value, list | tuple | set | frozenset):
        return len(value) >= 2 or any(distinctive(v) for v in value)
    if isinstance(value, dict):
        return len(value) >= 1
    return False


def nontrivial(value: Any) -> bool:
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float):
        return value not in (0, 1)
    if isinstance(value, str | bytes):
        return len(value.strip()) > 0
    return len(value) > 0


def literal(node: ast.AST) -> tuple[bool, Any]:
    """The value of a literal, also folded from constant arithmetic (``90 * 60``) and from a
    constructor of one (``float("37.0")``, ``Decimal("0.13")``, ``str(5400)``)."""
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        return True, _fold(node)
    except (ValueError, TypeError, ArithmeticError, MemoryError, RecursionError):
        return False, None


_CONSTRUCTORS = {
    "int": int,
    "float": float,
    "str": str,
    "Decimal": float,
    "Fraction": float,
    "tuple": tuple,
    "list": list,
}
_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def _fold(node: ast.AST) -> Any:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _fold(node.left), _fold(node.right)
        if isinstance(left, str) and not isinstance(right, str) or isinstance(right, int) and right > 10_000:
            raise ValueError("not folded")
        return _OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        if name in _CONSTRUCTORS:
            return _CONSTRUCTORS[name](_fold(node.args[0]))
    return ast.literal_eval(node)


PARSE_ERRORS = (SyntaxError, ValueError, MemoryError, RecursionError)
MAX_LINE_CHARS = 2000


def parse_line(line: str) -> ast.Module | None:
    text = line.strip()
    if not text or len(text) > MAX_LINE_CHARS:
        return None
    text = re.sub(r"^elif\b", "if", text)
    text = re.sub(r"^(else|try|finally)\s*:", "if 1:", text)
    text = re.sub(r"^except\b.*:", "if 1:", text)
    for candidate in (text, text + " pass", text.rstrip(",")):
        try:
            return ast.parse(candidate)
        except PARSE_ERRORS:
            continue
    return None


def code_lines(lines: list[str]) -> list[str]:
    """Lines outside docstrings/triple-quoted strings, with comments dropped."""
    out, in_string = [], None
    for line in lines:
        quotes = re.findall(r'"""|\'\'\'', line)
        if in_string:
            if in_string in quotes:
                in_string = None
            continue
        if quotes and len(quotes) % 2 == 1:
            in_string = quotes[-1]
            continue
        if quotes and re.match(r"\s*[rbuRBU]?('''|\"\"\")", line):
            continue
        out.append(line)
    return out


def added_literals(lines: list[str]) -> tuple[set, set]:
    """(keys of every literal, keys of returned literals) in lines of added code."""
    values: set = set()
    returned: set = set()
    for line in code_lines(lines):
        tree = parse_line(line)
        if tree is not None:
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant | ast.List | ast.Tuple | ast.Set | ast.Dict | ast.UnaryOp):
                    ok, value = literal(node)
                    if ok:
                        values.add(key(value))
                if isinstance(node, ast.Return | ast.Yield) and node.value is not None:
                    ok, value = literal(node.value)
                    if ok:
                        returned.add(key(value))
            continue
        try:
            for tok in tokenize.generate_tokens(io.StringIO(line.strip()[:MAX_LINE_CHARS] + "\n").readline):
                if tok.type in (tokenize.STRING, tokenize.NUMBER):
                    ok, value = literal(ast.parse(tok.string, mode="eval").body)
                    if ok:
                        values.add(key(value))
        except (tokenize.TokenError, *PARSE_ERRORS):
            continue
    return values, returned


def literal_keys(lines: Iterable[str]) -> set:
    keys: set = set()
    for line in lines:
        values, _ = added_literals([line])
        keys |= values
    return keys


def norm_code(line: str) -> str:
    return re.sub(r"\s+", "", line.split("  #")[0])


@functools.lru_cache(maxsize=256)
def parse_module(text: str) -> ast.Module | None:
    """``text`` parsed as a module (also with common indentation removed), or None."""
    if len(text) > 200_000:
        return None
    for candidate in (text, _dedent(text)):
        try:
            return ast.parse(candidate)
        except PARSE_ERRORS:
            continue
    return None


def _dedent(text: str) -> str:
    lines = text.splitlines()
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return "\n".join(line[cut:] for line in lines)


def _fragment_tree(lines: list[str]) -> tuple[ast.Module, int, int] | None:
    """``lines`` parsed, cutting up to three lines at either end if needed: (tree, first, last)."""
    for cut_start in range(min(4, len(lines))):
        for cut_end in range(min(4, len(lines) - cut_start)):
            part = lines[cut_start : len(lines) - cut_end]
            if not any(line.strip() for line in part):
                continue
            tree = parse_module("\n".join(part))
            if tree is not None:
                return tree, cut_start, len(lines) - cut_end
    return None


def new_code(change) -> list[tuple[ast.Module, set[int], list[str]]]:
    """The new code of a change as parsed pieces: (tree, line numbers it added, its lines).

    The whole new file when the session shows it; else the new side of each hunk (context and
    added lines), as far as it parses.
    """
    if change.after is not None and (tree := parse_module(change.after)) is not None:
        added, n = set(), 0
        for op, _ in change.ops:
            if op != "-":
                n += 1
                if op == "+":
                    added.add(n)
        return [(tree, added, change.after.splitlines())]
    hunks: list[list[tuple[str, str]]] = [[]]
    starts = set(change.hunks)
    for i, (op, line) in enumerate(change.ops):
        if i in starts and hunks[-1]:
            hunks.append([])
        if op == "-":
            if not starts and hunks[-1] and hunks[-1][-1][0] == " ":
                hunks.append([])
            continue
        hunks[-1].append((op, line))
    whole = [(op, line) for hunk in hunks for op, line in hunk]
    out = []
    for hunk in [whole] if parse_module("\n".join(line for _, line in whole)) is not None else hunks:
        if not any(op == "+" for op, _ in hunk):
            continue
        lines = [line for _, line in hunk]
        parsed = _fragment_tree(lines)
        if parsed is None:
            continue
        tree, start, end = parsed
        added = {i - start + 1 for i, (op, _) in enumerate(hunk) if op == "+" and start <= i < end}
        out.append((tree, added, lines[start:end]))
    return out
