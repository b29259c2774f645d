"""Late corrections: apply the late events to every Gold table they affect, check Gold.

The late events are those of ``silver_late_events``; after applying them the job checks Gold
against an independent batch recomputation from Silver.

An event older than Silver's watermark lands in ``silver_late_events``, not in its Silver
table, so the streaming Gold queries never see it. This batch job (``correct_late`` in
``medallion_incremental``, after ``gold_aggregate``) applies them:

Every windowed Gold table is declared (``include/pipeline.yaml``: window, grouping,
``where``, measures), so every one is corrected the same way, with no code of its own:

* **tumbling and sliding windows** (the payment totals and success rates). It finds the
  windows the late rows fall in, keeping only windows the streaming query has already
  finalised (window end at or before its watermark, read from its checkpoint: an open window
  is still the stream's to write), recomputes those windows from all the source's rows with
  the same compiled aggregate as the stream (:func:`spark_jobs.transforms.gold.
  aggregate_window`) and MERGEs them, keyed on the window and its grouping columns.
* **session windows** (``gold_customer_sessions``). For the keys with late rows it
  recomputes their sessions from all their rows (on-time plus late), keeps the sessions
  that contain a late event and that the stream has finalised (session end at or before its
  watermark), and replaces by one MERGE the stream's sessions they overlap (a late event can
  extend a session, or join two into one).
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

    python -m spark_jobs.gold.late_corrections
"""

from __future__ import annotations

import argparse
import functools
import operator
import sys
from collections.abc import Callable, Sequence

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ingest_core.catalog import get_catalog
from ingest_core.delta_tables import table_exists
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.delta_io import append_idempotent, read_table
from spark_jobs.gold.common import (
    ORDER_COLUMNS,
    behind_gold,
    gold_watermark,
    late_for_gold,
    merge_customer_metrics,
    recompute_windows,
    reconcile_payment_totals,
    silver_with_late,
    window_columns,
    window_source,
    windows_by_source,
)
from spark_jobs.job_cli import run_job

JOB_NAME = "late_corrections"
LEDGER_TABLE = "gold_late_corrections"


def correct(spark: SparkSession, settings: PlatformSettings | None = None) -> dict[str, int]:
    """Apply the late events to every Gold table they affect (see the module docstring).

    :returns: Gold table -> rows changed: windows rewritten for the tumbling and sliding
        tables, sessions written or removed for the session tables, (customer, currency)
        rows incremented for ``gold_customer_metrics``; 0 everywhere when nothing changed.
    """
    changed: dict[str, int] = {}
    for source, windows in windows_by_source().items():
        rows = window_source(spark, source, settings).persist()
        try:
            for table, window in windows.items():
                if window.kind == "session":
                    changed[table] = correct_sessions(spark, table, rows, settings)
                else:
                    changed[table] = correct_windows(spark, table, rows, settings)
        finally:
            rows.unpersist()
    changed["gold_customer_metrics"] = correct_customer_metrics(spark, settings)
    return changed


def correct_windows(
    spark: SparkSession,
    table: str,
    rows: DataFrame,
    settings: PlatformSettings | None = None,
) -> int:
    """Recompute and MERGE the finalised windows of tumbling or sliding Gold ``table`` that
    late rows touch (a late row counts whether or not it matches the window's ``where``: a
    late failed payment still proves its window final).

    :param rows: the window's source rows, on-time and late (:func:`window_source`).
    :returns: windows rewritten (0 when nothing changed).
    """

    from spark_jobs.transforms.gold import window_keys

    settings = settings or get_settings()
    window = get_catalog().window(table)
    columns = window_columns(window)
    path = str(get_catalog().table(table).path(settings))
    watermark = gold_watermark(table, settings)
    if watermark is None or not table_exists(path):
        return 0
    late = late_for_gold(rows, behind_gold(spark, table, settings))
    if late.isEmpty():
        return 0
    touched = window_keys(late, window).where(F.col(window.end_column) <= F.lit(watermark))
    fresh = recompute_windows(table, rows).join(touched, columns, "left_semi")
    current = spark.read.format("delta").load(path)
    diff = fresh.exceptAll(current.select(*fresh.columns)).persist()
    try:
        changed = diff.count()
        if changed:
            (
                DeltaTable.forPath(spark, path)
                .alias("t")
                .merge(diff.alias("s"), " AND ".join(f"t.{c} = s.{c}" for c in columns))
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute()
            )
        return changed
    finally:
        diff.unpersist()


