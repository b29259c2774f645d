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
