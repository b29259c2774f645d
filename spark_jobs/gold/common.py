"""What the Gold jobs share (no Gold job imports another: issue 52): the declared windows
and the Silver columns they read, Gold's watermarks read from its checkpoint, Silver with its
late events, the reconciliation of the payment totals, and the customer metrics' MERGE.

Used by :mod:`spark_jobs.gold.gold_aggregate`, :mod:`spark_jobs.gold.late_corrections`
and :mod:`spark_jobs.gold.gold_backfill`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ingest_core.catalog import get_catalog
from ingest_core.delta_tables import (
    committed_offsets,
    delta_source_batches,
    delta_version,
    table_exists,
)
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.delta_io import read_table
from spark_jobs.local_frames import local_frame
from spark_jobs.quality.holds import without_held

if TYPE_CHECKING:
    from ingest_core.catalog import WindowSpec

#: Silver columns ``gold_customer_metrics`` (code, not a declared window) reads.
ORDER_COLUMNS = ("event_id", "event_type", "customer_id", "currency", "total", "event_time")


class GoldReconciliationError(RuntimeError):
    """Final Gold windows differ from a batch recomputation from Silver."""


def windows_by_source() -> dict[str, dict[str, WindowSpec]]:
    """Silver table -> {windowed Gold table over it -> its window} (``include/pipeline.yaml``),
    in declaration order."""
    by_source: dict[str, dict[str, WindowSpec]] = {}
    for table, window in get_catalog().windowed_tables().items():
        by_source.setdefault(window.source, {})[table] = window
    return by_source


def source_columns(source: str) -> tuple[str, ...]:
    """The columns of Silver table ``source`` that the windows over it read, once each in
    declaration order (:attr:`ingest_core.catalog.WindowSpec.reads`).

    :raises KeyError: no window reads ``source``.
    """
    windows = windows_by_source()[source].values()
    return tuple(dict.fromkeys(c for w in windows for c in w.reads))


def window_columns(window: WindowSpec) -> list[str]:
    """Columns identifying one window's row: start, end and grouping columns, e.g.
    ``["window_start", "window_end", "currency"]``."""
    return [window.start_column, window.end_column, *window.group_by]


def recompute_windows(table: str, rows: DataFrame) -> DataFrame:
    """Gold ``table``'s rows recomputed from Silver ``rows`` (its declared window, with the
    session gap from the writing job's settings)."""
    from spark_jobs.transforms.gold import aggregate_window

    catalog = get_catalog()
    window = catalog.window(table)
    gap = catalog.window_gap(table) if window.gap else None
    return aggregate_window(rows, window, gap)


def gold_watermark(table: str, settings: PlatformSettings | None = None) -> datetime | None:
    """The event-time watermark of the streaming query writing ``table`` (from its checkpoint),
    or None if it has not committed a batch."""
    job = get_catalog().job("gold_aggregate")
    offsets = committed_offsets(job.checkpoint(settings or get_settings(), table))
    if offsets is None:
        return None
    millis = int(offsets["metadata"].get("batchWatermarkMs", 0))
    return datetime.fromtimestamp(millis / 1000, tz=UTC) if millis else None


