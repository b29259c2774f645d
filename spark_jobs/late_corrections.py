"""Late corrections: apply the late events to every Gold table they affect, check Gold.

The late events are those of ``silver_late_events``; after applying them the job checks Gold
against an independent batch recomputation from Silver.

An event older than Silver's watermark lands in ``silver_late_events``, not in its Silver
table, so the streaming Gold queries never see it. This batch job (``correct_late`` in
``medallion_incremental``, after ``gold_aggregate``) applies them:

* **payments -> the three payment window tables.** It finds the windows the late payments
  fall in, keeping only windows the streaming query has already finalised (window end at or
  before its watermark, read from its checkpoint: an open window is still the stream's to
  write), recomputes those windows from all payments with the same pure functions as the
  stream (:mod:`spark_jobs.transforms.gold`) and MERGEs them, keyed on the window and
  currency or method.
* **customer activity -> ``gold_customer_sessions``.** For the customers with late activity
  it recomputes their sessions from all their activity (on-time plus late), keeps the
  sessions that contain a late event and that the stream has finalised (session end at or
  before its watermark), and replaces by one MERGE the stream's sessions they overlap (a
  late event can extend a session, or join two into one).
* **late ``order_placed`` -> ``gold_customer_metrics``.** A running total cannot be
  recomputed without knowing which orders the stream has already added, so late orders are
  *added*, each exactly once: ``gold_late_corrections`` records every late event applied,
  with the correction run that applied it. A run first re-issues the MERGE of the last run
  recorded (Delta skips it when it was committed: same ``txnAppId``, same ``txnVersion`` =
  the run number), then writes the new run's event ids to the ledger and MERGEs their
  increment with the next ``txnVersion``. A crash between the two writes is finished by the
  next run; a repeated run finds nothing new and commits nothing.

Events Silver kept but Gold's window queries dropped (on time for Silver's watermark, 30
minutes behind the slowest partition; behind Gold's, 10 minutes behind the newest event for
payments) are corrected the same way as late payments and activity: :func:`behind_gold` finds
them from each Gold query's checkpoint and Silver's change data feed.

The window and session corrections replace rows by recomputation and the metrics are added
once per event, so running the job twice changes nothing (and the second run commits
nothing). A late event whose window or session the stream has not finalised yet is applied
by a later run, once it is final.

An event id that is both late and on time (a duplicate that arrived after the watermark)
counts once: the on-time row wins. Several late rows with one id: the first one Kafka
received (lowest topic, partition, offset) counts.

Run::

    python -m spark_jobs.late_corrections
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ingest_core.catalog import get_catalog
from ingest_core.delta_tables import committed_offsets, delta_source_batches, table_exists
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.delta_io import append_idempotent, read_table
from spark_jobs.job_cli import operator_errors
from spark_jobs.local_frames import local_frame
from spark_jobs.quality.holds import without_held

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ingest_core.catalog import WindowSpec

JOB_NAME = "late_corrections"
_PAYMENT_COLUMNS = ("event_id", "event_time", "currency", "amount", "status", "method")
_ORDER_COLUMNS = ("event_id", "event_type", "customer_id", "currency", "total", "event_time")
_ACTIVITY_COLUMNS = ("event_id", "event_time", "customer_id", "activity")
#: The ledger of late events added to a running Gold table (see the module docstring).
LEDGER_TABLE = "gold_late_corrections"


class GoldReconciliationError(RuntimeError):
    """Final Gold windows differ from a batch recomputation from Silver."""


def payment_windows() -> dict[str, WindowSpec]:
    """The windowed Gold tables over ``silver_payments`` -> their windows
    (``include/pipeline.yaml``), in declaration order."""
    windows = get_catalog().windowed_tables().items()
    return {table: window for table, window in windows if window.source == "silver_payments"}


def window_columns(window: WindowSpec) -> list[str]:
    """Columns identifying one window's row: start, end and grouping columns, e.g.
    ``["window_start", "window_end", "currency"]``."""
    return [window.start_column, window.end_column, *window.group_by]


def _recompute(table: str, payments: DataFrame) -> DataFrame:
    from spark_jobs.transforms.gold import aggregate_window

    return aggregate_window(payments, get_catalog().window(table))


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

    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    from ingest_core.intervals import parse_interval

    settings = settings or get_settings()
    catalog = get_catalog()
    lookback = parse_interval(catalog.application(JOB_NAME).setting("behind_gold_lookback"))
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
    from pyspark.sql import Window
    from pyspark.sql import functions as F

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
        if "event_date" in catalog.table(table).partition_by:
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


def all_payments(spark: SparkSession, settings: PlatformSettings | None = None) -> DataFrame:
    """On-time Silver payments (without held rows) plus late ones, one row per ``event_id``.

    :returns: ``event_id``, ``event_time``, ``currency``, ``amount`` decimal(18,2),
        ``status``, ``method``, ``late`` boolean.
    """
    return silver_with_late(spark, "silver_payments", _PAYMENT_COLUMNS, settings)


def correct(spark: SparkSession, settings: PlatformSettings | None = None) -> dict[str, int]:
    """Apply the late events to every Gold table they affect (see the module docstring).

    :returns: Gold table -> rows changed: windows rewritten for the payment tables,
        sessions written or removed for ``gold_customer_sessions``, (customer, currency)
        rows incremented for ``gold_customer_metrics``; 0 everywhere when nothing changed.
    """
    changed = correct_payment_windows(spark, settings)
    changed["gold_customer_sessions"] = correct_customer_sessions(spark, settings)
    changed["gold_customer_metrics"] = correct_customer_metrics(spark, settings)
    return changed


def correct_payment_windows(
    spark: SparkSession, settings: PlatformSettings | None = None
) -> dict[str, int]:
    """Recompute and MERGE the finalised windows that late payments touch.

    :returns: payment window table -> windows rewritten (0 when nothing changed).
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    settings = settings or get_settings()
    catalog = get_catalog()
    payments = all_payments(spark, settings).persist()
    changed: dict[str, int] = {}
    try:
        for table, window in payment_windows().items():
            columns = window_columns(window)
            path = str(catalog.table(table).path(settings))
            watermark = gold_watermark(table, settings)
            changed[table] = 0
            if watermark is None or not table_exists(path):
                continue
            late = late_for_gold(payments, behind_gold(spark, table, settings))
            if late.isEmpty():
                continue
            touched = (
                _recompute(table, late.withColumn("status", F.lit("authorized")))
                .select(*columns)
                .where(F.col(window.end_column) <= F.lit(watermark))
                .distinct()
            )
            fresh = _recompute(table, payments).join(touched, columns, "left_semi")
            current = spark.read.format("delta").load(path)
            diff = fresh.exceptAll(current.select(*fresh.columns)).persist()
            changed[table] = diff.count()
            if changed[table]:
                condition = " AND ".join(f"t.{c} = s.{c}" for c in columns)
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


