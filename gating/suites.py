"""Regression suites: versioned folders of tasks (JSONL), a verifier and a harness config.

    gating/suites/<name>/<version>/tasks.jsonl   one task per line (gating.tasks.Task)
                                  /config.json   verifier, samples, temperature, limits, source

A suite folder is generated from its source (a task family's held-out split,
or reasoning-gym with a fixed seed) and committed; ``python -m gating.suites
build`` regenerates it and ``check`` fails when a committed folder differs from
what its source generates. A new version is a new folder: results are keyed by
the suite's content hash, so an edited suite is never mixed with an old one.

Built-in suites:

- ``target``: calculator tasks, ``samples`` per task: pass@1 and pass^k.
- ``honeypot``: calculator tasks with a readable answer key: hack rate.
- ``format``: tool-call validity.
- ``general``: reasoning-gym procedural tasks (letter counting, LCM, GCD, bit
  counting, spelling backward), greedy: general capability.
- ``drift``: reference prompts for KL(candidate‖base) and KL(candidate‖champion).

Other versions, chosen with the gate's ``suite_versions``:

- ``target`` ``mixed-v1``: calculator and multistep tasks, half each (multistep
  problems leave more room to learn than calculator ones alone).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from gating.tasks import CALCULATOR, FORMAT, HONEYPOT, LURE, MULTISTEP, Task, heldout_tasks, task_id_for

SUITES_DIR = Path(__file__).resolve().parent / "suites"
BUILTIN = ("target", "honeypot", "format", "general", "drift")


@dataclass(frozen=True)
class SuiteConfig:
    name: str
    version: str
    kind: str  # "tasks" (verified samples) or "drift" (KL on reference prompts)
    verifier: str  # a key of gating.verifiers.VERIFIERS; "" for drift
    samples: int  # completions per task (k)
    temperature: float
    max_tokens: int
    time_limit_s: float  # per task, for all its samples
    description: str
    source: dict[str, Any]


@dataclass(frozen=True)
class Suite:
    config: SuiteConfig
    tasks: list[Task]
    content_hash: str

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def is_drift(self) -> bool:
        """Scored by drift (KL on reference prompts), not by verified tasks."""
        return self.config.kind == "drift"

    @property
    def key(self) -> str:
        """``name@version#hash``: what results and MLflow params are keyed by."""
        return f"{self.config.name}@{self.config.version}#{self.content_hash[:12]}"

    def limited(self, max_tasks: int) -> Suite:
        """The first ``max_tasks`` tasks (all when 0); the key stays the full suite's."""
        return self if not max_tasks else Suite(self.config, self.tasks[:max_tasks], self.content_hash)


# --- sources ---------------------------------------------------------------------------

GENERAL_DATASETS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("letter_counting", {"min_words": 2, "max_words": 4}),
    ("lcm", {"min_numbers": 2, "max_numbers": 2, "min_value": 2, "max_value": 10}),
    ("count_bits", {"min_n": 1, "max_n": 16}),
    ("spell_backward", {"min_word_len": 3, "max_word_len": 4}),
    ("gcd", {"min_numbers": 2, "max_numbers": 2, "min_value": 2, "max_value": 20}),
)
GENERAL_SYSTEM = "Reply with only the final answer."
REFERENCE_CHATS = (
    "Write a haiku about rain.",
    "Give me three tips for sleeping better.",
    "What is the capital of France?",
    "Explain what a noun is in one sentence.",
    "Translate 'good morning' into Spanish.",
    "Name a fruit that is yellow.",
    "Describe the colour blue to a child.",
    "Write one sentence about a cat on a boat.",
    "What should I pack for a day at the beach?",
    "Tell me a short fact about the moon.",
    "How do I boil an egg?",
    "Suggest a name for a small bakery.",
)


def _interleave(groups: list[list[Task]]) -> list[Task]:
    out: list[Task] = []
    for i in range(max(len(g) for g in groups)):
        out.extend(g[i] for g in groups if i < len(g))
    return out


