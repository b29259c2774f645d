"""payment_alerts: the payments topic -> suspicious-payment alerts, always on.

Two queries in one driver, each with its own checkpoint (``<checkpoint_dir>/payment_alerts/
<rule>``) and both in the job's heartbeat:

* ``amount_above_threshold``: a payment above ``alerts.amount_threshold`` (stateless);
* ``payment_velocity``: more than ``alerts.max_payments_per_window`` payments by one
  customer in a tumbling 5-minute event-time window (stateful, watermark from
  ``include/pipeline.yaml``).

Each micro-batch (``foreachBatch``) keeps the alerts not yet in ``gold_payment_alerts``,
sends them to the Kafka topic ``alerts.topic`` (key = ``alert_id``), then appends them to
the Delta table with ``txnAppId``/``txnVersion``. Kafka is at-least-once (a batch replayed
after a crash between the two writes sends again); consumers deduplicate on ``alert_id``,
which is deterministic. The Delta table holds each alert once.

The job reads Kafka directly, not Bronze, so that an alert does not wait for a Silver run;
it parses with the Silver contracts and ignores records Silver would quarantine.

Real-time mode (Spark 4.2) would suit the stateless rule, but it cannot write Delta; both
rules run with a processing-time trigger (default 5 seconds)::

    spark-submit spark_jobs/payment_alerts.py --trigger processing-time=5s
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ingest_core.catalog import KafkaSourceSpec, get_catalog
from ingest_core.delta_tables import checkpoint_query_id, table_exists
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.delta_io import append_idempotent, read_table
from spark_jobs.job_cli import job_parser, operator_errors, owned_checkpoint, parse_job_args
from spark_jobs.transforms.alerts import AMOUNT_RULE, VELOCITY_RULE
from spark_jobs.triggers import TriggerError, TriggerSpec

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

JOB_NAME = "payment_alerts"
REAL_TIME_REFUSAL = (
    "payment_alerts writes a Delta table and keeps windowed state; Spark 4.2's real-time "
    "mode supports only stateless queries with Kafka, foreach, console or memory sinks"
)
#: parse_topic judges future event times against the batch's clock; alerts leave that to
#: Silver (a far-future reference time switches the check off here).
_NO_FUTURE_CHECK = datetime(9000, 1, 1, tzinfo=UTC)


class AlertSink:
    """``foreachBatch`` function: new alerts -> Kafka, then Delta (idempotent per batch)."""

    def __init__(self, spark: SparkSession, checkpoint: Path, settings: PlatformSettings) -> None:
        self.spark = spark
        self.checkpoint = checkpoint
        self.table = get_catalog().table("gold_payment_alerts").path(settings)
        self.kafka_options = settings.kafka.spark_options()
        self.topic = settings.kafka.topic(settings.alerts.topic)

    def __call__(self, alerts: DataFrame, batch_id: int) -> None:
        """Write the batch's alerts that the table does not hold yet."""
        from pyspark.sql import functions as F

        existing = read_table(self.spark, self.table)
        new = alerts.dropDuplicates(["alert_id"])
        if existing is not None:
            new = new.join(existing.select("alert_id"), "alert_id", "left_anti")
        new = new.withColumn("detected_at", F.current_timestamp()).cache()
        try:
            if new.isEmpty():
                return
            (
                new.select(
                    F.col("alert_id").alias("key"),
                    F.to_json(F.struct(*new.columns)).alias("value"),
                )
                .write.format("kafka")
                .options(**self.kafka_options)
                .option("topic", self.topic)
                .save()
            )
            append_idempotent(
                new, self.table, app_id=checkpoint_query_id(self.checkpoint), version=batch_id
            )
        finally:
            new.unpersist()


def parsed_payments(spark: SparkSession, settings: PlatformSettings) -> DataFrame:
    """Usable payment events from the Kafka topic, typed as Silver types them."""
    from spark_jobs.bronze_ingest import to_bronze
    from spark_jobs.transforms.silver import parse_topic, usable_rows

    job = get_catalog().job(JOB_NAME)
    assert isinstance(job.source, KafkaSourceSpec)
    topic = settings.kafka.topic(job.source.topics[0])
    reader = (
        spark.readStream.format("kafka")
        .options(**settings.kafka.spark_options())
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if job.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(job.max_offsets_per_trigger))
    raw = to_bronze(reader.load())
    parsed = parse_topic(raw, "payments", now=_NO_FUTURE_CHECK, max_future_skew=timedelta(0))
    return usable_rows(parsed)


def start(
    spark: SparkSession, *, trigger: TriggerSpec, settings: PlatformSettings | None = None
) -> list[StreamingQuery]:
    """Start both alert queries and return them.

    :raises TriggerError: a real-time trigger.
    """
    from ingest_core.topics import ensure_topics
    from spark_jobs.transforms.alerts import ALERTS_DDL, amount_alerts, velocity_alerts

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
    table = get_catalog().table(job.sink).path(settings)
    if not table_exists(table):
        # Created up front: two queries creating it concurrently would conflict.
        spark.createDataFrame([], ALERTS_DDL).write.format("delta").save(str(table))
    payments = parsed_payments(spark, settings)
    definitions: list[tuple[str, DataFrame, str]] = [
        (AMOUNT_RULE, amount_alerts(payments, rules.amount_threshold), "append"),
        (
            VELOCITY_RULE,
            velocity_alerts(
                payments,
                window=job.setting("velocity_window"),
                watermark=job.setting("velocity_watermark"),
                max_payments=rules.max_payments_per_window,
            ),
            "update",
        ),
    ]
    queries = []
    for rule, alerts, mode in definitions:
        checkpoint = job.checkpoint(settings, rule)
        writer = (
            alerts.writeStream.outputMode(mode)
            .foreachBatch(AlertSink(spark, checkpoint, settings))
            .option("checkpointLocation", str(checkpoint))
            .queryName(f"{JOB_NAME}.{rule}")
        )
        queries.append(trigger.apply(writer).start())
    return queries


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; a bad value exits 2 with a message saying what is wrong."""
    parser = job_parser(JOB_NAME, __doc__.splitlines()[0])
    return parse_job_args(parser, argv, REAL_TIME_REFUSAL)


@operator_errors
def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: run until stopped (or until AvailableNow ends).

    A broker that does not answer the alerts topic's creation, or a topic name Kafka refuses,
    is one line on stderr and exit 1 (the heartbeat says ``failed``), not a traceback.
    """
    from kafka.errors import KafkaError

    from ingest_core.topics import TopicCollisionError
    from spark_jobs.session import build_spark_session
    from spark_jobs.streaming_runtime import run_supervised

    args = parse_args(argv)
    with owned_checkpoint(JOB_NAME):
        spark = build_spark_session(JOB_NAME)
        try:
            return run_supervised(spark, JOB_NAME, lambda: start(spark, trigger=args.trigger))
        except TopicCollisionError as error:
            print(f"{JOB_NAME}: {error}", file=sys.stderr)
        except KafkaError as error:
            print(
                f"{JOB_NAME}: Kafka at {get_settings().kafka.bootstrap_servers} refused or "
                f"did not answer: {error!r} (is the broker up? `ingestctl kafka status`)",
                file=sys.stderr,
            )
        return 1


if __name__ == "__main__":
    sys.exit(main())
