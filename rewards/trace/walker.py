"""The walk over a session's tool turns, in order, keeping what the session has shown so far: the
content of each file, the working directory, shell variables. Each call becomes a :class:`Call`."""

from __future__ import annotations

import fnmatch
import posixpath
import re
import shlex
from collections import Counter
from typing import TYPE_CHECKING

from ingest.contract import AssistantTurn, Session, ToolTurn
from rewards.trace import commands as cmd
from rewards.trace import scripts, tools
from rewards.trace.files import Files
from rewards.trace.patch import parse_patch
from rewards.trace.paths import looks_like_path, norm_path, paths_in_text, resolve
from rewards.trace.records import Call, FileChange, Trace
from rewards.trace.shell import echo_text, expand, inline_script, parse, redirects, strip_prefixes

if TYPE_CHECKING:
    from rewards.scoring import RewardSettings

MAX_DEPTH = 3  # nested shells: bash -c "python - <<EOF ..."
_NAVIGATION = {"cd", "pushd", "popd", "pwd", "ls", "echo", "true"}
_TEXT_ONLY = {"echo", "printf", "cat", "grep", "sed", "awk", "tee", "git", "cd", "export", "alias", "sleep"}


class _Effects:
    def __init__(self) -> None:
        self.changes: list[FileChange] = []
        self.paths: list[str] = []
        self.network: list[str] = []
        self.runs: list[str] = []


