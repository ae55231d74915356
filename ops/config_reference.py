"""The configuration reference, generated from the settings dataclasses.

    python -m ops.config_reference > docs/configuration.md
    python -m ops.config_reference --check    # exit 1 if docs/configuration.md is stale

Every field of every settings class becomes one row: its TOML key and table,
its ``RATCHET_*`` variable, type, default and meaning. The meaning is the
field's ``metadata["help"]``, else the comment on its line, else the comment
block right above it: a comment in the settings class is its documentation.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import difflib
import inspect
import io
import os
import sys
import textwrap
import tokenize
import types
import typing
from pathlib import Path

from gating.settings import GateSettings
from ingest.brokers import KafkaSecurity
from ingest.config import ENV_PREFIX
from ingest.quality import QualitySettings
from ingest.settings import IngestSettings
from learner.settings import LearnerSettings
from ops.pipeline import PipelineSettings
from ops.simulator import SimulatorSettings
from ops.stack import StackSettings
from rewards.scoring import RewardSettings
from rewards.traces import TraceSettings
from rewards.worker_settings import StreamSettings
from serving.settings import ControllerSettings, ProxySettings

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "configuration.md"


@dataclasses.dataclass(frozen=True)
class SettingsClass:
    cls: type
    section: str  # the TOML table its keys may also sit in
    read_by: str
    local: bool = False  # read only by the local stack, `ratchet up` and the demo


SETTINGS = (
    SettingsClass(
        KafkaSecurity, "kafka", "every stage's Kafka clients (ingest, proxy, rewards, learner, `ratchet dlq`)"
    ),
    SettingsClass(IngestSettings, "ingest", "`ratchet ingest serve`"),
    SettingsClass(ProxySettings, "proxy", "`ratchet proxy serve`"),
    SettingsClass(StreamSettings, "rewards", "`ratchet rewards worker` (the stream join and its loop)"),
    SettingsClass(RewardSettings, "rewards", "`ratchet rewards worker` (scoring and hack detectors)"),
    SettingsClass(LearnerSettings, "learner", "`ratchet learner run`, `ratchet learner status`"),
    SettingsClass(
        QualitySettings, "quality", "`ratchet quality`, and `ratchet learner run` (micro-batch check)"
    ),
    SettingsClass(
        GateSettings, "gate", "`ratchet gate run`, `ratchet gate serve` and the other `ratchet gate` commands"
    ),
    SettingsClass(ControllerSettings, "serving", "`ratchet serving run`, `ratchet serving status`"),
    SettingsClass(TraceSettings, "traces", "`ratchet traces run`, `ratchet traces forward`"),
    SettingsClass(
        StackSettings, "stack", "`ratchet stack`, `ratchet model prepare`, `ratchet up`", local=True
    ),
    SettingsClass(PipelineSettings, "pipeline", "`ratchet up`, `ratchet demo`", local=True),
    SettingsClass(SimulatorSettings, "simulator", "`python -m ops.simulator`, `ratchet demo`", local=True),
)

# --- reading the classes --------------------------------------------------------------------


def field_comments(cls: type) -> dict[str, tuple[str, str]]:
    """Per field: (the comments on its own lines, the comment block right above it)."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    (node,) = ast.parse(source).body
    out = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        own = [comments[n] for n in range(stmt.lineno, stmt.end_lineno + 1) if n in comments]
        above: list[str] = []
        n = stmt.lineno - 1
        while n >= 1 and n in comments and lines[n - 1].lstrip().startswith("#"):
            above.insert(0, comments[n])
            n -= 1
        out[stmt.target.id] = (" ".join(own), " ".join(above))
    return out


def field_help(cls: type, field: dataclasses.Field, comments: dict[str, tuple[str, str]]) -> str:
    """``metadata["help"]``, the field's own comment, the comment block above it."""
    own, above = comments.get(field.name, ("", ""))
    return field.metadata.get("help") or own or above


def type_name(annotation) -> str:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return f"{type_name(args[0])}, optional"
    if origin is tuple:
        return f"list of {type_name(typing.get_args(annotation)[0])}"
    if origin is dict:
        return "map"
    if annotation is Path:
        return "path"
    return annotation.__name__


HOME_MARK = "/home-folder"


