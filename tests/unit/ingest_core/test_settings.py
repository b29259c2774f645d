"""Settings: YAML profile, environment overrides, validation messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ingest_core.settings import PlatformSettings, get_settings

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _fresh_settings() -> object:
    """Settings read under one test's environment never leak into the next."""
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_local_profile_defaults_come_from_platform_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INGEST_PROFILE", raising=False)
    settings = PlatformSettings()
    assert settings.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert settings.spark.master == "local[*]"
    assert settings.spark.shuffle_partitions == 4


def test_environment_overrides_yaml(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("INGEST_KAFKA__PORT", "19092")
    monkeypatch.setenv("INGEST_SPARK__MASTER", "spark://10.0.0.5:7077")
    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    settings = PlatformSettings()
    assert settings.kafka.bootstrap_servers == "127.0.0.1:19092"
    assert settings.spark.master == "spark://10.0.0.5:7077"
    assert settings.kafka.data_path == tmp_path / "kafka"
    assert settings.storage.data_path == tmp_path / "data"


def test_bad_value_is_refused_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_KAFKA__PORT", "70000")
    with pytest.raises(ValidationError, match=r"kafka\.port"):
        PlatformSettings()


def test_unknown_spark_master_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_SPARK__MASTER", "mesos://x")
    with pytest.raises(ValidationError, match="spark master 'mesos://x'"):
        PlatformSettings()


def test_unknown_profile_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_PROFILE", "nonexistent")
    with pytest.raises(KeyError, match="nonexistent"):
        PlatformSettings()


def test_embedded_airflow_sets_the_sqlite_timeout_only_for_its_own_sqlite(monkeypatch) -> None:
    from ingestctl.airflow_runtime import airflow_environment

    monkeypatch.setenv("INGEST_AIRFLOW__DATABASE", "sqlite")  # the opt-out of the embedded PG
    get_settings.cache_clear()
    key = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"
    for name in ("", "_CMD", "_SECRET"):
        monkeypatch.delenv(f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN{name}", raising=False)
    monkeypatch.delenv(key, raising=False)
    assert airflow_environment()[key] == "ingestctl.airflow_runtime.SQLITE_CONNECT_ARGS"
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://u@h/db")
    assert key not in airflow_environment()
    monkeypatch.delenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", "echo postgresql://u@h/db")
    assert key not in airflow_environment()


def test_tasks_ride_through_a_two_minute_metadata_database_outage(monkeypatch) -> None:
    """Airflow kills a task whose supervisor failed ``max_failed_heartbeats`` heartbeats in a
    row, tried at most every ``min_heartbeat_interval`` seconds: the embedded Airflow and the
    compose file allow two minutes at least; a value the user exported wins."""
    import yaml
    from airflow.configuration import conf

    from ingestctl.airflow_runtime import MAX_FAILED_HEARTBEATS, airflow_environment

    key = "AIRFLOW__WORKERS__MAX_FAILED_HEARTBEATS"
    monkeypatch.delenv(key, raising=False)
    interval = conf.getint("workers", "min_heartbeat_interval")
    assert int(airflow_environment()[key]) * interval >= 120
    compose = yaml.safe_load((Path(__file__).parents[3] / "docker-compose.yaml").read_text())
    assert compose["x-airflow-env"][key] == str(MAX_FAILED_HEARTBEATS)
    monkeypatch.setenv(key, "5")
    assert key not in airflow_environment()


def test_log_server_ports_exported_by_the_user_win(monkeypatch, tmp_path: Path) -> None:
    from ingestctl.airflow_runtime import airflow_environment

    monkeypatch.setenv("INGEST_HOME", str(tmp_path))  # the embedded PG's password goes here
    get_settings.cache_clear()
    port = "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"
    monkeypatch.delenv(port, raising=False)
    assert airflow_environment(log_ports=(18793, 18794))[port] == "18793"
    monkeypatch.setenv(port, "9001")
    assert port not in airflow_environment(log_ports=(18793, 18794))  # os.environ's 9001 stays


def test_topic_prefix_is_checked_against_the_longest_topic_it_prefixes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 232 + len("customer_activity") = 249: Kafka's limit, accepted.
    monkeypatch.setenv("INGEST_KAFKA__TOPIC_PREFIX", "p" * 232)
    assert PlatformSettings().kafka.topic("customer_activity") == "p" * 232 + "customer_activity"
    monkeypatch.setenv("INGEST_KAFKA__TOPIC_PREFIX", "p" * 233)
    with pytest.raises(ValidationError, match="250 characters, Kafka allows at most 249"):
        PlatformSettings()
    # The alerts topic is prefixed too.
    monkeypatch.setenv("INGEST_KAFKA__TOPIC_PREFIX", "p" * 60)
    monkeypatch.setenv("INGEST_ALERTS__TOPIC", "a" * 190)
    with pytest.raises(ValidationError, match="250 characters"):
        PlatformSettings()


def test_the_embedded_airflow_home_is_private_even_when_it_existed_open(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from ingestctl.airflow_runtime import private_airflow_home

    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    (tmp_path / "airflow").mkdir(mode=0o755)
    (tmp_path / "airflow").chmod(0o755)  # an older platform's demo left it open
    for cli in (False, True):
        home = private_airflow_home(cli)
        assert home == tmp_path / ("airflow-cli" if cli else "airflow")
        assert home.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("topic", ["payments", "customer.activity"])
def test_the_alerts_topic_cannot_be_a_contract_topic(
    monkeypatch: pytest.MonkeyPatch, topic: str
) -> None:
    monkeypatch.setenv("INGEST_ALERTS__TOPIC", topic)
    with pytest.raises(ValidationError, match="would be read back as"):
        PlatformSettings()
