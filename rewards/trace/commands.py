"""What a simple shell command does, by the command's behaviour: which arguments are files, whether
it shows a whole file, reaches the network or runs the tests. Pure tables and argument parsing."""

from __future__ import annotations

import re
from collections.abc import Iterable

from rewards.trace.paths import looks_like_path

# commands that print a whole file given as their only operand
SHOWS_WHOLE = {"cat", "less", "more", "most", "nl", "bat", "batcat", "pg", "view"}
# commands whose every operand is a file or directory
FILE_OPERANDS = SHOWS_WHOLE | {
    "head", "tail", "tac", "ls", "ll", "dir", "tree", "rm", "unlink", "rmdir", "cp", "mv", "touch",
    "truncate", "stat", "file", "wc", "diff", "cmp", "colordiff", "od", "xxd", "hexdump", "strings",
    "base64", "md5sum", "sha1sum", "sha256sum", "vi", "vim", "nvim", "nano", "emacs", "code", "ed", "ex",
    "source", ".", "tee", "realpath", "readlink", "du", "shred", "install", "ln", "mkdir", "tar", "zip",
    "unzip", "gzip", "gunzip", "zcat", "sort", "uniq", "cut", "paste", "join", "column", "iconv", "fold",
    "fmt", "pr", "expand", "unexpand", "rev", "split", "csplit", "dos2unix", "sponge", "open", "xdg-open",
    "chmod", "chown", "chgrp", "rsync", "scp", "bash", "sh", "zsh", "dash", "ksh",
}  # fmt: skip
MODE_FIRST = {"chmod", "chown", "chgrp"}  # first operand is a mode or owner
PATTERN_FIRST = {
    "grep",
    "egrep",
    "fgrep",
    "zgrep",
    "rg",
    "ag",
    "ack",
    "sed",
    "awk",
    "gawk",
    "mawk",
    "jq",
    "yq",
}
OPTION_VALUES = {
    "head": {"-n", "-c"},
    "tail": {"-n", "-c"},
    "grep": {"-e", "-f", "-m", "-A", "-B", "-C", "-d", "-D"},
    "rg": {"-e", "-f", "-g", "-t", "-T", "-m", "-A", "-B", "-C", "-M", "-r", "--glob", "--type", "--iglob"},
    "ag": {"-G", "-A", "-B", "-C", "-m"},
    "sed": {"-e", "-f", "-l", "--expression"},
    "awk": {"-F", "-v", "-f"},
    "gawk": {"-F", "-v", "-f"},
    "jq": {"--arg", "--argjson", "-f"},
    "sort": {"-k", "-t", "-o", "-S", "-T"},
    "cut": {"-d", "-f", "-c", "-b"},
    "cp": {"-t", "-S"},
    "mv": {"-t", "-S"},
    "ln": {"-t"},
    "install": {"-m", "-o", "-g", "-t"},
    "tar": {"-f", "-C", "--directory", "-T", "-X"},
    "unzip": {"-d", "-x"},
    "diff": {"-U", "-C", "-x", "-X", "-L"},
    "xxd": {"-l", "-s", "-c"},
    "od": {"-t", "-N", "-j", "-A"},
    "truncate": {"-s"},
    "split": {"-l", "-b", "-n"},
    "rsync": {"-e", "--exclude", "--include"},
    "make": {"-C", "-f", "-j"},
    "ls": {"-I", "--ignore"},
    "tree": {"-L", "-I", "-P"},
    "bash": {"-O", "-o"},
}
NETWORK_COMMANDS = {
    "curl", "wget", "http", "https", "xh", "httpie", "aria2c", "lynx", "links", "w3m", "elinks", "nc",
    "ncat", "netcat", "telnet", "ftp", "sftp", "svn", "hg", "bzr", "gh", "hub", "glab", "ssh", "socat",
    "fetch", "youtube-dl", "huggingface-cli", "kaggle",
}  # fmt: skip
_GIT_NETWORK = {"clone", "fetch", "pull", "ls-remote", "submodule", "archive", "remote", "request-pull"}
_PACKAGE_VERBS = {
    "install", "download", "wheel", "add", "i", "get", "fetch", "view", "info", "show", "pack", "source",
    "clone", "create", "sync", "update", "upgrade", "exec", "dlx", "x", "run",
}  # fmt: skip
# a module named by its remote home or a version: ``go run golang.org/x/tools/cmd/stringer@v0.1``
_REMOTE_MODULE = re.compile(r"[\w.-]+\.[a-z]{2,}/\S+|[\w@/.-]+@[\w.^~-]+$")
PACKAGE_MANAGERS = {
    "pip", "pip3", "uv", "uvx", "pipx", "poetry", "pdm", "conda", "mamba", "micromamba", "npm", "npx",
    "yarn", "pnpm", "bun", "go", "cargo", "gem", "apt", "apt-get", "brew", "easy_install", "composer",
}  # fmt: skip
INTERPRETERS = re.compile(r"(python|pypy)(\d+(\.\d+)?)?|node(js)?|deno|ruby|perl|php|Rscript|lua")
SHELLS = {"bash", "sh", "zsh", "dash", "ksh", "eval", "su"}
TEST_MODULES = {"pytest", "unittest", "nose2", "tox", "nox", "doctest", "py.test", "trial", "green", "ward"}
TEST_COMMANDS = {"pytest", "py.test", "tox", "nox", "nose2", "nosetests", "trial", "green", "ward"}
_NET_API = re.compile(
    r"urlopen|urlretrieve|urllib\d?\.request|\brequests\.(get|post|head|request|Session)|\bhttpx\.|aiohttp"
    r"|http\.client|HTTPS?Connection|socket\.create_connection|\bfetch\(|https?\.(get|request)\("
    r"|\baxios\b|Net::HTTP|open-uri|URI\.open|LWP::|HTTP::Tiny|file_get_contents\(\s*['\"]https?:"
    r"|\b(curl|wget)\s|pip\.main|\bpip\b.*\b(download|install)\b|git\s+(clone|fetch|pull)\b"
)
URL = re.compile(r"\b(?:https?|ftp|git|ssh|svn)://[^\s'\"<>`]+|\bgit@[\w.-]+:[\w./-]+")


