"""The drivers' class-data archive: ``make setup`` builds it once, every driver maps it.

A Spark driver with Delta loads ~20,000 classes when it starts and runs its first queries;
the JVM parses and verifies each from the jars. HotSpot's application class-data sharing
(AppCDS, JEP 350 "Dynamic CDS Archives", JDK 13+) records the classes a run loaded in an
archive at its exit (``-XX:ArchiveClassesAtExit``); a later JVM maps it
(``-XX:SharedArchiveFile``) instead of loading them again. On this project's 2-core machine a
small Delta job's spark-submit took 18.9 s instead of 20.9 s, 32.3 s of CPU instead of 35.6 s
(medians of 5, ``python -m bench --only startup``; docs/configuration.md).

The archive is tied to the JDK build and to the class path it was made with (pyspark's
jars): ``make setup`` rebuilds it when the Python environment or the jars change. A JVM that
cannot use it (another JDK, another pyspark) starts without it, as before: the archive only
saves time, it never changes what a job does.

    python -m spark_jobs.class_data_archive      # (re)build it; about 30-60 s
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ingest_core.settings import jars_dir

#: The JVM option that makes a driver map the archive; the warnings a JVM prints when it
#: cannot (another JDK or class path) would repeat at every start: off.
_USE = "-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
#: The JVM options of the run that records the archive; one line per class it cannot archive
#: (signed jars, old class versions) is noise: off.
_RECORD = "-XX:ArchiveClassesAtExit={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"


def class_data_archive() -> Path:
    """The archive's path: ``<jars_dir>/cds/spark-driver.jsa`` (it belongs with the jars it
    was made from; ``make jars`` removes both together)."""
    return jars_dir() / "cds" / "spark-driver.jsa"


def archive_java_options() -> list[str]:
    """The driver JVM options that map the archive, or ``[]`` when it was not built (a job
    then starts as it did without it)."""
    archive = class_data_archive()
    return _USE.format(archive=archive).split() if archive.is_file() else []


def _workload(archive: Path) -> None:
    """Run what the platform's drivers run, on a few rows, in a driver that records the
    classes it loads into ``archive`` when its JVM exits: Delta writes, reads, MERGE and an
    AvailableNow stream, JSON parsing, event-time windows, the Kafka source's planning."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    from spark_jobs.session import build_spark_session, driver_java_options

    options = driver_java_options("class_data_archive", class_data=False)
    options += _RECORD.format(archive=archive).split()
    spark = build_spark_session(
        "class_data_archive", extra_conf={"spark.driver.extraJavaOptions": " ".join(options)}
    )
    with tempfile.TemporaryDirectory(prefix="class-data-archive-") as folder:
        events = (
            spark.range(200)
            .select(
                F.col("id").cast("string").alias("event_id"),
                F.to_json(F.struct(F.col("id").alias("amount"))).alias("value"),
                (F.lit(1_700_000_000) + F.col("id") * 7).cast("timestamp").alias("event_time"),
            )
            .withColumn("amount", F.from_json("value", "amount BIGINT").getField("amount"))
        )
        source, target = f"{folder}/source", f"{folder}/target"
        events.write.format("delta").partitionBy("event_id").mode("overwrite").save(source)
        events.limit(10).write.format("delta").save(target)
        from delta.tables import DeltaTable

        def merge(batch: DataFrame, batch_id: int) -> None:
            (
                DeltaTable.forPath(spark, target)
                .alias("t")
                .merge(batch.alias("s"), "t.event_id = s.event_id")
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute()
            )

        (
            spark.readStream.format("delta")
            .load(source)
            .writeStream.foreachBatch(merge)
            .option("checkpointLocation", f"{folder}/checkpoint")
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )
        windows = (
            spark.read.format("delta")
            .load(target)
            .withWatermark("event_time", "10 minutes")
            .groupBy(F.window("event_time", "5 minutes"))
            .agg(F.sum("amount").alias("total"), F.count("*").alias("events"))
        )
        windows.write.format("delta").save(f"{folder}/windows")
        spark.read.format("delta").load(f"{folder}/windows").collect()
        DeltaTable.forPath(spark, target).history().collect()
        # Planning a Kafka read loads the connector's classes; nothing connects.
        _ = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", "127.0.0.1:9")
            .option("subscribe", "none")
            .load()
            .schema
        )
    spark.stop()


def build(archive: Path | None = None) -> Path:
    """(Re)build the archive: record it in a driver of its own (the JVM writes it when it
    exits), then move it into place, so that drivers never map a half-written file.

    :returns: the archive's path (:func:`class_data_archive` by default).
    :raises RuntimeError: the recording driver failed or left no archive; its output is in
        the message.
    """
    archive = archive or class_data_archive()
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "spark_jobs.class_data_archive", "--record", str(partial)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(
            f"recording the class-data archive failed (exit {done.returncode}, no {partial}):\n"
            + (done.stdout + done.stderr)[-3000:]
        )
    os.replace(partial, archive)
    return archive


def main(argv: list[str] | None = None) -> int:
    """``python -m spark_jobs.class_data_archive [--record PATH]``."""
    parser = argparse.ArgumentParser(prog="class_data_archive", description=__doc__)
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.record is not None:
        _workload(args.record)
        return 0
    print("Recording the Spark drivers' class-data archive (about a minute) ...", flush=True)
    archive = build()
    print(f"{archive}: {archive.stat().st_size / 2**20:.0f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
