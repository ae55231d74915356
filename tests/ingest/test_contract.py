import json

import pytest

from ingest import contract
from ingest.contract import ContractError, DeadLetter, Feedback, Outcome, RewardedSession, Session, parse
from ingest.examples import example_feedback, example_outcome, example_session


def session_dict(**changes) -> dict:
    obj = json.loads(example_session().to_json())
    obj.update(changes)
    return obj


def assistant(obj: dict) -> dict:
    return next(t for t in obj["turns"] if t["role"] == "assistant")


def reject(model, obj) -> str:
    raw = obj if isinstance(obj, str | bytes) else json.dumps(obj)
    with pytest.raises(ContractError) as info:
        parse(model, raw)
    return info.value.reason


@pytest.mark.parametrize(
    "record",
    [
        example_session(),
        example_session(adapter_version="v3", outcome=example_outcome(), feedback=example_feedback()),
        example_feedback(kind="edit"),
        example_outcome(),
    ],
    ids=["session", "session-inline-signals", "feedback", "outcome"],
)
def test_round_trip_is_lossless(record):
    raw = record.to_json()
    again = parse(type(record), raw)
    assert again == record
    assert again.to_json() == raw


def test_rewarded_session_round_trip():
    session = example_session()
    rewarded = RewardedSession(
        session_id=session.session_id,
        tenant=session.tenant,
        session=session,
        revision=2,
        reward=0.75,
        components={"tests": 0.75},
        flags=[
            {
                "kind": "test_tampering",
                "evidence": "deleted tests/test_a.py",
                "spans": [{"turn_id": "a0", "start": 0, "end": 3}],
            }
        ],
    )
    assert parse(RewardedSession, rewarded.to_json()) == rewarded


def test_rewarded_session_embeds_the_ingested_json_verbatim():
    stamped = example_session(session_id="s-1", outcome=example_outcome("s-1", outcome_id="o-1")).to_json()
    ingested = b'  {"tenant": "acme",' + stamped[1:] + b"\n"  # reordered, spaced: still the same session
    session = parse(Session, ingested)
    assert session.stamped()
    rewarded = RewardedSession(
        session_id=session.session_id, tenant=session.tenant, session=session, reward=1.0
    )
    spliced = rewarded.to_json(ingested)
    assert ingested in spliced
    assert parse(RewardedSession, spliced) == rewarded
    assert json.loads(spliced) == json.loads(rewarded.to_json())


def test_a_rewarded_session_embeds_a_session_instance_as_is_and_validates_anything_else():
    session = example_session()
    rewarded = RewardedSession(
        session_id=session.session_id, tenant=session.tenant, session=session, reward=1.0
    )
    assert rewarded.session is session  # validated when made, frozen since
    # the session's own rules still hold where it arrives as JSON or as a plain object
    whole = json.loads(rewarded.to_json())
    whole["session"]["turns"][1]["turn_id"] = whole["session"]["turns"][0]["turn_id"]
    assert "is duplicated" in reject(RewardedSession, whole)
    with pytest.raises(ValueError, match="is duplicated"):
        RewardedSession(
            session_id=session.session_id, tenant=session.tenant, session=whole["session"], reward=1.0
        )


def test_a_session_without_created_at_is_not_stamped():
    whole = json.loads(
        example_session(session_id="s-1", outcome=example_outcome("s-1", outcome_id="o-1")).to_json()
    )
    for drop in (whole, whole["outcome"]):
        raw = dict(whole, outcome=dict(whole["outcome"]))
        (raw if drop is whole else raw["outcome"]).pop("created_at")
        assert not parse(Session, json.dumps(raw)).stamped()
    assert parse(Session, json.dumps(whole)).stamped()


def test_length_mismatch_names_both_fields():
    obj = session_dict()
    assistant(obj)["behaviour_logprobs"].pop()
    reason = reject(Session, obj)
    assert "completion_token_ids has 12 tokens but behaviour_logprobs has 11" in reason


@pytest.mark.parametrize(
    "bad, expect",
    [(float("nan"), "finite"), (float("-inf"), "finite"), (float("inf"), "finite"), (0.5, "must be <= 0")],
)
def test_logprobs_must_be_finite_and_nonpositive(bad, expect):
    obj = session_dict()
    assistant(obj)["behaviour_logprobs"][3] = bad
    raw = json.dumps(obj)  # json.dumps writes NaN/Infinity literally, as a careless producer would
    reason = reject(Session, raw)
    assert "behaviour_logprobs" in reason and expect in reason


def test_logprobs_whose_sum_overflows_are_still_valid():
    obj = session_dict()
    assistant(obj)["behaviour_logprobs"][:2] = [-1e308, -1e308]  # each finite, their sum is not
    assert parse(Session, json.dumps(obj)).assistant_turns()[0].behaviour_logprobs[:2] == [-1e308, -1e308]


