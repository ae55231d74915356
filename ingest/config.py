"""Typed settings: dataclass defaults < TOML file < ``RATCHET_*`` environment.

Each package declares one frozen dataclass of settings and reads it with
:func:`load`. A field ``kafka_bootstrap`` is read from the environment
variable ``RATCHET_KAFKA_BOOTSTRAP``, so stages that share an address share its
variable. The optional TOML file named by ``RATCHET_CONFIG`` may hold the same
keys at top level or in a table named after the settings' section::

    kafka_bootstrap = "broker-1:9092,broker-2:9092"

    [ingest]
    ingest_max_batch_bytes = 33554432
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ENV_PREFIX = "RATCHET_"


class ConfigError(ValueError):
    """A setting that cannot be parsed; the message names the source and the key."""


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
            return None
        return _coerce(value, args[0], where)
    if annotation is Path:
        return Path(os.path.expanduser(str(value)))
    if annotation is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected a boolean (true/false), got {value!r}")
    if annotation in (int, float, str):
        try:
            return annotation(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected {annotation.__name__}, got {value!r}") from None
    if origin in (tuple, list):
        (item,) = typing.get_args(annotation)[:1] or (str,)
        items = value if isinstance(value, list | tuple) else [v for v in str(value).split(",") if v.strip()]
        return tuple(_coerce(v.strip() if isinstance(v, str) else v, item, where) for v in items)
    if origin is dict:
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
        pairs = [p for p in str(value).split(",") if p.strip()]
        out = {}
        for pair in pairs:
            if "=" not in pair:
                raise ConfigError(f"{where}: expected key=value pairs separated by commas, got {pair!r}")
            key, _, val = pair.partition("=")
            out[key.strip()] = val.strip()
        return out
    return value


def _file_values(section: str, env: dict[str, str]) -> dict[str, Any]:
    """The keys the TOML file named by ``RATCHET_CONFIG`` sets for ``section`` (top level, then its table)."""
    config_path = env.get(ENV_PREFIX + "CONFIG")
    if not config_path:
        return {}
    path = Path(config_path).expanduser()
    if not path.is_file():
        raise ConfigError(f"RATCHET_CONFIG points at {path}, which is not a file")
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    values = {k: v for k, v in data.items() if not isinstance(v, dict)}
    values.update(data.get(section, {}))
    return values


def is_configured(name: str, section: str, env: dict[str, str] | None = None) -> bool:
    """Whether setting ``name`` is set at all (environment or TOML file), even to "none"."""
    env = dict(os.environ if env is None else env)
    return ENV_PREFIX + name.upper() in env or name in _file_values(section, env)


def load(cls: type[T], section: str, env: dict[str, str] | None = None, **overrides: Any) -> T:
    """Build settings ``cls`` from defaults, the TOML file, the environment and ``overrides``."""
    env = dict(os.environ if env is None else env)
    config_path = env.get(ENV_PREFIX + "CONFIG")
    file_values = _file_values(section, env)

    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = ENV_PREFIX + field.name.upper()
        if field.name in overrides:
            values[field.name] = overrides[field.name]
        elif key in env:
            values[field.name] = _coerce(env[key], hints[field.name], f"environment {key}")
        elif field.name in file_values:
            values[field.name] = _coerce(
                file_values[field.name], hints[field.name], f"{config_path} [{section}] {field.name}"
            )
    return cls(**values)
