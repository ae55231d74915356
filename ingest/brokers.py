"""How every Kafka client connects: the bootstrap address plus one security configuration.

Every librdkafka client Ratchet builds (producers, consumers, admin clients) takes its settings
from :func:`client_config`, and the rewards worker's faust app its credentials from
:func:`faust_credentials`, so a cluster that needs TLS or SASL is configured once, for every
stage, like any other setting (TOML file < ``RATCHET_*`` environment)::

    kafka_security_protocol = "SASL_SSL"
    kafka_sasl_mechanism = "SCRAM-SHA-512"
    kafka_sasl_username = "ratchet"
    kafka_sasl_password_file = "/run/secrets/kafka-password"
    kafka_ssl_ca_file = "/etc/ratchet/kafka-ca.pem"

The password comes from ``kafka_sasl_password_file`` (a mounted secret) or the environment
variable ``RATCHET_KAFKA_SASL_PASSWORD``; a TOML file should not hold it.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest.config import ConfigError, load

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class KafkaSecurity:
    kafka_security_protocol: str = "PLAINTEXT"  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    kafka_sasl_mechanism: str = "SCRAM-SHA-512"  # PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_* only)
    kafka_sasl_username: str | None = None  # SASL user (SASL_* only)
    kafka_sasl_password: str | None = None  # SASL password; set it in the environment, not in a file
    kafka_sasl_password_file: Path | None = None  # file holding the SASL password (a mounted secret)
    kafka_ssl_ca_file: Path | None = None  # CA bundle the brokers' certificates are checked against
    kafka_ssl_cert_file: Path | None = None  # client certificate, for brokers that require mutual TLS
    kafka_ssl_key_file: Path | None = None  # the client certificate's private key
    kafka_ssl_check_hostname: bool = True  # check that a broker's certificate names its host

    def __post_init__(self) -> None:
        protocol = self.kafka_security_protocol.upper()
        if protocol not in PROTOCOLS:
            raise ConfigError(
                f"kafka_security_protocol: {self.kafka_security_protocol!r} is not one of {', '.join(PROTOCOLS)}"
            )
        object.__setattr__(self, "kafka_security_protocol", protocol)
        if self.sasl:
            if self.kafka_sasl_mechanism.upper() not in MECHANISMS:
                raise ConfigError(
                    f"kafka_sasl_mechanism: {self.kafka_sasl_mechanism!r} is not one of {', '.join(MECHANISMS)}"
                )
            object.__setattr__(self, "kafka_sasl_mechanism", self.kafka_sasl_mechanism.upper())
            if not self.kafka_sasl_username:
                raise ConfigError(f"{protocol} needs kafka_sasl_username (RATCHET_KAFKA_SASL_USERNAME)")
            if self.kafka_sasl_password is None and self.kafka_sasl_password_file is None:
                raise ConfigError(
                    f"{protocol} needs a password: set kafka_sasl_password_file to a file holding it, "
                    "or RATCHET_KAFKA_SASL_PASSWORD"
                )
        for name in (
            "kafka_sasl_password_file",
            "kafka_ssl_ca_file",
            "kafka_ssl_cert_file",
            "kafka_ssl_key_file",
        ):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ConfigError(f"{name}: {path} is not a file")
        if (self.kafka_ssl_cert_file is None) != (self.kafka_ssl_key_file is None):
            raise ConfigError(
                "kafka_ssl_cert_file and kafka_ssl_key_file go together (mutual TLS needs both)"
            )

    @property
    def sasl(self) -> bool:
        return self.kafka_security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.kafka_security_protocol in ("SSL", "SASL_SSL")

    def password(self) -> str:
        if self.kafka_sasl_password_file is not None:
            return self.kafka_sasl_password_file.read_text().rstrip("\r\n")
        return self.kafka_sasl_password or ""

    def librdkafka(self) -> dict[str, Any]:
        """The security part of a librdkafka (confluent-kafka) configuration."""
        config: dict[str, Any] = {"security.protocol": self.kafka_security_protocol}
        if self.sasl:
            config |= {
                "sasl.mechanism": self.kafka_sasl_mechanism,
                "sasl.username": self.kafka_sasl_username,
                "sasl.password": self.password(),
            }
        if self.tls:
            if self.kafka_ssl_ca_file is not None:
                config["ssl.ca.location"] = str(self.kafka_ssl_ca_file)
            if self.kafka_ssl_cert_file is not None:
                config["ssl.certificate.location"] = str(self.kafka_ssl_cert_file)
                config["ssl.key.location"] = str(self.kafka_ssl_key_file)
            config["ssl.endpoint.identification.algorithm"] = (
                "https" if self.kafka_ssl_check_hostname else "none"
            )
        return config

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context(
            cafile=str(self.kafka_ssl_ca_file) if self.kafka_ssl_ca_file else None
        )
        context.check_hostname = self.kafka_ssl_check_hostname
        if self.kafka_ssl_cert_file is not None:
            context.load_cert_chain(str(self.kafka_ssl_cert_file), str(self.kafka_ssl_key_file))
        return context

    def aiokafka(self) -> dict[str, Any]:
        """The same, as keyword arguments of an aiokafka client."""
        kwargs: dict[str, Any] = {"security_protocol": self.kafka_security_protocol}
        if self.sasl:
            kwargs |= {
                "sasl_mechanism": self.kafka_sasl_mechanism,
                "sasl_plain_username": self.kafka_sasl_username,
                "sasl_plain_password": self.password(),
            }
        if self.tls:
            kwargs["ssl_context"] = self.ssl_context()
        return kwargs

    def faust_credentials(self) -> Any:
        """``broker_credentials`` of a faust app (None for PLAINTEXT)."""
        import faust

        if self.sasl:
            return faust.SASLCredentials(
                username=self.kafka_sasl_username,
                password=self.password(),
                mechanism=self.kafka_sasl_mechanism,
                ssl_context=self.ssl_context(),
            )
        if self.tls:
            return faust.SSLCredentials(self.ssl_context())
        return None


def security(env: dict[str, str] | None = None) -> KafkaSecurity:
    """The security settings, read from the TOML file and the environment each call."""
    return load(KafkaSecurity, "kafka", env)


def client_config(bootstrap: str, **config: Any) -> dict[str, Any]:
    """A librdkafka configuration for ``bootstrap``: the security settings, then ``config``."""
    return {"bootstrap.servers": bootstrap, **security().librdkafka(), **config}


def aiokafka_kwargs(bootstrap: str, **kwargs: Any) -> dict[str, Any]:
    return {"bootstrap_servers": bootstrap, **security().aiokafka(), **kwargs}


def faust_credentials() -> Any:
    return security().faust_credentials()