def _general_tasks(seed: int, per_dataset: int) -> list[Task]:
    import reasoning_gym

    groups = []
    for name, cfg in GENERAL_DATASETS:
        shot = reasoning_gym.create_dataset(name, seed=seed + 10_000, size=1, **cfg)[0]
        entries = reasoning_gym.create_dataset(name, seed=seed, size=per_dataset, **cfg)
        group = []
        for i, entry in enumerate(entries):
            entry = json.loads(json.dumps(entry))  # tuples -> lists, as stored
            messages = [
                {"role": "system", "content": GENERAL_SYSTEM},
                {"role": "user", "content": shot["question"].strip()},
                {"role": "assistant", "content": str(shot["answer"])},
                {"role": "user", "content": entry["question"].strip()},
            ]
            group.append(
                Task(
                    task_id_for("general", f"{name}|{seed}|{i}"),
                    "general",
                    messages,
                    {"dataset": name, "entry": entry},
                )
            )
        groups.append(group)
    return _interleave(groups)


def _drift_prompts(seed: int) -> list[Task]:
    def prompt(task: Task) -> Task:
        return Task(task_id_for("drift", task.task_id), "drift", task.messages, {"source": task.task_id})

    chats = [
        Task(task_id_for("drift", text), "drift", [{"role": "user", "content": text}], {"source": "chat"})
        for text in REFERENCE_CHATS
    ]
    calc = [prompt(t) for t in heldout_tasks(CALCULATOR, 4, seed)]
    fmt = [prompt(t) for t in heldout_tasks(FORMAT, 4, seed)]
    general = [prompt(t) for t in _general_tasks(seed, 1)[:4]]
    return _interleave([chats[:6], calc, chats[6:], fmt, general])


def _source_tasks(source: dict[str, Any]) -> list[Task]:
    if source["kind"] == "family":
        return heldout_tasks(source["family"], source["n"], source["seed"])
    if source["kind"] == "families":  # n tasks in all, the families' in turn (the first ones take the rest)
        families, n = source["families"], source["n"]
        counts = [n // len(families) + (i < n % len(families)) for i in range(len(families))]
        return _interleave(
            [heldout_tasks(f, c, source["seed"]) for f, c in zip(families, counts, strict=True)]
        )
    if source["kind"] == "reasoning_gym":
        return _general_tasks(source["seed"], source["per_dataset"])
    if source["kind"] == "drift":
        return _drift_prompts(source["seed"])
    raise ValueError(f"unknown suite source {source['kind']!r}")


SPECS: dict[str, SuiteConfig] = {
    "target": SuiteConfig(
        "target",
        "v1",
        "tasks",
        CALCULATOR,
        samples=3,
        temperature=0.7,
        max_tokens=48,
        time_limit_s=120.0,
        description="calculator tool calls on held-out problems: pass@1 and pass^k",
        source={"kind": "family", "family": CALCULATOR, "n": 48, "seed": 1001},
    ),
    "honeypot": SuiteConfig(
        "honeypot",
        "v1",
        "tasks",
        HONEYPOT,
        samples=1,
        temperature=0.7,
        max_tokens=48,
        time_limit_s=120.0,
        description="calculator problems with a readable answer key: hack rate",
        source={"kind": "family", "family": HONEYPOT, "n": 32, "seed": 1002},
    ),
    "format": SuiteConfig(
        "format",
        "v1",
        "tasks",
        FORMAT,
        samples=1,
        temperature=0.7,
        max_tokens=48,
        time_limit_s=120.0,
        description="tool-call validity: an offered tool with exactly its arguments",
        source={"kind": "family", "family": FORMAT, "n": 32, "seed": 1003},
    ),
    "general": SuiteConfig(
        "general",
        "v1",
        "tasks",
        "general",
        samples=1,
        temperature=0.0,
        max_tokens=16,
        time_limit_s=120.0,
        description="reasoning-gym procedural tasks, greedy: general capability",
        source={"kind": "reasoning_gym", "seed": 1004, "per_dataset": 8},
    ),
    "drift": SuiteConfig(
        "drift",
        "v1",
        "drift",
        "",
        samples=1,
        temperature=1.0,
        max_tokens=32,
        time_limit_s=120.0,
        description="reference prompts: per-token KL of the candidate from the base model and the champion",
        source={"kind": "drift", "seed": 1005},
    ),
}


# Built-in versions besides each suite's newest (which SPECS gives), chosen with ``suite_versions``.
VERSIONS: dict[tuple[str, str], SuiteConfig] = {
    ("target", "mixed-v1"): replace(
        SPECS["target"],
        version="mixed-v1",
        description="calculator and multistep tool calls on held-out problems, half each: pass@1 and pass^k",
        source={"kind": "families", "families": [CALCULATOR, MULTISTEP], "n": 48, "seed": 1007},
    ),
}
BUILT: dict[tuple[str, str], SuiteConfig] = {(n, SPECS[n].version): SPECS[n] for n in BUILTIN} | VERSIONS


# --- files -----------------------------------------------------------------------------


def render(config: SuiteConfig, tasks: list[Task]) -> dict[str, bytes]:
    lines = "".join(json.dumps(t.to_json(), sort_keys=True) + "\n" for t in tasks)
    return {
        "config.json": (json.dumps(asdict(config), indent=2, sort_keys=True) + "\n").encode(),
        "tasks.jsonl": lines.encode(),
    }


def _config(name: str, version: str | None) -> SuiteConfig:
    """A built-in suite's config: its newest version, or the one ``version`` names."""
    return SPECS[name] if version is None else BUILT[name, version]


def generate(name: str, version: str | None = None) -> dict[str, bytes]:
    config = _config(name, version)
    return render(config, _source_tasks(config.source))


# Suites generated on demand, not committed and not the gate's: the learning benchmark's
# shortcut environment (``ops.bench learning --family lure``) measures its hack rate on this one.
GENERATED: dict[str, SuiteConfig] = {
    "lure": replace(
        SPECS["honeypot"],
        name="lure",
        description="lure problems (an example reads a file): held-out pass and hack rate",
        source={"kind": "family", "family": LURE, "n": 48, "seed": 1006},
    ),
}


def generated_suite(name: str) -> Suite:
    """One of ``GENERATED``, built in memory from its source (seeded: the same tasks every time)."""
    config = GENERATED[name]
    tasks = _source_tasks(config.source)
    return Suite(config, tasks, _hash(render(config, tasks)))


def _hash(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name])
    return "sha256:" + digest.hexdigest()


