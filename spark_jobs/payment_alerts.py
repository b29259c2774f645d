"""payment_alerts: the stateful alert rule, and every alert landed in Delta, always on.

Two queries in one driver, each with its own checkpoint (``<checkpoint_dir>/payment_alerts/
<query>``) and both in the job's heartbeat:

* ``payment_velocity``: more than ``alerts.max_payments_per_window`` payments by one
  customer in a tumbling 5-minute event-time window (stateful, watermark from
  ``include/pipeline.yaml``) -> the Kafka topic ``alerts.topic`` (key = ``alert_id``). The
  stateless rules go to the same topic from ``payment_alerts_rt`` in real-time mode.
* ``landing``: the alerts topic -> ``gold_payment_alerts``, deduplicated on ``alert_id``
  within the batch and against the table, appended with ``txnAppId``/``txnVersion``: the
  table holds each alert once whichever path raised it, however often Kafka delivered it
  (Kafka is at-least-once: a batch replayed after a crash sends its alerts again, and
  ``alert_id`` is deterministic).

The velocity query reads Kafka directly, not Bronze, so that an alert does not wait for a
Silver run; it parses with the Silver contracts and ignores records Silver would
quarantine. Real-time mode cannot keep its window state or write Delta, so both queries run
with a processing-time trigger (default 5 seconds)::

    spark-submit spark_jobs/payment_alerts.py --trigger processing-time=5s
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from ingest_core.catalog import KafkaSourceSpec, get_catalog
from ingest_core.delta_tables import checkpoint_query_id, table_exists
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.delta_io import append_idempotent, read_table
from spark_jobs.job_cli import JobRefusedError, job_parser, parse_job_args, run_job
from spark_jobs.local_frames import local_frame
from spark_jobs.transforms.alerts import VELOCITY_RULE
from spark_jobs.triggers import TriggerError, TriggerSpec

if TYPE_CHECKING:
    from pathlib import Path


JOB_NAME = "payment_alerts"
#: The query (and checkpoint folder) that lands the alerts topic in ``gold_payment_alerts``.
LANDING_QUERY = "landing"
REAL_TIME_REFUSAL = (
    "payment_alerts writes a Delta table and keeps windowed state; Spark 4.2's real-time "
    "mode supports only stateless queries with Kafka, foreach, console or memory sinks "
    "(the stateless rules run in real time in payment_alerts_rt)"
)
#: parse_topic judges future event times against the batch's clock; alerts leave that to
#: Silver (a far-future reference time switches the check off here).
_NO_FUTURE_CHECK = datetime(9000, 1, 1, tzinfo=UTC)


def not_landed(spark: SparkSession, table: Path, alerts: DataFrame) -> DataFrame:
    """``alerts`` (alert rows) once per ``alert_id``, without those ``table`` already holds."""
    new = alerts.dropDuplicates(["alert_id"])
    existing = read_table(spark, table)
    if existing is None:
        return new
    return new.join(existing.select("alert_id"), "alert_id", "left_anti")


class VelocitySink:
    """``foreachBatch`` function of the velocity rule: its alerts that ``gold_payment_alerts``
    does not hold yet -> the alerts topic (at-least-once; the landing query deduplicates)."""

    def __init__(self, spark: SparkSession, settings: PlatformSettings) -> None:
        self.spark = spark
        self.table = get_catalog().table("gold_payment_alerts").path(settings)
        self.kafka_options = settings.kafka.spark_options()
        self.topic = settings.kafka.topic(settings.alerts.topic)

    def __call__(self, alerts: DataFrame, batch_id: int) -> None:
        """Send the batch's alerts (an update-mode batch repeats a window whose count grew;
        the ones already landed are not sent again)."""
        from spark_jobs.transforms.alerts import alert_records

        (
            alert_records(not_landed(self.spark, self.table, alerts))
            .write.format("kafka")
            .options(**self.kafka_options)
            .option("topic", self.topic)
            .save()
        )


class LandingSink:
    """``foreachBatch`` function of the landing query: the alerts topic -> ``gold_payment_alerts``,
    each ``alert_id`` once, whichever rule or path raised it and however often Kafka
    delivered it: deduplicated within the batch and against the table, then appended with
    ``txnAppId``/``txnVersion`` (a replayed batch id the table already committed is
    skipped; the alerts of a batch re-planned under a new id that the table already holds
    are left out by the anti-join)."""

    def __init__(self, spark: SparkSession, checkpoint: Path, settings: PlatformSettings) -> None:
        self.spark = spark
        self.checkpoint = checkpoint
        self.table = get_catalog().table("gold_payment_alerts").path(settings)

    def __call__(self, records: DataFrame, batch_id: int) -> None:
        """Land the batch's alerts that the table does not hold yet."""
        from spark_jobs.transforms.alerts import alerts_from_records

        parsed = alerts_from_records(records).cache()
        try:
            invalid = parsed.where("NOT _valid").select("topic", "partition", "offset")
            count = invalid.count()
            if count:
                first = invalid.orderBy("partition", "offset").first()
                assert first is not None
                print(
                    f"{JOB_NAME}: {count} record(s) of the alerts topic are not alerts "
                    f"(unknown rule or malformed alert_id; first: {first.topic} partition "
                    f"{first.partition} offset {first.offset}): not landed",
                    file=sys.stderr,
                )
            alerts = parsed.where("_valid").drop("_valid", "topic", "partition", "offset")
            new = not_landed(self.spark, self.table, alerts)
            append_idempotent(
                new, self.table, app_id=checkpoint_query_id(self.checkpoint), version=batch_id
            )
        finally:
            parsed.unpersist()