class Walker:
    def __init__(self, settings: RewardSettings):
        self.settings = settings
        self.trace = Trace()
        self.files = Files(self.trace)
        self.cwd = ""  # "" until the session moves: paths stay as the session names them
        self.variables: dict[str, str] = {}
        self.home: str | None = None  # what ``~`` stands for, when the session shows it

    def tilde(self, word: str) -> str:
        """``~`` and ``~/...`` as the shell expands them, once the session has shown the home folder."""
        if self.home and (word == "~" or word.startswith("~/")):
            return self.home + word[1:]
        return word

    # --- shell -------------------------------------------------------------------------

    def shell(self, command: str, output: str, exit_code: int | None, workdir: str | None) -> _Effects:
        fx = _Effects()
        cwd = resolve(workdir, self.cwd) if workdir else self.cwd
        cwd = self._run(command, output, exit_code, cwd, fx, 0)
        simple, _ = parse(command)
        if simple and all(s.words[0] in _NAVIGATION for s in simple):
            self.cwd = cwd
        return fx

    def _run(
        self, command: str, output: str, exit_code: int | None, cwd: str, fx: _Effects, depth: int
    ) -> str:
        simple, bodies = parse(command)
        alone = len([s for s in simple if s.words[0] not in ("cd", "pushd")]) == 1
        piped_text: str | None = None
        for s in simple:
            variables = {**self.variables, "PWD": cwd} if cwd else self.variables
            if self.home and "HOME" not in variables:
                variables = {**variables, "HOME": self.home}
            words = [self.tilde(expand(w, variables)) for w in s.words]
            assigned = self._assign(words, fx)
            words, via_xargs = strip_prefixes(words[assigned:] if assigned < len(words) else [])
            words, targets, here = redirects(words)
            heredoc = next((bodies[w] for w in words if w in bodies), None)
            stdin = heredoc if heredoc is not None else here
            for w in words:
                if w in bodies:
                    fx.paths.extend(resolve(p, cwd) for p in paths_in_text(bodies[w]))
            words = [w for w in words if w not in bodies]
            fx.paths.extend(resolve(t, cwd) for _, t in targets)
            if not words:
                fx.changes.extend(
                    self.files.write(resolve(t, cwd), "", append=op == ">>") for op, t in targets
                )
                continue
            name, rest = posixpath.basename(words[0]), words[1:]
            here_cwd = cwd
            if name == "git" and "-C" in rest[:-1]:
                here_cwd = resolve(rest[rest.index("-C") + 1], cwd)
            named = [] if via_xargs else cmd.file_arguments(name, rest)
            if name in cmd.SHELLS and inline_script(words) is not None:
                named = []
            fx.paths.extend(resolve(p, here_cwd) for p in named)
            for w in rest:
                if (" " in w or "(" in w) and w not in named:
                    fx.paths.extend(resolve(p, here_cwd) for p in paths_in_text(w))
            text = " ".join(s.words)
            if name in ("cd", "pushd"):
                target = rest[-1] if rest else "~"
                cwd = (
                    norm_path(target)
                    if target.startswith("~")
                    else resolve(target, cwd)
                    if target != "-"
                    else cwd
                )
                continue
            if self._nested(name, words, stdin, output, exit_code, here_cwd, fx, depth):
                continue
            if cmd.is_network(name, rest) or (
                name not in _TEXT_ONLY and not cmd.INTERPRETERS.fullmatch(name) and cmd.urls(" ".join(rest))
            ):
                fx.network.append(text + (f"\n{stdin}" if stdin else ""))
            if here_cwd.startswith(("/", "~/")) and (name == "git" or cmd.runs_any_tests(name, rest)):
                self.trace.checkouts.add(here_cwd)
            if cmd.runs_tests(name, rest):
                module = rest[rest.index("-m") + 1] if "-m" in rest[:-1] else name
                fx.runs.append(module if name not in ("make", "npm", "yarn", "pnpm") else f"{name} test")
            self._interpreter(name, words, stdin, here_cwd, fx)
            fx.changes.extend(
                self._file_effects(
                    name, words, targets, stdin, piped_text, output, exit_code, here_cwd, alone
                )
            )
            piped_text = echo_text(words) if name in ("echo", "printf") else stdin if name == "cat" else None
        return cwd

    def _assign(self, words: list[str], fx: _Effects) -> int:
        """Leading ``NAME=value`` words (also after ``export``) remembered; how many words they take."""
        n = 0
        for w in words:
            if w == "export":
                n += 1
                continue
            name, eq, value = w.partition("=")
            if not eq or not name.isidentifier():
                break
            self.variables[name] = value
            if looks_like_path(value):
                fx.paths.append(value)
            n += 1
        return n

    def _nested(self, name, words, stdin, output, exit_code, cwd, fx, depth) -> bool:
        """Shells running a script: ``bash -c "..."``, ``sh <<EOF``, ``bash script.sh``, ``./run.sh``."""
        if depth >= MAX_DEPTH:
            return False
        script = None
        if name in cmd.SHELLS:
            script = inline_script(words) if name != "eval" else " ".join(words[1:])
            script = script if script is not None else stdin
            operands = [w for w in words[1:] if not w.startswith("-")]
            if script is None and operands:
                fx.runs.append(resolve(operands[0], cwd))
                script = self.files.content(resolve(operands[0], cwd))
        elif "/" in words[0] and "://" not in words[0] and not cmd.INTERPRETERS.fullmatch(name):
            # (a command word with a slash is a path run as a program: ``./run.sh``, ``ci/check.sh``)
            fx.runs.append(resolve(words[0], cwd))
            script = self.files.content(resolve(words[0], cwd))
            if script is None or not script.startswith("#!") or "python" in script.split("\n", 1)[0]:
                return False
        if script is None:
            return False
        self._run(script, output, exit_code, cwd, fx, depth + 1)
        return True

    def _interpreter(self, name: str, words: list[str], stdin: str | None, cwd: str, fx: _Effects) -> None:
        """Python (and other interpreters') code run inline or from a file: network use, file effects."""
        if not cmd.INTERPRETERS.fullmatch(name):
            return
        flags = ("-c",) if name.startswith(("python", "pypy")) else ("-e", "-E", "-r")
        rest = words[1:]
        module = rest.index("-m") if "-m" in rest else len(rest)
        code = inline_script(words[: module + 1], flags)
        if code is None and stdin is not None:
            code = stdin
        operands = [w for w in rest[:module] if not w.startswith("-") and w != code]
        if code is None and operands:
            fx.runs.append(resolve(operands[0], cwd))
            code = self.files.content(resolve(operands[0], cwd))
        if code is None:
            return
        fx.paths.extend(resolve(p, cwd) for p in paths_in_text(code))
        if cmd.script_network(code):
            fx.network.append(" ".join(words) + "\n" + code)
        if name.startswith(("python", "pypy")):
            for verb, path, payload in scripts.python_effects(code):
                fx.changes.extend(self.files.effect(verb, resolve(path, cwd), payload, code, cwd))
        elif name in ("perl", "ruby") and any(w.startswith("-") and "i" in w for w in rest):
            subs, files = scripts.perl_in_place(words)
            for f in files:
                fx.changes.append(self.files.sed(resolve(f, cwd), subs, extended=True))

    def _file_effects(
        self, name, words, targets, stdin, piped, output, exit_code, cwd, alone
    ) -> list[FileChange]:
        """File changes (and whole-file reads) of one simple command."""
        files, rest = self.files, words[1:]
        args = [w for w in cmd.operands(name, rest)]
        at = [resolve(a, cwd) for a in args]
        out: list[FileChange] = []
        ok = exit_code in (0, None)
        if name in ("rm", "unlink", "shred"):
            out.extend(files.delete(p) for p in at)
        elif name == "git":
            out.extend(self._git(rest, stdin, cwd))
        elif name == "mv" and len(at) == 2:
            out.append(files.delete(at[0], moved_to=at[1]))
        elif name in ("cp", "install") and len(at) == 2:
            out.append(files.copy(at[0], at[1]))
        elif name == "sed" and cmd.has_option(rest, "-i", "--in-place"):
            sed, file_args, extended = scripts.sed_scripts(words)
            out.extend(files.sed(resolve(f, cwd), sed, extended) for f in file_args)
        elif name in ("patch", "apply_patch") or (name == "git" and rest[:1] == ["apply"]):
            text = stdin if stdin is not None else piped
            if text is None and name == "apply_patch" and rest:
                text = rest[0]
            if text is None and "<" in words and words.index("<") + 1 < len(words):
                text = files.content(resolve(words[words.index("<") + 1], cwd))
            out.extend(files.patch(parse_patch(text or ""), cwd))
        elif name == "tee":
            content = stdin if stdin is not None else piped
            out.extend(files.write(p, content, append=cmd.has_option(rest, "-a")) for p in at)
        elif name == "truncate" and cmd.has_option(rest, "-s"):
            out.extend(files.write(p, "") for p in at)
        elif name == "touch":
            out.extend(files.write(p, "") for p in at if not files.existed(p))
        elif name in ("ln", "sponge") and at:
            out.append(files.write(at[-1], None))
        elif name in _CONVERTS_IN_PLACE and not cmd.has_option(rest, "-n", "--newfile"):
            # line endings or encodings rewritten in place: content the session does not see
            out.extend(files.write(p, None) for p in self._globbed(at, cwd))
        elif name == "find" and ("-delete" in rest or ("-exec" in rest and "rm" in rest)):
            pattern = rest[rest.index("-name") + 1] if "-name" in rest[:-1] else None
            if pattern and "*" not in pattern:
                out.extend(
                    files.delete(resolve(f"{r}/{pattern}", cwd)) for r in cmd.file_arguments("find", rest)
                )
        elif name in cmd.SHOWS_WHOLE and len(at) == 1 and not targets and ok and output and alone:
            files.see(at[0], tools.file_text(output) if rest[0].startswith("-") else output)
        for op, target in targets:
            if name == "cat" and stdin is not None:
                content = stdin
            elif name in ("echo", "printf"):
                content = echo_text(words)
            elif name == "cat" and len(at) == 1:
                content = files.content(at[0])
            else:
                content = None
            out.append(files.write(resolve(target, cwd), content, append=op == ">>"))
        return out

    def _globbed(self, paths: list[str], cwd: str) -> list[str]:
        """``paths`` with each shell pattern (``spec/fixtures/*.fa``) replaced by the files it matches
        among those the session has seen or named, or kept as it is when it matches none."""
        out = []
        for path in paths:
            if not any(c in path for c in "*?["):
                out.append(path)
                continue
            seen = {*self.files.known, *self.trace.originals}
            seen |= {resolve(p, cwd) for text in self.files.mentioned for p in paths_in_text(text)}
            matched = sorted(p for p in seen if fnmatch.fnmatchcase(p, path))
            out.extend(matched or [path])
        return out

    def _git(self, rest: list[str], stdin: str | None, cwd: str) -> list[FileChange]:
        sub, args = cmd.git_subcommand(rest)
        operands = [resolve(a, cwd) for a in args if not a.startswith("-")]
        files = self.files
        if sub == "rm" and "--cached" not in args:
            return [files.delete(p) for p in operands]
        if sub == "mv" and len(operands) == 2:
            return [files.delete(operands[0], moved_to=operands[1])]
        if sub == "apply":
            text = stdin if stdin is not None else files.content(operands[-1]) if operands else None
            return files.patch(parse_patch(text or ""), cwd)
        if sub in ("checkout", "restore") and ("--" in args or sub == "restore"):
            paths = args[args.index("--") + 1 :] if "--" in args else operands
            source = cmd.checkout_source(sub, args)
            shown = (c.output for c in reversed(self.trace.calls))
            if source is not None and not cmd.own_revision(source, cmd.branch_shown(shown)):
                # another line of work's version: content the session does not know
                if "--" not in args:
                    paths = [a for a in args if not a.startswith("-") and a != source]
                return [files.write(resolve(p, cwd), None) for p in paths]
            return [c for p in paths if (c := files.revert(resolve(p, cwd))) is not None]
        return []

    # --- tools -------------------------------------------------------------------------

    def call(self, turn: ToolTurn) -> dict:
        """The fields of the :class:`Call` a tool turn makes."""
        try:
            args = tools.loads(turn.arguments)
        except ValueError:
            args = turn.arguments  # free-form input (a raw patch, a raw command line)
        if isinstance(args, str):
            args = tools.raw_arguments(turn.name, args, self.settings)
        if not isinstance(args, dict):
            self.files.mention(turn.output)
            return {"role": "other", "paths": paths_in_text(turn.arguments)}
        role = tools.role(turn.name, args, self.settings)
        fields: dict = {"role": role, "cwd": self.cwd}
        ok = turn.exit_code in (0, None)
        path = tools.first(args, tools.PATH_KEYS)
        at = resolve(self.tilde(path), self.cwd) if path else None
        if role == "shell":
            command = next((args[k] for k in tools.COMMAND_KEYS if k in args), "")
            if isinstance(command, list):
                command = shlex.join(str(c) for c in command)
            if not command:
                command = next((v for v in args.values() if isinstance(v, str)), "")
            if isinstance(command, str):
                workdir = tools.first(args, tools.CWD_KEYS)
                workdir = self.tilde(workdir) if workdir else workdir
                fields["cwd"] = resolve(workdir, self.cwd) if workdir else self.cwd
                fx = self.shell(command, turn.output, turn.exit_code, workdir)
                fields.update(
                    command=command, changes=fx.changes, paths=fx.paths, network=fx.network, runs=fx.runs
                )
        elif role == "python":
            fx = _Effects()
            self._interpreter("python", ["python", "-c", args["code"]], None, self.cwd, fx)
            fields.update(command=args["code"], changes=fx.changes, paths=fx.paths, network=fx.network)
        elif role == "read" and at:
            fields["paths"] = [at]
            if ok and not any(k in args for k in tools.RANGE_KEYS) and not _error(turn.output):
                self.files.see(at, tools.file_text(turn.output))
        elif role == "edit":
            changes, paths = self.files.edit_tool(
                args, tools.normal(turn.name), at, ok, turn.output, self.cwd
            )
            fields.update(changes=changes, paths=paths)
        elif role == "search":
            pattern = tools.first(args, tools.PATTERN_KEYS)
            fields["paths"] = [p for p in (at, pattern) if p and (p == at or "/" in p)]
        elif role == "fetch":
            url = (
                tools.first(args, tools.URL_KEYS)
                or tools.url_argument(args)
                or tools.first(args, ("query",))
                or ""
            )
            fields.update(command=url, network=[url] if url else [])
        else:
            texts = tools.strings(args)
            fields["paths"] = [p for t in texts for p in paths_in_text(t)]
            fields["network"] = [u for t in texts for u in cmd.urls(t)]  # a URL handed to an unknown tool
        self.files.mention(turn.output)
        return fields


