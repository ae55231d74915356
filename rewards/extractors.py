"""Reward extractors: pure functions from a session (and its signals) to one reward component.

Each extractor returns a :class:`Component`: its contribution to the reward (already
weighted), the part of it attributable to single assistant turns, and a line of
evidence. An extractor with nothing to say returns ``None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ingest.contract import AssistantTurn, Feedback, FeedbackKind, Outcome, Session, ToolTurn
from rewards.trace import tools

if TYPE_CHECKING:
    from rewards.scoring import RewardSettings


@dataclass(frozen=True)
class Component:
    name: str
    value: float
    evidence: str
    turn_values: dict[str, float] = field(default_factory=dict)


def _ordered(records, id_field: str):
    return sorted(records, key=lambda r: (r.created_at, getattr(r, id_field)))


def unique_outcomes(session: Session, outcomes: list[Outcome]) -> list[Outcome]:
    """The in-line outcome and the late ones, each id once, oldest first."""
    inline = [session.outcome] if session.outcome else []
    if not outcomes:
        return inline
    found = {o.outcome_id: o for o in inline + list(outcomes)}
    return _ordered(found.values(), "outcome_id")


def unique_feedback(session: Session, feedback: list[Feedback]) -> list[Feedback]:
    """The in-line feedback and the late ones, each id once, oldest first."""
    inline = [session.feedback] if session.feedback else []
    if not feedback:
        return inline
    found = {f.feedback_id: f for f in inline + list(feedback)}
    return _ordered(found.values(), "feedback_id")


def tests_component(outcomes: list[Outcome], settings: RewardSettings) -> list[Component]:
    """Pass fraction of the latest outcome that ran tests, plus a bonus when all passed."""
    latest = [o for o in outcomes if o.tests_total is not None and o.tests_total > 0]
    if not latest:
        return []
    o = latest[-1]
    fraction = o.tests_passed / o.tests_total
    out = [
        Component(
            "tests",
            settings.weight_tests * fraction,
            f"{o.tests_passed}/{o.tests_total} tests ({o.outcome_id})",
        )
    ]
    if o.tests_passed == o.tests_total:
        out.append(
            Component("tests_all_pass", settings.tests_all_pass_bonus, f"all tests passed ({o.outcome_id})")
        )
    return out


def verifiers_component(outcomes: list[Outcome], settings: RewardSettings) -> list[Component]:
    """Verifiers passed / total of the latest outcome that ran verifiers: a dense reward."""
    latest = [o for o in outcomes if o.verifiers_total is not None and o.verifiers_total > 0]
    if not latest:
        return []
    o = latest[-1]
    fraction = o.verifiers_passed / o.verifiers_total
    return [
        Component(
            "verifiers",
            settings.weight_verifiers * fraction,
            f"{o.verifiers_passed}/{o.verifiers_total} verifiers ({o.outcome_id})",
        )
    ]


def feedback_component(feedback: list[Feedback], settings: RewardSettings) -> list[Component]:
    """Mean value of the users' verdicts (accept, reject, edit), weighted."""
    if not feedback:
        return []
    values = {
        FeedbackKind.ACCEPT: settings.feedback_accept,
        FeedbackKind.REJECT: settings.feedback_reject,
        FeedbackKind.EDIT: settings.feedback_edit,
    }
    mean = sum(values[f.kind] for f in feedback) / len(feedback)
    kinds = ", ".join(f"{f.kind.value} ({f.feedback_id})" for f in feedback)
    return [Component("feedback", settings.weight_feedback * mean, kinds)]


def cost_component(session: Session, settings: RewardSettings) -> list[Component]:
    """−λ_tokens·tokens − λ_tool_calls·tool calls: what the session consumed, not how loaded the
    machine was (wall-clock seconds are left out); tokens fall back to the completion tokens when
    unreported."""
    tokens = session.cost.tokens or sum(len(t.completion_token_ids) for t in session.assistant_turns())
    tool_calls = sum(isinstance(t, ToolTurn) for t in session.turns)
    value = 0.0 - (settings.cost_lambda_tokens * tokens + settings.cost_lambda_tool_calls * tool_calls)
    return [Component("cost", value, f"{tokens} tokens, {tool_calls} tool calls")]