def test_logprob_as_string_is_a_type_error():
    obj = session_dict()
    assistant(obj)["behaviour_logprobs"][0] = "-0.5"
    assert "behaviour_logprobs.0" in reject(Session, obj)


def test_token_ids_must_be_non_negative_ints():
    obj = session_dict()
    assistant(obj)["completion_token_ids"][0] = -1
    assert "completion_token_ids.0" in reject(Session, obj)
    obj = session_dict()
    assistant(obj)["completion_token_ids"][0] = 1.5
    assert "completion_token_ids.0" in reject(Session, obj)


def test_ids_present_and_well_formed():
    obj = session_dict()
    del obj["session_id"]
    assert "session_id: Field required" in reject(Session, obj)
    assert "session_id" in reject(Session, session_dict(session_id=""))
    assert "session_id" in reject(Session, session_dict(session_id="has spaces"))


def test_turn_ids_unique():
    obj = session_dict()
    obj["turns"][2]["turn_id"] = obj["turns"][0]["turn_id"]
    assert "turn_id 'u0' is duplicated" in reject(Session, obj)


@pytest.mark.parametrize("field, value", [("status", "finished"), ("schema_version", 2)])
def test_closed_enums_and_schema_version(field, value):
    reason = reject(Session, session_dict(**{field: value}))
    assert reason.startswith(field)


def test_unknown_turn_role_and_feedback_kind():
    obj = session_dict()
    obj["turns"][0]["role"] = "system"
    assert "turns.0" in reject(Session, obj)
    fb = json.loads(example_feedback().to_json()) | {"kind": "love"}
    assert "kind" in reject(Feedback, fb)


def test_unknown_fields_rejected():
    assert "surprise: Extra inputs are not permitted" in reject(Session, session_dict(surprise=1))


def test_size_limits_have_clear_messages():
    obj = session_dict()
    obj["turns"] = obj["turns"] * 100  # duplicate ids too, but the count limit is checked first
    assert f"at most {contract.MAX_TURNS} items" in reject(Session, obj)

    obj = session_dict()
    obj["turns"][0]["text"] = "x" * (contract.MAX_TEXT_CHARS + 1)
    assert f"at most {contract.MAX_TEXT_CHARS} characters" in reject(Session, obj)

    raw = json.dumps(session_dict())
    with pytest.raises(ContractError, match=r"record is \d+ bytes, over the limit of 100 bytes"):
        parse(Session, raw, max_bytes=100)


def test_session_token_budget():
    n = contract.MAX_TOKENS_PER_TURN
    obj = session_dict()
    turn = assistant(obj)
    turn["completion_token_ids"] = [1] * n
    turn["behaviour_logprobs"] = [-0.1] * n
    turn["prompt_token_ids"] = [1] * n
    extra = [dict(turn, turn_id=f"a{i}") for i in range(1, 5)]
    obj["turns"] += extra
    assert "over the limit of" in reject(Session, obj)


def test_outcome_counts_consistent():
    obj = json.loads(example_outcome().to_json()) | {"tests_passed": 5, "tests_total": 4}
    assert "tests_passed (5) exceeds tests_total (4)" in reject(Outcome, obj)
    obj = json.loads(example_outcome().to_json()) | {"tests_total": None}
    assert "must be given together" in reject(Outcome, obj)


def test_inline_signal_must_match_session():
    obj = session_dict(outcome=json.loads(example_outcome(session_id="other").to_json()))
    assert "in-line outcome must carry the session's session_id" in reject(Session, obj)


def test_rejection_carries_ids_for_the_dead_letter():
    obj = session_dict(status="bogus")
    with pytest.raises(ContractError) as info:
        parse(Session, json.dumps(obj))
    assert (info.value.session_id, info.value.tenant) == ("s-0001", "acme")


def test_truncated_json_is_a_clear_error():
    raw = example_session().to_json()[:-20]
    assert "Invalid JSON" in reject(Session, raw)


def test_dead_letter_truncates_payload():
    dl = DeadLetter.of("test", "bad", b"x" * (contract.MAX_TEXT_CHARS + 10))
    assert len(dl.payload) == contract.MAX_TEXT_CHARS


def test_json_schema_files_in_sync():
    from ingest.export_schemas import main

    assert main(["--check"]) == 0, "JSON Schema files are stale: run `make schemas`"


def test_json_schema_accepts_an_example_for_other_languages():
    import jsonschema

    from ingest.export_schemas import SCHEMA_DIR

    schema = json.loads((SCHEMA_DIR / "session.v1.json").read_text())
    jsonschema.validate(json.loads(example_session().to_json()), schema)
    bad = session_dict(status="finished")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
