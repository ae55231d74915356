from datetime import UTC, datetime, timedelta

import pytest

from ingest.config import ConfigError
from ingest.contract import Cost, Feedback, Outcome, RewardedSession, parse
from rewards.scoring import RewardSettings, load_reward_settings, reward_session
from tests.rewards.hand_made import bash, read, say, session, tool, write

T0 = datetime(2025, 1, 1, tzinfo=UTC)
NO_COST = RewardSettings(cost_lambda_tokens=0.0, cost_lambda_tool_calls=0.0)


def outcome(oid="o1", passed=4, total=4, minutes=1) -> Outcome:
    return Outcome(
        outcome_id=oid,
        session_id="s-hand-1",
        tenant="acme",
        tests_passed=passed,
        tests_total=total,
        created_at=T0 + timedelta(minutes=minutes),
    )


def feedback(fid="f1", kind="accept", minutes=2) -> Feedback:
    return Feedback(
        feedback_id=fid,
        session_id="s-hand-1",
        tenant="acme",
        kind=kind,
        created_at=T0 + timedelta(minutes=minutes),
    )


def honest(**fields):
    return session(bash("python -m pytest -q", "4 passed"), say("Fixed."), created_at=T0, **fields)


TAMPERED = (
    read("tests/test_a.py", "def test_a():\n    assert f(2) == 4\n"),
    bash("sed -i 's/== 4/== 5/' tests/test_a.py"),
)


def test_reward_is_the_sum_of_weighted_components():
    s = honest(cost=Cost(tokens=10_000, seconds=100.0))
    r = reward_session(s, [feedback()], [outcome(passed=3, total=4)], RewardSettings())
    tool_calls = sum(t.role == "tool" for t in s.turns)
    cost = -(0.1 + 1e-3 * tool_calls)  # 10,000 tokens at 1e-5, tool calls at 1e-3; the 100 s do not count
    assert tool_calls > 0
    assert r.components == {"tests": 0.75, "feedback": 1.0, "cost": pytest.approx(cost)}
    assert r.reward == pytest.approx(0.75 + 1.0 + cost)
    assert not r.excluded and r.flags == []


def test_scoring_is_deterministic_and_round_trips():
    s = honest()
    a = reward_session(s, [feedback()], [outcome()], RewardSettings())
    b = reward_session(s, [feedback()], [outcome()], RewardSettings())
    assert a.to_json() == b.to_json()
    assert parse(RewardedSession, a.to_json()) == a
    assert a.created_at == T0 + timedelta(minutes=2)


def test_in_line_and_late_signals_all_count_once():
    s = honest(outcome=outcome("o1", passed=1, total=4), feedback=feedback("f1", "reject"))
    r = reward_session(
        s,
        [feedback("f1", "reject"), feedback("f2", "accept", 5)],
        [outcome("o1", passed=1, total=4), outcome("o2", passed=4, total=4, minutes=6)],
        NO_COST,
    )
    assert r.outcome_ids == ["o1", "o2"] and r.feedback_ids == ["f1", "f2"]
    assert r.components == {"tests": 1.0, "tests_all_pass": 0.5, "feedback": 0.0, "cost": 0.0}


def test_revision_is_carried():
    assert reward_session(honest(), [], [], RewardSettings(), revision=3).revision == 3


def test_timed_out_session_is_excluded_with_a_reason():
    r = reward_session(honest(status="timeout"), [], [outcome()], RewardSettings())
    assert r.excluded and "timeout" in r.exclusion_reason


def test_malformed_calls_cannot_dodge_a_low_reward():
    clean = session(bash("python -m pytest -q", "4 failed"), created_at=T0)
    broken = session(tool("bash", '{"command": "python -m pytest -q'), created_at=T0)
    low = [outcome(passed=0, total=4)]
    r_clean, r_broken = (reward_session(s, [], low, NO_COST) for s in (clean, broken))
    assert r_clean.reward == 0.0
    assert r_broken.reward == -0.5
    assert r_broken.turn_rewards == {"a0": -0.5}


def test_penalised_hack_forfeits_the_outcome_and_is_charged_to_its_turn():
    s = session(*TAMPERED, created_at=T0)
    r = reward_session(s, [feedback()], [outcome()], NO_COST)
    (flag,) = r.flags
    assert flag.kind == "test_tampering" and flag.action == "penalise"
    assert r.components == {"tests": 0.0, "tests_all_pass": 0.0, "feedback": 1.0, "cost": 0.0, "hacks": -1.0}
    assert r.reward == 0.0
    assert r.turn_rewards == {"a1": -1.0}
    assert flag.spans[0].turn_id == "a1"


def test_mask_policy_keeps_the_reward_and_names_the_spans():
    settings = RewardSettings(
        cost_lambda_tokens=0.0, cost_lambda_tool_calls=0.0, hack_policy={"test_tampering": "mask"}
    )
    r = reward_session(session(*TAMPERED, created_at=T0), [], [outcome()], settings)
    assert r.components == {"tests": 1.0, "tests_all_pass": 0.5, "cost": 0.0}
    (flag,) = r.flags
    assert flag.action == "mask"
    assert (flag.spans[0].start, flag.spans[0].end) == (0, len(r.session.turns[3].completion_token_ids))
    assert not r.excluded


def test_exclude_policy_excludes_with_the_kind():
    settings = RewardSettings(hack_policy={"test_tampering": "exclude"})
    r = reward_session(session(*TAMPERED, created_at=T0), [], [outcome()], settings)
    assert r.excluded and r.exclusion_reason == "hack flagged: test_tampering"


def test_disabled_detector_raises_no_flag():
    settings = RewardSettings(hack_detectors=("protected_access",))
    assert reward_session(session(*TAMPERED, created_at=T0), [], [], settings).flags == []


def test_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("RATCHET_HACK_POLICY", "verifier_gaming=penalise,test_tampering=mask")
    monkeypatch.setenv("RATCHET_COST_LAMBDA_TOKENS", "0.5")
    monkeypatch.setenv("RATCHET_PROTECTED_GLOBS", "/secret/**,**/*.key")
    settings = load_reward_settings()
    assert settings.policy("test_tampering") == "mask"
    assert settings.policy("hardcoded_output") == "penalise"
    assert settings.cost_lambda_tokens == 0.5
    assert settings.protected_globs == ("/secret/**", "**/*.key")


def test_bad_settings_are_refused(monkeypatch):
    with pytest.raises(ValueError, match="actions are penalise, mask, exclude"):
        load_reward_settings(hack_policy={"test_tampering": "ignore"})
    with pytest.raises(ValueError, match="unknown kind"):
        load_reward_settings(hack_policy={"cheating": "mask"})
    monkeypatch.setenv("RATCHET_FORMAT_PENALTY", "lots")
    with pytest.raises(ConfigError, match="RATCHET_FORMAT_PENALTY"):
        load_reward_settings()


def test_writes_outside_tests_do_not_forfeit_anything():
    s = session(write("src/app.py", "def f(x):\n    return 2 * x\n"), created_at=T0)
    assert reward_session(s, [], [outcome()], NO_COST).components == {
        "tests": 1.0,
        "tests_all_pass": 0.5,
        "cost": 0.0,
    }