_CALL_HINT = re.compile(r'^\s*(\{|\[|<tool_call>)|"name"\s*:|<tool_call>')
_TAGGED_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.S)
_FENCED = re.compile(r"```(?:json)?\s*(.*?)(```|$)", re.S)


def _tool_call_text(text: str) -> str | None:
    """The part of an assistant text that is meant to be a tool call, or None."""
    if not _CALL_HINT.search(text):
        return None
    inner = _TAGGED_CALL.search(text) if "<tool_call>" in text else None
    if inner:
        return inner.group(1).strip()
    fenced = _FENCED.search(text) if "```" in text else None
    if fenced and _CALL_HINT.search(fenced.group(1)):
        return fenced.group(1).strip()
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    return text[start:].strip() if start >= 0 else text.strip()


def malformed_call_text(text: str) -> str | None:
    """Why an assistant text that is meant to be a tool call is malformed, or None if it is fine."""
    call = _tool_call_text(text)
    if call is None:
        return None
    try:
        obj = tools.loads(call)
    except ValueError as exc:
        return f"tool call is not valid JSON ({exc.msg} at char {exc.pos})"
    calls = obj if isinstance(obj, list) else [obj]
    for c in calls:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c["name"]:
            return "tool call lacks a string name"
        args = c.get("arguments", c.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = tools.loads(args)
            except ValueError:
                return "tool call arguments are a string that is not valid JSON"
        if not isinstance(args, dict):
            return "tool call arguments are not a JSON object"
    return None


def malformed_tool_turn(turn: ToolTurn, settings: RewardSettings) -> str | None:
    """Why a tool turn's arguments are malformed, or None if they are fine."""
    try:
        args = tools.loads(turn.arguments)
    except ValueError as exc:
        return f"{turn.name} arguments are not valid JSON ({exc.msg} at char {exc.pos})"
    if not isinstance(args, dict):
        return f"{turn.name} arguments are not a JSON object"
    required = settings.tool_required_args.get(turn.name)
    if required:
        missing = [k for k in required.split("+") if not isinstance(args.get(k), str)]
        if missing:
            return f"{turn.name} arguments lack {', '.join(missing)}"
    return None


def format_component(session: Session, settings: RewardSettings) -> list[Component]:
    """A negative reward per malformed tool call, attributed to the assistant turn that emitted it.

    An assistant turn counts the larger of: its own text being a malformed call (1), and
    the number of malformed tool turns that follow it before the next assistant turn.
    """
    per_turn: dict[str, int] = {}
    reasons: list[str] = []
    current: AssistantTurn | None = None
    from_text = from_tools = 0

    def close() -> None:
        if current is not None and max(from_text, from_tools):
            per_turn[current.turn_id] = max(from_text, from_tools)

    for turn in session.turns:
        if isinstance(turn, AssistantTurn):
            close()
            current, from_tools = turn, 0
            why = malformed_call_text(turn.text) if turn.text else None
            from_text = 1 if why else 0
            if why:
                reasons.append(f"{turn.turn_id}: {why}")
        elif isinstance(turn, ToolTurn):
            why = malformed_tool_turn(turn, settings)
            if why:
                from_tools += 1
                reasons.append(f"{turn.turn_id}: {why}")
    close()
    if not per_turn:
        return []
    turn_values = {tid: settings.format_penalty * n for tid, n in per_turn.items()}
    n_calls = sum(per_turn.values())
    return [
        Component(
            "format",
            sum(turn_values.values()),
            f"{n_calls} malformed call(s): " + "; ".join(reasons),
            turn_values,
        )
    ]


def exclusion_reason(session: Session, settings: RewardSettings) -> str | None:
    """Why a session is kept out of training because of its status, or None."""
    if session.status.value in settings.excluded_statuses:
        return (
            f"status {session.status.value}: the session did not finish, so its outcome is not the policy's"
        )
    return None
