from datetime import UTC, datetime, timedelta

import pytest

from ingest.contract import Cost, Feedback, Outcome
from rewards import extractors
from rewards.scoring import RewardSettings, load_reward_settings
from tests.rewards.hand_made import bash, say, session, tool

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def outcome(oid: str, minutes: int = 0, **counts) -> Outcome:
    return Outcome(
        outcome_id=oid,
        session_id="s-hand-1",
        tenant="acme",
        created_at=T0 + timedelta(minutes=minutes),
        **counts,
    )


def feedback(fid: str, kind: str, minutes: int = 0) -> Feedback:
    return Feedback(
        feedback_id=fid,
        session_id="s-hand-1",
        tenant="acme",
        kind=kind,
        created_at=T0 + timedelta(minutes=minutes),
    )


def values(components) -> dict[str, float]:
    return {c.name: c.value for c in components}


def test_tests_pass_fraction_without_bonus():
    got = values(extractors.tests_component([outcome("o1", tests_passed=3, tests_total=4)], RewardSettings()))
    assert got == {"tests": 0.75}


def test_tests_all_pass_bonus_and_weight():
    settings = RewardSettings(weight_tests=2.0, tests_all_pass_bonus=0.3)
    got = values(extractors.tests_component([outcome("o1", tests_passed=5, tests_total=5)], settings))
    assert got == {"tests": 2.0, "tests_all_pass": 0.3}


def test_latest_outcome_with_tests_wins():
    rerun = [
        outcome("o2", minutes=5, tests_passed=4, tests_total=4),
        outcome("o1", minutes=1, tests_passed=1, tests_total=4),
    ]
    got = values(
        extractors.tests_component(extractors.unique_outcomes(session(say("hi")), rerun), RewardSettings())
    )
    assert got == {"tests": 1.0, "tests_all_pass": 0.5}


def test_no_tests_run_gives_no_tests_component():
    assert extractors.tests_component([outcome("o1", tests_passed=0, tests_total=0)], RewardSettings()) == []


def test_verifiers_are_a_dense_fraction():
    got = values(
        extractors.verifiers_component(
            [outcome("o1", verifiers_passed=2, verifiers_total=5)], RewardSettings()
        )
    )
    assert got == {"verifiers": pytest.approx(0.4)}


@pytest.mark.parametrize(
    "kinds, expected", [(["accept"], 1.0), (["reject"], -1.0), (["edit"], 0.25), (["accept", "reject"], 0.0)]
)
def test_feedback_is_the_mean_verdict(kinds, expected):
    records = [feedback(f"f{i}", k, minutes=i) for i, k in enumerate(kinds)]
    assert values(extractors.feedback_component(records, RewardSettings())) == {"feedback": expected}


def test_feedback_weight_applies():
    got = values(
        extractors.feedback_component([feedback("f1", "reject")], RewardSettings(weight_feedback=0.5))
    )
    assert got == {"feedback": -0.5}


def test_in_line_and_late_records_count_once_each():
    s = session(
        say("done"), outcome=outcome("o1", tests_passed=1, tests_total=2), feedback=feedback("f1", "accept")
    )
    late = [
        outcome("o1", tests_passed=1, tests_total=2),
        outcome("o2", minutes=3, tests_passed=2, tests_total=2),
    ]
    assert [o.outcome_id for o in extractors.unique_outcomes(s, late)] == ["o1", "o2"]
    assert [f.feedback_id for f in extractors.unique_feedback(s, [feedback("f2", "edit", 2)])] == ["f1", "f2"]


def test_cost_is_lambda_weighted_tokens_and_tool_calls_not_seconds():
    s = session(bash("ls"), bash("pytest -q"), say("done"), cost=Cost(tokens=20_000, seconds=30.0))
    settings = RewardSettings(cost_lambda_tokens=1e-5, cost_lambda_tool_calls=2e-3)
    assert values(extractors.cost_component(s, settings)) == {"cost": pytest.approx(-(0.2 + 2 * 2e-3))}
    slower = session(bash("ls"), bash("pytest -q"), say("done"), cost=Cost(tokens=20_000, seconds=300.0))
    assert values(extractors.cost_component(slower, settings)) == values(
        extractors.cost_component(s, settings)
    )


def test_cost_falls_back_to_completion_tokens():
    s = session(say("x" * 40), cost=Cost(tokens=0, seconds=0.0))
    n = len(s.assistant_turns()[0].completion_token_ids)
    assert values(extractors.cost_component(s, RewardSettings(cost_lambda_tokens=0.01))) == {
        "cost": pytest.approx(-0.01 * n)
    }


def test_well_formed_calls_have_no_format_component():
    s = session(bash("ls"), say("All done, the fix is in."))
    assert extractors.format_component(s, RewardSettings()) == []


def test_malformed_text_call_is_penalised_on_its_turn():
    s = session(say('{"name": "bash", "arguments": {"command": "ls"'), bash("ls"))
    (c,) = extractors.format_component(s, RewardSettings())
    assert c.value == -0.5
    assert c.turn_values == {"a0": -0.5}
    assert "not valid JSON" in c.evidence


def test_malformed_tool_arguments_are_penalised():
    s = session(
        tool("bash", '{"command": "ls -la'), tool("read_file", '{"file": "a.py"}'), tool("bash", "[1, 2]")
    )
    (c,) = extractors.format_component(s, RewardSettings(format_penalty=-0.25))
    assert c.turn_values == {"a0": -0.25, "a1": -0.25, "a2": -0.25}
    assert "read_file arguments lack path" in c.evidence


def test_a_broken_call_counts_once_when_text_and_tool_turn_both_show_it():
    text = '<tool_call>{"name": "bash", "arguments": {"command": "ls}</tool_call>'
    s = session(tool("bash", '{"command": "ls}', "error: bad arguments", 2, text=text))
    (c,) = extractors.format_component(s, RewardSettings())
    assert c.value == -0.5
    assert c.evidence.startswith("1 malformed call")


def test_prose_is_not_a_tool_call():
    assert extractors.malformed_call_text("The fix is in slug.py; I normalised the accents.") is None
    assert (
        extractors.malformed_call_text('Calling {"name": "bash", "arguments": "{\\"command\\": 1}"}') is None
    )


def test_format_penalty_can_never_be_zero_or_positive():
    for bad in (0.0, 0.5):
        with pytest.raises(ValueError, match="format_penalty must be negative"):
            RewardSettings(format_penalty=bad)


@pytest.mark.parametrize(
    "status, excluded", [("timeout", True), ("truncated", True), ("completed", False), ("error", False)]
)
def test_status_exclusion(status, excluded):
    reason = extractors.exclusion_reason(session(say("x"), status=status), RewardSettings())
    assert (reason is not None) == excluded
    if excluded:
        assert status in reason


def test_excluded_statuses_are_configurable():
    assert extractors.exclusion_reason(
        session(say("x"), status="error"), load_reward_settings(excluded_statuses=("error",))
    )
