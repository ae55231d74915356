"""The great-expectations data-quality suite over session micro-batches."""

import json
import math

import pytest

from ingest import topics
from ingest.contract import DeadLetter, RewardedSession, Session, parse
from ingest.examples import example_session
from ingest.producer import Outgoing, RecordProducer
from ingest.quality import check_batch, session_features
from ops.stack import Stack, StackSettings
from tests.conftest import free_port


def good_batch(n: int = 4) -> list[Session]:
    return [example_session(session_id=f"s-{i}", seed=i, adapter_version="v3") for i in range(n)]


def with_logprobs(session: Session, logprobs: list[float]) -> Session:
    """A copy of ``session`` whose assistant turn carries ``logprobs`` (no validation: corrupt on purpose)."""
    turns = [
        t.model_copy(update={"behaviour_logprobs": logprobs}) if t.role == "assistant" else t
        for t in session.turns
    ]
    return session.model_copy(update={"turns": turns})


def failed(report) -> set[str]:
    return {line.split(":")[0] for line in report.failures}


def test_a_good_batch_passes():
    sessions = good_batch()
    rewarded = [
        RewardedSession(session_id=s.session_id, tenant=s.tenant, session=s, reward=r)
        for s, r in zip(sessions, [-3.0, 0.0, 0.5, 3.5], strict=True)
    ]
    for batch in (sessions, rewarded, [example_session(session_id="base-only")]):
        report = check_batch(batch)
        assert report.success, report.failures
        assert report.failures == [] and report.record_failures == {}
        assert report.result["statistics"]["unsuccessful_expectations"] == 0
        assert report.result["statistics"]["evaluated_expectations"] == 15


def test_each_failure_in_a_bad_batch_is_named_with_its_sessions():
    s = good_batch(8)
    n = len(s[0].assistant_turns()[0].completion_token_ids)
    version_turns = [
        t.model_copy(update={"adapter_version": "v2"}) if t.role == "assistant" else t for t in s[4].turns
    ]
    bad = [
        s[0],
        s[0].model_copy(),  # a duplicate session id
        with_logprobs(s[1], [-0.5] * (n - 1)),  # one logprob short
        with_logprobs(s[2], [0.5] + [-0.5] * (n - 1)),  # a positive "log-probability"
        with_logprobs(s[3], [math.nan] + [-0.5] * (n - 1)),  # not finite
        s[4].model_copy(update={"turns": version_turns}),  # a turn served by another version than the policy
        s[5].model_copy(update={"policy": s[5].policy.model_copy(update={"adapter_version": "policy-7"})}),
        with_logprobs(s[6], [-500.0] + [-0.5] * (n - 1)),  # below the corrupt-logprob floor
        s[7],  # fine
    ]
    rewarded = [
        RewardedSession.model_construct(
            session_id=f"r-{i}", tenant="acme", session=example_session(session_id=f"r-{i}"), reward=reward
        )
        for i, reward in ((1, 30.0), (2, math.nan))
    ]
    report = check_batch(bad + rewarded)
    assert not report.success
    assert failed(report) == {
        "expect_column_values_to_be_unique(session_id)",
        "expect_column_values_to_be_in_set(logprobs_match_tokens) [value_set=[True]]",
        "expect_column_values_to_be_between(max_logprob) [min_value=-100.0, max_value=0.0]",
        "expect_column_values_to_be_in_set(logprobs_finite) [value_set=[True]]",
        "expect_column_values_to_be_in_set(turn_versions_match_policy) [value_set=[True]]",
        "expect_column_values_to_match_regex(adapter_version) [regex='^v[0-9]+$']",
        "expect_column_values_to_be_between(min_logprob) [min_value=-100.0, max_value=0.0]",
        "expect_column_values_to_be_between(reward) [min_value=-10.0, max_value=10.0]",
        "expect_column_values_to_be_in_set(reward_finite) [value_set=[True]]",
    }
    by_session = {
        sid: {r.split(":")[0].split("(")[1].split(")")[0] for r in reasons}
        for sid, reasons in report.record_failures.items()
    }
    assert by_session == {
        "s-0": {"session_id"},
        "s-1": {"logprobs_match_tokens"},
        "s-2": {"max_logprob"},
        "s-3": {"logprobs_finite"},
        "s-4": {"turn_versions_match_policy"},
        "s-5": {"adapter_version", "turn_versions_match_policy"},
        "s-6": {"min_logprob"},
        "r-1": {"reward"},
        "r-2": {"reward_finite"},
    }
    assert "2 of 11 sessions unexpected, e.g. ['s-0', 's-0']" in report.failures[0]
    assert "FAILED: 11 records" in report.summary()