def operands(name: str, rest: list[str]) -> list[str]:
    """Non-option arguments of a command, option values skipped."""
    values = OPTION_VALUES.get(name, set())
    out, i, only = [], 0, False
    while i < len(rest):
        w = rest[i]
        if not only and w == "--":
            only = True
        elif not only and w.startswith("-") and len(w) > 1:
            i += 1 if w in values and i + 1 < len(rest) else 0
        elif w != "<":
            out.append(w)
        i += 1
    return out


def has_option(rest: list[str], *flags: str) -> bool:
    """``rest`` holds one of ``flags`` (short flags also inside clusters such as ``-rn``)."""
    for w in rest:
        if w in flags or any(w.startswith(f + "=") for f in flags if f.startswith("--")):
            return True
        if re.fullmatch(r"-[A-Za-z]{2,}", w) and any(len(f) == 2 and f[1] in w[1:] for f in flags):
            return True
    return False


def file_arguments(name: str, rest: list[str]) -> list[str]:
    """The arguments of a command that name files: every operand of file commands, the operands
    after the pattern of search/stream commands, path-looking words of any other command."""
    if name in FILE_OPERANDS:
        ops = operands(name, rest)
        return ops[1:] if name in MODE_FIRST else ops
    if name in PATTERN_FIRST:
        ops = operands(name, rest)
        pattern_given = has_option(rest, "-e", "-f", "--expression", "--regexp", "--file")
        return ops if pattern_given and name != "jq" else ops[1:]
    if name == "find":
        roots = []
        for w in rest:
            if w.startswith(("-", "(", "!")):
                break
            roots.append(w)
        return roots or ["."]
    return [w.split("=", 1)[-1] for w in rest if looks_like_path(w.split("=", 1)[-1])]


def is_network(name: str, rest: list[str]) -> bool:
    """The command reaches the network (by the command, its subcommand, or a remote argument)."""
    if name in NETWORK_COMMANDS:
        return True
    if name == "git":
        sub = git_subcommand(rest)[0]
        return sub in _GIT_NETWORK and (sub != "archive" or has_option(rest, "--remote"))
    if name in ("rsync", "scp"):
        return any(re.match(r"[\w.@-]+:", w) or "://" in w for w in rest)
    if name in PACKAGE_MANAGERS or name.startswith(("pip", "easy_install")):
        sub = [w for w in rest if not w.startswith("-")]
        if sub[:1] == ["run"]:  # the project's own code (cargo run, npm run), unless named remotely
            return any(_REMOTE_MODULE.match(w) for w in sub[1:])
        return name in ("npx", "uvx") or bool(sub) and (sub[0] in _PACKAGE_VERBS or sub[0] == "pip")
    if name in ("mvn", "mvnw", "./mvnw"):  # an artifact fetched: dependency:get, dependency:copy...
        return any(w.startswith("dependency:") and w != "dependency:tree" for w in rest)
    if INTERPRETERS.fullmatch(name) and rest[:2] == ["-m", "pip"]:
        return bool(set(rest[2:4]) & _PACKAGE_VERBS)
    return False


