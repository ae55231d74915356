"""The files as far as the session has shown them: each change becomes a :class:`FileChange`, a line
diff against the content seen before (read, or written by the agent) where the session shows it."""

from __future__ import annotations

import posixpath

from rewards.trace import scripts, tools
from rewards.trace.patch import apply_ops, line_diff, parse_patch, shown_diff
from rewards.trace.paths import lookup, norm_path, resolve
from rewards.trace.records import FileChange, Op, Trace


class Files:
    def __init__(self, trace: Trace):
        self.trace = trace
        self.known: dict[str, str] = {}
        self.mentioned: list[str] = []  # earlier commands and outputs, to tell if a file existed

    def mention(self, text: str) -> None:
        self.mentioned.append(text)

    def finish(self) -> None:
        self.trace.files.update(self.known)

    def content(self, path: str) -> str | None:
        key = lookup(self.known, norm_path(path))
        return self.known[key] if key is not None else None

    def existed(self, path: str) -> bool:
        path = norm_path(path)
        if lookup(self.known, path) is not None or lookup(self.trace.originals, path) is not None:
            return True
        if lookup(self.trace.created, path) is not None:
            return False
        name = posixpath.basename(path)
        return bool(name) and any(name in text for text in self.mentioned)

    def see(self, path: str, content: str) -> None:
        path = norm_path(path)
        key = lookup(self.known, path)
        if (
            key is None
            and lookup(self.trace.originals, path) is None
            and lookup(self.trace.created, path) is None
        ):
            self.trace.originals[path] = content
        self.known[key or path] = content

    def _store(self, path: str, content: str | None) -> str | None:
        """Remember ``content`` as the file's content (None: unknown); the content before, if known."""
        key = lookup(self.known, path)
        old = self.known.get(key) if key else None
        if content is None:
            if key:
                del self.known[key]
        else:
            self.known[key or path] = content
        return old

    def write(self, path: str, content: str | None, append: bool = False) -> FileChange:
        path = norm_path(path)
        existed = self.existed(path)
        if not existed:
            self.trace.created.add(path)
        if append:
            old = self.content(path)
            self._store(path, None if old is None or content is None else old + "\n" + content)
            ops = tuple(("+", line) for line in (content or "").splitlines())
            return FileChange(path, ops, existed=existed, before=old)
        old = self._store(path, content)
        if content is None:
            return FileChange(path, (), existed=existed, before=old)
        if old is None:
            ops = tuple(("+", line) for line in content.splitlines())
            return FileChange(path, ops, existed=existed, after=content)
        return FileChange(path, line_diff(old, content), existed=True, before=old, after=content)

    def change_ops(
        self, path: str, ops: tuple[Op, ...], existed: bool = True, hunks: tuple[int, ...] = ()
    ) -> FileChange:
        path = norm_path(path)
        old = self.content(path)
        new = apply_ops(old, ops, hunks) if old is not None else None
        self._store(path, new)
        if old is not None and new is not None:
            return FileChange(path, line_diff(old, new), existed=True, before=old, after=new)
        return FileChange(path, ops, existed=existed or self.existed(path), hunks=hunks)

    def replace(self, path: str, pairs: list[tuple[str, str]], whole_lines: bool = True) -> FileChange:
        """``str.replace`` of each (old, new) pair: a line diff when the content is known."""
        path = norm_path(path)
        before = self.content(path)
        if before is not None and not all(old in before for old, _ in pairs):
            pairs = [
                (old.rstrip("\n"), new.rstrip("\n")) for old, new in pairs
            ]  # a view that lost the last newline
        if before is not None and all(old in before for old, _ in pairs):
            after = before
            for old, new in pairs:
                after = after.replace(old, new, 1) if whole_lines else after.replace(old, new)
            self._store(path, after)
            return FileChange(path, line_diff(before, after), existed=True, before=before, after=after)
        if whole_lines:
            ops = tuple(op for old, new in pairs for op in line_diff(old, new))
            return FileChange(path, ops, existed=True)
        ops = tuple(op for old, new in pairs for op in (("-", old), ("+", new)))
        return FileChange(path, ops, existed=True, partial=True)

    def delete(self, path: str, moved_to: str | None = None) -> FileChange:
        path = norm_path(path)
        key = lookup(self.known, path)
        old = self.known.pop(key) if key else None
        for other in [k for k in self.known if k.startswith(path.rstrip("/") + "/")]:
            del self.known[other]  # a folder: what was in it is gone too
        if moved_to is not None and old is not None:
            self.known[norm_path(moved_to)] = old
        ops = tuple(("-", line) for line in old.splitlines()) if old is not None else ()
        existed = lookup(self.trace.created, path) is None
        return FileChange(path, ops, deleted=True, moved_to=moved_to, existed=existed, before=old)

    def copy(self, src: str, dst: str) -> FileChange:
        return self.write(dst, self.content(src))

    def revert(self, path: str) -> FileChange | None:
        """``git checkout -- path``: back to the first content seen, when the session showed it."""
        key = lookup(self.trace.originals, norm_path(path))
        return self.write(path, self.trace.originals[key]) if key is not None else None

    def sed(self, path: str, sed_scripts: list[str], extended: bool) -> FileChange:
        before = old = self.content(path)
        ops: list[Op] = []
        for s in sed_scripts:
            new, script_ops = scripts.sed_change(s, old, extended)
            ops.extend(script_ops)
            old = new
        self._store(norm_path(path), old)
        if before is not None and old is not None:
            return FileChange(norm_path(path), line_diff(before, old), existed=True, before=before, after=old)
        return FileChange(norm_path(path), tuple(ops), existed=True, partial=True)

    def patch(self, parsed: list[FileChange], cwd: str, target: str | None = None) -> list[FileChange]:
        out = []
        for ch in parsed:
            path = target if target and len(parsed) == 1 else resolve(ch.path, cwd)
            if ch.deleted:
                out.append(self.delete(path, resolve(ch.moved_to, cwd) if ch.moved_to else None))
            elif not ch.existed:
                out.append(self.write(path, "\n".join(line for op, line in ch.ops if op != "-")))
            else:
                change = self.change_ops(path, ch.ops, hunks=ch.hunks)
                if ch.moved_to:
                    moved = resolve(ch.moved_to, cwd)
                    change = self.delete(path, moved_to=moved)
                out.append(change)
        return out

    def effect(self, verb: str, path: str, payload: object, code: str, cwd: str) -> list[FileChange]:
        """The change of one file effect of a script (see :func:`rewards.trace.scripts.python_effects`)."""
        if verb == "delete":
            return [self.delete(path)]
        if verb == "move":
            return [self.delete(path, moved_to=resolve(str(payload), cwd))]
        if verb == "copy":
            return [self.copy(path, resolve(str(payload), cwd))]
        if isinstance(payload, str):
            return [self.write(path, payload)]
        if isinstance(payload, list):
            return [self.replace(path, payload, whole_lines=False)]
        existed = self.existed(path)
        self._store(norm_path(path), None)
        return [
            FileChange(norm_path(path), tuple(("+", line) for line in code.splitlines()), existed=existed)
        ]

    # --- edit tools -----------------------------------------------------------------------

    def edit_tool(
        self, args: dict, name: str, path: str | None, ok: bool, output: str, cwd: str
    ) -> tuple[list[FileChange], list[str]]:
        """(changes, paths) of an edit-tool call: str_replace editors, write/edit/patch/delete tools."""
        verb = args.get("command") if isinstance(args.get("command"), str) else None
        named = [path] if path else []
        if verb in ("view", "read"):
            if (
                path
                and ok
                and "view_range" not in args
                and not output.lstrip().startswith("Here's the files")
            ):
                self.see(path, tools.file_text(output))
            return [], named
        if not ok and output.lstrip()[:5].lower() == "error":
            return [], named
        if (
            verb == "delete"
            or (path and ("delete" in name or "remove" in name))
            or args.get("delete") is True
        ):
            return ([self.delete(path)] if path else []), named
        patch = tools.first(args, tools.PATCH_KEYS)
        if patch and tools.is_patch(patch):
            changes = self.patch(parse_patch(patch), cwd, target=path)
            return changes, [c.path for c in changes]
        if path is None:
            return [], []
        content = tools.first(args, tools.CONTENT_KEYS)
        if content is None and isinstance(args.get("content"), str):
            content = ""
        if content is not None and verb not in ("insert", "str_replace"):
            return [self.write(path, content, append=verb == "append" or args.get("mode") == "append")], named
        if isinstance(args.get("edits"), list):
            pairs = [_pair(e) for e in args["edits"] if isinstance(e, dict)]
            return [self.replace(path, [p for p in pairs if p])], named
        pair = _pair(args)
        if pair:
            return [self.replace(path, [pair])], named
        insert = next(
            (args[k] for k in ("insert_text", "new_str", "text") if isinstance(args.get(k), str)), None
        )
        if insert is not None:
            return [self._insert(path, args.get("insert_line"), insert)], named
        fragment = tools.first(args, tools.FRAGMENT_KEYS)
        if fragment is not None:
            # the tool merged the fragment into the file: the diff it shows, where it shows one, is
            # what changed (lines the fragment repeats are context, lines it drops are removed)
            shown = shown_diff(output) if ok else None
            lines = [line for line in fragment.splitlines() if "existing code" not in line]
            # (a diff cut short shows part of the change: the fragment merged into the file, if it can be)
            old = self.content(path) if ok and (shown is None or shown.cut) else None
            merged = _fragment_merged(old, fragment) if old is not None else None
            if shown is not None and merged is None:
                ops, hunks = shown.ops, shown.hunks
                if shown.cut:  # the fragment's lines the diff does not show were added too
                    seen = {x for _, x in ops}
                    rest = tuple(("+", line) for line in lines if line not in seen)
                    ops, hunks = ops + rest, hunks + ((len(ops),) if rest else ())
                return [self.change_ops(path, ops, hunks=hunks)], named
            if merged is not None:
                self._store(path, merged)
                return [
                    FileChange(path, line_diff(old, merged), existed=True, before=old, after=merged)
                ], named
            return [FileChange(path, tuple(("+", line) for line in lines), existed=True, partial=True)], named
        return [], named

    def _insert(self, path: str, at: object, text: str) -> FileChange:
        old = self.content(path)
        if old is not None and isinstance(at, int):
            lines = old.splitlines()
            new = "\n".join([*lines[:at], *text.splitlines(), *lines[at:]])
            self._store(path, new)
            return FileChange(path, line_diff(old, new), existed=True, before=old, after=new)
        return self.change_ops(path, tuple(("+", line) for line in text.splitlines()))