@contextlib.contextmanager
def home_as_tilde():
    """Defaults built from the home folder render as ``~/...`` whoever generates the page."""
    saved = {k: os.environ.get(k) for k in ("HOME", "XDG_STATE_HOME", "RATCHET_CACHE")}
    os.environ["HOME"] = HOME_MARK
    os.environ.pop("XDG_STATE_HOME", None)
    os.environ.pop("RATCHET_CACHE", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def default_value(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        with home_as_tilde():
            return field.default_factory()
    raise ValueError(f"{field.name} has no default")


def render_value(value) -> str:
    """A default as it would be written in the environment variable."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, tuple):
        return f"`{','.join(str(v) for v in value)}`" if value else "empty"
    if isinstance(value, dict):
        return f"`{','.join(f'{k}={v}' for k, v in value.items())}`" if value else "empty"
    if isinstance(value, str) and value == "":
        return "empty"
    if isinstance(value, Path):
        value = str(value).replace(HOME_MARK, "~", 1)
    return f"`{value}`"


@dataclasses.dataclass(frozen=True)
class Setting:
    owner: SettingsClass
    name: str
    type: str
    default: str
    help: str

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


def settings_of(entry: SettingsClass) -> list[Setting]:
    hints = typing.get_type_hints(entry.cls)
    comments = field_comments(entry.cls)
    return [
        Setting(
            entry,
            f.name,
            type_name(hints[f.name]),
            render_value(default_value(f)),
            field_help(entry.cls, f, comments),
        )
        for f in dataclasses.fields(entry.cls)
    ]


def all_settings() -> list[Setting]:
    return [s for entry in SETTINGS for s in settings_of(entry)]


def env_names() -> set[str]:
    """Every ``RATCHET_*`` variable a setting reads, and ``RATCHET_CONFIG``."""
    return {s.env for s in all_settings()} | {ENV_PREFIX + "CONFIG"}


def is_address(name: str) -> bool:
    """Settings that name another service: Kafka bootstrap servers and URLs."""
    return name.endswith(("_bootstrap", "_url", "_urls"))


# --- the page -------------------------------------------------------------------------------

INTRO = """\
# Configuration reference

Generated from the settings dataclasses by `python -m ops.config_reference > docs/configuration.md`;
do not edit by hand (`python -m ops.config_reference --check` and `tests/ops/test_deploy.py` fail when
this page is stale). For deployment files see [`ops/deploy/`](../ops/deploy/README.md).

## How settings are read

Each command reads one typed settings object (a frozen dataclass) with `ingest.config.load`, in
this order, the last one winning:

1. the field's default (below);
2. the TOML file named by `RATCHET_CONFIG`: a key at top level applies to every settings class
   that has that field; a key in the class's table (`[ingest]`, `[rewards]`, ...) to that class;
3. the environment variable `RATCHET_<FIELD>` (upper case).

So stages that share a field share its variable: one `RATCHET_KAFKA_BOOTSTRAP` configures every
stage that talks to Kafka. Values in the environment: booleans `true`/`false` (also `1`/`0`,
`yes`/`no`, `on`/`off`); lists comma-separated (`a,b,c`); maps `key=value,key=value`; an optional
setting is unset by an empty value, `none` or `null`. In TOML use the native types (arrays,
inline tables); a map setting must sit in its table, since at top level an inline table reads as a
table of its own. A path starting with `~` is expanded. `~/.local/state` in a default stands for
`$XDG_STATE_HOME` when that is set, and `~/.cache/ratchet` for `$RATCHET_CACHE`.

A key or variable that names no setting is reported by `ratchet config check [FILE]` (with the
likeliest intended one), and `ratchet up` and `ratchet demo` refuse to start on it; a stage started
on its own (`ratchet learner run`, ...) reads only the settings it knows, so run the check first.

Addresses of other services (Kafka, MLflow, vLLM, the proxies) have no production default: the
defaults point at the local stack on 127.0.0.1.
"""


def _cell(text: str) -> str:
    """Text for a table cell: pipes escaped, and ``<`` outside code spans (it would start an HTML tag)."""
    parts = text.replace("\n", " ").split("`")
    parts = [part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts)]
    return "`".join(parts).replace("|", "\\|")


def render() -> str:
    settings = all_settings()
    out = [INTRO]

    readers: dict[str, list[str]] = {}
    for s in settings:
        tag = f"`[{s.owner.section}]`"
        if tag not in readers.setdefault(s.env, []):
            readers[s.env].append(tag)
    shared = {env: tables for env, tables in readers.items() if len(tables) > 1}
    out.append("## Variables read by several tables\n")
    out.append("| variable | tables |\n|---|---|")
    out += [f"| `{env}` | {', '.join(tables)} |" for env, tables in sorted(shared.items())]
    out.append("")

    out.append("## Address settings\n")
    out.append("Every stage setting that names another service; in production each must point at yours.\n")
    out.append("| variable | tables | default |\n|---|---|---|")
    seen = set()
    for s in settings:
        if is_address(s.name) and not s.owner.local and s.env not in seen:
            seen.add(s.env)
            defaults = sorted({x.default for x in settings if x.env == s.env and not x.owner.local})
            out.append(
                f"| `{s.env}` | {', '.join(readers[s.env])} | {', '.join(_cell(d) for d in defaults)} |"
            )
    out.append("")

    for group, local in (("Stages", False), ("Local stack and demo", True)):
        out.append(f"## {group}\n")
        if local:
            out.append(
                "These are read only by the local stack, `ratchet up` and the demo; a production\n"
                "deployment does not need them.\n"
            )
        for entry in (e for e in SETTINGS if e.local == local):
            module = entry.cls.__module__.replace(".", "/") + ".py"
            out.append(f"### `[{entry.section}]` {entry.cls.__name__}\n")
            doc = inspect.getdoc(entry.cls) or ""
            if doc and not doc.startswith(entry.cls.__name__ + "("):  # not the dataclass's generated one
                out.append(doc.split("\n\n")[0].replace("\n", " ") + "\n")
            out.append(f"Defined in [`{module}`](../{module}); read by {entry.read_by}.\n")
            out.append("| key | variable | type | default | meaning |\n|---|---|---|---|---|")
            for s in settings_of(entry):
                out.append(f"| `{s.name}` | `{s.env}` | {s.type} | {_cell(s.default)} | {_cell(s.help)} |")
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# Settings that were renamed (one name per concept): old key -> the key that replaced it.
RENAMED: dict[str, tuple[str, ...]] = {
    "served_model_name": ("base_model",),
    "base_model_name": ("base_model",),
    "vllm_url": ("vllm_urls", "gate_vllm_url"),  # the proxy's replicas, the gate's evaluation replica
    "seed": ("lora_seed", "gate_seed"),  # the learner's LoRA initialisation, the gate's bootstrap
}


def check_config(path: Path) -> list[str]:
    """Problems of the TOML file ``path`` as every stage would read it: unknown tables, keys no
    settings class reads where they stand (with the likeliest intended one), values of the wrong
    type and values a class refuses. Empty when every key is read by some stage."""
    import tomllib

    from ingest.config import ConfigError, load

    try:
        with Path(path).open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        return [f"{path}: cannot read it ({exc.strerror})"]
    except tomllib.TOMLDecodeError as exc:
        return [f"{path}: not valid TOML ({exc})"]
    by_section: dict[str, set[str]] = {}
    for entry in SETTINGS:
        by_section.setdefault(entry.section, set()).update(f.name for f in dataclasses.fields(entry.cls))
    every = set().union(*by_section.values())

    def unknown(key: str, where: str, known: set[str]) -> str:
        near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
        owners = [f"[{section}]" for section, keys in sorted(by_section.items()) if key in keys]
        if owners:
            hint = f"; it is a setting of {' and '.join(owners)}: move it there or to the top level"
        elif key in RENAMED:
            hint = "; it was renamed " + " or ".join(repr(k) for k in RENAMED[key])
        else:
            hint = f"; did you mean {near[0]!r}?" if near else ""
        return f"{path}: {where}{key!r} is not a setting any stage reads{hint}"

    problems = []
    for key, value in data.items():
        if isinstance(value, dict):
            if key not in by_section:
                problems.append(
                    f"{path}: unknown table [{key}]; the tables are {', '.join(f'[{s}]' for s in sorted(by_section))}"
                )
                continue
            for inner in value:
                if inner not in by_section[key]:
                    problems.append(unknown(inner, f"[{key}] ", by_section[key]))
        elif key not in every:
            problems.append(unknown(key, "", every))
    for entry in SETTINGS:
        try:
            load(entry.cls, entry.section, env={"RATCHET_CONFIG": str(path)})
        except ConfigError as exc:
            problems.append(str(exc))
        except (TypeError, ValueError) as exc:
            problems.append(f"{path} [{entry.section}]: {exc}")
    return list(dict.fromkeys(problems))


# RATCHET_* variables that are not settings: where the caches are, which venv the CLI runs from,
# and the test suite's and the Makefile's own knobs.
OTHER_ENV = {
    ENV_PREFIX + name for name in ("CACHE", "APP_VENV", "TEST_STACK", "TEST_CANDIDATES", "DEMO_MINUTES")
}


def check_environment(env: dict[str, str] | None = None) -> list[str]:
    """``RATCHET_*`` variables no stage reads, each with the likeliest intended one."""

    env = os.environ if env is None else env
    known = env_names() | OTHER_ENV
    problems = []
    for name in sorted(n for n in env if n.startswith(ENV_PREFIX) and n not in known):
        near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        hint = f"; did you mean {near[0]}?" if near else ""
        renamed = RENAMED.get(name.removeprefix(ENV_PREFIX).lower())
        if renamed:
            hint = "; it was renamed " + " or ".join(ENV_PREFIX + key.upper() for key in renamed)
        problems.append(f"environment {name} is not a setting any stage reads{hint}")
    return problems


def config_problems(path: str | None = None) -> list[str]:
    """Problems of the ``RATCHET_*`` environment and of the TOML file ``path`` (default: the one
    ``RATCHET_CONFIG`` names, if any)."""
    path = path or os.environ.get("RATCHET_CONFIG")
    return check_environment() + (check_config(Path(path).expanduser()) if path else [])


def require_valid_config() -> None:
    """Raise :class:`ConfigError` listing :func:`config_problems`, if any."""
    from ingest.config import ConfigError

    problems = config_problems()
    if problems:
        raise ConfigError(
            "\n  ".join([f"{len(problems)} problem(s) in the configuration:", *problems])
            + "\n(`ratchet config check` lists them; docs/configuration.md has every setting)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops.config_reference", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {DOC.relative_to(REPO)} is stale")
    args = parser.parse_args(argv)
    page = render()
    if not args.check:
        sys.stdout.write(page)
        return 0
    if DOC.exists() and DOC.read_text() == page:
        return 0
    print(
        f"{DOC.relative_to(REPO)} is stale: run python -m ops.config_reference > {DOC.relative_to(REPO)}",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
