"""The drivers' class-data archive: ``make setup`` builds it once, scheduled drivers map it.

A Spark driver with Delta loads about 16,000 classes when it starts and runs its first queries;
the JVM parses and verifies each from the jars. HotSpot's application class-data sharing
(AppCDS, JEP 350 "Dynamic CDS Archives", JDK 13+) records the classes a run loaded in an
archive at its exit (``-XX:ArchiveClassesAtExit``); a later JVM maps it
(``-XX:SharedArchiveFile``) instead of loading them again. On this project's 2-core machine a
small Delta job's spark-submit took 16.9 s instead of 22.9 s, 29.4 s of CPU instead of 38.2 s
(medians of 5, ``python -m bench --only startup``; docs/configuration.md).

The archive is tied to the JDK build and to the class path it was made with (pyspark's
jars): ``make setup`` rebuilds it when the Python environment or the jars change. It only
saves time, it never changes what a job does: a driver maps it only when it is complete (the
size its recording wrote in ``spark-driver.jsa.json``; HotSpot would map a truncated archive
and crash) and after HotSpot checked its CRCs (``-XX:+VerifySharedSpaces``: a corrupted one
is refused). A JVM that refuses it (another JDK or pyspark, damage) starts without any class
sharing, a few seconds slower than a JVM that was never given it, and runs the same.

    python -m spark_jobs.class_data_archive      # (re)build it; 1-3 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingest_core.locks import file_lock

# What a driver needs to map the archive is in the Spark-free core; importable from here too.
from ingest_core.spark_config import (
    archive_java_options,
    archive_manifest,
    class_data_archive,
    own_spark_conf_dir,
)

__all__ = ["archive_java_options", "build", "class_data_archive", "main", "own_spark_conf_dir"]

#: The recording run keeps HotSpot's CDS errors (a folder it cannot write), not its warnings.
_QUIET_RECORDING = ["-Xlog:cds=error", "-Xlog:cds+dynamic=error"]


def _workload(archive: Path) -> None:
    """Run what the platform's drivers run, on a few rows, in a driver that records the
    classes it loads into ``archive`` when its JVM exits: Delta writes, reads, MERGE and an
    AvailableNow stream, JSON parsing, event-time windows, the Kafka source's planning."""

    # The build that started this driver was killed: stop too (the JVM, its stdin closed,
    # exits), rather than record an archive nobody will move into place.
    parent = os.getppid()

    def stop_when_orphaned() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=stop_when_orphaned, name="orphan-watch", daemon=True).start()

    from spark_jobs.session import build_spark_session, driver_java_options, java_options_string

    options = driver_java_options("class_data_archive", class_data=False)
    options += [f"-XX:ArchiveClassesAtExit={archive}", *_QUIET_RECORDING]
    spark = build_spark_session(
        "class_data_archive",
        extra_conf={"spark.driver.extraJavaOptions": java_options_string(options)},
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


def build() -> Path:
    """(Re)build the archive: record it in a driver of its own (the JVM writes it when it
    exits), then move it into place and write its manifest, so that drivers never map a
    half-written file. One build at a time (a lock beside the archive; a second waits).

    :returns: the archive's path (:func:`class_data_archive`).
    :raises PermissionError: the archive's folder is not writable.
    :raises RuntimeError: the recording driver failed or left no archive; its output is in
        the message.
    """
    archive = class_data_archive()
    archive.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(archive.parent, os.W_OK):
        raise PermissionError(f"cannot write the class-data archive into {archive.parent}")
    with file_lock(archive.with_name(archive.name + ".lock")):
        partial = archive.with_name(archive.name + ".partial")
        partial.unlink(missing_ok=True)
        # For the drivers that can map it: without SPARK_CONF_DIR (archive_java_options).
        environment = {k: v for k, v in os.environ.items() if k != "SPARK_CONF_DIR"}
        done = subprocess.run(
            [sys.executable, "-m", "spark_jobs.class_data_archive", "--record", str(partial)],
            capture_output=True,
            text=True,
            env=environment,
            check=False,
        )
        if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError(
                f"recording the class-data archive failed (exit {done.returncode}, "
                f"no {partial}):\n" + (done.stdout + done.stderr)[-3000:]
            )
        # Drivers map the archive only when its manifest gives its size: remove the old
        # manifest first, write the new one last.
        archive_manifest(archive).unlink(missing_ok=True)
        size = partial.stat().st_size
        os.replace(partial, archive)
        with tempfile.NamedTemporaryFile("w", dir=archive.parent, delete=False) as manifest:
            json.dump({"bytes": size}, manifest)
        os.chmod(manifest.name, 0o644)  # readable by every driver, as the archive is
        os.replace(manifest.name, archive_manifest(archive))
    return archive


def main(argv: list[str] | None = None) -> int:
    """``python -m spark_jobs.class_data_archive [--record PATH]``."""
    parser = argparse.ArgumentParser(prog="class_data_archive", description=__doc__)
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.record is not None:
        _workload(args.record)
        return 0
    print("Recording the Spark drivers' class-data archive (1-3 minutes) ...", flush=True)
    try:
        archive = build()
    except (PermissionError, RuntimeError) as error:
        print(f"class_data_archive: {error}", file=sys.stderr)
        return 1
    print(f"{archive}: {archive.stat().st_size / 2**20:.0f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
