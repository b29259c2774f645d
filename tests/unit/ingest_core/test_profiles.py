"""Profiles: what `compose` and `cluster` change in the Spark configuration of every job."""

from __future__ import annotations

import os

import pytest

from ingest_core.settings import PlatformSettings
from spark_jobs.session import spark_conf, spark_submit_conf

pytestmark = pytest.mark.unit


@pytest.fixture
def profile(monkeypatch: pytest.MonkeyPatch):
    for name in [n for n in os.environ if n.startswith(("INGEST_KAFKA__", "INGEST_SPARK__"))]:
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