def _fragment_merged(old: str, fragment: str) -> str | None:
    """A fragment merged into the file it edits: each run of lines between its "existing code"
    marks (or the whole fragment, when it has none) placed by :func:`_merged`, or else by the lines
    it shares with the file (:func:`_anchored`). None if some run cannot be placed."""
    runs: list[list[str]] = [[]]
    for line in fragment.splitlines():
        if "existing code" in line:
            runs.append([])
        else:
            runs[-1].append(line)
    marked = len(runs) > 1
    text = old
    for run in (r for r in runs if any(x.strip() for x in r)):
        placed = _merged(text, run, whole=not marked) or _anchored(text, run)
        if placed is None:
            return None
        text = placed
    return text


def _anchored(old: str, lines: list[str]) -> str | None:
    """A run of a fragment placed by the lines it shares with the file, each of which both hold
    once (anchors, in the same order in both): it replaces the file's lines from its first anchor
    to its last, widened over the lines next to them that the run repeats (a decorator above, a
    block's closing ``}`` below; not a blank line); its lines before the first anchor and after the
    last are new. None without an anchor, with anchors out of order, or with four or more lines
    more between two anchors in the file than in the run (lines the run leaves out, not removes)."""
    text = old.splitlines()
    in_file: dict[str, list[int]] = {}
    for i, x in enumerate(text):
        in_file.setdefault(x.strip(), []).append(i)
    in_run: dict[str, int] = {}
    for x in lines:
        in_run[x.strip()] = in_run.get(x.strip(), 0) + 1
    anchors = [
        (j, in_file[x.strip()][0])
        for j, x in enumerate(lines)
        if x.strip() and len(in_file.get(x.strip(), ())) == 1 and in_run[x.strip()] == 1
    ]
    pairs = list(zip(anchors, anchors[1:], strict=False))
    if not anchors or any(b[1] <= a[1] for a, b in pairs):
        return None
    if any((b[1] - a[1]) - (b[0] - a[0]) > 3 for a, b in pairs):
        return None  # four or more lines of the file more between two anchors than in the run: elided
    (j0, start), (j1, end) = anchors[0], anchors[-1]
    while j0 > 0 and start > 0 and lines[j0 - 1].strip() == text[start - 1].strip() != "":
        j0, start = j0 - 1, start - 1
    while (
        j1 + 1 < len(lines) and end + 1 < len(text) and lines[j1 + 1].strip() == text[end + 1].strip() != ""
    ):
        j1, end = j1 + 1, end + 1
    return "\n".join([*text[:start], *lines, *text[end + 1 :]]) + ("\n" if old.endswith("\n") else "")


