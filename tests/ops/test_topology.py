"""The production topology on one machine, against the real components (no vLLM): the broker on S3
(SeaweedFS), MLflow with its backend store on PostgreSQL and its artifacts in an S3 bucket, served
through the MLflow server. The servers start once for the module."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import uuid
from contextlib import closing
from pathlib import Path

import boto3
import psutil
import psycopg2
import pytest
from mlflow import MlflowClient

from ops import postgres
from ops.stack import (
    MLFLOW_BUCKET,
    S3_ENV,
    TANSU_BUCKET,
    Stack,
    StackSettings,
    free_port,
    port_open,
)

INFRA = ["s3", "broker", "postgres", "mlflow"]
PORTS = ("broker_port", "mlflow_port", "vllm_port", "vllm2_port", "s3_port", "postgres_port")


@pytest.fixture(scope="module")
def production_stack(tmp_path_factory):
    settings = StackSettings(
        state_dir=tmp_path_factory.mktemp("production"),
        topology="production",
        **{name: free_port() for name in PORTS},
    )
    stack = Stack(settings, progress=print)
    yield stack
    stack.down()


@pytest.fixture
def stack(production_stack) -> Stack:
    """The module's stack with its infrastructure up (a no-op once it is: tests may run in any order)."""
    production_stack.up(INFRA)
    return production_stack


def s3_client(settings: StackSettings):
    return boto3.client(
        "s3",
        endpoint_url=settings.s3_url,
        aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
        region_name=S3_ENV["AWS_DEFAULT_REGION"],
    )


