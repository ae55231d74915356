"""Kafka security settings reach every client: validated once, mapped for librdkafka, aiokafka and
faust, and proven against a real broker that requires SASL (SCRAM) authentication."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from ingest.brokers import aiokafka_kwargs, client_config, security
from ingest.config import ConfigError
from ingest.producer import producer_config
from ops.stack import broker_bin, free_port, port_open


def env(**values: str) -> dict[str, str]:
    return {f"RATCHET_KAFKA_{k.upper()}": v for k, v in values.items()}


def test_plaintext_is_the_default_and_adds_nothing_but_the_protocol():
    sec = security({})
    assert sec.librdkafka() == {"security.protocol": "PLAINTEXT"}
    assert sec.aiokafka() == {"security_protocol": "PLAINTEXT"}
    assert sec.faust_credentials() is None


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"security_protocol": "SASL"}, "is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        ({"security_protocol": "sasl_ssl"}, "needs kafka_sasl_username (RATCHET_KAFKA_SASL_USERNAME)"),
        ({"security_protocol": "SASL_SSL", "sasl_username": "u"}, "RATCHET_KAFKA_SASL_PASSWORD"),
        (
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_username": "u",
                "sasl_password": "p",
                "sasl_mechanism": "MD5",
            },
            "kafka_sasl_mechanism: 'MD5' is not one of PLAIN",
        ),
        (
            {"security_protocol": "SSL", "ssl_ca_file": "/nonexistent/ca.pem"},
            "kafka_ssl_ca_file: /nonexistent/ca.pem",
        ),
    ],
)
def test_a_bad_security_setting_says_which_and_what_to_set(values, says):
    with pytest.raises(ConfigError) as raised:
        security(env(**values))
    assert says in str(raised.value)


def test_mutual_tls_needs_both_certificate_and_key(tmp_path):
    cert = tmp_path / "client.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match="go together"):
        security(env(security_protocol="SSL", ssl_cert_file=str(cert)))


def test_sasl_ssl_maps_to_each_client_library(tmp_path):
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    sec = security(
        env(security_protocol="SASL_SSL", sasl_mechanism="scram-sha-256", sasl_username="ratchet")
        | {"RATCHET_KAFKA_SASL_PASSWORD_FILE": str(password), "RATCHET_KAFKA_SSL_CHECK_HOSTNAME": "false"}
    )
    assert sec.librdkafka() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "ratchet",
        "sasl.password": "s3cret",  # the file's trailing newline is not part of it
        "ssl.endpoint.identification.algorithm": "none",
    }
    kwargs = sec.aiokafka()
    assert (kwargs["security_protocol"], kwargs["sasl_mechanism"]) == ("SASL_SSL", "SCRAM-SHA-256")
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("ratchet", "s3cret")
    assert kwargs["ssl_context"].check_hostname is False

    # faust hands its credentials to aiokafka: the same settings arrive there.
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    via_faust = credentials_to_aiokafka_auth(sec.faust_credentials())
    assert {k: v for k, v in via_faust.items() if k != "ssl_context"} == {
        k: v for k, v in kwargs.items() if k != "ssl_context"
    }
    assert via_faust["ssl_context"] is not None


def test_the_rewards_worker_app_carries_the_credentials(monkeypatch):
    from rewards.app import build_app
    from rewards.worker_settings import load_stream_settings

    for key, value in env(
        security_protocol="SASL_PLAINTEXT", sasl_username="worker", sasl_password="pw"
    ).items():
        monkeypatch.setenv(key, value)
    app, stage = build_app(load_stream_settings())
    asyncio.run(stage.shutdown())  # closes the stage's own clients
    credentials = app.conf.broker_credentials
    assert (credentials.username, credentials.password, credentials.protocol.value) == (
        "worker",
        "pw",
        "SASL_PLAINTEXT",
    )


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    """A real broker started with authentication required (SASL/SCRAM). This broker build can neither
    create users while it requires authentication nor keep them across the restart that turns it on,
    so no client can log in: the tests see how far each client gets, which shows what it sent."""
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("sasl") / "broker.log"
    argv = [
        broker_bin(),
        "broker",
        "--listener-url",
        f"tcp://{bootstrap}",
        "--advertised-listener-url",
        f"tcp://{bootstrap}",
        "--storage-engine",
        "memory://tansu/",
        "--authentication",
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not port_open("127.0.0.1", port):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"broker did not listen within 30s: {log.read_text()}"
            time.sleep(0.05)  # polling a port, not waiting for an effect
        yield bootstrap
    finally:
        proc.kill()
        proc.wait()


def errors_of(config: dict) -> list:
    """The errors a librdkafka admin client built from ``config`` reports while trying for 3 s."""
    seen: list = []
    admin = AdminClient({**config, "error_cb": seen.append, "socket.timeout.ms": 3000})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    admin.poll(1)  # serves the error callbacks
    return seen


def test_without_security_settings_a_client_is_cut_off_before_authenticating(sasl_broker):
    seen = errors_of(client_config(sasl_broker))
    assert not any(e.code() == KafkaError._AUTHENTICATION for e in seen)  # refused, never asked to log in


def test_clients_built_from_the_settings_log_in_with_scram(sasl_broker, monkeypatch):
    for key, value in env(
        security_protocol="SASL_PLAINTEXT", sasl_username="ratchet", sasl_password="pw"
    ).items():
        monkeypatch.setenv(key, value)
    # the broker answered a SCRAM exchange for this user: the credentials went over the wire
    seen = errors_of(client_config(sasl_broker))
    assert any(e.code() == KafkaError._AUTHENTICATION and "unknown-user" in e.str() for e in seen), seen
    # the durable producer's configuration carries them too
    assert {"security.protocol", "sasl.username", "sasl.password"} <= producer_config(sasl_broker).keys()

    async def aiokafka_start() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(**aiokafka_kwargs(sasl_broker), request_timeout_ms=5000)
        try:
            await producer.start()
        finally:
            await producer.stop()

    # aiokafka, the library under the rewards worker's faust app, authenticates the same way
    with pytest.raises(Exception) as raised:
        asyncio.run(aiokafka_start())
    # (this aiokafka cannot read the broker's SCRAM refusal: it fails inside its SCRAM exchange)
    assert any(entry.name == "authenticator_scram" for entry in raised.traceback), raised.value


def test_a_bad_security_setting_stops_a_command_before_it_starts_work():
    import os
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "ops.cli", "learner", "run"],
        env={**os.environ, "RATCHET_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "RATCHET_KAFKA_SASL_USERNAME": "u"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert "configuration error: SASL_SSL needs a password" in run.stderr
    assert "learner:" not in run.stdout + run.stderr  # nothing started: no model loaded, no topic read
