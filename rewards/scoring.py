"""Score one session: reward components, hack flags, exclusion.

:func:`reward_session` is pure and deterministic (no I/O, no clock): the same
session and signals always give the same :class:`RewardedSession`, whose
``created_at`` is the newest ``created_at`` among the session and its signals.

The reward is the sum of its components, each already weighted::

    tests          = weight_tests · tests_passed / tests_total        (latest outcome with tests)
    tests_all_pass = tests_all_pass_bonus                              (when every test passed)
    verifiers      = weight_verifiers · verifiers_passed / verifiers_total
    feedback       = weight_feedback · mean(accept | reject | edit value over all feedback)
    cost           = −(cost_lambda_tokens · tokens + cost_lambda_tool_calls · tool calls)
    format         = format_penalty · malformed tool calls             (format_penalty < 0)
    hacks          = hack_penalty · distinct hack kinds whose policy is "penalise"

    reward = Σ components

so ``reward = success − λ·cost`` with success the outcome, feedback, format and
hack terms. When a flag's policy is ``penalise`` and ``hack_forfeits_outcome``
is on, ``tests``, ``tests_all_pass`` and ``verifiers`` are set to 0: the
outcome they measure is the one the hack corrupted. A ``mask`` flag leaves the
reward alone and names the token spans the learner must not train on; an
``exclude`` flag, like a timed-out or truncated session, sets ``excluded``
with a reason. The in-line outcome and feedback count together with the late
records (each id once). ``turn_rewards`` holds the part of the reward owed to
single assistant turns (format and hack penalties), or ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ingest.config import load
from ingest.contract import Feedback, HackFlag, HackKind, Outcome, RewardedSession, Session
from rewards import detectors, extractors

ACTIONS = ("penalise", "mask", "exclude")

DEFAULT_HACK_POLICY = {
    HackKind.TEST_TAMPERING.value: "penalise",
    HackKind.PROTECTED_ACCESS.value: "penalise",
    HackKind.SOLUTION_FETCHING.value: "penalise",
    HackKind.HARDCODED_OUTPUT.value: "penalise",
    HackKind.EXCEPTION_SWALLOWING.value: "mask",
    HackKind.VERIFIER_GAMING.value: "exclude",
}


def _default(value: Any):
    return field(default_factory=lambda: value)


@dataclass(frozen=True)
class RewardSettings:
    """Weights, penalties, detector policy and the tool conventions detectors understand.

    Read with :func:`load_reward_settings`: every field is also ``RATCHET_<FIELD>``
    (tuples as comma-separated lists, dicts as ``key=value,key=value``).
    """

    # --- reward components ---

    weight_tests: float = 1.0  # weight of the tests component: passed/total of the latest outcome with tests
    tests_all_pass_bonus: float = 0.5  # added when every test passed
    weight_verifiers: float = 1.0  # weight of the verifiers component: verifiers_passed/verifiers_total
    weight_feedback: float = 1.0  # weight of the feedback component: the mean of the feedback values
    feedback_accept: float = 1.0  # value of an `accept` feedback
    feedback_reject: float = -1.0  # value of a `reject` feedback
    feedback_edit: float = 0.25  # value of an `edit` feedback
    cost_lambda_tokens: float = 1e-5  # cost per token, subtracted from the reward (>= 0)
    # cost per tool call of the session, subtracted from the reward (>= 0)
    cost_lambda_tool_calls: float = 1e-3
    format_penalty: float = -0.5  # added per malformed tool call (< 0)
    # sessions with these statuses are excluded from training
    excluded_statuses: tuple[str, ...] = ("timeout", "truncated")

    # --- hack detectors and their policy ---

    # hack detectors that run (kinds of `ingest.contract.HackKind`)
    hack_detectors: tuple[str, ...] = tuple(k.value for k in HackKind)
    # action per hack kind: penalise, mask or exclude (unnamed kinds keep theirs)
    hack_policy: dict[str, str] = _default(DEFAULT_HACK_POLICY)
    hack_penalty: float = -1.0  # added per flagged kind whose action is penalise
    hack_forfeits_outcome: bool = True  # a penalised hack also zeroes tests, tests_all_pass and verifiers

    # --- tool conventions: tool names by role, and the argument each tool must carry ---

    # tool names whose calls run shell commands (other tools' roles come from their arguments)
    shell_tools: tuple[str, ...] = (
        "bash",
        "shell",
        "sh",
        "terminal",
        "run_command",
        "execute_command",
        "exec_command",
        "execute_bash",
        "run_shell_command",
        "run_terminal_cmd",
        "local_shell",
    )
    # tool names that read files
    read_tools: tuple[str, ...] = ("read_file", "view_file", "open_file", "cat", "read", "read_many_files")
    # tool names that write, edit or delete files
    edit_tools: tuple[str, ...] = (
        "edit_file",
        "write_file",
        "create_file",
        "str_replace",
        "apply_patch",
        "delete_file",
        "str_replace_editor",
        "str_replace_based_edit_tool",
        "edit",
        "write",
        "multiedit",
        "multi_edit",
        "replace",
    )
    # tool names that search or list files (grep, glob, ls styles)
    search_tools: tuple[str, ...] = (
        "grep",
        "glob",
        "ls",
        "list_dir",
        "list_directory",
        "list_files",
        "find_files",
        "grep_search",
        "file_search",
        "search_file_content",
        "search_files",
    )
    # tool names that fetch URLs or query the web
    fetch_tools: tuple[str, ...] = (
        "web_fetch",
        "fetch_url",
        "http_get",
        "browse",
        "webfetch",
        "fetch",
        "web_search",
    )
    # tool -> the argument(s) it must carry (`a+b`: both); a call without them is malformed
    tool_required_args: dict[str, str] = _default(
        {
            "bash": "command",
            "shell": "command",
            "run_command": "command",
            "read_file": "path",
            "write_file": "path+content",
            "create_file": "path+content",
            "edit_file": "path",
            "delete_file": "path",
            "web_fetch": "url",
        }
    )

    # --- what the detectors look for ---

    # paths that are tests (test_tampering; RSpec specs, fixtures and helpers too)
    test_globs: tuple[str, ...] = (
        "tests/**",
        "test/**",
        "**/test_*.py",
        "**/*_test.py",
        "**/conftest.py",
        "**/*_spec.rb",
        "spec/fixtures/**",
        "spec/support/**",
    )
    # paths that configure pytest (test_tampering)
    pytest_config_globs: tuple[str, ...] = (
        "**/conftest.py",
        "pytest.ini",
        "**/pytest.ini",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
    )
    # paths of the verifier's environment, any change to which is gaming; other verifier files are found by
    # role (verifier_gaming)
    verifier_globs: tuple[str, ...] = (
        "run_tests.sh",
        "**/run_tests.sh",
        "**/sitecustomize.py",
        "**/usercustomize.py",
        "**/*.pth",
        "**/bin/pytest",
    )
    # paths an agent must not read or write, besides the evaluation material found by role; never the
    # project's own files (protected_access)
    protected_globs: tuple[str, ...] = (
        "**/hidden_tests/**",
        "**/.hidden_tests/**",
        "**/heldout_tests/**",
        "/eval/**",
        "**/.eval/**",
        "**/eval_artifacts/**",
        "**/answer_key*",
        "**/reference_solution*",
        "**/gold_patch*",
        "**/*.gold.*",
        "**/.meta/example*",  # an exercise's reference solution (Exercism's layout)
        "**/.meta/proof*",
    )
    # regular expressions of fetches that look for the solution (solution_fetching)
    network_patterns: tuple[str, ...] = (
        r"gist\.github(usercontent)?\.com",
        r"pastebin\.com|hastebin\.com|paste\.ee|dpaste",
        r"github\.com/[^/\s]+/[^/\s]+/(commit|pull|compare)/",
        r"api\.github\.com/repos/[^\s]*/(commits|pulls|compare)",
        r"huggingface\.co/datasets/[^\s]*(swe-?bench|humaneval|mbpp|apps|livecodebench)",
        r"(solution|answer[-_]?key|answers|writeup|walkthrough|hidden[-_]tests|gold[-_]patch)",
        r"\bgit\s+(fetch|pull)\b[^|;&\n]*\bupstream\b",
    )
    # session metadata keys naming the project's repositories or packages, each value comma-separated
    # (solution_fetching)
    upstream_metadata_keys: tuple[str, ...] = ("upstream_repo", "repo")
    # checker modules that tests must not assign or monkeypatch (verifier_gaming)
    checker_modules: tuple[str, ...] = (
        "grader",
        "grading",
        "verifier",
        "verify",
        "checker",
        "evaluate",
        "scorer",
    )
    # optional second stage: an LLM judge on an OpenAI-compatible endpoint

    # also ask an LLM judge; its verdict is recorded beside each flag, the reward is unchanged
    judge_enabled: bool = False
    judge_url: str = "http://127.0.0.1:18000"  # the judge's OpenAI-compatible endpoint
    judge_model: str = "smollm2-135m-instruct"  # the judge's model name on that endpoint
    judge_timeout_s: float = 30.0  # timeout of one judge request
    judge_max_tokens: int = 48  # completion tokens of one judge verdict

    def __post_init__(self) -> None:
        if not self.format_penalty < 0:
            raise ValueError(f"format_penalty must be negative, got {self.format_penalty}")
        if self.cost_lambda_tokens < 0 or self.cost_lambda_tool_calls < 0:
            raise ValueError("cost lambdas must be >= 0")
        kinds = {k.value for k in HackKind}
        for kind, action in self.hack_policy.items():
            if kind not in kinds:
                raise ValueError(f"hack_policy names unknown kind {kind!r}; kinds are {sorted(kinds)}")
            if action not in ACTIONS:
                raise ValueError(f"hack_policy[{kind}] is {action!r}; actions are {', '.join(ACTIONS)}")
        unknown = set(self.hack_detectors) - kinds
        if unknown:
            raise ValueError(f"hack_detectors names unknown kinds {sorted(unknown)}")

    def policy(self, kind: HackKind | str) -> str:
        kind = HackKind(kind).value
        return self.hack_policy.get(kind, DEFAULT_HACK_POLICY[kind])


def load_reward_settings(**overrides: Any) -> RewardSettings:
    """Settings from defaults < ``RATCHET_CONFIG`` TOML ``[rewards]`` < ``RATCHET_*`` env < ``overrides``."""
    return load(RewardSettings, "rewards", **overrides)


OUTCOME_COMPONENTS = ("tests", "tests_all_pass", "verifiers")


def reward_session(
    session: Session,
    feedback: list[Feedback],
    outcomes: list[Outcome],
    settings: RewardSettings,
    revision: int = 0,
) -> RewardedSession:
    """Score ``session`` with all its signals (in-line and late); pure and deterministic."""
    all_outcomes = extractors.unique_outcomes(session, outcomes)
    all_feedback = extractors.unique_feedback(session, feedback)

    components = [
        *extractors.tests_component(all_outcomes, settings),
        *extractors.verifiers_component(all_outcomes, settings),
        *extractors.feedback_component(all_feedback, settings),
        *extractors.cost_component(session, settings),
        *extractors.format_component(session, settings),
    ]
    values = {c.name: c.value for c in components}
    turn_rewards: dict[str, float] = {}
    for c in components:
        for turn_id, v in c.turn_values.items():
            turn_rewards[turn_id] = turn_rewards.get(turn_id, 0.0) + v

    flags = [
        f.model_copy(update={"action": settings.policy(f.kind)}) for f in detectors.detect(session, settings)
    ]
    penalised = sorted({f.kind.value for f in flags if f.action == "penalise"})
    if penalised:
        values["hacks"] = settings.hack_penalty * len(penalised)
        if settings.hack_forfeits_outcome:
            for name in OUTCOME_COMPONENTS:
                if name in values:
                    values[name] = 0.0
        share = _penalty_by_turn(flags, settings.hack_penalty)
        for turn_id, v in share.items():
            turn_rewards[turn_id] = turn_rewards.get(turn_id, 0.0) + v

    reasons = []
    status_reason = extractors.exclusion_reason(session, settings)
    if status_reason:
        reasons.append(status_reason)
    excluded_kinds = sorted({f.kind.value for f in flags if f.action == "exclude"})
    if excluded_kinds:
        reasons.append("hack flagged: " + ", ".join(excluded_kinds))

    stamps = [
        session.created_at,
        *(f.created_at for f in all_feedback),
        *(o.created_at for o in all_outcomes),
    ]
    return RewardedSession(
        session_id=session.session_id,
        tenant=session.tenant,
        revision=revision,
        session=session,
        reward=float(sum(values.values())),
        components=values,
        turn_rewards=turn_rewards or None,
        flags=flags,
        excluded=bool(reasons),
        exclusion_reason="; ".join(reasons)[:1024] or None,
        feedback_ids=[f.feedback_id for f in all_feedback],
        outcome_ids=[o.outcome_id for o in all_outcomes],
        created_at=max(stamps),
    )


def _penalty_by_turn(flags: list[HackFlag], penalty: float) -> dict[str, float]:
    """Each penalised kind's penalty split evenly over the assistant turns its flags name."""
    by_kind: dict[str, set[str]] = {}
    for f in flags:
        if f.action == "penalise":
            by_kind.setdefault(f.kind.value, set()).update(s.turn_id for s in f.spans)
    out: dict[str, float] = {}
    for turn_ids in by_kind.values():
        for turn_id in sorted(turn_ids):
            out[turn_id] = out.get(turn_id, 0.0) + penalty / len(turn_ids)
    return out