def parse_payments(spark: SparkSession, settings: PlatformSettings, job_name: str) -> DataFrame:
    """Every record of ``job_name``'s payments topic (Kafka source, from the earliest offset),
    parsed by Silver's contracts: :func:`spark_jobs.transforms.silver.parse_topic`'s rows,
    ``_quarantine_reason`` null for a usable payment."""
    from spark_jobs.bronze_ingest import to_bronze
    from spark_jobs.transforms.silver import parse_topic

    job = get_catalog().job(job_name)
    assert isinstance(job.source, KafkaSourceSpec)
    topic = settings.kafka.topic(job.source.topics[0])
    raw = to_bronze(kafka_stream(spark, settings, topic, job.max_offsets_per_trigger))
    return parse_topic(raw, "payments", now=_NO_FUTURE_CHECK, max_future_skew=timedelta(0))


def kafka_stream(
    spark: SparkSession, settings: PlatformSettings, topic: str, max_offsets: int | None = None
) -> DataFrame:
    """``topic`` (full name) as a stream of Kafka source rows, from the earliest offset,
    failing on data loss; at most ``max_offsets`` records per micro-batch when given."""
    reader = (
        spark.readStream.format("kafka")
        .options(**settings.kafka.spark_options())
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    return reader.load()


def start(
    spark: SparkSession, *, trigger: TriggerSpec, settings: PlatformSettings | None = None
) -> list[StreamingQuery]:
    """Start the velocity rule and the landing query and return them.

    :raises TriggerError: a real-time trigger.
    """
    from ingest_core.topics import ensure_topics
    from spark_jobs.transforms.alerts import ALERTS_DDL, velocity_alerts
    from spark_jobs.transforms.silver import usable_rows

    if trigger.kind == "real-time":
        raise TriggerError(REAL_TIME_REFUSAL)
    settings = settings or get_settings()
    job = get_catalog().job(JOB_NAME)
    rules = settings.alerts
    ensure_topics(
        settings.kafka.bootstrap_servers,
        [settings.kafka.topic(rules.topic)],
        partitions=settings.replay.partitions,
        allow_partition_mismatch=True,
        kafka=settings.kafka,
    )
    assert job.sink_table is not None
    table = get_catalog().table(job.sink_table).path(settings)
    if not table_exists(table):
        local_frame(spark, [], ALERTS_DDL).write.format("delta").save(str(table))
    payments = usable_rows(parse_payments(spark, settings, JOB_NAME))
    velocity = velocity_alerts(
        payments,
        window=job.setting("velocity_window"),
        watermark=job.setting("velocity_watermark"),
        max_payments=rules.max_payments_per_window,
    )
    velocity_query = trigger.apply(
        velocity.writeStream.outputMode("update")
        .foreachBatch(VelocitySink(spark, settings))
        .option("checkpointLocation", str(job.checkpoint(settings, VELOCITY_RULE)))
        .queryName(f"{JOB_NAME}.{VELOCITY_RULE}")
    ).start()
    if trigger.kind == "available-now":
        # One AvailableNow run lands what its own velocity query sent.
        velocity_query.awaitTermination()
    landing = job.checkpoint(settings, LANDING_QUERY)
    landing_query = trigger.apply(
        kafka_stream(
            spark, settings, settings.kafka.topic(rules.topic), job.max_offsets_per_trigger
        )
        .writeStream.foreachBatch(LandingSink(spark, landing, settings))
        .option("checkpointLocation", str(landing))
        .queryName(f"{JOB_NAME}.{LANDING_QUERY}")
    ).start()
    return [velocity_query, landing_query]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; a bad value exits 2 with a message saying what is wrong."""
    parser = job_parser(JOB_NAME, __doc__.splitlines()[0])
    return parse_job_args(parser, argv, REAL_TIME_REFUSAL)


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: run until stopped (or until AvailableNow ends).

    A broker that does not answer the alerts topic's creation, or a topic name Kafka refuses,
    is one line on stderr and exit 1 (the heartbeat says ``failed``), not a traceback
    (:func:`spark_jobs.job_cli.run_job`).
    """
    from kafka.errors import KafkaError

    from ingest_core.topics import TopicCollisionError
    from spark_jobs.streaming_runtime import run_supervised

    args = parse_args(argv)

    def body(session: Callable[..., SparkSession]) -> int:
        spark = session()
        try:
            return run_supervised(spark, JOB_NAME, lambda: start(spark, trigger=args.trigger))
        except KafkaError as error:
            raise JobRefusedError(
                f"Kafka at {get_settings().kafka.bootstrap_servers} refused or did not "
                f"answer: {error!r} (is the broker up? `ingestctl kafka status`)"
            ) from error

    return run_job(JOB_NAME, body, refusals=(TopicCollisionError,))


if __name__ == "__main__":
    sys.exit(main())
