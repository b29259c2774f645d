"""payment_alerts_rt: the stateless alert rules in Spark's real-time mode, always on.

Kafka ``payments`` -> parse with the Silver contracts (records Silver would quarantine are
skipped, and counted in the heartbeat as the observed metric ``skipped``) -> the rules of
:data:`spark_jobs.transforms.alerts.STATELESS_RULES` (a payment above
``alerts.amount_threshold``) -> the Kafka topic ``alerts.topic``, key ``alert_id``, the
same alert record as the velocity rule's (``spark_jobs.payment_alerts``), which also lands
every alert of the topic in ``gold_payment_alerts`` exactly once.

Real-time mode (Spark 4.2) keeps one long-running task per Kafka partition and sends each
alert as soon as its payment is read: milliseconds, where a micro-batch waits for its
trigger (``bench`` part ``alert_latency``). Before the query starts the job refuses, with
one line, a plan that keeps state or a sink real-time mode cannot write
(:func:`spark_jobs.real_time.check_plan`), and a Spark master with fewer task slots than
the topic has partitions (:func:`spark_jobs.real_time.check_task_slots`); on ``local[*]``
it asks for one thread per partition. Kafka delivery is at-least-once: a batch replayed
after a crash sends its alerts again (same ``alert_id``), and the landing query
deduplicates::

    spark-submit spark_jobs/payment_alerts_rt.py --trigger real-time=1m

Any other trigger (``processing-time=5s``) runs the same query on micro-batches: the
bench's baseline.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from ingest_core.catalog import KafkaSinkSpec, KafkaSourceSpec, get_catalog
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.job_cli import job_parser, parse_job_args, run_job
from spark_jobs.triggers import TriggerSpec

if TYPE_CHECKING:
    from pathlib import Path


JOB_NAME = "payment_alerts_rt"
SINK_FORMAT = "kafka"


def topic_partitions(settings: PlatformSettings) -> dict[str, int]:
    """``{topic: partition count}`` of the topics the job reads (created when missing) and
    the alerts topic it writes (created when missing, not counted: writing needs no slot of
    its own).

    :raises kafka.errors.KafkaError: the broker refused or did not answer.
    """
    from ingest_core.topics import ensure_topics

    job = get_catalog().job(JOB_NAME)
    assert isinstance(job.source, KafkaSourceSpec)
    assert isinstance(job.sink, KafkaSinkSpec)
    topics = [settings.kafka.topic(t) for t in job.source.topics]
    counts = ensure_topics(
        settings.kafka.bootstrap_servers,
        [*topics, job.sink.topic(settings)],
        partitions=settings.replay.partitions,
        allow_partition_mismatch=True,
        kafka=settings.kafka,
    )
    return {t: counts[t] for t in topics}


def alert_stream(spark: SparkSession, settings: PlatformSettings) -> DataFrame:
    """The alerts topic's records (``key``, ``value`` strings) for every payment a stateless
    rule flags, with the observed metric ``skipped`` (records Silver would quarantine)."""

    from spark_jobs.payment_alerts import parse_payments
    from spark_jobs.transforms.alerts import alert_records, stateless_alerts
    from spark_jobs.transforms.silver import usable_rows

    parsed = parse_payments(spark, settings, JOB_NAME).observe(
        "skipped", F.count_if(F.col("_quarantine_reason").isNotNull()).alias("skipped")
    )
    return alert_records(stateless_alerts(usable_rows(parsed), settings.alerts.amount_threshold))


def start(
    spark: SparkSession,
    *,
    trigger: TriggerSpec,
    settings: PlatformSettings | None = None,
    checkpoint: Path | None = None,
    partitions: dict[str, int] | None = None,
) -> StreamingQuery:
    """Start the query and return it.

    :param checkpoint: default the job's (``<checkpoint_dir>/payment_alerts_rt``).
    :param partitions: the source's ``{topic: partitions}`` when already known.
    :raises spark_jobs.real_time.RealTimeRefusedError: real-time mode and a stateful plan, an
        unsupported sink or too few task slots.
    """
    from spark_jobs.real_time import check_plan, check_task_slots, task_slots

    settings = settings or get_settings()
    job = get_catalog().job(JOB_NAME)
    assert isinstance(job.sink, KafkaSinkSpec)
    partitions = partitions or topic_partitions(settings)
    records = alert_stream(spark, settings)
    if trigger.kind == "real-time":
        check_plan(JOB_NAME, records, SINK_FORMAT)
        master = spark.sparkContext.master or "?"
        slots = task_slots(spark, needed=sum(partitions.values()))
        check_task_slots(JOB_NAME, partitions, master, slots)
    writer = (
        records.writeStream.format(SINK_FORMAT)
        .options(**settings.kafka.spark_options())
        .option("topic", job.sink.topic(settings))
        .option("checkpointLocation", str(checkpoint or job.checkpoint(settings)))
        .outputMode("update")
        .queryName(JOB_NAME)
    )
    return trigger.apply(writer).start()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; a bad value exits 2 with a message saying what is wrong.

    A real-time batch writes the heartbeat once, at its end: an interval of half
    ``supervisor.heartbeat_timeout_s`` or more would let the supervisor take a healthy job
    for a stuck one and restart it, so it is refused.
    """
    from ingest_core.intervals import parse_interval

    parser = job_parser(JOB_NAME, __doc__.splitlines()[0])
    args = parse_job_args(parser, argv, None)
    if args.trigger.kind == "real-time":
        limit_s = get_settings().supervisor.heartbeat_timeout_s / 2
        if parse_interval(args.trigger.interval).total_seconds() >= limit_s:
            parser.error(
                f"--trigger {args.trigger}: a real-time batch must be shorter than half "
                f"supervisor.heartbeat_timeout_s ({limit_s:g} s): the heartbeat is written "
                "once per batch"
            )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: run until stopped.

    A refusal (stateful plan, sink, task slots) or a broker that does not answer is one line
    on stderr and exit 1 (the heartbeat says ``failed``), not a traceback or a hang
    (:func:`spark_jobs.job_cli.run_job`).
    """
    from kafka.errors import KafkaError

    from ingest_core.topics import TopicCollisionError
    from spark_jobs.real_time import RealTimeRefusedError, local_master_for
    from spark_jobs.streaming_runtime import mark_failed, run_supervised

    args = parse_args(argv)
    settings = get_settings()

    def body(session: Callable[..., SparkSession]) -> int:
        try:
            partitions = topic_partitions(settings)
        except TopicCollisionError as error:
            return mark_failed(JOB_NAME, str(error))
        except KafkaError as error:
            return mark_failed(
                JOB_NAME,
                f"Kafka at {settings.kafka.bootstrap_servers} refused or did not answer: "
                f"{error!r} (is the broker up? `ingestctl kafka status`)",
            )
        master = None
        if args.trigger.kind == "real-time":
            given = _master(settings)
            sized = local_master_for(given, sum(partitions.values()))
            master = sized if sized != given.strip() else None
        spark = session(master=master)
        print(
            f"{JOB_NAME}: trigger {args.trigger}, Spark master {spark.sparkContext.master}, "
            f"Kafka partitions {partitions}",
            file=sys.stderr,
        )
        try:
            return run_supervised(
                spark,
                JOB_NAME,
                lambda: [start(spark, trigger=args.trigger, partitions=partitions)],
                between_batches=args.trigger.kind != "real-time",
            )
        except RealTimeRefusedError as error:  # its message names the job already
            return mark_failed(JOB_NAME, str(error).removeprefix(f"{JOB_NAME}: "))

    return run_job(JOB_NAME, body)


def _master(settings: PlatformSettings) -> str:
    """The master this driver was given: spark-submit's ``--master`` (the system property
    ``spark.master`` it sets), else the profile's."""
    from spark_jobs.session import submitted_master

    return submitted_master() or settings.spark.master


if __name__ == "__main__":
    sys.exit(main())
