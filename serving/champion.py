"""The desired state: the adapter version the gate made champion, read from the MLflow registry.

The gate registers each candidate as a version of the registered model (default
``ratchet-policy``) tagged ``adapter_version=vN`` and moves the ``champion``
alias on promotion and rollback. No registered model or no alias yet means the
base model is served.
"""

from __future__ import annotations

from learner.store import VERSION_RE

TAG = "adapter_version"


class ChampionUnknown(RuntimeError):
    """The registry could not be read, or its champion names no adapter version."""


def champion_version(client, registered_model: str, alias: str = "champion") -> str | None:
    """The champion's adapter version (``vN``), or None for the base model."""
    from mlflow.exceptions import MlflowException

    try:
        try:
            model = client.get_registered_model(registered_model)
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise
        number = model.aliases.get(alias)
        if number is None:
            return None
        tags = client.get_model_version(registered_model, number).tags
    except MlflowException as exc:
        raise ChampionUnknown(f"cannot read {registered_model}@{alias} from MLflow: {exc}") from None
    version = tags.get(TAG)
    if not version or not VERSION_RE.match(version):
        raise ChampionUnknown(
            f"{registered_model} version {number} ({alias}) has no {TAG} tag like v7 (got {version!r})"
        )
    return version
