"""File effects of interpreter scripts (``python -c``, ``python - <<EOF``, a script file it runs):
what they write, delete, move and copy, read from the code itself."""

from __future__ import annotations

import ast
import contextlib
import re

from rewards.trace.patch import line_diff
from rewards.trace.records import Op

# (verb, path, payload): verb "write" with payload the new content (str), (old, new)
# replacements (list) or None (unknown: the script's lines count as added); "delete" with
# payload None; "move" and "copy" with payload the destination
Effect = tuple[str, str, object]

_WRITE_MODE = re.compile(r"[wax+]")
_PY_WRITE = re.compile(
    r"open\(\s*['\"]([^'\"]+)['\"]\s*,\s*['\"][wax]|Path\(\s*['\"]([^'\"]+)['\"]\s*\)\s*\.\s*write_(text|bytes)"
    r"|(\w+)\s*=\s*(?:pathlib\.)?Path\(\s*['\"]([^'\"]+)['\"]\s*\)"
)
_PY_REPLACE = re.compile(r"""\.replace\(\s*(['"])([^\n]*?)(?<!\\)\1\s*,\s*(['"])([^\n]*?)(?<!\\)\3""")
_DELETE = {"remove", "unlink", "rmtree", "rmdir"}
_MOVE = {"rename", "replace", "move"}
_COPY = {"copy", "copy2", "copyfile", "copytree"}