def correct_sessions(
    spark: SparkSession,
    table: str,
    rows: DataFrame,
    settings: PlatformSettings | None = None,
) -> int:
    """Replace the finalised sessions of session Gold ``table`` that late rows change by
    their recomputation from all rows (on-time plus late) of the same keys, in one MERGE.

    A recomputed session that contains a late event and ends at or before the sessions
    query's watermark supersedes every session of the same key it overlaps (a late event
    can move a session's start or end, or join two sessions into one): those are deleted
    unless they have the same key, which is updated. Nothing is written before the stream
    has committed a batch, and nothing when the table already holds the result.

    :param rows: the window's source rows, on-time and late (:func:`window_source`).
    :returns: sessions inserted, updated or deleted (0: nothing committed).
    """

    settings = settings or get_settings()
    catalog = get_catalog()
    window = catalog.window(table)
    group_by, time = window.group_by, window.time_column
    path = str(catalog.table(table).path(settings))
    watermark = gold_watermark(table, settings)
    if watermark is None or not table_exists(path):
        return 0
    keyed = rows
    for column in group_by:
        keyed = keyed.where(F.col(column).isNotNull())
    keyed = keyed.localCheckpoint()
    late = late_for_gold(keyed, behind_gold(spark, table, settings))
    if late.isEmpty():
        return 0
    affected = keyed.join(late.select(*group_by).distinct(), group_by, "left_semi")
    # Materialised before filtering: Spark 4.2 pushes a filter on session_window's bounds
    # below the aggregation, where it cuts sessions short (see gold_backfill.recompute).
    sessions = recompute_windows(table, affected.drop("late")).localCheckpoint()
    start, end = F.col(f"s.{window.start_column}"), F.col(f"s.{window.end_column}")
    s, lt = sessions.alias("s"), late.alias("l")
    same_key = [F.col(f"s.{c}") == F.col(f"l.{c}") for c in group_by]
    touched = s.join(
        lt,
        functools.reduce(operator.and_, same_key)
        & (F.col(f"l.{time}") >= start)
        & (F.col(f"l.{time}") < end),
        "left_semi",
    ).where(F.col(window.end_column) <= F.lit(watermark))
    columns = sessions.columns
    current = spark.read.format("delta").load(path).select(*columns)
    upserts = touched.exceptAll(current)
    t, n = current.alias("t"), touched.alias("n")
    overlapped = t.join(
        n,
        functools.reduce(operator.and_, [F.col(f"t.{c}") == F.col(f"n.{c}") for c in group_by])
        & (F.col(f"t.{window.start_column}") < F.col(f"n.{window.end_column}"))
        & (F.col(f"n.{window.start_column}") < F.col(f"t.{window.end_column}")),
        "left_semi",
    )
    keys = catalog.table(table).keys
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

    from spark_jobs.transforms.gold import customer_metrics_increment

    settings = settings or get_settings()
    catalog = get_catalog()
    table = "gold_customer_metrics"
    path = str(catalog.table(table).path(settings))
    ledger_path = catalog.table(LEDGER_TABLE).path(settings)
    app_id = f"{JOB_NAME}-{table}"
    # Its own session: the MERGE's transaction settings must not reach any other write.
    merge_session = spark.newSession()
    orders = silver_with_late(spark, "silver_orders", ORDER_COLUMNS, settings)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: correct, then reconcile including late payments. The Gold tables are
    gold_aggregate's: it holds that job's checkpoint lock, so it never rewrites them beside
    its driver (or a backfill, which holds the same lock)."""
    parse_args(argv)

    def body(session: Callable[..., SparkSession]) -> None:
        spark = session()
        print(f"late corrections: rows changed {correct(spark)}")
        checked = reconcile_payment_totals(spark, include_late=True)
        print(f"gold_payment_totals_5m: {checked} final windows match Silver")

    return run_job(JOB_NAME, body, lock="gold_aggregate")


if __name__ == "__main__":
    sys.exit(main())
