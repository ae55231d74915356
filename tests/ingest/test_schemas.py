"""The exported JSON Schemas carry every rule of the contract that JSON Schema can express.

Each bad record below is refused by the contract (what the ingest API runs). It must also be refused
by its exported schema, checked with ``jsonschema`` (draft 2020-12, not pydantic), unless its rule is
one JSON Schema cannot state (a comparison between two fields, uniqueness of a property across
items, a sum): then the schema's description of that field must state the rule, so a producer in
another language reads it there.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import jsonschema
import pytest

from ingest import contract
from ingest.contract import ContractError, Outcome, RewardedSession, Session, parse
from ingest.examples import example_outcome, example_session
from ingest.export_schemas import SCHEMA_DIR

SESSION = json.loads(example_session(outcome=example_outcome()).to_json())
OUTCOME = json.loads(example_outcome().to_json())


def schema(name: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{name}.v1.json").read_text())


def validator(name: str) -> jsonschema.Draft202012Validator:
    found = schema(name)
    jsonschema.Draft202012Validator.check_schema(found)
    return jsonschema.Draft202012Validator(found)


def assistant(obj: dict) -> dict:
    return next(t for t in obj["turns"] if t["role"] == "assistant")


def mutated(base: dict, change: Callable[[dict], object]) -> dict:
    obj = copy.deepcopy(base)
    change(obj)
    return obj


def _set(obj: dict, key: str, value) -> None:
    obj[key] = value


def _too_many_tokens(obj: dict) -> None:
    turn = assistant(obj)
    n = contract.MAX_TOKENS_PER_TURN
    obj["turns"] = [
        {**turn, "turn_id": f"a{i}", "completion_token_ids": [1] * n, "behaviour_logprobs": [-0.1] * n}
        for i in range(contract.MAX_SESSION_TOKENS // n + 1)
    ]


# (id, schema, bad record, None if the schema refuses it, else the description that must state the rule)
CASES = [
    ("logprob-positive", "session", mutated(SESSION, lambda o: assistant(o)["behaviour_logprobs"].__setitem__(3, 0.5)), None),
    ("logprob-string", "session", mutated(SESSION, lambda o: assistant(o)["behaviour_logprobs"].__setitem__(0, "-0.5")), None),
    ("token-negative", "session", mutated(SESSION, lambda o: assistant(o)["completion_token_ids"].__setitem__(0, -1)), None),
    ("token-too-large", "session", mutated(SESSION, lambda o: assistant(o)["completion_token_ids"].__setitem__(0, 2**31)), None),
    ("token-float", "session", mutated(SESSION, lambda o: assistant(o)["completion_token_ids"].__setitem__(0, 1.5)), None),
    ("no-turns", "session", mutated(SESSION, lambda o: _set(o, "turns", [])), None),
    ("no-assistant-turn", "session", mutated(SESSION, lambda o: _set(o, "turns", [o["turns"][0]])), None),
    ("unknown-field", "session", mutated(SESSION, lambda o: _set(o, "extra", 1)), None),
    ("unknown-turn-field", "session", mutated(SESSION, lambda o: _set(assistant(o), "extra", 1)), None),
    ("status", "session", mutated(SESSION, lambda o: _set(o, "status", "finished")), None),
    ("schema-version", "session", mutated(SESSION, lambda o: _set(o, "schema_version", 2)), None),
    ("id-pattern", "session", mutated(SESSION, lambda o: _set(o, "session_id", "has spaces")), None),
    ("id-empty", "session", mutated(SESSION, lambda o: _set(o, "tenant", "")), None),
    ("adapter-version", "session", mutated(SESSION, lambda o: _set(assistant(o), "adapter_version", "7")), None),
    ("top-p-zero", "session", mutated(SESSION, lambda o: assistant(o)["sampling"].__setitem__("top_p", 0.0)), None),
    ("temperature-negative", "session", mutated(SESSION, lambda o: assistant(o)["sampling"].__setitem__("temperature", -1.0)), None),
    ("metadata-too-many", "session", mutated(SESSION, lambda o: _set(o, "metadata", {str(i): "x" for i in range(65)})), None),
    ("cost-negative", "session", mutated(SESSION, lambda o: o["cost"].__setitem__("tokens", -1)), None),
    ("outcome-half-pair", "outcome", {**OUTCOME, "tests_passed": 3, "tests_total": None}, None),
    ("outcome-no-counts", "outcome", {k: v for k, v in OUTCOME.items() if "tests" not in k and "verifiers" not in k}, None),
    ("inline-outcome-half-pair", "session", mutated(SESSION, lambda o: o["outcome"].__setitem__("tests_total", None)), None),
    # rules JSON Schema cannot state: the description says them
    ("length-mismatch", "session", mutated(SESSION, lambda o: assistant(o)["behaviour_logprobs"].append(-0.1)), "exactly one per entry of completion_token_ids"),
    ("turn-ids-duplicated", "session", mutated(SESSION, lambda o: o["turns"][2].__setitem__("turn_id", o["turns"][0]["turn_id"])), "turn ids unique"),
    ("session-tokens", "session", mutated(SESSION, _too_many_tokens), f"at most {contract.MAX_SESSION_TOKENS} prompt + completion tokens"),
    ("outcome-passed-over-total", "outcome", {**OUTCOME, "tests_passed": 9, "tests_total": 4}, "<= tests_total"),
    ("inline-outcome-other-session", "session", mutated(SESSION, lambda o: o["outcome"].__setitem__("session_id", "other")), "its session_id and tenant are the session's"),
]  # fmt: skip

MODELS = {"session": Session, "outcome": Outcome, "rewarded_session": RewardedSession}


@pytest.mark.parametrize("name", ["session", "outcome", "feedback", "rewarded_session", "dead_letter"])
def test_each_schema_is_a_valid_draft_2020_12_schema(name):
    validator(name)


def test_the_good_examples_validate():
    validator("session").validate(SESSION)
    validator("session").validate(json.loads(example_session().to_json()))
    validator("outcome").validate(OUTCOME)


@pytest.mark.parametrize(("case", "name", "bad", "stated"), CASES, ids=[c[0] for c in CASES])
def test_every_rule_is_in_the_schema_or_its_description(case, name, bad, stated):
    with pytest.raises(ContractError):
        parse(MODELS[name], json.dumps(bad))  # the contract refuses it
    errors = list(validator(name).iter_errors(bad))
    if stated is None:
        assert errors, f"{case}: the schema accepts what the contract refuses"
    else:
        assert not errors, f"{case}: the schema refuses it after all; move it to the expressible cases"
        assert stated in json.dumps(schema(name)), f"{case}: no description states the rule"


def test_an_excluded_rewarded_session_needs_a_reason_in_the_schema_too():
    rewarded = {
        "schema_version": 1,
        "session_id": SESSION["session_id"],
        "tenant": SESSION["tenant"],
        "session": SESSION,
        "reward": 0.0,
        "excluded": True,
    }
    with pytest.raises(ContractError):
        parse(RewardedSession, json.dumps(rewarded))
    assert list(validator("rewarded_session").iter_errors(rewarded))
    validator("rewarded_session").validate({**rewarded, "exclusion_reason": "hack: test-tampering"})
