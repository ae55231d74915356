"""The (inputs, expected value) pairs a session shows: from test reports (pytest in any verbosity,
unittest, doctest), from test code displayed by any command or tool (whole files or fragments, with
line numbers or grep prefixes), values reaching an assertion through a variable or a table, and
examples in the task statement."""

from __future__ import annotations

import ast
import functools
import re
from typing import Any

from rewards.detectors.pycode import PARSE_ERRORS, literal, parse_line, parse_module

Pair = tuple[tuple, Any]  # (inputs, expected)
_EXPECTED_NAMES = ("expected", "expect", "want", "result", "output", "out", "exp", "answer")


def _call_inputs(node: ast.AST, names: dict[str, Any]) -> list:
    inputs = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            for arg in [*sub.args, *(k.value for k in sub.keywords)]:
                ok, value = _value(arg, names)
                if ok:
                    inputs.append(value)
        elif isinstance(sub, ast.Subscript):
            ok, value = _value(sub.slice, names)
            if ok:
                inputs.append(value)
    return inputs


def _value(node: ast.AST, names: dict[str, Any]) -> tuple[bool, Any]:
    """A literal, or a name bound to one in the same code."""
    if isinstance(node, ast.Name) and node.id in names:
        return True, names[node.id]
    return literal(node)


def _unwrap(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "approx":
        return node.args[0] if node.args else node
    return node


def _compare(left: ast.AST, right: ast.AST, names: dict[str, Any]) -> Pair | None:
    left, right = _unwrap(left), _unwrap(right)
    ok_r, r = _value(right, names)
    ok_l, lv = _value(left, names)
    if ok_r and not ok_l:
        return tuple(_call_inputs(left, names)), r
    if ok_l and not ok_r:
        return tuple(_call_inputs(right, names)), lv
    if ok_l and ok_r:  # a report's "assert 'got' == 'expected'"
        return (), r
    return None


def _bindings(tree: ast.AST) -> dict[str, Any]:
    """Names bound to literal values anywhere in ``tree`` (last binding wins)."""
    names: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            ok, value = literal(node.value)
            if ok:
                names[node.targets[0].id] = value
    return names


def _cases(value: Any, names: list[str] | None) -> list[Pair]:
    """Pairs of a table of cases: tuples (the expected one by name, else the last), or a dict."""
    if isinstance(value, dict):
        return [((k,), v) for k, v in value.items()]
    if not isinstance(value, list | tuple):
        return []
    at = -1
    if names:
        at = next((i for i, n in enumerate(names) if any(k in str(n) for k in _EXPECTED_NAMES)), -1)
    out = []
    for case in value:
        if isinstance(case, tuple | list) and len(case) >= 2:
            items = list(case)
            expected = items.pop(at)
            out.append((tuple(items), expected))
    return out


@functools.lru_cache(maxsize=512)
def pairs_in_text(text: str) -> tuple[Pair, ...]:
    """Pairs of a test file's source (cached: outputs repeat the files they show)."""
    tree = parse_module(text)
    return tuple(pairs_in_tree(tree)) if tree is not None else ()


def pairs_in_tree(tree: ast.AST) -> list[Pair]:
    """(inputs, expected) of assertions, parametrize tables and case loops under ``tree``; an
    assertion on a result (``assert result.returncode == 2``) takes the inputs of its test's calls."""
    pairs: list[Pair] = []
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    inside = {id(sub) for f in functions for sub in ast.walk(f)}
    names = _bindings(tree)
    for f in functions:
        local = [
            (inputs or tuple(_call_inputs(f, names)), value)
            for inputs, value in _pairs(f, names, shallow=True)
        ]
        pairs.extend(local)
    pairs.extend(p for p in _pairs(tree, names, skip=inside))
    return pairs


def _pairs(
    tree: ast.AST, names: dict[str, Any], shallow: bool = False, skip: set[int] | None = None
) -> list[Pair]:
    pairs: list[Pair] = []
    for node in ast.walk(tree):
        if skip and id(node) in skip:
            continue
        if shallow and node is not tree and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare):
            cmp = node.test
            if len(cmp.ops) == 1 and isinstance(cmp.ops[0], ast.Eq | ast.Is):
                pair = _compare(cmp.left, cmp.comparators[0], names)
                if pair:
                    pairs.append(pair)
        elif isinstance(node, ast.Call) and re.fullmatch(
            r"assert_?[Ee]quals?|assert_?[Aa]lmost_?[Ee]qual|assert_array_equal|assert_allclose|assertListEqual"
            r"|assertDictEqual|assertMultiLineEqual|assertCountEqual",
            getattr(node.func, "attr", getattr(node.func, "id", "")),
        ):
            if len(node.args) >= 2:
                pair = _compare(node.args[0], node.args[1], names)
                if pair:
                    pairs.append(pair)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "parametrize"
            and len(node.args) >= 2
        ):
            ok_names, arg_names = literal(node.args[0])
            if ok_names and isinstance(arg_names, str):
                arg_names = [n.strip() for n in arg_names.split(",")]
            ok, table = _value(node.args[1], names)
            if not ok:
                table = [
                    v for elt in getattr(node.args[1], "elts", []) for ok, v in [_value(elt, names)] if ok
                ]
            pairs.extend(_cases(table, arg_names if ok_names else None))
        elif isinstance(node, ast.For) and isinstance(node.target, ast.Tuple):
            iterable = node.iter
            if isinstance(iterable, ast.Call) and getattr(iterable.func, "attr", "") == "items":
                iterable = iterable.func.value
            ok, table = _value(iterable, names)
            if ok:
                targets = [getattr(e, "id", "") for e in node.target.elts]
                expected = _compared_name(node, targets)
                pairs.extend(_cases(table, [t if t != expected else "expected" for t in targets]))
    return pairs


