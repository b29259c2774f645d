"""Late corrections: fold late payments into the Gold payment windows they touch, and check
Gold against an independent batch recomputation from Silver.

A payment older than Silver's watermark lands in ``silver_late_events``, not in
``silver_payments``, so the streaming Gold queries never see it. This batch job:

1. reads the late payments and the on-time ones, deduplicated on ``event_id`` (an id already
   in ``silver_payments`` wins);
2. finds the windows the late payments fall in, for each windowed payment table, keeping
   only windows the streaming query has already finalised (window end at or before its
   watermark, read from its checkpoint): an open window is still the stream's to write;
3. recomputes those windows from all payments with the same pure functions as the stream
   (:mod:`spark_jobs.transforms.gold`) and MERGEs them, keyed on the window and currency or
   method. A recomputation replaces the window's values, so running the job twice changes
   nothing (and the second run commits nothing).

Session windows and per-customer metrics are not corrected here: late activity and late
orders stay in ``silver_late_events`` for a backfill.

Run::

    python -m spark_jobs.late_corrections
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from spark_jobs.catalog import get_catalog
from spark_jobs.delta_io import committed_offsets, read_table, table_exists
from spark_jobs.job_cli import operator_errors
from spark_jobs.quality.holds import without_held
from spark_jobs.settings import PlatformSettings, get_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

JOB_NAME = "late_corrections"
#: Windowed payment tables: (window length, slide or None, key column).
PAYMENT_WINDOWS: dict[str, tuple[str, str | None, str]] = {
    "gold_payment_totals_5m": ("5 minutes", None, "currency"),
    "gold_payment_totals_10m_sliding": ("10 minutes", "5 minutes", "currency"),
    "gold_payment_success_rate_15m": ("15 minutes", None, "method"),
}
_PAYMENT_COLUMNS = ("event_id", "event_time", "currency", "amount", "status", "method")


class GoldReconciliationError(RuntimeError):
    """Final Gold windows differ from a batch recomputation from Silver."""


def _recompute(table: str, payments: DataFrame) -> DataFrame:
    from spark_jobs.transforms import gold

    duration, slide, _ = PAYMENT_WINDOWS[table]
    if table == "gold_payment_success_rate_15m":
        return gold.payment_success_rate(payments, duration)
    return gold.payment_totals(payments, duration, slide)


def gold_watermark(table: str, settings: PlatformSettings | None = None) -> datetime | None:
    """The event-time watermark of the streaming query writing ``table`` (from its checkpoint),
    or None if it has not committed a batch."""
    job = get_catalog().job("gold_aggregate")
    offsets = committed_offsets(job.checkpoint(settings or get_settings(), table))
    if offsets is None:
        return None
    millis = int(offsets["metadata"].get("batchWatermarkMs", 0))
    return datetime.fromtimestamp(millis / 1000, tz=UTC) if millis else None


def silver_with_late(
    spark: SparkSession,
    table: str,
    columns: Sequence[str],
    settings: PlatformSettings | None = None,
) -> DataFrame:
    """On-time rows of Silver ``table`` (without rows held by a gate remedy) plus the late
    events of the same event types from ``silver_late_events``, one row per ``event_id``
    (on-time wins).

    :param table: a Silver table of :data:`spark_jobs.contracts.CONTRACTS` (e.g.
        ``silver_payments``, ``silver_customer_activity``).
    :param columns: columns to keep (envelope or payload fields; ``event_time`` is a
        timestamp).
    :returns: ``columns`` plus ``late`` boolean.
    :raises StopIteration: ``table`` is no event table.
    """
    from pyspark.sql import functions as F

    from spark_jobs.contracts import CONTRACTS, ENVELOPE_DDL, PAYLOAD_DDL

    catalog, settings = get_catalog(), settings or get_settings()
    contracts = [c for c in CONTRACTS.values() if c.silver_table == table]
    topic = next(c.topic for c in contracts)
    schema = f"{ENVELOPE_DDL}, {PAYLOAD_DDL[topic]}".replace(
        "event_time string", "event_time timestamp"
    )
    on_time = read_table(spark, catalog.table(table).path(settings))
    if on_time is None:
        on_time = spark.createDataFrame([], schema)
    # Rows an operator held back after a failed gate never reach Gold (quality.holds).
    on_time = without_held(spark, on_time, table, settings)
    on_time = on_time.select(*columns).withColumn("late", F.lit(False))
    late = read_table(spark, catalog.table("silver_late_events").path(settings))
    if late is None:
        return on_time
    parsed = late.where(F.col("event_type").isin([c.event_type for c in contracts])).select(
        F.from_json("payload_json", schema).alias("p")
    )
    late_rows = (
        parsed.select("p.*")
        .select(*columns)
        .dropDuplicates(["event_id"])
        .join(on_time.select("event_id"), "event_id", "left_anti")
        .withColumn("late", F.lit(True))
    )
    return on_time.unionByName(late_rows)


def all_payments(spark: SparkSession, settings: PlatformSettings | None = None) -> DataFrame:
    """On-time Silver payments (without held rows) plus late ones, one row per ``event_id``.

    :returns: ``event_id``, ``event_time``, ``currency``, ``amount`` decimal(18,2),
        ``status``, ``method``, ``late`` boolean.
    """
    return silver_with_late(spark, "silver_payments", _PAYMENT_COLUMNS, settings)


def correct(spark: SparkSession, settings: PlatformSettings | None = None) -> dict[str, int]:
    """Recompute and MERGE the finalised windows that late payments touch.

    :returns: Gold table -> windows rewritten (0 when nothing changed).
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    settings = settings or get_settings()
    catalog = get_catalog()
    payments = all_payments(spark, settings).persist()
    late = payments.where("late")
    changed: dict[str, int] = {}
    try:
        if late.isEmpty():
            return {table: 0 for table in PAYMENT_WINDOWS}
        for table, (_, _, key) in PAYMENT_WINDOWS.items():
            path = str(catalog.table(table).path(settings))
            watermark = gold_watermark(table, settings)
            if watermark is None or not table_exists(path):
                changed[table] = 0
                continue
            touched = (
                _recompute(table, late.withColumn("status", F.lit("authorized")))
                .select("window_start", "window_end", key)
                .where(F.col("window_end") <= F.lit(watermark))
                .distinct()
            )
            fresh = _recompute(table, payments).join(
                touched, ["window_start", "window_end", key], "left_semi"
            )
            current = spark.read.format("delta").load(path)
            diff = fresh.exceptAll(current.select(*fresh.columns)).persist()
            changed[table] = diff.count()
            if changed[table]:
                condition = " AND ".join(
                    f"t.{c} = s.{c}" for c in ("window_start", "window_end", key)
                )
                (
                    DeltaTable.forPath(spark, path)
                    .alias("t")
                    .merge(diff.alias("s"), condition)
                    .whenMatchedUpdateAll()
                    .whenNotMatchedInsertAll()
                    .execute()
                )
            diff.unpersist()
    finally:
        payments.unpersist()
    return changed


