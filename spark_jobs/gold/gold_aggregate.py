"""gold_aggregate: Silver -> Gold, in event time, as one Spark application with one
streaming query (and one checkpoint) per Gold table. The windowed tables are declared in
``include/pipeline.yaml`` (a new declaration gets its query here with no code); today's:

==================================  ======================================================
``gold_payment_totals_5m``          tumbling 5-minute windows per currency, append mode
``gold_payment_totals_10m_sliding`` 10-minute windows sliding every 5 minutes, append
``gold_payment_success_rate_15m``   15-minute windows per payment method, append
``gold_customer_sessions``          session windows per customer (gap 10 min), append
``gold_customer_metrics``           running order count and spend per customer, MERGE
==================================  ======================================================

Windowed tables use append mode: a window is written once, when the watermark (10 minutes
for payments, 30 for sessions; ``include/pipeline.yaml``) has passed its end, so every row
in them is final. The watermark lives in each query's checkpoint and carries over between
AvailableNow runs. Events that arrive later than that are in ``silver_late_events``, or
in Silver but behind this query's watermark (``spark_jobs.gold.common.behind_gold``); the
late-corrections job folds both in.

``gold_customer_metrics`` is upserted by MERGE in ``foreachBatch``; the MERGE carries Delta's
``txnAppId``/``txnVersion`` session settings (in a session of its own, so concurrent queries
do not share them), so a replayed batch is not counted twice.

Run::

    python -m spark_jobs.gold.gold_aggregate --trigger available-now
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from ingest_core.catalog import get_catalog
from ingest_core.delta_tables import checkpoint_query_id, table_exists
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.gold.common import (
    merge_customer_metrics,
    recompute_windows,
    reconcile_payment_totals,
)
from spark_jobs.job_cli import job_parser, parse_job_args, run_job
from spark_jobs.quality.holds import without_held
from spark_jobs.triggers import TriggerError, TriggerSpec

JOB_NAME = "gold_aggregate"
REAL_TIME_REFUSAL = (
    "gold_aggregate runs stateful aggregations into Delta; Spark 4.2's real-time mode "
    "supports only stateless queries with Kafka, foreach, console or memory sinks"
)


def windowed_definitions() -> dict[str, tuple[str, str, str, Callable[[DataFrame], DataFrame]]]:
    """Gold table -> (Silver source table, event-time column, watermark delay, compiled
    aggregation), from the tables' window declarations (``include/pipeline.yaml``), in
    declaration order."""
    catalog = get_catalog()
    return {
        table: (
            window.source,
            window.time_column,
            catalog.window_watermark(table),
            functools.partial(recompute_windows, table),  # the batch jobs' compilation too
        )
        for table, window in catalog.windowed_tables().items()
    }


class CustomerMetricsMerge:
    """``foreachBatch`` MERGE of per-customer increments into ``gold_customer_metrics``."""

    def __init__(self, spark: SparkSession, path: str, checkpoint: str) -> None:
        # A session of its own: the txn settings of the MERGE must not leak into other queries.
        self.spark = spark.newSession()
        self.path = path
        self.checkpoint = checkpoint

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Add the batch's increments (see :func:`customer_metrics_increment`) by MERGE."""
        from spark_jobs.transforms.gold import customer_metrics_increment

        app_id = f"{JOB_NAME}-customer-metrics-{checkpoint_query_id(self.checkpoint)}"
        merge_customer_metrics(
            self.spark,
            self.path,
            customer_metrics_increment(batch),
            app_id=app_id,
            version=batch_id,
        )


def start(
    spark: SparkSession,
    *,
    trigger: TriggerSpec,
    settings: PlatformSettings | None = None,
    tables: Sequence[str] | None = None,
) -> list[StreamingQuery]:
    """Start one streaming query per Gold table whose Silver source exists.

    :param tables: a subset of Gold tables (default: all).
    :raises TriggerError: a real-time trigger.
    :returns: the started queries (possibly none, when Silver is still empty).
    """

    if trigger.kind == "real-time":
        raise TriggerError(REAL_TIME_REFUSAL)
    settings = settings or get_settings()
    catalog = get_catalog()
    job = catalog.job(JOB_NAME)
    definitions = windowed_definitions()
    wanted = set(tables or [*definitions, "gold_customer_metrics"])
    queries = []

    def source(table: str) -> DataFrame | None:
        path = catalog.table(table).path(settings)
        if not table_exists(path):
            return None
        # Rows an operator held back after a failed gate never reach Gold (quality.holds).
        return without_held(
            spark, spark.readStream.format("delta").load(str(path)), table, settings
        )

    for table, (silver, time_column, delay, aggregate) in definitions.items():
        stream = source(silver) if table in wanted else None
        if stream is None:
            continue
        out = aggregate(stream.withWatermark(time_column, delay))
        writer = (
            out.writeStream.format("delta")
            .outputMode("append")
            .option("checkpointLocation", str(job.checkpoint(settings, table)))
            .queryName(f"{JOB_NAME}.{table}")
        )
        queries.append(trigger.apply(writer).start(str(catalog.table(table).path(settings))))
    orders = source("silver_orders") if "gold_customer_metrics" in wanted else None
    if orders is not None:
        checkpoint = str(job.checkpoint(settings, "gold_customer_metrics"))
        merge = CustomerMetricsMerge(
            spark, str(catalog.table("gold_customer_metrics").path(settings)), checkpoint
        )
        writer = (
            orders.select("event_type", "customer_id", "currency", "total", "event_time")
            .where(F.col("event_type") == "order_placed")
            .writeStream.foreachBatch(merge)
            .option("checkpointLocation", checkpoint)
            .queryName(f"{JOB_NAME}.gold_customer_metrics")
        )
        queries.append(trigger.apply(writer).start())
    return queries


def run(
    spark: SparkSession, *, trigger: TriggerSpec, settings: PlatformSettings | None = None
) -> int:
    """Run every Gold query to completion (AvailableNow) and check Gold against Silver.

    :returns: number of queries run.
    :raises pyspark.errors.StreamingQueryException: a query failed.
    :raises spark_jobs.gold.common.GoldReconciliationError: final windows disagree with
        a batch recomputation from Silver.
    """

    queries = start(spark, trigger=trigger, settings=settings)
    for query in queries:
        query.awaitTermination()
    reconcile_payment_totals(spark, settings=settings, include_late=False)
    return len(queries)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; a bad value exits 2 with a message saying what is wrong."""
    parser = job_parser(JOB_NAME, __doc__.splitlines()[0])
    return parse_job_args(parser, argv, REAL_TIME_REFUSAL)


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point (:func:`spark_jobs.job_cli.run_job`)."""
    args = parse_args(argv)

    def body(session: Callable[..., SparkSession]) -> None:
        run(session(), trigger=args.trigger)  # its count of queries is not an exit code

    return run_job(JOB_NAME, body)


if __name__ == "__main__":
    sys.exit(main())
