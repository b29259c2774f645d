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
from typing import TYPE_CHECKING, Any

from spark_jobs.catalog import KafkaSourceSpec, get_catalog
from spark_jobs.job_cli import job_parser, operator_errors, owned_checkpoint, parse_job_args
from spark_jobs.settings import KafkaSettings, get_settings
from spark_jobs.triggers import TriggerError, TriggerSpec

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


class DataLossError(RuntimeError):
    """Kafka no longer holds offsets the checkpoint needs (retention, recreated topic).

    :param gaps: one dict per partition: ``topic``, ``partition``, ``first_missing_offset``,
        ``last_missing_offset`` (None when unknown), ``reason``.
    """

    def __init__(self, gaps: list[dict[str, Any]]) -> None:
        self.gaps = gaps
        lines = "; ".join(
            f"{g['topic']}[{g['partition']}] offsets {g['first_missing_offset']}.."
            f"{'?' if g['last_missing_offset'] is None else g['last_missing_offset']} "
            f"({g['reason']})"
            for g in gaps
        )
        super().__init__(
            f"Kafka lost data bronze_ingest has not read: {lines}. Nothing was written. To "
            "accept the loss and record it in bronze_kafka_gaps, run with --accept-data-loss; "
            "or restore the topic's data."
        )


def find_gaps(
    checkpoint: Path,
    bootstrap_servers: str,
    topics: Sequence[str],
    kafka: KafkaSettings | None = None,
) -> list[dict[str, Any]]:
    """Compare the checkpoint's committed offsets with what Kafka still holds.

    The consumer connects to ``bootstrap_servers`` with the security settings (SASL, TLS) of
    ``kafka`` (the current profile's when ``None``).

    :returns: one gap per partition whose next offset to read is no longer available: below
        the partition's earliest offset (retention) or above its end (topic recreated).
    """
    from kafka import KafkaConsumer, TopicPartition

    from spark_jobs.delta_io import committed_offsets

    committed = committed_offsets(checkpoint)
    if committed is None or not committed["sources"] or committed["sources"][0] is None:
        return []
    offsets: dict[str, dict[str, int]] = committed["sources"][0]
    wanted = [
        TopicPartition(topic, int(partition))
        for topic, partitions in offsets.items()
        if topic in topics
        for partition in partitions
    ]
    if not wanted:
        return []
    config = (kafka or get_settings().kafka).client_config(bootstrap_servers)
    consumer = KafkaConsumer(**config, enable_auto_commit=False)
    try:
        existing = consumer.topics()
        present = [tp for tp in wanted if tp.topic in existing]
        earliest = consumer.beginning_offsets(present) if present else {}
        latest = consumer.end_offsets(present) if present else {}
    finally:
        consumer.close()
    gaps = []
    for tp in wanted:
        next_offset = int(offsets[tp.topic][str(tp.partition)])
        if tp not in earliest:
            gaps.append(_gap(tp, next_offset, None, "topic or partition no longer exists"))
        elif latest[tp] < next_offset:
            reason = f"topic recreated (end offset {latest[tp]} < next {next_offset}): the old "
            gaps.append(_gap(tp, next_offset, None, reason + "topic's offsets are gone"))
            if latest[tp] > 0:
                # Spark (failOnDataLoss=false) resumes a shrunken partition at its new end:
                # what the new topic already holds is skipped too, and recorded as such.
                gaps.append(_gap(tp, 0, latest[tp] - 1, reason + "new topic's first offsets "
                                 "are skipped (Spark resumes at the new end)"))  # fmt: skip
        elif earliest[tp] > next_offset:
            gaps.append(_gap(tp, next_offset, earliest[tp] - 1,
                             f"aged out: earliest offset is now {earliest[tp]}"))  # fmt: skip
    return gaps


def _gap(tp: Any, first: int, last: int | None, reason: str) -> dict[str, Any]:
    return {"topic": tp.topic, "partition": tp.partition, "first_missing_offset": first,
            "last_missing_offset": last, "reason": reason}  # fmt: skip


