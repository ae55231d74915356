"""Settings loading: defaults < TOML file < environment, and "none" as an explicit unset."""

from __future__ import annotations

import dataclasses

import pytest

from ingest.config import ConfigError, is_configured, load


@dataclasses.dataclass(frozen=True)
class Example:
    mlflow_url: str | None = None
    batch: int = 4


def test_file_then_environment_override_defaults(tmp_path):
    config = tmp_path / "ratchet.toml"
    config.write_text('batch = 8\n[example]\nmlflow_url = "http://m:5000"\n')
    env = {"RATCHET_CONFIG": str(config)}
    assert load(Example, "example", env=env) == Example("http://m:5000", 8)
    assert load(Example, "example", env={**env, "RATCHET_BATCH": "16"}).batch == 16


def test_none_in_the_file_is_configured_but_unset(tmp_path):
    config = tmp_path / "ratchet.toml"
    config.write_text('[example]\nmlflow_url = "none"\n')
    env = {"RATCHET_CONFIG": str(config)}
    assert load(Example, "example", env=env).mlflow_url is None
    assert is_configured("mlflow_url", "example", env=env)
    assert not is_configured("mlflow_url", "other", env=env)
    assert not is_configured("batch", "example", env=env)
    assert is_configured("mlflow_url", "other", env={"RATCHET_MLFLOW_URL": "none"})


def test_a_bad_value_names_its_source(tmp_path):
    with pytest.raises(ConfigError, match="RATCHET_BATCH"):
        load(Example, "example", env={"RATCHET_BATCH": "many"})
    with pytest.raises(ConfigError, match="not a file"):
        is_configured("batch", "example", env={"RATCHET_CONFIG": str(tmp_path / "missing.toml")})