def _compared_name(loop: ast.For, targets: list[str]) -> str | None:
    """The loop variable that an assertion in the loop compares against."""
    for node in ast.walk(loop):
        if isinstance(node, ast.Compare) and getattr(node.comparators[0], "id", None) in targets:
            return node.comparators[0].id
        if (
            isinstance(node, ast.Call)
            and len(node.args) >= 2
            and getattr(node.args[1], "id", None) in targets
            and "assert" in getattr(node.func, "attr", "")
        ):
            return node.args[1].id
    return None


# --- reports ---------------------------------------------------------------------------------

_PREFIX = re.compile(
    r"^(?:>|E)?\s*(?:[\w./-]+\.py:\d+:(?:\s*in \w+)?\s*|\s*\d+[:\t→│|]\s?|[\w./-]+[:-]\d+[:-])?"
)
_ASSERT = re.compile(
    r"(?:AssertionError:\s*|^|\s-\s|[:\s])(assert\s+.+?==.+?)(?:\s*$|\s+\+\s+where)|^\s*(self\.assert\w+\(.*\)|assert\s.*)$"
)
_UNITTEST = re.compile(
    r"AssertionError:\s*(?:Lists differ: |Tuples differ: |Dicts differ: )?(.+?)\s+!=\s+(.+?)\s*$"
)
_WHERE = re.compile(r"^E\s+\+\s+where\s+.*?=\s+(.+)$")
_PARAM_ID = re.compile(r"::(test\w*)\[([^\]\s]+)\]")
_DOCTEST = re.compile(r"^Expected:\n\s+(.+)\nGot:", re.M)
_MESSAGE = re.compile(
    r"\b(?:expected|want(?:ed)?|should (?:be|return|give))['\"]?\s*[:=\s]\s*(['\"][^'\"\n]+['\"]|-?\d+(?:\.\d+)?)",
    re.I,
)


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text.strip())
    except PARSE_ERRORS:
        return None


def _literal_text(text: str) -> tuple[bool, Any]:
    tree = _parse(text)
    if tree is None or not tree.body or not isinstance(tree.body[0], ast.Expr):
        return False, None
    return literal(tree.body[0].value)


def _id_value(token: str) -> Any:
    try:
        return ast.literal_eval(token)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return token