def record_gaps(spark: SparkSession, gaps: list[dict[str, Any]], path: Path) -> None:
    """Append accepted gaps (with the time they were accepted) to ``bronze_kafka_gaps``."""
    from datetime import UTC, datetime

    rows = [g | {"accepted_at": datetime.now(UTC)} for g in gaps]
    spark.createDataFrame(
        rows,
        "topic string, partition int, first_missing_offset long, last_missing_offset long, "
        "reason string, accepted_at timestamp",
    ).write.format("delta").mode("append").save(str(path))


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
    own topics, table path and checkpoint.

    :param trigger: see :mod:`spark_jobs.triggers`.
    :param topics: Kafka topics to subscribe to.
    :param table_path: Delta table to append to (``bronze_events``'s path by default).
    :param checkpoint: the query's checkpoint folder (the job's own by default).
    :param bootstrap_servers: Kafka ``host:port`` list.
    :param max_offsets_per_trigger: records per micro-batch at most (AvailableNow honours it).
    :param starting_offsets: where a *new* checkpoint starts: ``earliest`` or ``latest``;
        ignored once the checkpoint has offsets.
    :param accept_data_loss: when Kafka no longer holds offsets the checkpoint needs, record
        the gaps in ``bronze_kafka_gaps`` and go on from the earliest available offset,
        instead of failing.
    :raises TriggerError: a real-time trigger (this job writes Delta).
    :raises DataLossError: Kafka lost data the checkpoint needs and ``accept_data_loss`` is
        false; the message names topic, partition and missing offsets.
    """
    if trigger.kind == "real-time":
        raise TriggerError(REAL_TIME_REFUSAL)
    catalog = get_catalog()
    job = catalog.job(JOB_NAME)
    table = catalog.table(job.sink)
    settings = get_settings()
    assert isinstance(job.source, KafkaSourceSpec)
    bootstrap = bootstrap_servers or settings.kafka.bootstrap_servers
    subscribed = list(topics or [settings.kafka.topic(t) for t in job.source.topics])
    checkpoint_path = checkpoint or job.checkpoint(settings)
    gaps = find_gaps(checkpoint_path, bootstrap, subscribed, settings.kafka)
    if gaps and not accept_data_loss:
        raise DataLossError(gaps)
    if gaps:
        record_gaps(spark, gaps, catalog.table("bronze_kafka_gaps").path(settings))
    reader = (
        spark.readStream.format("kafka")
        # bootstrap servers and the security settings (SASL, TLS) of the profile
        .options(**settings.kafka.spark_options(bootstrap))
        .option("subscribe", ",".join(subscribed))
        .option("startingOffsets", starting_offsets)
        # Lost data (topic recreated, offsets aged out) fails the query loudly, unless the
        # operator accepted it above (the gaps are recorded first).
        .option("failOnDataLoss", str(not gaps).lower())
    )
    limit = max_offsets_per_trigger or job.max_offsets_per_trigger
    if limit:
        reader = reader.option("maxOffsetsPerTrigger", str(limit))
    writer = (
        to_bronze(reader.load())
        .writeStream.format("delta")
        .outputMode("append")
        .partitionBy(*table.partition_by)
        .option("checkpointLocation", str(checkpoint_path))
        .queryName(JOB_NAME)
    )
    return trigger.apply(writer).start(str(table_path or table.path(settings)))


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


@operator_errors
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for spark-submit: run until the trigger ends (AvailableNow), a stop is
    requested (:mod:`spark_jobs.streaming_runtime`), or the query fails."""
    from spark_jobs.session import build_spark_session
    from spark_jobs.streaming_runtime import run_supervised

    args = parse_args(argv)
    with owned_checkpoint(JOB_NAME):
        spark = build_spark_session(JOB_NAME)
        try:
            return run_supervised(spark, JOB_NAME, lambda: [start(
                spark, trigger=args.trigger, max_offsets_per_trigger=args.max_offsets_per_trigger,
                accept_data_loss=args.accept_data_loss)])  # fmt: skip
        except DataLossError as error:
            print(f"bronze_ingest: {error}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