def test_features_of_one_session():
    features = session_features(example_session(n_tokens=5, adapter_version="v2"))
    assert (features["n_turns"], features["n_assistant_turns"], features["completion_tokens"]) == (3, 1, 5)
    assert features["prompt_tokens"] == 5 and features["adapter_version"] == "v2"
    assert features["logprobs_match_tokens"] and features["turn_versions_match_policy"]
    assert features["reward"] is None and -3.0 <= features["min_logprob"] <= features["max_logprob"] <= 0.0


@pytest.fixture
def private_broker(tmp_path, lazy_stack):
    settings = StackSettings(
        state_dir=tmp_path / "state", cache_dir=lazy_stack.settings.cache_dir, broker_port=free_port()
    )
    stack = Stack(settings, progress=lambda m: None)
    stack.up(["broker"])
    yield settings.kafka_bootstrap
    stack.down()


def test_ratchet_quality_passes_a_good_sample_and_quarantines_a_bad_one(private_broker, mlflow_url, capsys):
    from mlflow.tracking import MlflowClient

    from ops.cli import main
    from ops.commands.quality import consume_sample

    producer = RecordProducer(private_broker)
    good = good_batch(3)
    producer.produce([Outgoing(topics.SESSIONS, s.session_id, s.to_json()) for s in good])
    args = ["quality", "--bootstrap", private_broker, "--idle-timeout", "2"]
    assert main([*args, "--sample", "3"]) == 0
    assert "PASSED: 3 records" in capsys.readouterr().out

    producer.produce(
        [
            Outgoing(topics.SESSIONS, "s-0", good[0].to_json()),  # delivered twice
            Outgoing(topics.SESSIONS, "junk", b'{"session_id": "junk"}'),
        ]
    )
    producer.close()
    assert main([*args, "--sample", "200", "--mlflow", mlflow_url, "--quarantine"]) == 1
    out = capsys.readouterr().out
    assert "FAILED: 4 records" in out
    assert "expect_column_values_to_be_unique(session_id): 2 of 4 sessions unexpected" in out
    assert "not a valid session record: tenant: Field required" in out
    assert "quarantined 5 records to dlq.v1" in out

    letters = [parse(DeadLetter, m.value) for m in consume_sample(private_broker, topics.DLQ, 10, 2.0)]
    reasons = {(letter.session_id, letter.reason.split(":")[0]) for letter in letters}
    assert len(letters) == 5
    assert ("s-0", "expect_column_values_to_be_unique(session_id)") in reasons
    assert ("s-1", "quarantined with its batch, which failed") in reasons
    assert any(
        letter.session_id == "junk" and "tenant: Field required" in letter.reason for letter in letters
    )

    run_id = out.split("run ")[-1].split()[0]
    client = MlflowClient(tracking_uri=mlflow_url)
    run = client.get_run(run_id)
    assert run.data.metrics["success"] == 0.0 and run.data.metrics["records"] == 4.0
    with open(client.download_artifacts(run_id, "validation.json")) as fh:
        validation = json.load(fh)
    assert validation["success"] is False
    assert validation["statistics"]["unsuccessful_expectations"] == 1