# the revision checked out, its ancestors and the default line: the project's own state
_OWN_REVISION = re.compile(r"^(?:HEAD|@|(?:(?:origin|upstream)/)?(?:HEAD|main|master))(?:[~^]\d*)*$")
# the branch checked out, as git status and git branch print it
_ON_BRANCH = re.compile(r"^## ([^\s.]+(?:\.[^\s.]+)*?)(?:\.\.\.|\s|$)|^On branch (\S+)|^\* (?!\()(\S+)", re.M)


def branch_shown(outputs: Iterable[str]) -> str | None:
    """The branch checked out, as the first of these outputs (latest first) to show one says."""
    return next(
        (next(g for g in m.groups() if g) for text in outputs for m in _ON_BRANCH.finditer(text)), None
    )


def own_revision(ref: str, branch: str | None) -> bool:
    """The revision checked out, its ancestors or its line of work: ``HEAD``, and the default line
    (``main``, ``origin/main``) unless another branch is checked out (on ``release/0.9``, main's
    files are another line's work), or that branch itself."""
    base = re.sub(r"^(?:origin|upstream)/", "", re.sub(r"[~^]\d*", "", ref))
    if branch and base == branch:
        return True
    if not _OWN_REVISION.match(ref):
        return False
    return not (branch and branch not in ("main", "master") and base in ("main", "master"))


def checkout_source(sub: str, args: list[str]) -> str | None:
    """The revision ``git checkout REV -- path`` or ``git restore --source=REV path`` takes files
    from, or None (the index, or the checked-out revision)."""
    if sub == "checkout" and "--" in args:
        named = [a for a in args[: args.index("--")] if not a.startswith("-")]
        return named[0] if named else None
    if sub == "restore":
        for i, a in enumerate(args):
            if a.startswith("--source="):
                return a.split("=", 1)[1]
            if a in ("-s", "--source") and i + 1 < len(args):
                return args[i + 1]
    return None


def git_subcommand(rest: list[str]) -> tuple[str, list[str]]:
    """(subcommand, its arguments) of ``git [global options] sub args...``."""
    i = 0
    while i < len(rest) and rest[i].startswith("-"):
        i += 2 if rest[i] in ("-C", "-c", "--git-dir", "--work-tree") else 1
    return (rest[i], rest[i + 1 :]) if i < len(rest) else ("", [])


def runs_tests(name: str, rest: list[str]) -> bool:
    """The command runs a test suite (pytest, unittest, tox, ``make test``...)."""
    if name in TEST_COMMANDS:
        return True
    if INTERPRETERS.fullmatch(name) and "-m" in rest:
        module = rest[rest.index("-m") + 1] if rest.index("-m") + 1 < len(rest) else ""
        return module in TEST_MODULES
    if name in ("make", "npm", "yarn", "pnpm", "just", "task", "invoke"):
        return any(w in ("test", "tests", "check") for w in rest)
    return False


# test runners of other ecosystems: where one runs is the project's checkout
_OTHER_RUNNERS = {"jest", "vitest", "mocha", "ava", "tap", "rspec", "bats", "ctest", "phpunit", "busted"}
_RUNNER_VERBS = {
    "go": ("test",),
    "cargo": ("test", "nextest"),
    "mvn": ("test", "verify"),
    "mvnw": ("test", "verify"),
    "gradle": ("test", "check"),
    "gradlew": ("test", "check"),
    "dotnet": ("test",),
    "mix": ("test",),
    "rake": ("test", "spec"),
    "bundle": ("rspec", "rake"),
    "npx": tuple(_OTHER_RUNNERS),
    "bun": ("test",),
    "deno": ("test",),
    "sbt": ("test", "testOnly", "testQuick"),  # also a subproject's: ``sbt 'report/test'``
}


def runs_any_tests(name: str, rest: list[str]) -> bool:
    """:func:`runs_tests`, or another ecosystem's test runner (``go test``, ``cargo test``, jest,
    rspec, bats, ctest, ``./gradlew test``...)."""
    base = name.rsplit("/", 1)[-1]
    if runs_tests(name, rest) or base in _OTHER_RUNNERS:
        return True
    verbs = _RUNNER_VERBS.get(base)
    return bool(verbs) and any(w.split(" ")[0].rsplit("/", 1)[-1] in verbs for w in rest[:3])


def script_network(text: str) -> bool:
    return bool(_NET_API.search(text))


def urls(text: str) -> list[str]:
    return URL.findall(text)
