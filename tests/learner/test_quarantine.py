"""Which sessions of a micro-batch the data-quality suite quarantines: only those that fail."""

from ingest.contract import RewardedSession
from ingest.examples import example_session
from ingest.quality import check_batch
from learner.quarantine import failing, latest_revisions


def rewarded(session_id: str, revision: int = 0, logprob: float = -0.5) -> RewardedSession:
    session = example_session(session_id=session_id, adapter_version="v3")
    n = len(session.assistant_turns()[0].completion_token_ids)
    turns = [
        t.model_copy(update={"behaviour_logprobs": [logprob] * n}) if t.role == "assistant" else t
        for t in session.turns
    ]  # no validation: corrupt on purpose when logprob > 0
    session = session.model_copy(update={"turns": turns})
    return RewardedSession.model_construct(
        session_id=session_id, tenant=session.tenant, session=session, reward=1.0, revision=revision
    )


def test_the_latest_revision_of_each_session_is_checked():
    sessions = [rewarded("a", 0), rewarded("b", 0), rewarded("a", 2), rewarded("a", 1)]
    latest = latest_revisions(sessions)
    assert {sid: rs.revision for sid, rs in latest.items()} == {"a": 2, "b": 0}


def test_only_the_sessions_that_fail_are_named_with_their_failures():
    latest = latest_revisions([rewarded("good-1"), rewarded("bad", logprob=0.5), rewarded("good-2")])
    report = check_batch(list(latest.values()))
    assert not report.success
    reasons = failing(latest, report, None)
    assert list(reasons) == ["bad"] and any("max_logprob" in r for r in reasons["bad"])