def query(settings: StackSettings, sql: str, *args) -> list[tuple]:
    dsn = postgres.uri(settings.host, settings.postgres_port, "mlflow")
    with closing(psycopg2.connect(dsn, connect_timeout=10)) as conn, conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess:
    """``ratchet ARGS --topology production`` on the stack's ports and state folder."""
    s = stack.settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_") or k == "RATCHET_CACHE"}
    env |= {f"RATCHET_{name.upper()}": str(getattr(s, name)) for name in PORTS}
    env |= {"RATCHET_STATE_DIR": str(s.state_dir)}
    argv = [sys.executable, "-m", "ops.cli", *args, "--topology", "production"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def logged(production_stack, tmp_path_factory) -> dict:
    """An experiment, a finished run with a parameter, a metric and an artifact, and a registered
    version with an alias, made through the MLflow client alone (no S3 credentials in its environment)."""
    production_stack.up(INFRA)
    url = production_stack.settings.mlflow_url
    payload = os.urandom(50_000)
    folder = tmp_path_factory.mktemp("artifact")
    (folder / "weights.bin").write_bytes(payload)
    with pytest.MonkeyPatch.context() as env:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MLFLOW_S3_ENDPOINT_URL"):
            env.delenv(name, raising=False)
        client = MlflowClient(tracking_uri=url, registry_uri=url)
        experiment_id = client.create_experiment(f"topology-{uuid.uuid4().hex[:8]}")
        run = client.create_run(experiment_id)
        run_id = run.info.run_id
        client.log_param(run_id, "learning_rate", "0.001")
        client.log_metric(run_id, "reward", 0.75, step=3)
        client.log_artifact(run_id, str(folder / "weights.bin"), artifact_path="adapter")
        client.set_terminated(run_id, "FINISHED")
        model = f"topology-policy-{uuid.uuid4().hex[:8]}"
        client.create_registered_model(model)
        version = client.create_model_version(
            model, source=f"{run.info.artifact_uri}/adapter", run_id=run_id
        ).version
        client.set_registered_model_alias(model, "champion", version)
    return {
        "experiment_id": experiment_id,
        "run_id": run_id,
        "artifact_uri": run.info.artifact_uri,
        "model": model,
        "version": str(version),
        "payload": payload,
    }


def download(settings: StackSettings, run_id: str, dst: Path) -> bytes:
    client = MlflowClient(tracking_uri=settings.mlflow_url)
    return Path(client.download_artifacts(run_id, "adapter/weights.bin", str(dst))).read_bytes()


def test_status_shows_the_production_topology(stack):
    out = cli(stack, "status", "--json")
    status = json.loads(out.stdout)
    assert status["topology"] == "production"
    rows = {r["component"]: r for r in status["components"]}
    for name in INFRA:
        assert rows[name]["state"] == "up" and rows[name]["healthy"], rows[name]
    assert rows["postgres"]["url"] == f"postgresql://127.0.0.1:{stack.settings.postgres_port}"
    assert rows["vllm"]["state"] == rows["vllm2"]["state"] == "down"  # this test starts no vLLM
    assert rows["vllm2"]["url"] == f"http://127.0.0.1:{stack.settings.vllm2_port}"
    assert Path(rows["postgres"]["log"]).read_text().count("database system is ready to accept connections")


def test_the_production_topology_runs_two_vllm_replicas_of_one_model(tmp_path):
    settings = StackSettings(
        state_dir=tmp_path / "state",
        topology="production",
        model_dir=tmp_path / "model",
        vllm_python=Path(sys.executable),
        **{name: free_port() for name in PORTS},
    )
    components = Stack(settings, progress=print).components()
    assert [c.name for c in components] == [*INFRA, "vllm", "vllm2"]
    first, second = components[-2:]
    assert (first.port, second.port) == (settings.vllm_port, settings.vllm2_port)
    assert settings.vllm_urls == (first.url, second.url)

    def without_port(argv: list[str]) -> list[str]:
        at = argv.index("--port")
        assert argv[at + 1] == str(settings.vllm_port if argv is first.argv else settings.vllm2_port)
        return argv[:at] + argv[at + 2 :]

    # the same model, name and flags; adapters come from one store by the paths the stages send
    assert without_port(first.argv) == without_port(second.argv) and first.env == second.env
    local = Stack(dataclasses.replace(settings, topology="local"), progress=print).components()
    assert [c.name for c in local][-1] == "vllm" and settings.vllm_urls[:1] == (local[-1].url,)


def test_the_broker_keeps_its_data_on_s3_and_postgres_listens_on_loopback_only(stack):
    s = stack.settings
    broker = stack._owned_process("broker").cmdline()
    assert broker[broker.index("--storage-engine") + 1] == f"s3://{TANSU_BUCKET}/"
    assert s3_client(s).list_objects_v2(Bucket=TANSU_BUCKET)["KeyCount"] > 0  # the topics' metadata
    postmaster = stack._owned_process("postgres")
    assert postmaster.name() == "postgres"
    listening = {c.laddr for c in postmaster.net_connections("all") if c.status == psutil.CONN_LISTEN}
    assert listening and {addr.ip for addr in listening} == {"127.0.0.1"}, listening
    assert not [c for c in postmaster.net_connections("unix") if ".s.PGSQL" in (c.laddr or "")]  # no socket


def test_runs_and_versions_land_in_postgres_and_artifacts_in_s3(stack, logged, tmp_path):
    s = stack.settings
    run_id = logged["run_id"]
    # clients see artifacts through the MLflow server, never S3 itself
    assert logged["artifact_uri"].startswith("mlflow-artifacts:/")

    assert query(s, "SELECT status, experiment_id FROM runs WHERE run_uuid = %s", run_id) == [
        ("FINISHED", int(logged["experiment_id"]))
    ]
    assert query(s, "SELECT key, value FROM params WHERE run_uuid = %s", run_id) == [
        ("learning_rate", "0.001")
    ]
    assert query(s, "SELECT key, value, step FROM metrics WHERE run_uuid = %s", run_id) == [
        ("reward", 0.75, 3)
    ]
    assert query(s, "SELECT version, run_id FROM model_versions WHERE name = %s", logged["model"]) == [
        (int(logged["version"]), run_id)
    ]
    assert query(
        s, "SELECT alias, version FROM registered_model_aliases WHERE name = %s", logged["model"]
    ) == [("champion", int(logged["version"]))]

    listed = s3_client(s).list_objects_v2(Bucket=MLFLOW_BUCKET, Prefix="artifacts/")
    keys = [o["Key"] for o in listed.get("Contents", []) if run_id in o["Key"]]
    assert len(keys) == 1 and keys[0].endswith("/adapter/weights.bin"), keys
    stored = s3_client(s).get_object(Bucket=MLFLOW_BUCKET, Key=keys[0])["Body"].read()
    assert stored == logged["payload"]
    assert download(s, run_id, tmp_path) == logged["payload"]
    # nothing was written beside the server: no sqlite file, no local artifact folder
    assert not (s.state_dir / "data" / "mlflow").exists()


def test_runs_aliases_and_artifacts_survive_a_restart_of_mlflow_and_postgres(stack, logged, tmp_path):
    s = stack.settings
    before = {name: stack._owned_process(name).pid for name in ("postgres", "mlflow")}
    assert stack.stop("mlflow") and stack.stop("postgres")
    assert not port_open(s.host, s.mlflow_port) and not port_open(s.host, s.postgres_port)
    stack.up(["postgres", "mlflow"])
    assert all(stack._owned_process(name).pid != pid for name, pid in before.items())
    # PostgreSQL was stopped cleanly (a shutdown checkpoint, no crash recovery on the way up)
    starts = re.findall(r"database system was (.*?) at", stack.log_path("postgres").read_text())
    assert starts[-1] == "shut down", starts

    client = MlflowClient(tracking_uri=s.mlflow_url, registry_uri=s.mlflow_url)
    run = client.get_run(logged["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params == {"learning_rate": "0.001"} and run.data.metrics == {"reward": 0.75}
    assert client.get_model_version_by_alias(logged["model"], "champion").version == logged["version"]
    assert download(s, logged["run_id"], tmp_path) == logged["payload"]


def test_ratchet_down_leaves_no_process_of_the_topology(stack):
    s = stack.settings
    processes = []
    for name in INFRA:
        proc = stack._owned_process(name)
        processes += [proc, *proc.children(recursive=True)]
    assert len(processes) > len(INFRA)  # PostgreSQL's own processes, at least

    out = cli(stack, "down")
    assert out.returncode == 0, out.stderr

    alive = [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    assert not any(port_open(s.host, getattr(s, name)) for name in PORTS)
    assert list((s.state_dir / "run").glob("*.pid")) == []
    assert "database system is shut down" in stack.tail_log("postgres", 5)
