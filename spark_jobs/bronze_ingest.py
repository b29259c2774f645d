"""bronze_ingest: Kafka topics -> ``bronze_events`` (Delta), every record exactly as it arrived.

Bronze never parses and never drops: key and value bytes stay untouched, so that every later
layer can be rebuilt from it. Exactly-once comes from the Delta streaming sink, which commits
each micro-batch once per (query id, batch id) recorded in the checkpoint.

Run with spark-submit (or ``python -m spark_jobs.bronze_ingest``)::

    spark-submit spark_jobs/bronze_ingest.py --trigger available-now
    spark-submit spark_jobs/bronze_ingest.py --trigger processing-time=10s
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.catalog import KafkaSourceSpec, get_catalog
from spark_jobs.settings import get_settings
from spark_jobs.triggers import TriggerError, TriggerSpec, parse_trigger

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

JOB_NAME = "bronze_ingest"
#: Spark 4.2's real-time mode cannot write Delta.
REAL_TIME_REFUSAL = "bronze_ingest writes a Delta table; real-time mode supports only Kafka, "
REAL_TIME_REFUSAL += "foreach, console and memory sinks (Spark 4.2)"


def to_bronze(kafka_records: DataFrame) -> DataFrame:
    """Shape Kafka source records into Bronze rows. Pure: no I/O, no parsing.

    :param kafka_records: rows of Spark's Kafka source: ``key`` binary, ``value`` binary,
        ``topic`` string, ``partition`` int, ``offset`` bigint, ``timestamp`` timestamp,
        ``timestampType`` int.
    :returns: ``key`` binary, ``value`` binary, ``topic`` string, ``partition`` int,
        ``offset`` bigint, ``kafka_timestamp`` timestamp, ``kafka_timestamp_type`` int
        (0 create time, 1 log-append time), ``ingestion_time`` timestamp (the micro-batch's
        start, UTC), ``ingestion_date`` date (partition column, from ``ingestion_time``).
    """
    from pyspark.sql import functions as F

    return kafka_records.select(
        F.col("key"),
        F.col("value"),
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("timestampType").alias("kafka_timestamp_type"),
        F.current_timestamp().alias("ingestion_time"),
    ).withColumn("ingestion_date", F.to_date("ingestion_time"))


def start(
    spark: SparkSession,
    *,
    trigger: TriggerSpec,
    topics: Sequence[str] | None = None,
    table_path: Path | None = None,
    checkpoint: Path | None = None,
    bootstrap_servers: str | None = None,
    max_offsets_per_trigger: int | None = None,
    starting_offsets: str = "earliest",
) -> StreamingQuery:
    """Start the bronze_ingest streaming query and return it (the caller waits or stops it).

    Defaults come from ``include/pipeline.yaml`` and the platform settings; tests pass their
    own topics, table path and checkpoint.

    :param trigger: see :mod:`spark_jobs.triggers`.
    :param topics: Kafka topics to subscribe to.
    :param table_path: Delta table to append to (``bronze_events``'s path by default).
    :param checkpoint: the query's checkpoint folder (the job's own by default).
    :param bootstrap_servers: Kafka ``host:port`` list.
    :param max_offsets_per_trigger: records per micro-batch at most (AvailableNow honours it).
    :param starting_offsets: where a *new* checkpoint starts: ``earliest`` or ``latest``;
        ignored once the checkpoint has offsets.
    :raises TriggerError: a real-time trigger (this job writes Delta).
    """
    if trigger.kind == "real-time":
        raise TriggerError(REAL_TIME_REFUSAL)
    catalog = get_catalog()
    job = catalog.job(JOB_NAME)
    table = catalog.table(job.sink)
    settings = get_settings()
    assert isinstance(job.source, KafkaSourceSpec)
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers or settings.kafka.bootstrap_servers)
        .option(
            "subscribe",
            ",".join(topics or [settings.kafka.topic(t) for t in job.source.topics]),
        )
        .option("startingOffsets", starting_offsets)
        # Lost data (topic recreated, offsets aged out) fails the query loudly.
        .option("failOnDataLoss", "true")
    )
    limit = max_offsets_per_trigger or job.max_offsets_per_trigger
    if limit:
        reader = reader.option("maxOffsetsPerTrigger", str(limit))
    writer = (
        to_bronze(reader.load())
        .writeStream.format("delta")
        .outputMode("append")
        .partitionBy(*table.partition_by)
        .option("checkpointLocation", str(checkpoint or job.checkpoint(settings)))
        .queryName(JOB_NAME)
    )
    return trigger.apply(writer).start(str(table_path or table.path(settings)))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the job's command line; a bad value exits 2 with a message saying what is wrong."""
    job = get_catalog().job(JOB_NAME)
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trigger",
        default=job.default_trigger,
        help=f"available-now | processing-time=<interval> (default: {job.default_trigger})",
    )
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        args.trigger = parse_trigger(args.trigger, real_time_refusal=REAL_TIME_REFUSAL)
    except TriggerError as error:
        parser.error(str(error))
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        parser.error("--max-offsets-per-trigger must be a positive number of records")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for spark-submit: run until the trigger ends (AvailableNow) or forever."""
    from spark_jobs.session import build_spark_session

    args = parse_args(argv)
    spark = build_spark_session(JOB_NAME)
    query = start(spark, trigger=args.trigger, max_offsets_per_trigger=args.max_offsets_per_trigger)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
