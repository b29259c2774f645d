"""spark-submit still works after install (pyspark and pyspark-client share files), with the
platform's configuration: local jars, Delta, the Kafka source class on the class path, and the
drivers' class-data archive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs.class_data_archive import class_data_archive
from spark_jobs.session import local_file_system_jar, spark_conf, spark_jars_dir

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


def _jars_folder(at: Path, archive_bytes: bytes | None = None) -> Path:
    """A jars folder at ``at`` whose Spark jars and local file system jar link to the ones
    `make setup` made, and whose class-data archive links to its archive, or is
    ``archive_bytes`` (with a manifest that gives their size)."""
    archive = class_data_archive()
    (at / "cds").mkdir(parents=True)
    (at / "spark").symlink_to(spark_jars_dir())
    (at / "localfs").symlink_to(local_file_system_jar().parent)
    manifest = archive.with_name(archive.name + ".json")
    for made in (archive, manifest):
        assert made.is_file(), f"no {made}: run `make setup`"
    if archive_bytes is None:
        (at / "cds" / archive.name).symlink_to(archive)
        (at / "cds" / manifest.name).symlink_to(manifest)
    else:
        (at / "cds" / archive.name).write_bytes(archive_bytes)
        (at / "cds" / manifest.name).write_text(json.dumps({"bytes": len(archive_bytes)}))
    return at


def _submit(tmp_path: Path, conf: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    command = [str(Path(sys.executable).parent / "spark-submit")]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return subprocess.run(
        [*command, str(script), str(tmp_path / "table")],
        capture_output=True,
        text=True,
        env=os.environ | {"PYSPARK_PYTHON": sys.executable},
        timeout=300,
    )


def test_spark_submit_runs_a_delta_job_with_local_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The jars folder from a path with a space: the archive's option stays one JVM argument.
    jars = _jars_folder(tmp_path / "jars with a space")
    monkeypatch.setenv("INGEST_JARS_DIR", str(jars))
    conf = spark_conf("spark_submit_check")
    assert f"-XX:SharedArchiveFile={jars}/cds/" in conf["spark.driver.extraJavaOptions"]
    # Which file each class came from: the class-data archive `make setup` built, or a jar.
    loaded = tmp_path / "classes.log"
    conf["spark.driver.extraJavaOptions"] += f" -Xlog:class+load=info:file={loaded}"
    result = _submit(tmp_path, conf)
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


def test_a_corrupted_class_data_archive_is_refused_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its size is right (the manifest's), 8 MiB in its middle are not: without HotSpot's CRC
    # check the driver JVM died on a SIGSEGV before Spark started.
    damaged = bytearray(class_data_archive().read_bytes())
    middle = len(damaged) // 3
    damaged[middle : middle + 8 * 2**20] = b"\xa5" * (8 * 2**20)
    monkeypatch.setenv("INGEST_JARS_DIR", str(_jars_folder(tmp_path / "jars", bytes(damaged))))
    conf = spark_conf("spark_submit_check")
    assert "-XX:+VerifySharedSpaces" in conf["spark.driver.extraJavaOptions"]
    result = _submit(tmp_path, conf)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ROWS 7" in result.stdout
    assert not list(Path.cwd().glob("hs_err_pid*.log"))