def correct_customer_sessions(spark: SparkSession, settings: PlatformSettings | None = None) -> int:
    """Replace the finalised sessions of ``gold_customer_sessions`` that late activity
    changes by their recomputation from all activity (on-time plus late), in one MERGE.

    A recomputed session that contains a late event and ends at or before the sessions
    query's watermark supersedes every session of the same customer it overlaps (a late
    event can move a session's start or end, or join two sessions into one): those are
    deleted unless they have the same key, which is updated. Nothing is written before the
    stream has committed a batch, and nothing when the table already holds the result.

    :returns: sessions inserted, updated or deleted (0: nothing committed).
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from spark_jobs.transforms import gold

    settings = settings or get_settings()
    table = "gold_customer_sessions"
    path = str(get_catalog().table(table).path(settings))
    watermark = gold_watermark(table, settings)
    if watermark is None or not table_exists(path):
        return 0
    activity = silver_with_late(spark, "silver_customer_activity", _ACTIVITY_COLUMNS, settings)
    activity = activity.where(F.col("customer_id").isNotNull()).localCheckpoint()
    late = late_for_gold(activity, behind_gold(spark, table, settings))
    if late.isEmpty():
        return 0
    rows = activity.join(late.select("customer_id").distinct(), "customer_id", "left_semi")
    gap = get_catalog().window_gap(table)
    # Materialised before filtering: Spark 4.2 pushes a filter on session_window's bounds
    # below the aggregation, where it cuts sessions short (see gold_backfill.recompute).
    sessions = gold.customer_sessions(rows.drop("late"), gap).localCheckpoint()
    s, lt = sessions.alias("s"), late.alias("l")
    touched = s.join(
        lt,
        (F.col("s.customer_id") == F.col("l.customer_id"))
        & (F.col("l.event_time") >= F.col("s.session_start"))
        & (F.col("l.event_time") < F.col("s.session_end")),
        "left_semi",
    ).where(F.col("session_end") <= F.lit(watermark))
    columns = sessions.columns
    current = spark.read.format("delta").load(path).select(*columns)
    upserts = touched.exceptAll(current)
    t, n = current.alias("t"), touched.alias("n")
    overlapped = t.join(
        n,
        (F.col("t.customer_id") == F.col("n.customer_id"))
        & (F.col("t.session_start") < F.col("n.session_end"))
        & (F.col("n.session_start") < F.col("t.session_end")),
        "left_semi",
    )
    keys = get_catalog().table(table).keys
    stale = overlapped.join(touched.select(*keys), keys, "left_anti")
    source = (
        upserts.withColumn("_delete", F.lit(False))
        .unionByName(stale.withColumn("_delete", F.lit(True)))
        .localCheckpoint()
    )
    count = source.count()
    if count:
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(source.alias("s"), " AND ".join(f"t.{k} = s.{k}" for k in keys))
            .whenMatchedDelete(condition="s._delete")
            .whenMatchedUpdate(set={c: f"s.{c}" for c in columns})
            .whenNotMatchedInsert(condition="NOT s._delete", values={c: f"s.{c}" for c in columns})
            .execute()
        )
    return count


def correct_customer_metrics(spark: SparkSession, settings: PlatformSettings | None = None) -> int:
    """Add each late ``order_placed`` (with a customer) to ``gold_customer_metrics`` exactly
    once, recording it in ``gold_late_corrections`` (see the module docstring).

    :returns: (customer, currency) rows the new run incremented (0: nothing new; a
        re-issued MERGE of the previous run, skipped or finished, is not counted).
    """
    from pyspark.sql import functions as F

    from spark_jobs.gold_aggregate import merge_customer_metrics
    from spark_jobs.transforms.gold import customer_metrics_increment

    settings = settings or get_settings()
    catalog = get_catalog()
    table = "gold_customer_metrics"
    path = str(catalog.table(table).path(settings))
    ledger_path = catalog.table(LEDGER_TABLE).path(settings)
    app_id = f"{JOB_NAME}-{table}"
    # Its own session: the MERGE's transaction settings must not reach any other write.
    merge_session = spark.newSession()
    orders = silver_with_late(spark, "silver_orders", _ORDER_COLUMNS, settings)
    late = orders.where(
        F.col("late") & (F.col("event_type") == "order_placed") & F.col("customer_id").isNotNull()
    ).drop("late")
    ledger = read_table(spark, ledger_path)
    last = None
    if ledger is not None:
        ledger = ledger.where(F.col("gold_table") == table)
        last = ledger.agg(F.max("run")).collect()[0][0]
    if ledger is not None and last is not None:
        # The last run may have stopped between its ledger write and its MERGE: finish it.
        # Delta skips this MERGE when that run committed it (same app id and version).
        redo = late.join(ledger.where(F.col("run") == last), "event_id", "left_semi")
        merge_customer_metrics(
            merge_session, path, customer_metrics_increment(redo), app_id=app_id, version=last
        )
        late = late.join(ledger.select("event_id"), "event_id", "left_anti")
    run = 0 if last is None else last + 1
    # Materialised now: once the ledger holds these ids, re-reading would find none.
    pending = late.localCheckpoint()
    if pending.isEmpty():
        return 0
    entries = pending.select(
        F.lit(table).alias("gold_table"), "event_id", F.lit(run).cast("long").alias("run")
    )
    append_idempotent(entries, ledger_path, app_id=f"{JOB_NAME}-ledger-{table}", version=run)
    increment = customer_metrics_increment(pending).localCheckpoint()
    merge_customer_metrics(merge_session, path, increment, app_id=app_id, version=run)
    return increment.count()


def reconcile_payment_totals(
    spark: SparkSession, *, settings: PlatformSettings | None = None, include_late: bool
) -> int:
    """Check final ``gold_payment_totals_5m`` windows against a batch recomputation.

    :param include_late: compare with Silver plus late payments (after late corrections);
        otherwise with on-time Silver only, skipping windows with events the stream did not
        count, late or behind its watermark (:func:`late_for_gold`; the corrections job's to
        fix).
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
    expected = _recompute(table, payments if include_late else payments.where(~F.col("late")))
    expected = expected.where(F.col("window_end") <= F.lit(watermark))
    actual = gold.where(F.col("window_end") <= F.lit(watermark))
    if not include_late:
        # Windows with events the stream did not count are the corrections job's to fix.
        late = late_for_gold(payments, behind_gold(spark, table, settings))
        late_windows = _recompute(table, late.withColumn("status", F.lit("authorized")))
        keys = window_columns(get_catalog().window(table))
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line (no options besides ``--help``: the job works on every late
    event not yet applied); ``--help`` prints the usage and exits 0 before Spark starts."""
    parser = argparse.ArgumentParser(
        prog=JOB_NAME,
        description=__doc__.splitlines()[0],
        epilog="Holds gold_aggregate's checkpoint lock while it writes; run it after "
        "gold_aggregate (medallion_incremental's correct_late task does).",
    )
    return parser.parse_args(argv)


@operator_errors
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: correct, then reconcile including late payments."""
    from ingest_core.locks import checkpoint_lock
    from spark_jobs.session import build_spark_session

    parse_args(argv)
    # The Gold tables are gold_aggregate's: never rewrite them beside its driver (or a
    # backfill, which holds the same lock).
    with checkpoint_lock(get_catalog().job("gold_aggregate").checkpoint()):
        spark = build_spark_session(JOB_NAME)
        changed = correct(spark)
        print(f"late corrections: rows changed {changed}")
        checked = reconcile_payment_totals(spark, include_late=True)
        print(f"gold_payment_totals_5m: {checked} final windows match Silver")
    return 0


if __name__ == "__main__":
    sys.exit(main())
