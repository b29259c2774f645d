"""Profiles: what `compose`, `cluster` and `local-cluster` change in the Spark configuration
of every job."""

from __future__ import annotations

import json
import os

import pytest
from pydantic import ValidationError

from ingest_core.settings import PlatformSettings, spark_connection
from spark_jobs.session import spark_conf, spark_submit_conf

pytestmark = pytest.mark.unit


@pytest.fixture
def profile(monkeypatch: pytest.MonkeyPatch):
    sections = ("INGEST_KAFKA__", "INGEST_SPARK__", "INGEST_SPARK_CLUSTER__")
    for name in [n for n in os.environ if n.startswith(sections)]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("INGEST_PROFILE", raising=False)

    def select(name: str) -> PlatformSettings:
        monkeypatch.setenv("INGEST_PROFILE", name)
        return PlatformSettings()

    return select


def test_local_profile_leaves_cores_and_driver_address_to_spark(profile) -> None:
    conf = spark_conf("job", profile("local"))
    assert conf["spark.master"] == "local[*]"
    assert "spark.cores.max" not in conf
    assert "spark.driver.host" not in conf


def test_compose_profile_caps_cores_per_application(profile, monkeypatch) -> None:
    monkeypatch.setenv("INGEST_SPARK__DRIVER_HOST", "airflow-scheduler")
    conf = spark_submit_conf("silver_refine", profile("compose"))
    # The master comes from the spark_default connection, never from the profile.
    assert "spark.master" not in conf
    assert conf["spark.cores.max"] == "1"
    assert conf["spark.executor.memory"] == "1g"
    assert conf["spark.driver.host"] == "airflow-scheduler"
    assert conf["spark.driver.bindAddress"] == "0.0.0.0"
    # The jars still travel with the application (executors fetch them from the driver).
    assert "delta-spark_" in conf["spark.jars"]


def test_cluster_profile_sizes_executors(profile) -> None:
    conf = spark_conf("gold_aggregate", profile("cluster"))
    assert conf["spark.cores.max"] == "8"
    assert conf["spark.executor.memory"] == "4g"
    assert conf["spark.sql.shuffle.partitions"] == "16"


def test_local_cluster_profile_runs_every_job_on_its_embedded_standalone_cluster(
    profile,
) -> None:
    """Issue 54: a master and two workers on loopback; Airflow's spark_default points at the
    master; an application takes one core, a real-time query one per Kafka partition."""
    settings = profile("local-cluster")
    assert settings.spark_cluster.workers == 2
    assert json.loads(spark_connection(settings)) == {
        "conn_type": "spark",
        "host": "spark://127.0.0.1",
        "port": 17077,
    }
    assert json.loads(spark_connection(profile("local")))["host"] == "local[*]"
    bronze = spark_submit_conf("bronze_ingest", settings)
    assert bronze["spark.cores.max"] == "1"
    assert bronze["spark.executor.extraJavaOptions"] == "-XX:+UseSerialGC -Xms64m"
    real_time = spark_submit_conf("payment_alerts_rt", settings)
    assert int(real_time["spark.cores.max"]) == settings.replay.partitions  # a slot each
    # Elsewhere the catalog's cores do not set a cap the profile does not have.
    assert "spark.cores.max" not in spark_conf("payment_alerts_rt", profile("local"))


def test_an_embedded_cluster_must_listen_on_loopback(profile, monkeypatch) -> None:
    monkeypatch.setenv("INGEST_SPARK__MASTER", "spark://spark-master.example:7077")
    with pytest.raises(ValidationError, match=r"spark://127\.0\.0\.1:<port>"):
        profile("local-cluster")
    monkeypatch.setenv("INGEST_SPARK__MASTER", "local[*]")
    with pytest.raises(ValidationError, match=r"spark_cluster\.workers > 0"):
        profile("local-cluster")
    monkeypatch.setenv("INGEST_SPARK_CLUSTER__WORKERS", "0")
    assert profile("local-cluster").spark.master == "local[*]"  # no embedded cluster: fine


def test_an_embedded_clusters_ports_must_not_overlap(profile, monkeypatch) -> None:
    """Stress test: a worker UI port equal to the master's UI port let Spark move the UI to
    the next port, and ``up`` waited 120 s for a registration it could not see."""
    monkeypatch.setenv("INGEST_SPARK_CLUSTER__WORKER_UI_PORT", "18080")
    with pytest.raises(ValidationError, match="ports overlap"):
        profile("local-cluster")
    monkeypatch.setenv("INGEST_SPARK_CLUSTER__WORKER_UI_PORT", "17076")  # workers 17076, 17077
    with pytest.raises(ValidationError, match="master 17077"):
        profile("local-cluster")
    monkeypatch.setenv("INGEST_SPARK_CLUSTER__WORKER_UI_PORT", "18081")
    assert profile("local-cluster").spark_cluster.worker_ui_port == 18081