def behind_gold(
    spark: SparkSession,
    table: str,
    settings: PlatformSettings | None = None,
    now: float | None = None,
) -> DataFrame | None:
    """Event ids of the on-time Silver rows the streaming query writing Gold ``table`` read
    when its watermark had already passed them, so that its windows dropped them.

    Silver and Gold judge lateness apart: Silver by its topic's watermark
    (``dedup_watermark``, 30 minutes, behind its slowest partition), Gold's window queries by
    Spark's (``payments_watermark`` 10 minutes, ``sessions_watermark`` 30, behind the newest
    event read). Spark drops a row whose window ended at or before the watermark in force
    (``batchWatermarkMs``); such a row is in neither Gold nor ``silver_late_events``. Found
    from the query's checkpoint (:func:`ingest_core.delta_tables.delta_source_batches`: the
    Silver versions each batch read, with its watermark) and Silver's change data feed: a
    row read by a batch with an event time before that batch's watermark (a superset: its
    window may still have been open; recomputing a final window is harmless).

    Only batches planned within the job's ``behind_gold_lookback`` (6 hours,
    ``include/pipeline.yaml``) are looked at, and Spark keeps the last 100
    (``minBatchesToRetain``): the job runs after every Gold run. A window missed for longer
    is no longer skipped by ``aggregate_gold``'s check, which then fails naming it (remedy:
    a ``gold_backfill`` of its interval). Each batch's versions are read apart, filtered on
    event time: Parquet statistics then skip the files with nothing that old (most of them).

    :param table: a windowed Gold table (``Catalog.windowed_tables``).
    :param now: the clock (epoch seconds; default now), for the lookback.
    :returns: ``event_id`` rows (distinct), or None when no batch in the lookback had a
        watermark.
    :raises pyspark.errors.AnalysisException: Silver's change data of those versions is gone
        (vacuumed); ``include/pipeline.yaml``'s VACUUM keeps 7 days at least.
    """
    import time

    from ingest_core.intervals import parse_interval

    settings = settings or get_settings()
    catalog = get_catalog()
    lookback = parse_interval(
        catalog.application("late_corrections").setting("behind_gold_lookback")
    )
    since_ms = ((now or time.time()) - lookback.total_seconds()) * 1000
    checkpoint = catalog.job("gold_aggregate").checkpoint(settings, table)
    batches = [
        b for b in delta_source_batches(checkpoint) if b.watermark_ms and b.timestamp_ms >= since_ms
    ]
    if not batches:
        return None
    path = str(catalog.table(catalog.window(table).source).path(settings))
    frames = []
    for batch in batches:
        before = F.col("event_time") < F.lit(
            datetime.fromtimestamp(batch.watermark_ms / 1000, tz=UTC)
        )
        reader = spark.read.format("delta")
        if batch.snapshot:
            rows = reader.option("versionAsOf", batch.last_version).load(path)
        else:
            rows = (
                reader.option("readChangeFeed", "true")
                .option("startingVersion", batch.first_version)
                .option("endingVersion", batch.last_version)
                .load(path)
                .where(F.col("_change_type").isin("insert", "update_postimage"))
            )
        frames.append(rows.where(before).select("event_id"))
    return functools.reduce(DataFrame.unionByName, frames).distinct()


def unread_by_gold(
    spark: SparkSession, table: str, settings: PlatformSettings | None = None
) -> DataFrame | None:
    """Rows of Gold ``table``'s Silver source that its streaming query has not read yet:
    the versions from its newest committed offset on (a version it read part of counts
    whole: a superset). Soak run 17: a layer refresh's ``correct_late`` ran while the live
    medallion refined Silver past what the rebuilt query had read, and the reconciliation
    expected those rows in Gold.

    :returns: the rows (Silver's columns), or None when the query has committed nothing or
        read every version.
    """
    settings = settings or get_settings()
    catalog = get_catalog()
    offsets = committed_offsets(catalog.job("gold_aggregate").checkpoint(settings, table))
    source = offsets["sources"][0] if offsets and offsets["sources"] else None
    if not source:
        return None
    first_unread = int(source["reservoirVersion"])
    path = catalog.table(catalog.window(table).source).path(settings)
    latest = delta_version(path)
    if latest is None or latest < first_unread:
        return None
    return (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", first_unread)
        .load(str(path))
        .where(F.col("_change_type").isin("insert", "update_postimage"))
    )


def late_for_gold(rows: DataFrame, behind: DataFrame | None) -> DataFrame:
    """The rows of ``rows`` (:func:`silver_with_late`) that a Gold table's stream did not
    count: the late ones, and those whose ids are in ``behind`` (:func:`behind_gold`)."""
    late = rows.where("late")
    return late if behind is None else late.unionByName(rows.join(behind, "event_id", "left_semi"))


