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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from ingest_core.catalog import KafkaSourceSpec, get_catalog
from ingest_core.kafka_offsets import (
    DataLossError,
    MissingTopicError,
    inspect_kafka,
    record_topic_ids,
    resume_after_gaps,
)
from ingest_core.settings import get_settings
from spark_jobs.delta_io import ensure_table_properties
from spark_jobs.job_cli import job_parser, parse_job_args, run_job
from spark_jobs.local_frames import local_frame
from spark_jobs.triggers import TriggerError, TriggerSpec

JOB_NAME = "bronze_ingest"
#: Spark 4.2's real-time mode cannot write Delta.
REAL_TIME_REFUSAL = "bronze_ingest writes a Delta table; real-time mode supports only Kafka, "
REAL_TIME_REFUSAL += "foreach, console and memory sinks (Spark 4.2)"


def to_bronze(
    kafka_records: DataFrame, topic_ids: Mapping[str, str | None] | None = None
) -> DataFrame:
    """Shape Kafka source records into Bronze rows. Pure: no I/O, no parsing.

    :param kafka_records: rows of Spark's Kafka source: ``key`` binary, ``value`` binary,
        ``topic`` string, ``partition`` int, ``offset`` bigint, ``timestamp`` timestamp,
        ``timestampType`` int.
    :param topic_ids: ``{topic name: Kafka topic id}`` of the topics being read (the UUID
        Kafka gives a topic when it is created; a deleted and re-created topic gets a new
        one). Spark's Kafka source does not expose it, so the caller looks it up when the
        query starts. ``None``, or a topic not in the mapping: ``topic_id`` is null.
    :returns: ``key`` binary, ``value`` binary, ``topic`` string, ``topic_id`` string (the
        topic's incarnation; ``(topic_id, topic, partition, offset)`` identifies a record
        across re-creations of a topic), ``partition`` int, ``offset`` bigint,
        ``kafka_timestamp`` timestamp, ``kafka_timestamp_type`` int (0 create time,
        1 log-append time), ``ingestion_time`` timestamp (the micro-batch's start, UTC),
        ``ingestion_date`` date (partition column, from ``ingestion_time``).
    """

    ids = {t: i for t, i in (topic_ids or {}).items() if i}
    topic_id = (
        F.create_map(*[F.lit(x) for pair in sorted(ids.items()) for x in pair])[F.col("topic")]
        if ids
        else F.lit(None).cast("string")
    )
    return kafka_records.select(
        F.col("key"),
        F.col("value"),
        F.col("topic"),
        topic_id.alias("topic_id"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("timestampType").alias("kafka_timestamp_type"),
        F.current_timestamp().alias("ingestion_time"),
    ).withColumn("ingestion_date", F.to_date("ingestion_time"))


def record_gaps(spark: SparkSession, gaps: list[dict[str, Any]], path: Path) -> None:
    """Append accepted gaps (with the time they were accepted) to ``bronze_kafka_gaps``.

    ``topic_id`` (the incarnation the missing offsets belonged to) joined the table later:
    older tables gain the column (schema merge)."""
    from datetime import UTC, datetime

    rows = [{"topic_id": None} | g | {"accepted_at": datetime.now(UTC)} for g in gaps]
    local_frame(
        spark,
        rows,
        "topic string, partition int, first_missing_offset long, last_missing_offset long, "
        "reason string, topic_id string, accepted_at timestamp",
    ).write.format("delta").mode("append").option("mergeSchema", "true").save(str(path))


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
    accept_data_loss: bool = False,
) -> StreamingQuery:
    """Start the bronze_ingest streaming query and return it (the caller waits or stops it).

    Defaults come from ``include/pipeline.yaml`` and the platform settings; tests pass their
    own topics, table path and checkpoint. A micro-batch is written by at most the job's
    ``output_files_per_batch`` tasks (one file each per ``ingestion_date``).

    :param trigger: see :mod:`spark_jobs.triggers`.
    :param topics: Kafka topics to subscribe to.
    :param table_path: Delta table to append to (``bronze_events``'s path by default).
    :param checkpoint: the query's checkpoint folder (the job's own by default).
    :param bootstrap_servers: Kafka ``host:port`` list.
    :param max_offsets_per_trigger: records per micro-batch at most (AvailableNow honours it).
    :param starting_offsets: where a *new* checkpoint starts: ``earliest`` or ``latest``;
        ignored once the checkpoint has offsets.
    :param accept_data_loss: when Kafka no longer holds offsets the checkpoint needs, record
        the gaps in ``bronze_kafka_gaps`` and go on from the earliest available offset (a
        re-created topic from its first offset; vanished partitions are dropped), instead of
        failing.
    :raises TriggerError: a real-time trigger (this job writes Delta).
    :raises MissingTopicError: a subscribed topic does not exist; names it and the command
        that creates it.
    :raises DataLossError: Kafka lost data the checkpoint needs and ``accept_data_loss`` is
        false; the message names topic, partition and missing offsets.
    """
    if trigger.kind == "real-time":
        raise TriggerError(REAL_TIME_REFUSAL)
    catalog = get_catalog()
    job = catalog.job(JOB_NAME)
    assert job.sink_table is not None
    table = catalog.table(job.sink_table)
    settings = get_settings()
    assert isinstance(job.source, KafkaSourceSpec)
    bootstrap = bootstrap_servers or settings.kafka.bootstrap_servers
    subscribed = list(topics or [settings.kafka.topic(t) for t in job.source.topics])
    checkpoint_path = checkpoint or job.checkpoint(settings)
    topic_ids = _check_kafka_positions(
        spark, checkpoint_path, bootstrap, subscribed, accept_data_loss=accept_data_loss
    )
    reader = (
        spark.readStream.format("kafka")
        # bootstrap servers and the security settings (SASL, TLS) of the profile
        .options(**settings.kafka.spark_options(bootstrap))
        .option("subscribe", ",".join(subscribed))
        .option("startingOffsets", starting_offsets)
        # Lost data fails the query loudly. Accepted gaps were recorded above and the
        # checkpoint's positions moved past them, so Spark finds no loss to skip silently.
        .option("failOnDataLoss", "true")
    )
    limit = max_offsets_per_trigger or job.max_offsets_per_trigger
    if limit:
        reader = reader.option("maxOffsetsPerTrigger", str(limit))
    bronze = to_bronze(reader.load(), topic_ids)
    if job.output_files_per_batch:
        bronze = bronze.coalesce(job.output_files_per_batch)
    path = table_path or table.path(settings)
    ensure_table_properties(
        spark, path, table.delta_properties, schema=bronze.schema, partition_by=table.partition_by
    )
    writer = (
        bronze.writeStream.format("delta")
        .outputMode("append")
        .partitionBy(*table.partition_by)
        # a Bronze table from before topic_id existed gains the column (null in old rows)
        .option("mergeSchema", "true")
        .option("checkpointLocation", str(checkpoint_path))
        .queryName(JOB_NAME)
    )
    return trigger.apply(writer).start(str(path))


