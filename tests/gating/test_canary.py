"""The canary judge's pure core: live scores, pairing by family, and the verdict."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gating.canary import Observed, judge, live_score, observe, pairs
from ingest.contract import HackFlag, RewardedSession
from ingest.examples import example_session

T0 = 1_800_000_000.0


def rewarded(reward: float, version: str | None = "v2", at: float = T0, **fields) -> RewardedSession:
    session = example_session(
        session_id=fields.pop("session_id", "s-1"),
        adapter_version=version,
        task_family=fields.pop("family", "calculator"),
        created_at=datetime.fromtimestamp(at, UTC),
    )
    return RewardedSession(
        session_id=session.session_id, tenant=session.tenant, session=session, reward=reward, **fields
    )


def test_the_live_score_is_the_reward_clipped_and_needs_a_signal():
    assert live_score(rewarded(0.9, outcome_ids=["o1"])) == pytest.approx(0.9)
    assert live_score(rewarded(1.7, feedback_ids=["f1"])) == 1.0
    assert live_score(rewarded(-1.2, outcome_ids=["o1"])) == 0.0
    assert live_score(rewarded(0.5)) is None  # no outcome, no verdict: missing, not a zero
    timeout = rewarded(0.0, outcome_ids=["o1"], excluded=True, exclusion_reason="timeout")
    assert live_score(timeout) is None
    hack = HackFlag(kind="test_tampering", evidence="deleted a test", action="exclude")
    assert (
        live_score(rewarded(1.0, outcome_ids=["o1"], excluded=True, exclusion_reason="hack", flags=[hack]))
        == 0.0
    )


def test_a_session_is_observed_with_its_family_and_the_one_version_that_served_it():
    seen = observe(rewarded(1.0, version="v3", family="format", at=T0 + 5, outcome_ids=["o1"]))
    assert seen == Observed("s-1", "format", "v3", 1.0, T0 + 5)
    assert observe(rewarded(1.0, version=None, outcome_ids=["o1"])).version is None  # the base model
    assert observe(rewarded(1.0)) is None


def obs(i: int, version: str | None, score: float, family: str = "calculator", at: float | None = None):
    return Observed(f"s{i}", family, version, score, T0 + (i if at is None else at))


def test_pairs_match_sessions_of_one_family_in_recording_order_and_skip_the_rest():
    seen = [
        obs(0, "v2", 1.0),
        obs(1, "v1", 0.0),
        obs(2, "v2", 0.0, family="format"),
        obs(3, "v1", 1.0),  # calculator's second incumbent: waits for a second canary session
        obs(4, "v1", 1.0, family="format"),
        obs(5, "v9", 1.0),  # another version: neither side
        obs(6, "v2", 0.5),
        obs(7, "v2", 1.0, at=-100),  # recorded before the trial
    ]
    # calculator: (s0, s1) -> +1.0 at s1, (s6, s3) -> -0.5 at s6; format: (s2, s4) -> -1.0 at s4
    assert pairs(seen, "v2", "v1", since=T0) == [1.0, -1.0, -0.5]
    assert pairs(seen, "v2", "v1", since=T0 + 2) == [-1.0, -0.5]  # s2 with s4, s6 with s3
    assert pairs([obs(0, "v2", 1.0), obs(1, None, 0.0)], "v2", None, since=T0) == [1.0]


RULES = dict(margin=0.1, alpha=0.05, min_pairs=8, max_pairs=64, max_s=1200.0)


def test_a_clearly_worse_canary_is_rolled_back_and_a_better_one_confirmed():
    worse = [obs(2 * i, "v2", 0.0) for i in range(40)] + [obs(2 * i + 1, "v1", 1.0) for i in range(40)]
    verdict = judge(worse, "v2", "v1", T0, T0 + 100, **RULES)
    assert verdict.decision == "rollback" and "worse by more than the margin" in verdict.reason
    assert verdict.evidence["canary.upper"] < -0.1 and verdict.evidence["canary.score"] == 0.0
    assert 8 <= verdict.evidence["canary.pairs"] <= 40
    better = [obs(2 * i, "v2", 1.0) for i in range(40)] + [obs(2 * i + 1, "v1", 0.0) for i in range(40)]
    assert judge(better, "v2", "v1", T0, T0 + 100, **RULES).decision == "confirm"


def test_too_few_pairs_continue_until_the_pair_or_time_cap_confirms():
    few = [obs(0, "v2", 0.0), obs(1, "v1", 1.0)]
    assert judge(few, "v2", "v1", T0, T0 + 60, **RULES).decision == "continue"
    late = judge(few, "v2", "v1", T0, T0 + 1200, **RULES)
    assert late.decision == "confirm" and "after 1200 s" in late.reason
    alike = [obs(2 * i, "v2", float(i % 2)) for i in range(70)] + [
        obs(2 * i + 1, "v1", float(i % 2)) for i in range(70)
    ]
    same = judge(alike, "v2", "v1", T0, T0 + 100, **RULES)  # the bound rules out a drop of 0.1
    assert same.decision == "confirm" and "over the first 38 of 64 paired sessions" in same.reason
    assert "not worse by more than the margin" in same.reason
    # a win or a loss in every pair: a mean of 0 that 64 pairs cannot settle
    split = [obs(2 * i, "v2", float(i % 2)) for i in range(70)] + [
        obs(2 * i + 1, "v1", float((i + 1) % 2)) for i in range(70)
    ]
    capped = judge(split, "v2", "v1", T0, T0 + 100, **RULES)
    assert (
        capped.decision == "confirm"
        and capped.evidence["canary.pairs"] == 64
        and "after 64 pairs" in capped.reason
    )
    assert judge([], "v2", "v1", T0, T0 + 10, **RULES).decision == "continue"