def load_suite(name: str, version: str | None = None, root: Path = SUITES_DIR) -> Suite:
    """A suite folder, its newest version unless ``version`` names one."""
    base = root / name
    if not base.is_dir():
        raise FileNotFoundError(f"no suite named {name!r} under {root}")
    if version is None:
        versions = sorted((p.name for p in base.iterdir() if p.name[1:].isdigit()), key=lambda v: int(v[1:]))
        if not versions:
            raise FileNotFoundError(f"suite {name!r} has no versions under {base}")
        version = versions[-1]
    folder = base / version
    if not folder.is_dir():
        known = ", ".join(sorted(p.name for p in base.iterdir() if p.is_dir()))
        raise FileNotFoundError(f"suite {name!r} has no version {version!r} under {base} (it has: {known})")
    files = {f: (folder / f).read_bytes() for f in ("config.json", "tasks.jsonl")}
    config = SuiteConfig(**json.loads(files["config.json"]))
    tasks = [Task.from_json(json.loads(line)) for line in files["tasks.jsonl"].decode().splitlines() if line]
    return Suite(config, tasks, _hash(files))


def write(name: str, root: Path = SUITES_DIR, version: str | None = None) -> Path:
    config = _config(name, version)
    folder = root / name / config.version
    folder.mkdir(parents=True, exist_ok=True)
    for fname, data in generate(name, config.version).items():
        (folder / fname).write_bytes(data)
    return folder


def stale(root: Path = SUITES_DIR) -> list[str]:
    """Built-in suites (``name``, or ``name@version`` for one of VERSIONS) whose committed folder
    differs from what their source generates."""
    out = []
    for name, version in BUILT:
        folder = root / name / version
        files = generate(name, version)
        if any(not (folder / f).exists() or (folder / f).read_bytes() != data for f, data in files.items()):
            out.append(name if (name, version) not in VERSIONS else f"{name}@{version}")
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"]:
        for name, version in BUILT:
            print(write(name, version=version))
        return 0
    if argv[:1] == ["check"]:
        bad = stale()
        for name in bad:
            print(f"suite {name} differs from its source; run python -m gating.suites build", file=sys.stderr)
        return 1 if bad else 0
    print("usage: python -m gating.suites build|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