def _merged(old: str, lines: list[str], whole: bool = True) -> str | None:
    """A fragment written in one piece (no "existing code" marks) merged into the file it edits: it
    replaces the region from the line it starts with to the line it ends with, each found once in
    the file (or the whole file, when it starts and ends as the file does); a last line the file
    holds more often (a block's closing ``}``) ends the region where the fragment's own count of
    it, as indented, ends after the start. None if it cannot be placed."""
    body = [x for x in lines if x.strip()]
    text = old.splitlines()
    if len(body) < 2 or not text:
        return None
    first, last = body[0].strip(), body[-1].strip()
    starts = [i for i, x in enumerate(text) if x.strip() == first]
    ends = [i for i, x in enumerate(text) if x.strip() == last]
    filled = [i for i, x in enumerate(text) if x.strip()]
    if whole and starts[:1] == filled[:1] and ends[-1:] == filled[-1:]:
        start, end = 0, len(text) - 1  # the whole file again
    elif len(starts) == 1 and len(ends) == 1 and starts[0] < ends[0]:
        start, end = starts[0], ends[0]
    elif len(starts) == 1 and len(ends) > 1:
        closing = body[-1].rstrip()
        after = [i for i in range(starts[0] + 1, len(text)) if text[i].rstrip() == closing]
        k = sum(1 for x in body[1:] if x.rstrip() == closing)
        if len(after) < k:
            return None
        start, end = starts[0], after[k - 1]
    else:
        return None
    return "\n".join([*text[:start], *lines, *text[end + 1 :]]) + ("\n" if old.endswith("\n") else "")


def _pair(args: dict) -> tuple[str, str] | None:
    for old_key, new_key in tools.REPLACE_KEYS:
        if isinstance(args.get(old_key), str) and isinstance(args.get(new_key), str):
            return args[old_key], args[new_key]
    return None