def _str(node: ast.AST, names: dict[str, str]) -> str | None:
    """The path an expression names: a string literal, ``Path("x")``, a name bound to one, ``a / "b"``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
        "Path",
        "PurePath",
    ):
        parts = [_str(a, names) for a in node.args]
        return "/".join(p for p in parts if p) if parts and all(parts) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left, right = _str(node.left, names), _str(node.right, names)
        return f"{left}/{right}" if left and right else None
    if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "join" and node.args:
        parts = [_str(a, names) for a in node.args]
        return "/".join(parts) if all(parts) else None  # os.path.join
    return None


def _replacements(node: ast.AST) -> list[tuple[str, str]]:
    """(old, new) of every ``.replace("old", "new")`` under ``node``."""
    pairs = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and getattr(sub.func, "attr", "") == "replace" and len(sub.args) >= 2:
            a, b = sub.args[:2]
            if isinstance(a, ast.Constant) and isinstance(b, ast.Constant) and isinstance(a.value, str):
                pairs.append((a.value, str(b.value)))
    return pairs


def _payload(node: ast.AST | None) -> object:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    pairs = _replacements(node) if node is not None else []
    return pairs or None


def python_effects(script: str) -> list[Effect]:
    """Files a Python script writes, deletes, moves or copies."""
    try:
        tree = ast.parse(script)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return _regex_effects(script)
    names: dict[str, str] = {}
    handles: dict[str, str] = {}  # file objects opened for writing: name -> path
    effects: list[Effect] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _str(node.value, names)
            if value:
                names[node.targets[0].id] = value
        if isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
            path = _opened_for_writing(node.context_expr, names)
            if path:
                handles[node.optional_vars.id] = path
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        attr = getattr(func, "attr", getattr(func, "id", ""))
        owner = _str(func.value, names) if isinstance(func, ast.Attribute) else None
        args = [_str(a, names) for a in node.args]
        if attr in ("write_text", "write_bytes") and owner:
            effects.append((node.lineno, ("write", owner, _payload(node.args[0] if node.args else None))))
        elif attr in ("write", "writelines") and isinstance(func, ast.Attribute):
            target = handles.get(getattr(func.value, "id", "")) or _opened_for_writing(func.value, names)
            if target:
                effects.append(
                    (node.lineno, ("write", target, _payload(node.args[0] if node.args else None)))
                )
        elif attr == "open" and _opened_for_writing(node, names) and not handles:
            effects.append((node.lineno, ("write", _opened_for_writing(node, names), None)))
        elif (
            attr in _DELETE
            and (owner if not args else args[0])
            and (owner or _module(func) in ("os", "shutil"))
        ):
            effects.append((node.lineno, ("delete", owner if not args else args[0], None)))
        elif attr in _MOVE and _module(func) in ("os", "shutil") and len(args) >= 2 and args[0] and args[1]:
            effects.append((node.lineno, ("move", args[0], args[1])))
        elif attr in _MOVE and owner and len(args) == 1 and args[0]:
            effects.append((node.lineno, ("move", owner, args[0])))  # Path("a").rename("b")
        elif attr in _COPY and len(args) >= 2 and args[0] and args[1]:
            effects.append((node.lineno, ("copy", args[0], args[1])))
    return _merge([effect for _, effect in sorted(effects, key=lambda e: e[0])])


def _module(func: ast.AST) -> str:
    return ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""


def _opened_for_writing(node: ast.AST, names: dict[str, str]) -> str | None:
    if not (
        isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "open"
    ):
        return None
    owner = _str(node.func.value, names) if isinstance(node.func, ast.Attribute) else None
    args = node.args if owner is None else [None, *node.args]
    path = owner or (_str(args[0], names) if args and args[0] is not None else None)
    mode_node = args[1] if len(args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
    mode = (
        mode_node.value if isinstance(mode_node, ast.Constant) and isinstance(mode_node.value, str) else "r"
    )
    return path if path and _WRITE_MODE.search(mode) else None


def _merge(effects: list[Effect]) -> list[Effect]:
    """One write per path: the known content or replacements win over an unknown write."""
    out: dict[tuple[str, str], Effect] = {}
    for verb, path, payload in effects:
        key = (verb, path)
        if key not in out or out[key][2] is None:
            out[key] = (verb, path, payload)
    return list(out.values())


def _regex_effects(script: str) -> list[Effect]:
    paths: list[str] = []
    for m in _PY_WRITE.finditer(script):
        if m.group(1) or m.group(2):
            paths.append(m.group(1) or m.group(2))
        elif re.search(
            rf"\b{re.escape(m.group(4))}\s*\.\s*(write_text|write_bytes|open\([^)]*['\"][wa])", script
        ):
            paths.append(m.group(5))
    replaced = [(m.group(2), m.group(4)) for m in _PY_REPLACE.finditer(script)]
    return [("write", p, replaced or None) for p in dict.fromkeys(paths)]


_PERL_SUB = re.compile(r"^s(.)(.*?)(?<!\\)\1(.*?)(?<!\\)\1([gimsx]*)$", re.S)


def perl_in_place(words: list[str]) -> tuple[list[str], list[str]]:
    """(substitution scripts, files) of ``perl -pi -e 's/a/b/' FILE...`` (also ``ruby -pi -e``)."""
    scripts, files, i = [], [], 1
    while i < len(words):
        w = words[i]
        if w in ("-e", "-E") and i + 1 < len(words):
            scripts.append(words[i + 1])
            i += 2
            continue
        if re.fullmatch(r"-[a-zA-Z.]+", w) and w.endswith("e") and i + 1 < len(words):
            scripts.append(words[i + 1])
            i += 2
            continue
        if not w.startswith("-"):
            files.append(w)
        i += 1
    return [s for s in scripts if _PERL_SUB.match(s.strip())], files


# --- sed ---------------------------------------------------------------------------


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


def sed_scripts(words: list[str]) -> tuple[list[str], list[str], bool]:
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


_SED_ADDRESS = r"(\d+|\$|/(?:[^/\\]|\\.)*/)"
_SED_COMMAND = re.compile(
    rf"^\s*(?:{_SED_ADDRESS}(?:\s*,\s*{_SED_ADDRESS})?)?\s*"
    r"(?:s(.)(.*?)(?<!\\)\3(.*?)(?<!\\)\3([gipI0-9]*)|(d)|([iac])\\?\s?(.*))\s*$",
    re.S,
)
_UNESCAPE = re.compile(r"\\(.)")


def _split_sed(script: str) -> list[str]:
    """Commands of a sed script, split on new lines and on ``;`` outside ``s///``."""
    parts, cur, i = [], [], 0
    while i < len(script):
        ch = script[i]
        if ch == "s" and not "".join(cur).strip().lstrip("0123456789,$").strip() and i + 1 < len(script):
            delim, seen, j = script[i + 1], 0, i + 2
            while j < len(script) and seen < 2:
                if script[j] == "\\":
                    j += 1
                elif script[j] == delim:
                    seen += 1
                j += 1
            cur.append(script[i:j])
            i = j
            continue
        if ch in ";\n":
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def _sed_commands(script: str) -> list[re.Match]:
    out = []
    for part in _split_sed(script.strip()):
        m = _SED_COMMAND.match(part)
        if m is None:
            return []
        out.append(m)
    return out


