"""spark-submit still works after install (pyspark and pyspark-client share files), with the
platform's configuration: local jars, Delta, and the Kafka source class on the class path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs.session import spark_conf

pytestmark = pytest.mark.integration

SCRIPT = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
spark.range(7).write.format("delta").save(sys.argv[1])
print("ROWS", spark.read.format("delta").load(sys.argv[1]).count())
print("KAFKA", spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:1")
      .option("subscribe", "x").load().columns)
"""


def test_spark_submit_runs_a_delta_job_with_local_jars(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    command = [str(Path(sys.executable).parent / "spark-submit")]
    for key, value in spark_conf("spark_submit_check").items():
        command += ["--conf", f"{key}={value}"]
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(
        [*command, str(script), str(tmp_path / "table")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ROWS 7" in result.stdout
    assert "KAFKA ['key', 'value', 'topic', 'partition', 'offset'" in result.stdout