def reconcile_payment_totals(
    spark: SparkSession, *, settings: PlatformSettings | None = None, include_late: bool
) -> int:
    """Check final ``gold_payment_totals_5m`` windows against a batch recomputation.

    :param include_late: compare with Silver plus late payments (after late corrections);
        otherwise with on-time Silver only, skipping windows that late payments touch (those
        are the corrections job's to fix).
    :returns: windows checked.
    :raises GoldReconciliationError: windows differ; the message lists up to five.
    """
    from pyspark.sql import functions as F

    settings = settings or get_settings()
    table = "gold_payment_totals_5m"
    path = get_catalog().table(table).path(settings)
    watermark = gold_watermark(table, settings)
    gold = read_table(spark, path)
    if gold is None or watermark is None:
        return 0
    payments = all_payments(spark, settings)
    late_windows = _recompute(
        table, payments.where("late").withColumn("status", F.lit("authorized"))
    )
    if not include_late:
        payments = payments.where(~F.col("late"))
    expected = _recompute(table, payments).where(F.col("window_end") <= F.lit(watermark))
    actual = gold.where(F.col("window_end") <= F.lit(watermark))
    if not include_late:
        keys = ["window_start", "window_end", "currency"]
        expected = expected.join(late_windows.select(*keys), keys, "left_anti")
        actual = actual.join(late_windows.select(*keys), keys, "left_anti")
    columns = expected.columns
    missing = expected.exceptAll(actual.select(*columns))
    extra = actual.select(*columns).exceptAll(expected)
    problems = missing.limit(5).collect() + extra.limit(5).collect()
    if problems:
        raise GoldReconciliationError(
            f"{table}: {missing.count()} expected windows missing or different, "
            f"{extra.count()} unexpected (watermark {watermark}); e.g. {problems[:5]}"
        )
    return actual.count()


@operator_errors
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: correct, then reconcile including late payments."""
    from spark_jobs.locks import checkpoint_lock
    from spark_jobs.session import build_spark_session

    # The Gold tables are gold_aggregate's: never rewrite them beside its driver (or a
    # backfill, which holds the same lock).
    with checkpoint_lock(get_catalog().job("gold_aggregate").checkpoint()):
        spark = build_spark_session(JOB_NAME)
        changed = correct(spark)
        print(f"late corrections: windows rewritten {changed}")
        checked = reconcile_payment_totals(spark, include_late=True)
        print(f"gold_payment_totals_5m: {checked} final windows match Silver")
    return 0


if __name__ == "__main__":
    sys.exit(main())
