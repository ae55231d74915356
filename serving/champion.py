"""The desired state: the adapter version the gate made champion, read from the MLflow registry.

The gate registers each candidate as a version of the registered model (default
``ratchet-policy``) tagged ``adapter_version=vN`` and moves the ``champion``
alias on promotion and rollback. No registered model or no alias yet means the
base model is served.

With the gate's decision key, the alias is believed only as far as the gate's
signature goes (:mod:`gating.records`): the alias's version must carry a
``gate.signature`` of a promoting decision (a gate promotion, an approval or a
rollback to it) bound to that registered model, version number, adapter version
and the content hash the adapter store holds for it; an alias removed (the base
model) needs the registered model's signature of the decision that made the base
model champion. Anything else is a :class:`Refusal`, and :func:`desired` keeps
the version the controller holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gating.decisions import BASE
from gating.records import SIGNATURE, Statement, signed
from learner.store import VERSION_RE, StoreError

TAG = "adapter_version"
REFUSALS = ("unsigned", "bad_signature", "not_promoted", "not_in_store")  # Refusal.code


class ChampionUnknown(RuntimeError):
    """The registry could not be read, or its champion names no adapter version."""


@dataclass(frozen=True)
class Refusal:
    code: str  # one of REFUSALS
    reason: str


@dataclass(frozen=True)
class Champion:
    """What the alias names, and why it may not be served (``refusal``; None: it may)."""

    version: str | None  # None: the base model
    number: str | None = None  # its registered model version
    refusal: Refusal | None = None


def desired(reading: Champion, holding: str | None) -> str | None:
    """The version to serve: the alias's, unless it is refused; then the one held (never the base
    model instead)."""
    return holding if reading.refusal is not None else reading.version


def check_version(
    key: bytes, registered_model: str, number: str, tags: dict[str, str], content_hash: str
) -> Refusal | None:
    """Whether version ``number``'s tags carry the gate's signature of a decision promoting it, for
    the adapter version they name with the store's ``content_hash``."""
    if not tags.get(SIGNATURE):
        return Refusal("unsigned", "no gate signature")
    statement = Statement.of(tags, registered_model, number, tags[TAG], content_hash)
    if not signed(key, statement, tags[SIGNATURE]):
        return Refusal(
            "bad_signature",
            f"its gate signature does not vouch for version {number} = {tags[TAG]} with the store's "
            f"content {content_hash} and decision {statement.decision_id or '-'} (copied, altered, or "
            "made with another key)",
        )
    if not statement.promotes:
        return Refusal(
            "not_promoted",
            f"the gate's decision on it ({statement.decision_id}) is {statement.action} -> "
            f"{statement.decision}, not a promotion",
        )
    return None


def check_base(key: bytes, registered_model: str, tags: dict[str, str]) -> Refusal | None:
    """Whether the registered model's tags carry the gate's signature of a decision that made the
    base model champion."""
    if not tags.get(SIGNATURE):
        return Refusal("unsigned", "no gate signature for the base model (no logged rollback to it)")
    statement = Statement.of(tags, registered_model, "", BASE, "")
    if not signed(key, statement, tags[SIGNATURE]):
        return Refusal("bad_signature", "the gate signature for the base model does not match its decision")
    if not statement.promotes:
        return Refusal(
            "not_promoted", f"{statement.action} -> {statement.decision} does not make base champion"
        )
    return None


def read_champion(
    client,
    registered_model: str,
    alias: str = "champion",
    key: bytes | None = None,
    stored_hash: Callable[[str], str] | None = None,
) -> Champion:
    """The alias's version, checked against the gate's signature when ``key`` is given
    (``stored_hash``: an adapter version's content hash in the store; raises StoreError if absent)."""
    from mlflow.exceptions import MlflowException

    try:
        try:
            model = client.get_registered_model(registered_model)
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                return Champion(None, refusal=check_base(key, registered_model, {}) if key else None)
            raise
        number = model.aliases.get(alias)
        if number is None:
            tags = dict(model.tags)
            return Champion(None, refusal=check_base(key, registered_model, tags) if key else None)
        tags = client.get_model_version(registered_model, number).tags
    except MlflowException as exc:
        raise ChampionUnknown(f"cannot read {registered_model}@{alias} from MLflow: {exc}") from None
    version = tags.get(TAG)
    if not version or not VERSION_RE.match(version):
        raise ChampionUnknown(
            f"{registered_model} version {number} ({alias}) has no {TAG} tag like v7 (got {version!r})"
        )
    if key is None:
        return Champion(version, number)
    if stored_hash is None:
        raise ValueError("checking the champion's signature needs the store's content hash (stored_hash)")
    try:
        content_hash = stored_hash(version)
    except StoreError as exc:
        return Champion(version, number, Refusal("not_in_store", str(exc)))
    return Champion(version, number, check_version(key, registered_model, number, tags, content_hash))


def champion_version(client, registered_model: str, alias: str = "champion") -> str | None:
    """The champion's adapter version (``vN``), or None for the base model; no signature check."""
    return read_champion(client, registered_model, alias).version
