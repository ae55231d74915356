"""The gate's decision signatures: the canonical statement, what a signature is bound to, the key file,
and which log entry a version's tags record (pure; no MLflow)."""

import dataclasses
import hashlib
import hmac
import stat

import pytest

from gating.decisions import Entry, State, next_state
from gating.records import (
    Statement,
    base_grant,
    create_decision_key,
    read_decision_key,
    recorded_entries,
    sign,
    signed,
)

KEY = b"k" * 32
STATEMENT = Statement("ratchet-policy", "3", "v2", "sha256:abc", "d-7", "evaluate", "promote")


def test_the_canonical_statement_names_every_field_in_a_fixed_unambiguous_form():
    assert STATEMENT.canonical() == (
        b'["ratchet.gate.decision/1","ratchet-policy","3","v2","sha256:abc","d-7","evaluate","promote"]'
    )
    expected = hmac.new(KEY, STATEMENT.canonical(), hashlib.sha256).hexdigest()
    assert sign(KEY, STATEMENT) == f"hmac-sha256:{expected}"
    # a separator inside a field cannot make two statements read alike
    shifted = dataclasses.replace(STATEMENT, registered_model='ratchet-policy","3', model_version="")
    assert shifted.canonical() != STATEMENT.canonical()


@pytest.mark.parametrize(
    "field, value",
    [
        ("registered_model", "other-policy"),
        ("model_version", "4"),
        ("adapter_version", "v3"),
        ("content_hash", "sha256:abd"),
        ("decision_id", "d-8"),
        ("action", "approve"),
        ("decision", "reject"),
    ],
)
def test_a_signature_is_invalid_for_any_other_statement(field, value):
    signature = sign(KEY, STATEMENT)
    assert signed(KEY, STATEMENT, signature)
    assert not signed(KEY, dataclasses.replace(STATEMENT, **{field: value}), signature)


def test_a_signature_is_invalid_under_another_key_or_when_absent_or_altered():
    signature = sign(KEY, STATEMENT)
    assert not signed(b"x" * 32, STATEMENT, signature)
    assert not signed(KEY, STATEMENT, None) and not signed(KEY, STATEMENT, "")
    assert not signed(KEY, STATEMENT, signature[:-1] + ("0" if signature[-1] != "0" else "1"))
    assert not signed(KEY, STATEMENT, sign(b"x" * 32, STATEMENT))


@pytest.mark.parametrize(
    "version, action, decision, promotes",
    [
        ("v2", "evaluate", "promote", True),
        ("v2", "approve", "promote", True),
        ("v2", "rollback", "promote", True),
        ("v2", "evaluate", "reject", False),
        ("v2", "reject", "reject", False),
        ("base", "rollback", "promote", True),
        ("base", "reject", "reject", True),  # rejecting the only champion hands back to the base model
        ("base", "evaluate", "reject", False),
    ],
)
def test_which_decisions_promote(version, action, decision, promotes):
    statement = dataclasses.replace(STATEMENT, adapter_version=version, action=action, decision=decision)
    assert statement.promotes is promotes


def test_the_key_file_is_created_once_private_and_refused_when_short_or_missing(tmp_path):
    path = create_decision_key(tmp_path / "secrets" / "decision.key")
    key = read_decision_key(path)
    assert len(key) == 64 and int(key, 16) >= 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_decision_key(create_decision_key(path)) == key  # an existing key is kept
    assert [p.name for p in path.parent.iterdir()] == ["decision.key"]

    short = tmp_path / "short.key"
    short.write_text("change-me\n")
    with pytest.raises(ValueError, match="9 bytes, it needs at least 32"):
        read_decision_key(short)
    with pytest.raises(ValueError, match="cannot read it"):
        read_decision_key(tmp_path / "missing.key")


def _log(*steps: tuple[str, str, str]) -> list[Entry]:
    entries: list[Entry] = []
    for i, (version, action, decision) in enumerate(steps):
        before = entries[-1].state.champion if entries else None
        entries.append(
            Entry(
                f"d-{i}",
                version,
                action,
                decision,
                "gate",
                [],
                before,
                next_state(entries, version, action, decision),
                content_hash=None if version == "base" else f"sha256:{version}",
                run_id=f"r-{i}",
            )  # fmt: skip
        )
    return entries


def test_a_version_records_its_latest_entry_and_the_champion_the_promotion_that_made_it():
    entries = _log(
        ("v1", "evaluate", "promote"),
        ("v2", "evaluate", "promote"),
        ("v1", "evaluate", "reject"),  # a forced re-evaluation against v2
        ("v2", "reject", "reject"),  # hands the title back to v1
    )
    assert entries[-1].state == State("v1", "v1")
    recorded = recorded_entries(entries, "v1")
    assert recorded["v1"].decision_id == "d-0" and recorded["v2"].decision_id == "d-3"
    assert recorded_entries(entries, None)["v1"].decision_id == "d-2"

    rolled = _log(("v1", "evaluate", "promote"), ("v2", "approve", "promote"), ("v1", "rollback", "promote"))
    assert recorded_entries(rolled, "v1")["v1"].decision_id == "d-2"


def test_the_base_model_is_granted_by_the_entry_that_handed_the_title_back_to_it():
    assert base_grant(_log(("v1", "evaluate", "reject"))) is None  # base since the start
    rolled = _log(("v1", "evaluate", "promote"), ("base", "rollback", "promote"))
    assert base_grant(rolled).decision_id == "d-1"
    rejected = _log(("v1", "evaluate", "promote"), ("v1", "reject", "reject"), ("v2", "evaluate", "reject"))
    assert rejected[-1].state.champion is None and base_grant(rejected).decision_id == "d-1"