def pairs_in_output(output: str) -> list[Pair]:
    """(inputs, expected) from any text a command showed: test reports of pytest (full, short,
    ``-q`` summaries, ``--tb=line``), unittest and doctest, and test code (whole or in pieces)."""
    pairs: list[Pair] = []
    if not _EXPECTS.search(output):
        return pairs
    if _SOURCE.match(output) and ("assert" in output or "parametrize" in output):
        source = _strip_numbers(output)
        if parse_module(source) is not None:
            return list(pairs_in_text(source))
    for section in re.split(r"\n_{3,} .* _{3,}\n", output):
        inputs: list = []
        expected: list = []
        for raw in section.splitlines():
            line = raw.rstrip()
            m = _WHERE.match(line)
            if m and (tree := _parse(m.group(1))):
                inputs.extend(_call_inputs(tree, {}))
                continue
            text = _PREFIX.sub("", line, count=1)
            if _TRACEBACK_SOURCE.match(line) and "=" in text and (tree := parse_line(text)):
                inputs.extend(_call_inputs(tree, {}))  # the failing test's own lines: its inputs
            m = _ASSERT.search(text) or _ASSERT.search(line)
            if m and (tree := parse_line(m.group(1) or m.group(2))):
                found = pairs_in_tree(tree)
                pairs.extend(p for p in found if p[0])
                expected.extend(v for inputs_, v in found if not inputs_)
            m = _UNITTEST.search(line)
            if m:
                ok, value = _literal_text(m.group(2))
                if ok:
                    expected.append(value)
            for m in _MESSAGE.finditer(line):
                expected.append(_id_value(m.group(1)))
        pairs.extend((tuple(inputs), e) for e in expected)
    for m in _PARAM_ID.finditer(output):
        tokens = [_id_value(t) for t in m.group(2).split("-")]
        if len(tokens) >= 2:
            pairs.append((tuple(tokens[:-1]), tokens[-1]))
    for m in _DOCTEST.finditer(output):
        pairs.append(((), _id_value(m.group(1).strip())))
    pairs.extend(_tuples(output))
    return pairs


_EXPECTS = re.compile(r"assert|[!=]=|[Ee]xpect|want|should|parametrize|\[\S+-\S+\]")
_TRACEBACK_SOURCE = re.compile(r"^( {4,}|>\s+)\w[\w.]*\s*=\s*\w[\w.]*\(")  # "    result = parse(...)"
_SOURCE = re.compile(
    r"\s*(?:(?:[\w./-]+[:-])?\d+(?:\t|→|: ?|\s?│|\s?\|\s?|  )\s*)?(import |from |def |class |@|#|\"\"\"|[A-Z_]+ = )"
)
_NUMBERED = re.compile(r"^\s*(?:[\w./-]+[:-])?\d+(?:\t|→|: ?|-|\s?│|\s?\|\s?|  )")


def _strip_numbers(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and all(_NUMBERED.match(line) for line in lines):
        return "\n".join(_NUMBERED.sub("", line, count=1) for line in text.splitlines())
    return text


def _tuples(output: str) -> list[Pair]:
    """Case tuples of a parametrize table shown in pieces (``("2021-W01-1", "2021-01-04"),``)."""
    if "parametrize" not in output and "CASES" not in output.upper():
        return []
    out = []
    for line in output.splitlines():
        text = _PREFIX.sub("", line.rstrip(), count=1).strip().rstrip(",")
        if text.startswith("(") and text.endswith(")"):
            ok, value = _literal_text(text)
            if ok and isinstance(value, tuple) and len(value) >= 2:
                out.append((value[:-1], value[-1]))
    return out


_INSTEAD = re.compile(
    r"(?:returns?|gives?|prints?|outputs?|yields?|is)\s+`?('[^'\n]*'|\"[^\"\n]*\"|-?\d+(?:\.\d+)?)`?\s+(?:instead of|rather than|but "
    r"(?:should|must) (?:be|return|give))\s+`?('[^'\n]*'|\"[^\"\n]*\"|-?\d+(?:\.\d+)?)`?",
    re.I,
)
_TASK_EXAMPLE = re.compile(
    r"`?(\w+\((?:[^()`]|\([^()]*\))*\))`?\s*(?:should\s+(?:be|return|give)|must\s+(?:be|return|give)|returns?|gives?"
    r"|==|->|→|is|to\s+be|equals?)\s*`?((?:'[^'\n]*'|\"[^\"\n]*\"|-?\d+(?:\.\d+)?|\[[^\]\n]*\]|\([^)\n]*\)))`?"
)


def pairs_in_task(task: str) -> list[Pair]:
    """Examples such as ``fib(20) should be 6765`` or ``returns 3600 instead of 5400`` in the task."""
    out = []
    for m in _INSTEAD.finditer(task):
        ok, expected = _literal_text(m.group(2))
        if ok:
            out.append(((), expected))
    for m in _TASK_EXAMPLE.finditer(task):
        call, value = _parse(m.group(1)), _parse(m.group(2))
        if call is None or value is None or not isinstance(value.body[0], ast.Expr):
            continue
        ok, expected = literal(value.body[0].value)
        if ok:
            out.append((tuple(_call_inputs(call, {})), expected))
    return out
