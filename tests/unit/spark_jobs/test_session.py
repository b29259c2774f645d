"""The Maven step gives Spark what pyspark lacks, and nothing pyspark already has."""

from __future__ import annotations

import re
from pathlib import Path

import pyspark
import pytest

from spark_jobs.session import spark_conf, spark_jar_paths

pytestmark = pytest.mark.unit


def _artifact(jar: Path) -> str:
    return re.sub(r"-\d[^-]*(-[a-z0-9_]+)?\.jar$", "", jar.name)


def test_platform_jars_do_not_duplicate_pysparks() -> None:
    ours = {_artifact(jar) for jar in spark_jar_paths()}
    pysparks = {_artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    assert ours, "no jars fetched"
    assert ours & pysparks == set()


def test_connectors_are_present_and_versions_match_pyspark() -> None:
    names = {jar.name for jar in spark_jar_paths()}
    assert f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar" in names
    assert f"spark-token-provider-kafka-0-10_2.13-{pyspark.__version__}.jar" in names
    assert any(n.startswith("delta-spark_4.2_2.13-4.4.") for n in names)
    assert any(n.startswith("kafka-clients-") for n in names)
    assert any(n.startswith("commons-pool2-") for n in names)


def test_spark_gets_local_files_and_never_downloads() -> None:
    conf = spark_conf("t")
    assert "spark.jars.packages" not in conf
    for path in conf["spark.jars"].split(","):
        assert Path(path).is_file()
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"


def _java_options(app_name: str) -> list[str]:
    """The driver JVM options after the platform's log4j one."""
    return spark_conf(app_name)["spark.driver.extraJavaOptions"].split()[1:]


def test_a_catalog_application_brings_its_driver_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ingest_core.catalog import get_catalog

    bronze = get_catalog().job("bronze_ingest")
    monkeypatch.setattr(bronze, "driver_memory", "768m")
    conf = spark_conf("bronze_ingest")
    assert conf["spark.driver.memory"] == "768m"
    options = conf["spark.driver.extraJavaOptions"].split()
    assert options[0].startswith("-Dlog4j2.configurationFile=")
    assert options[1:] == bronze.driver_java_options != []
    gate = get_catalog().application("quality_gate")
    monkeypatch.setattr(gate, "driver_java_options", ["-Xms32m"])
    assert _java_options("quality_gate.silver") == ["-Xms32m"]  # a gate's application
    assert _java_options("tests") == []  # not in the catalog: the platform's defaults
    assert spark_conf("tests")["spark.driver.memory"] == "1g"