def silver_with_late(
    spark: SparkSession,
    table: str,
    columns: Sequence[str],
    settings: PlatformSettings | None = None,
    between: tuple[datetime, datetime] | None = None,
) -> DataFrame:
    """On-time rows of Silver ``table`` (without rows held by a gate remedy) plus the late
    events of the same event types from ``silver_late_events``, one row per ``event_id``
    (on-time wins).

    :param table: a Silver table of :data:`ingest_core.contracts.CONTRACTS` (e.g.
        ``silver_payments``, ``silver_customer_activity``).
    :param columns: columns to keep (envelope or payload fields; ``event_time`` is a
        timestamp).
    :param between: only rows with ``low <= event_time < high`` (UTC); a table partitioned
        by ``event_date`` (``include/pipeline.yaml``) then reads only those days'
        partitions. A late event in range whose id is also on time elsewhere still loses
        to it (the whole table's ids are read only then).
    :returns: ``columns`` plus ``late`` boolean.
    :raises StopIteration: ``table`` is no event table.
    """

    from ingest_core.contracts import CONTRACTS, ENVELOPE_DDL, PAYLOAD_DDL

    catalog, settings = get_catalog(), settings or get_settings()
    contracts = [c for c in CONTRACTS.values() if c.silver_table == table]
    topic = next(c.topic for c in contracts)
    schema = f"{ENVELOPE_DDL}, {PAYLOAD_DDL[topic]}".replace(
        "event_time string", "event_time timestamp"
    )
    on_time = read_table(spark, catalog.table(table).path(settings))
    if on_time is None:
        on_time = local_frame(spark, [], schema)
    # Rows an operator held back after a failed gate never reach Gold (quality.holds).
    on_time = without_held(spark, on_time, table, settings)
    every_on_time = on_time
    in_range = F.lit(True)
    if between is not None:
        low, high = between
        in_range = (F.col("event_time") >= F.lit(low)) & (F.col("event_time") < F.lit(high))
        on_time = on_time.where(in_range)
        if "event_date" in catalog.table(table).partition_by and "event_date" in on_time.columns:
            # (a table not written yet is an empty frame of the contract's columns)
            # event_date is event_time's UTC date (transforms.silver.parse_events): Spark
            # cannot derive the partitions from event_time, so they are named here.
            days = F.col("event_date").between(F.lit(low.date()), F.lit(high.date()))
            on_time = on_time.where(days)
    on_time = on_time.select(*columns).withColumn("late", F.lit(False))
    late = read_table(spark, catalog.table("silver_late_events").path(settings))
    if late is None:
        return on_time
    coordinates = ("topic", "partition", "offset")
    parsed = late.where(F.col("event_type").isin([c.event_type for c in contracts])).select(
        F.from_json("payload_json", schema).alias("p"),
        *coordinates,
        F.col("event_time").alias("_event_time"),
    )
    # One row per event id, the same one on every run (the first Kafka received), so that a
    # recomputation from it never flips between two payloads.
    first = Window.partitionBy("event_id").orderBy(*coordinates)
    late_rows = (
        # payload_json holds event_time to the millisecond only (to_json's format); the
        # table's own event_time column keeps Silver's microseconds.
        parsed.select("p.*", *coordinates, "_event_time")
        .withColumn("event_time", F.col("_event_time"))
        .withColumn("_rank", F.row_number().over(first))
        .where((F.col("_rank") == 1) & in_range)
        .select(*columns)
    )
    if between is not None and late_rows.isEmpty():
        return on_time
    # A late duplicate loses to its on-time event, wherever that one's time lies.
    on_time_ids = every_on_time.select("event_id")
    late_rows = late_rows.join(on_time_ids, "event_id", "left_anti").withColumn("late", F.lit(True))
    return on_time.unionByName(late_rows)