def _check_kafka_positions(
    spark: SparkSession,
    checkpoint: Path,
    bootstrap: str,
    topics: Sequence[str],
    *,
    accept_data_loss: bool,
) -> dict[str, str | None]:
    """Compare ``checkpoint``'s Kafka positions with what Kafka holds before a start; with
    ``accept_data_loss``, record the gaps in ``bronze_kafka_gaps`` and move the positions
    past them. :returns: each topic's current topic id (None where Kafka gives none), also
    recorded in the checkpoint.

    :raises DataLossError: gaps, and ``accept_data_loss`` is false.
    """
    settings = get_settings()
    found = inspect_kafka(checkpoint, bootstrap, topics, settings.kafka)
    if found.gaps and not accept_data_loss:
        raise DataLossError(found.gaps)
    if found.gaps:
        gaps_table = get_catalog().table("bronze_kafka_gaps").path(settings)
        record_gaps(spark, found.gaps, gaps_table)
        resume_after_gaps(checkpoint, found)
    # Every row carries the id of the topic incarnation it was read from, looked up now. A
    # topic re-created while the query runs fails it when offsets shrink or partitions vanish
    # (failOnDataLoss), and the next start sees the new id; a new topic that overtakes the
    # old end between two micro-batches is not seen (Spark's Kafka source has no topic ids).
    record_topic_ids(checkpoint, found.topic_ids)
    return dict(found.topic_ids)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the job's command line; a bad value exits 2 with a message saying what is wrong."""
    parser = job_parser(JOB_NAME, __doc__.splitlines()[0])
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument(
        "--accept-data-loss",
        action="store_true",
        help="if Kafka lost offsets this job needs, record the gaps and go on",
    )
    args = parse_job_args(parser, argv, REAL_TIME_REFUSAL)
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        parser.error("--max-offsets-per-trigger must be a positive number of records")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for spark-submit: run until the trigger ends (AvailableNow), a stop is
    requested (:mod:`spark_jobs.streaming_runtime`), or the query fails; lost Kafka data or
    a missing topic is one line and exit 1 (:func:`spark_jobs.job_cli.run_job`)."""
    from spark_jobs.streaming_runtime import run_supervised

    args = parse_args(argv)

    def body(session: Callable[..., SparkSession]) -> int:
        spark = session()
        return run_supervised(
            spark,
            JOB_NAME,
            lambda: [
                start(
                    spark,
                    trigger=args.trigger,
                    max_offsets_per_trigger=args.max_offsets_per_trigger,
                    accept_data_loss=args.accept_data_loss,
                )
            ],
        )

    return run_job(JOB_NAME, body, refusals=(DataLossError, MissingTopicError))


if __name__ == "__main__":
    sys.exit(main())
