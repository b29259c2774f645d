"""spark-submit still works after install (pyspark and pyspark-client share files), with the
platform's configuration: local jars, Delta, the Kafka source class on the class path, and the
drivers' class-data archive."""

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
    conf = spark_conf("spark_submit_check")
    # Which file each class came from: the class-data archive `make setup` built, or a jar.
    loaded = tmp_path / "classes.log"
    conf["spark.driver.extraJavaOptions"] += f" -Xlog:class+load=info:file={loaded}"
    for key, value in conf.items():
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
    # The driver mapped the archive: Spark's and Delta's classes (Delta's come through
    # spark.jars' class loader) were not loaded from their jars again.
    sources = {
        line.split(" source: ")[0].split()[-1]: line.split(" source: ")[1].strip()
        for line in loaded.read_text().splitlines()
        if " source: " in line
    }
    for name in ("org.apache.spark.SparkContext", "org.apache.spark.sql.delta.DeltaLog"):
        assert sources[name] == "shared objects file (top)", (name, sources[name])
    # Of the classes read from a file (not generated at run time), most came from it.
    shared = sum(source.startswith("shared objects file") for source in sources.values())
    from_jars = sum(source.startswith(("file:", "jar:", "jrt:")) for source in sources.values())
    assert shared > 0.8 * (shared + from_jars), f"{shared} from the archive, {from_jars} not"
