"""The deployment files and the configuration reference against the code (no stack needed)."""

import dataclasses
import importlib
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from ingest import topics
from ingest.config import ENV_PREFIX, load
from ops import config_reference
from ops.cli import build_parser
from ops.deploy.topics import layout_problems
from ops.pipeline import STAGE_COMMANDS, PipelineSettings, stage_env
from ops.stack import StackSettings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "ops" / "deploy"
K8S = DEPLOY / "k8s"
PRODUCTION = [e for e in config_reference.SETTINGS if not e.local]
# Addresses of Ratchet's own processes, not of the services a user brings.
INTERNAL_ADDRESSES = {"proxy_urls"}


def stage_commands() -> set[tuple[str, ...]]:
    """The stage commands `ratchet up` launches (ops/pipeline.py)."""
    return {("ratchet", *command) for command in STAGE_COMMANDS.values()}


def check_command(argv: list[str]) -> None:
    """A `ratchet` subcommand or a `python -m` module that accepts these arguments."""
    if argv[0] == "ratchet":
        try:
            build_parser().parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"not a ratchet command: {shlex.join(argv)}")
    elif argv[:2] == ["python", "-m"]:
        module = importlib.import_module(argv[2])
        try:
            module.build_parser().parse_args(argv[3:])
        except SystemExit:
            pytest.fail(f"{argv[2]} refuses its arguments: {shlex.join(argv)}")
    else:
        pytest.fail(f"unexpected command: {shlex.join(argv)}")


def stage(argv: list[str]) -> tuple[str, ...]:
    return tuple(argv[:3])


def k8s_documents() -> list[dict]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def k8s_workloads() -> list[dict]:
    return [d for d in k8s_documents() if d["kind"] in ("Deployment", "Job")]


# --- the configuration reference ------------------------------------------------------------


def test_configuration_reference_is_current():
    committed = (REPO / "docs" / "configuration.md").read_text()
    assert committed == config_reference.render(), (
        "run: python -m ops.config_reference > docs/configuration.md"
    )


def test_every_setting_has_a_meaning():
    missing = [f"{s.owner.cls.__name__}.{s.name}" for s in config_reference.all_settings() if not s.help]
    assert missing == []


def test_reference_names_the_variables_the_loader_reads():
    for entry in config_reference.SETTINGS:
        defaults = entry.cls()
        for s in config_reference.settings_of(entry):
            default = getattr(defaults, s.name)
            if s.type in ("int", "float") and not isinstance(default, bool):
                changed = default * 2 or 1
                loaded = load(entry.cls, entry.section, env={s.env: str(changed)})
                assert getattr(loaded, s.name) == changed, s.env


# --- names in the deployment files ----------------------------------------------------------


