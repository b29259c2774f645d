"""Kafka security settings: from the environment to Spark's ``kafka.*`` options and to
kafka-python's keyword arguments; PLAINTEXT by default; secrets refused in YAML."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ingest_core import settings as settings_module
from ingest_core.settings import KafkaSecurityError, PlatformSettings

pytestmark = pytest.mark.unit

SASL_SSL_ENV = {
    "INGEST_KAFKA__BOOTSTRAP": "b1.example.com:9093,b2.example.com:9093",
    "INGEST_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
    "INGEST_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
    "INGEST_KAFKA__SASL_USERNAME": "ingest",
    # quotes and a backslash: the JAAS line must escape them
    "INGEST_KAFKA__SASL_PASSWORD": 's3cr"et\\pw',
    "INGEST_KAFKA__SSL_CAFILE": "/etc/ingest/kafka-ca.pem",
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    # Only what the tests set: a developer's shell may point the platform elsewhere.
    for name in [n for n in os.environ if n.startswith(("INGEST_KAFKA__", "INGEST_SPARK__"))]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("INGEST_PROFILE", raising=False)
    return monkeypatch


def test_defaults_stay_plaintext(clean_env: pytest.MonkeyPatch) -> None:
    kafka = PlatformSettings().kafka
    assert kafka.spark_options() == {
        "kafka.bootstrap.servers": "127.0.0.1:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }
    assert kafka.client_config() == {
        "bootstrap_servers": "127.0.0.1:9092",
        "security_protocol": "PLAINTEXT",
        "bootstrap_timeout_ms": 10_000,
    }
    assert kafka.client_config("10.0.0.1:1234")["bootstrap_servers"] == "10.0.0.1:1234"


def test_sasl_ssl_from_environment_reaches_spark_options(clean_env: pytest.MonkeyPatch) -> None:
    for name, value in SASL_SSL_ENV.items():
        clean_env.setenv(name, value)
    options = PlatformSettings().kafka.spark_options()
    assert options == {
        "kafka.bootstrap.servers": "b1.example.com:9093,b2.example.com:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="ingest" password="s3cr\\"et\\\\pw";'
        ),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/ingest/kafka-ca.pem",
    }


def test_sasl_ssl_from_environment_reaches_kafka_python(clean_env: pytest.MonkeyPatch) -> None:
    for name, value in SASL_SSL_ENV.items():
        clean_env.setenv(name, value)
    clean_env.setenv("INGEST_KAFKA__SSL_CHECK_HOSTNAME", "false")
    kafka = PlatformSettings().kafka
    assert kafka.client_config() == {
        "bootstrap_servers": "b1.example.com:9093,b2.example.com:9093",
        "security_protocol": "SASL_SSL",
        "bootstrap_timeout_ms": 10_000,
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "ingest",
        "sasl_plain_password": 's3cr"et\\pw',
        "ssl_check_hostname": False,
        "ssl_cafile": "/etc/ingest/kafka-ca.pem",
    }
    assert kafka.spark_options()["kafka.ssl.endpoint.identification.algorithm"] == ""
    # The password never shows in the settings' repr (logs, error messages).
    assert "s3cr" not in repr(kafka)


def test_kafka_python_accepts_the_config(clean_env: pytest.MonkeyPatch) -> None:
    """Every key is a real kafka-python setting: the client's own validation accepts it."""
    from kafka import KafkaProducer

    for name, value in SASL_SSL_ENV.items():
        clean_env.setenv(name, value)
    config = PlatformSettings().kafka.client_config()
    assert set(config) <= set(KafkaProducer.DEFAULT_CONFIG)


def test_sasl_without_password_is_refused_naming_the_variable(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("INGEST_KAFKA__SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    clean_env.setenv("INGEST_KAFKA__SASL_MECHANISM", "PLAIN")
    clean_env.setenv("INGEST_KAFKA__SASL_USERNAME", "ingest")
    kafka = PlatformSettings().kafka
    with pytest.raises(KafkaSecurityError, match="INGEST_KAFKA__SASL_PASSWORD"):
        kafka.spark_options()
    with pytest.raises(KafkaSecurityError, match="INGEST_KAFKA__SASL_PASSWORD"):
        kafka.client_config()


def test_password_in_platform_yaml_is_refused(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    leaky = tmp_path / "platform.yaml"
    leaky.write_text("local:\n  kafka:\n    sasl_password: hunter2\n")
    clean_env.setattr(settings_module, "PLATFORM_YAML", leaky)
    with pytest.raises(ValueError, match="INGEST_KAFKA__SASL_PASSWORD") as raised:
        PlatformSettings()
    assert "hunter2" not in str(raised.value)


@pytest.mark.parametrize(
    ("profile", "bootstrap", "protocol", "master"),
    [
        ("local", "127.0.0.1:9092", "PLAINTEXT", "local[*]"),
        (
            "compose",
            "kafka-1:9092,kafka-2:9092,kafka-3:9092",
            "PLAINTEXT",
            "spark://spark-master:7077",
        ),
        (
            "local-cluster",
            "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094",
            "PLAINTEXT",
            "spark://127.0.0.1:17077",
        ),
        (
            "cluster",
            "kafka.cluster.invalid:9093",
            "SASL_SSL",
            "spark://spark-master.cluster.invalid:7077",
        ),
    ],
)
def test_one_variable_selects_the_profile(
    clean_env: pytest.MonkeyPatch, profile: str, bootstrap: str, protocol: str, master: str
) -> None:
    clean_env.setenv("INGEST_PROFILE", profile)
    settings = PlatformSettings()
    assert settings.kafka.bootstrap_servers == bootstrap
    assert settings.kafka.security_protocol == protocol
    assert settings.spark.master == master
    # Shared sections are the same in every profile (YAML anchors), except where a
    # profile says otherwise.
    assert settings.supervisor.crash_loop_restarts == 5


def test_cluster_profile_takes_addresses_and_credentials_from_environment(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("INGEST_PROFILE", "cluster")
    clean_env.setenv("INGEST_KAFKA__BOOTSTRAP", "k1:9093,k2:9093")
    clean_env.setenv("INGEST_KAFKA__SASL_USERNAME", "ingest")
    clean_env.setenv("INGEST_KAFKA__SASL_PASSWORD", "from-env")
    settings = PlatformSettings()
    assert settings.quality.freshness_limit_s == 3600
    assert settings.kafka.replication_factor == 3
    config = settings.kafka.client_config()
    assert config["bootstrap_servers"] == "k1:9093,k2:9093"
    assert config["sasl_plain_password"] == "from-env"
    assert config["sasl_mechanism"] == "SCRAM-SHA-512"


def test_bad_bootstrap_list_is_refused(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("INGEST_KAFKA__BOOTSTRAP", "k1:9093, k2")
    with pytest.raises(ValueError, match=r"kafka\.bootstrap"):
        PlatformSettings()