def _address(text: str | None, extended: bool) -> tuple[str, object] | None:
    if text is None:
        return None
    if text == "$":
        return ("last", None)
    if text.isdigit():
        return ("line", int(text))
    try:
        return ("re", re.compile(_sed_to_python(text[1:-1], extended)))
    except re.error:
        return ("re", re.compile(re.escape(text[1:-1])))


def _hits(address: tuple[str, object] | None, n: int, line: str, last: int) -> bool:
    if address is None:
        return True
    kind, value = address
    return n == value if kind == "line" else n == last if kind == "last" else bool(value.search(line))


def _selected(lines: list[str], start, end) -> list[bool]:
    if start is None:
        return [True] * len(lines)
    out, inside, last = [], False, len(lines)
    for n, line in enumerate(lines, start=1):
        if end is None:
            out.append(_hits(start, n, line, last))
            continue
        if not inside and _hits(start, n, line, last):
            inside = True
            out.append(True)
            continue
        out.append(inside)
        if inside and (_hits(end, n, line, last) or (end[0] == "line" and n >= end[1])):
            inside = False
    return out


def _apply_sed(m: re.Match, lines: list[str], extended: bool) -> list[str]:
    start, end = _address(m.group(1), extended), _address(m.group(2), extended)
    selected = _selected(lines, start, end)
    out: list[str] = []
    rx = None
    if m.group(4) is not None:
        try:
            rx = re.compile(_sed_to_python(m.group(4), extended), re.I if "i" in m.group(6).lower() else 0)
        except re.error:
            return lines
    repl = re.sub(r"(?<!\\)&", r"\\g<0>", m.group(5) or "")
    for line, hit in zip(lines, selected, strict=True):
        if not hit:
            out.append(line)
        elif rx is not None:
            with contextlib.suppress(re.error, IndexError):
                line = rx.sub(repl, line, count=0 if "g" in m.group(6) else 1)
            out.append(line)
        elif m.group(7):
            continue
        elif m.group(8) == "i":
            out.extend([m.group(9), line])
        elif m.group(8) == "a":
            out.extend([line, m.group(9)])
        elif m.group(8) == "c":
            out.append(m.group(9))
    return out


def sed_change(script: str, old: str | None, extended: bool) -> tuple[str | None, tuple[Op, ...]]:
    """(new content or None, ops) of one sed script applied to ``old`` (unknown: None)."""
    commands = _sed_commands(script)
    if not commands:
        return None, ()
    if old is not None:
        lines = old.splitlines()
        for m in commands:
            lines = _apply_sed(m, lines, extended)
        new = "\n".join(lines)
        return new, line_diff(old, new)
    ops: list[Op] = []
    for m in commands:
        if m.group(4) is not None:
            ops += [("-", _UNESCAPE.sub(r"\1", m.group(4))), ("+", _UNESCAPE.sub(r"\1", m.group(5)))]
        elif m.group(7) and m.group(1) and m.group(1).startswith("/"):
            ops.append(("-", _UNESCAPE.sub(r"\1", m.group(1)[1:-1])))
        elif m.group(8):
            ops.append(("+", _UNESCAPE.sub(r"\1", m.group(9))))
    return None, tuple(ops)