def test_deploy_files_name_only_real_settings():
    known = config_reference.env_names()
    for path in sorted(p for p in DEPLOY.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        named = set(re.findall(r"\bRATCHET_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
        assert named <= known, f"{path.relative_to(REPO)}: not settings: {sorted(named - known)}"


def test_env_example_lists_every_address_and_is_well_formed():
    lines = [line.strip() for line in (DEPLOY / "ratchet.env.example").read_text().splitlines()]
    active = [line for line in lines if line and not line.startswith("#")]
    for line in active:
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*=\S+", line), line
    listed = {line.lstrip("#").partition("=")[0] for line in lines if re.match(r"#?[A-Z][A-Z0-9_]*=", line)}
    addresses = {
        ENV_PREFIX + f.name.upper()
        for e in PRODUCTION
        for f in dataclasses.fields(e.cls)
        if config_reference.is_address(f.name)
    }
    assert addresses >= {"RATCHET_KAFKA_BOOTSTRAP", "RATCHET_MLFLOW_URL", "RATCHET_VLLM_URLS"}
    assert addresses <= listed, sorted(addresses - listed)
    assert {"RATCHET_INGEST_TOKENS", "RATCHET_REVIEW_TOKEN", "RATCHET_PROXY_ADMIN_TOKEN"} <= listed


def test_the_production_topology_configures_its_stages_with_the_env_examples_keys(tmp_path):
    """`ratchet up --topology production` gives its stages every variable ratchet.env.example sets
    (the MLflow client's own credentials aside: the local MLflow runs without authentication), and
    each of them is read by a stage."""
    lines = (DEPLOY / "ratchet.env.example").read_text().splitlines()
    example = {line.partition("=")[0] for line in lines if re.match(r"RATCHET_[A-Z0-9_]*=", line)}
    read_by_stages = {s.env for s in config_reference.all_settings() if not s.owner.local}
    assert example <= read_by_stages, sorted(example - read_by_stages)

    settings = StackSettings(state_dir=tmp_path, model_dir=tmp_path / "model", topology="production")
    env = stage_env(settings, PipelineSettings())
    assert example <= set(env), sorted(example - set(env))
    assert set(env) <= read_by_stages, sorted(set(env) - read_by_stages)
    assert env["RATCHET_VLLM_URLS"].split(",") == [settings.vllm_url, settings.vllm2_url]
    assert env["RATCHET_GATE_VLLM_URL"] == settings.vllm_url

    local = stage_env(StackSettings(state_dir=tmp_path, model_dir=tmp_path / "model"), PipelineSettings())
    assert local["RATCHET_VLLM_URLS"] == settings.vllm_url and "RATCHET_PROXY_ADMIN_TOKEN" not in local


@pytest.mark.parametrize("argv", [["up"], ["down"], ["status"], ["stack", "up"], ["stack", "status"]])
def test_the_topology_is_a_flag_of_the_stack_commands(argv):
    assert build_parser().parse_args([*argv, "--topology", "production"]).topology == "production"
    assert build_parser().parse_args(argv).topology is None  # then RATCHET_TOPOLOGY, else local
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--topology", "staging"])


# --- TOML files through the real loader -------------------------------------------------------


def toml_files(tmp_path: Path) -> dict[str, Path]:
    (configmap,) = [d for d in k8s_documents() if d["kind"] == "ConfigMap"]
    from_configmap = tmp_path / "configmap.toml"
    from_configmap.write_text(configmap["data"]["ratchet.toml"])
    return {"ratchet.toml.example": DEPLOY / "ratchet.toml.example", "k8s/configmap.yaml": from_configmap}


@pytest.mark.parametrize("name", ["ratchet.toml.example", "k8s/configmap.yaml"])
def test_production_toml_loads_and_names_only_real_settings(name, tmp_path):
    path = toml_files(tmp_path)[name]
    data = tomllib.loads(path.read_text())
    fields = {e.section: set() for e in config_reference.SETTINGS}
    for e in config_reference.SETTINGS:
        fields[e.section] |= {f.name for f in dataclasses.fields(e.cls)}
    for key, value in data.items():
        if isinstance(value, dict):
            assert key in fields, f"unknown table [{key}]"
            assert set(value) <= fields[key], f"[{key}]: not settings: {sorted(set(value) - fields[key])}"
        else:
            assert any(key in names for names in fields.values()), f"not a setting: {key}"

    env = {"RATCHET_CONFIG": str(path)}
    loaded = {e.cls.__name__: load(e.cls, e.section, env=env) for e in config_reference.SETTINGS}
    for e in PRODUCTION:
        for f in dataclasses.fields(e.cls):
            if config_reference.is_address(f.name) and f.name not in INTERNAL_ADDRESSES:
                value = getattr(loaded[e.cls.__name__], f.name)
                assert "127.0.0.1" not in str(value), f"{e.cls.__name__}.{f.name} is still local: {value}"
    assert loaded["IngestSettings"].kafka_bootstrap == data["kafka_bootstrap"]
    assert loaded["GateSettings"].review_port != loaded["ControllerSettings"].controller_metrics_port
    assert loaded["StreamSettings"].state_dir != loaded["ControllerSettings"].state_dir
    assert (
        loaded["LearnerSettings"].adapter_store_dir
        == loaded["GateSettings"].adapter_store_dir
        == loaded["ControllerSettings"].adapter_store_dir
    )
    assert loaded["ProxySettings"].routes_path == loaded["ControllerSettings"].routes_path


# --- compose, Kubernetes, systemd -----------------------------------------------------------


def test_compose_runs_every_stage_with_real_commands():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    commands = [service["command"] for service in compose["services"].values()]
    for argv in commands:
        check_command(argv)
    assert stage_commands() <= {stage(argv) for argv in commands}


def test_k8s_runs_every_stage_with_real_commands():
    commands = [c["command"] for w in k8s_workloads() for c in w["spec"]["template"]["spec"]["containers"]]
    for argv in commands:
        check_command(argv)
    assert stage_commands() <= {stage(argv) for argv in commands}


def test_k8s_deployments_are_consistent():
    secret = yaml.safe_load((K8S / "secret.example.yaml").read_text())
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert set(kustomization["resources"]) == {p.name for p in K8S.glob("*.yaml")} - {
        "kustomization.yaml",
        "secret.example.yaml",
    }
    claims = {d["metadata"]["name"] for d in k8s_documents() if d["kind"] == "PersistentVolumeClaim"}
    services = {d["metadata"]["name"]: d for d in k8s_documents() if d["kind"] == "Service"}
    single = {("ratchet", "learner", "run"), ("ratchet", "gate", "run"), ("ratchet", "serving", "run")}
    for workload in k8s_workloads():
        pod = workload["spec"]["template"]
        labels = pod["metadata"]["labels"]
        if workload["kind"] == "Deployment":
            assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        for volume in volumes.values():
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims
        for container in pod["spec"]["containers"]:
            assert {m["name"] for m in container.get("volumeMounts", [])} <= set(volumes)
            for var in container.get("env", []):
                ref = var.get("valueFrom", {}).get("secretKeyRef")
                if ref and not ref.get("optional"):
                    assert ref["key"] in secret["stringData"], ref
            if stage(container["command"]) in single:
                assert workload["spec"]["replicas"] == 1
                assert workload["spec"]["strategy"]["type"] == "Recreate"
            ports = {p["name"] for p in container.get("ports", [])}
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                if "httpGet" in container.get(probe, {}):
                    assert container[probe]["httpGet"]["port"] in ports
        name = workload["metadata"]["name"]
        if name in services:
            assert services[name]["spec"]["selector"].items() <= labels.items()


def test_systemd_units_run_every_stage_with_real_commands():
    commands = []
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        (exec_start,) = re.findall(r"^ExecStart=(.+)$", unit.read_text(), re.MULTILINE)
        binary, *args = shlex.split(exec_start)
        assert binary == "/opt/ratchet/venv/bin/ratchet"
        commands.append(["ratchet", *args])
    for argv in commands:
        check_command(argv)
    assert stage_commands() <= {stage(argv) for argv in commands}


# --- topics -------------------------------------------------------------------------------------


def test_topic_layout_check():
    good = {spec.name: spec.partitions for spec in topics.topic_specs(12)}
    assert layout_problems(good) == []
    assert layout_problems({**good, topics.REWARDED: 6}) == [
        "the keyed topics must share one partition count: sessions.v1 has 12, feedback.v1 has 12, "
        "outcomes.v1 has 12, rewarded.v1 has 6"
    ]
    assert layout_problems({k: v for k, v in good.items() if k != topics.DLQ}) == ["topic dlq.v1 is missing"]
