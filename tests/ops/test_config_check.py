"""`ratchet config check`, and `ratchet up` refusing a configuration file with a problem."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ops.config_reference import REPO, check_config, check_environment, env_names


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ratchet.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("shipped", ["ops/demo.toml", "ops/deploy/ratchet.toml.example"])
def test_the_shipped_files_have_no_problem(shipped):
    assert check_config(REPO / shipped) == []


def test_typos_name_the_intended_key(tmp_path):
    problems = check_config(
        write(tmp_path, 'kafka_bootstap = "b:9092"\n[rewards]\njoin_wait = 3\n[learnr]\nlora_rank = 4\n')
    )
    assert len(problems) == 3, problems
    assert "'kafka_bootstap'" in problems[0] and "did you mean 'kafka_bootstrap'" in problems[0]
    assert "[rewards] 'join_wait'" in problems[1] and "did you mean 'join_wait_s'" in problems[1]
    assert "unknown table [learnr]" in problems[2] and "[learner]" in problems[2]


def test_a_key_in_another_stages_table_says_where_it_belongs(tmp_path):
    (problem,) = check_config(write(tmp_path, "[rewards]\nlora_rank = 4\n"))
    assert "[rewards] 'lora_rank'" in problem and "it is a setting of [learner]" in problem


def test_a_renamed_key_names_its_successors(tmp_path):
    problems = check_config(write(tmp_path, 'vllm_url = "http://r:8000"\n[gate]\nserved_model_name = "b"\n'))
    assert "'vllm_url'" in problems[0] and "renamed 'vllm_urls' or 'gate_vllm_url'" in problems[0]
    assert "[gate] 'served_model_name'" in problems[1] and "renamed 'base_model'" in problems[1]
    (problem,) = check_environment({"RATCHET_SEED": "3", "RATCHET_BASE_MODEL": "b"})
    assert "RATCHET_SEED" in problem and "renamed RATCHET_LORA_SEED or RATCHET_GATE_SEED" in problem
    assert {"RATCHET_VLLM_URLS", "RATCHET_GATE_VLLM_URL", "RATCHET_LORA_SEED"} <= env_names()


def test_wrong_types_and_refused_values(tmp_path):
    problems = check_config(
        write(tmp_path, '[learner]\nlearning_rate = "fast"\n[rewards]\nformat_penalty = 1.0\n')
    )
    assert any("learning_rate: expected float, got 'fast'" in p for p in problems), problems
    assert any("format_penalty must be negative" in p for p in problems), problems
    assert len(problems) == 2


def test_not_toml(tmp_path):
    (problem,) = check_config(write(tmp_path, "[learner\n"))
    assert "not valid TOML" in problem


def run_cli(args: list[str], tmp_path: Path, config: Path | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    if config is not None:
        env["RATCHET_CONFIG"] = str(config)
    return subprocess.run(
        [sys.executable, "-m", "ops.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_check_exit_codes(tmp_path):
    good = run_cli(["config", "check", str(REPO / "ops" / "demo.toml")], tmp_path, None)
    assert good.returncode == 0, good.stderr
    bad = run_cli(["config", "check"], tmp_path, write(tmp_path, "lora_rnak = 4\n"))
    assert bad.returncode == 1
    assert "did you mean 'lora_rank'" in bad.stderr
    assert run_cli(["config", "check"], tmp_path, None).returncode == 0  # the environment alone


def test_misspelled_environment_variables_are_problems():
    from ops.config_reference import check_environment

    problems = check_environment(
        {"RATCHET_KAFKA_BOOTSTRAPS": "b:9092", "RATCHET_CACHE": "/c", "PATH": "/bin"}
    )
    assert problems == [
        "environment RATCHET_KAFKA_BOOTSTRAPS is not a setting any stage reads; did you mean RATCHET_KAFKA_BOOTSTRAP?"
    ]


def test_up_refuses_a_file_with_a_problem_before_starting_anything(tmp_path):
    result = run_cli(["up"], tmp_path, write(tmp_path, "[stack]\nbroker_prot = 1\n"))
    assert result.returncode == 2
    assert "configuration error" in result.stderr and "did you mean 'broker_port'" in result.stderr
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.pid"))