def window_source(
    spark: SparkSession,
    source: str,
    settings: PlatformSettings | None = None,
    between: tuple[datetime, datetime] | None = None,
) -> DataFrame:
    """On-time rows of Silver ``source`` (without held rows) plus late ones, one row per
    ``event_id``, with the columns the windows over it read (:func:`source_columns`).

    :returns: those columns plus ``late`` boolean (see :func:`silver_with_late`).
    """
    return silver_with_late(spark, source, source_columns(source), settings, between=between)


def reconcile_payment_totals(
    spark: SparkSession, *, settings: PlatformSettings | None = None, include_late: bool
) -> int:
    """Check final ``gold_payment_totals_5m`` windows against a batch recomputation.

    :param include_late: compare with Silver plus late payments (after late corrections);
        otherwise with on-time Silver only, skipping windows with events the stream did not
        count, late or behind its watermark (:func:`late_for_gold`; the corrections job's to
        fix). Either way the windows of Silver rows the stream has not read yet are skipped
        (:func:`unread_by_gold`).
    :returns: windows checked.
    :raises GoldReconciliationError: windows differ; the message lists up to five.
    """

    settings = settings or get_settings()
    table = "gold_payment_totals_5m"
    path = get_catalog().table(table).path(settings)
    watermark = gold_watermark(table, settings)
    gold = read_table(spark, path)
    if gold is None or watermark is None:
        return 0
    window = get_catalog().window(table)
    payments = window_source(spark, window.source, settings)
    expected = recompute_windows(
        table, payments if include_late else payments.where(~F.col("late"))
    )
    expected = expected.where(F.col("window_end") <= F.lit(watermark))
    actual = gold.where(F.col("window_end") <= F.lit(watermark))
    # Windows not judged now: with on-time Silver only, those with events the stream did not
    # count (the corrections job's to fix); always, those of Silver rows the query has not
    # read yet (its next batch's or, if behind its watermark by then, the corrections').
    unjudged = (
        [] if include_late else [late_for_gold(payments, behind_gold(spark, table, settings))]
    )
    unread = unread_by_gold(spark, table, settings)
    if unread is not None:
        unjudged.append(unread)
    if unjudged:
        from spark_jobs.transforms.gold import window_keys

        keys = window_columns(window)
        for rows in unjudged:
            skipped = window_keys(rows, window)
            expected = expected.join(skipped, keys, "left_anti")
            actual = actual.join(skipped, keys, "left_anti")
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


def merge_customer_metrics(
    spark: SparkSession, path: str, increment: DataFrame, *, app_id: str, version: int
) -> None:
    """Add ``increment`` to ``gold_customer_metrics`` at ``path`` by one MERGE, once per
    (``app_id``, ``version``): Delta skips the MERGE when it already committed that version
    (or a later one) for ``app_id``, so a repeated call adds nothing.

    :param spark: a session of the caller's own (``spark.newSession()``): the transaction
        settings are set on it for the MERGE and unset afterwards, so concurrent writers on
        another session never carry them.
    :param increment: :func:`spark_jobs.transforms.gold.customer_metrics_increment` rows
        (``customer_id``, ``currency``, ``order_count``, ``spend``, ``last_order_time``).
    :param app_id: Delta ``txnAppId``: one per writer (the stream's query, the late
        corrections).
    :param version: Delta ``txnVersion``: the writer's batch or run number, increasing.
    """

    if not table_exists(path):
        increment.limit(0).write.format("delta").save(path)
    keys = get_catalog().table("gold_customer_metrics").keys
    spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(version))
    try:
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(
                increment.alias("s"),
                " AND ".join(f"t.{k} = s.{k}" for k in keys),
            )
            .whenMatchedUpdate(
                set={
                    "order_count": "t.order_count + s.order_count",
                    "spend": "t.spend + s.spend",
                    "last_order_time": "greatest(t.last_order_time, s.last_order_time)",
                }
            )
            .whenNotMatchedInsertAll()
            .execute()
        )
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")