_CONVERTS_IN_PLACE = {"dos2unix", "unix2dos", "mac2unix", "unix2mac"}


_HOME = re.compile(r"(?<![\w.~/-])(/home/[\w.-]+|/Users/[\w.-]+|/root)(?=/)")


def home_folder(session: Session) -> str | None:
    """The home folder the session's absolute paths show (the most named one), or None."""
    found = [
        folder
        for turn in session.turns
        if isinstance(turn, ToolTurn)
        for text in (turn.arguments, turn.output)
        if "/home/" in text or "/Users/" in text or "/root/" in text
        for folder in _HOME.findall(text)
    ]
    return Counter(found).most_common(1)[0][0] if found else None


def _error(output: str) -> bool:
    head = output.lstrip()[:80].lower()
    return head.startswith(("error", "no such file", "file not found", "cannot", "[errno"))


def trace(session: Session, settings: RewardSettings) -> Trace:
    """The session's tool calls as :class:`Call` records, in order."""
    walker = Walker(settings)
    walker.home = home_folder(session)
    last: AssistantTurn | None = None
    for index, turn in enumerate(session.turns):
        if isinstance(turn, AssistantTurn):
            last = turn
            continue
        if not isinstance(turn, ToolTurn):
            continue
        fields = walker.call(turn)
        walker.trace.calls.append(
            Call(
                index=index,
                tool_turn_id=turn.turn_id,
                assistant_turn_id=last.turn_id if last else None,
                completion_len=len(last.completion_token_ids) if last else 0,
                tool=turn.name,
                role=fields["role"],
                command=fields.get("command", ""),
                paths=tuple(dict.fromkeys(norm_path(p) for p in fields.get("paths", []) if p)),
                changes=tuple(fields.get("changes", [])),
                network=tuple(fields.get("network", [])),
                runs=tuple(fields.get("runs", [])),
                output=turn.output,
                exit_code=turn.exit_code,
                cwd=fields.get("cwd", ""),
            )
        )
    walker.files.finish()
    return walker.trace
