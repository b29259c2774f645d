"""gold_backfill: recompute the Gold windows of one data interval from Silver, in batch.

What ``medallion_incremental`` runs instead of its streaming steps when the DAG run is a
backfill (or a manual run of a past interval): an AvailableNow job ignores the data
interval, this job is scoped by it.

For every windowed Gold table (declared in ``include/pipeline.yaml``), the windows (or
sessions) that **start** in ``[start, end)`` are recomputed from Silver with the same
compiled aggregate as the stream (:func:`spark_jobs.transforms.gold.aggregate_window`),
from on-time Silver rows (minus rows held by a gate remedy) **plus the late events** in
``silver_late_events``, one row per ``event_id``. So a backfill gives what the incremental
runs gave when nothing arrived late, and the corrected figures when something did. Each
window belongs to exactly one interval (by its start), so backfills of adjacent intervals
never write the same row.

Only windows the streaming query has **finalised** are written (window end at or before the
watermark in its checkpoint): an open window is the stream's to append, and writing it here
would make the stream append it a second time. They are counted as ``open`` in the report.

The interval's rows are replaced by one MERGE per table (update changed windows, insert new
ones, delete the interval's windows that no longer exist, e.g. after a quarantine). When the
recomputation equals the table, nothing is committed: a repeated backfill leaves every Gold
table at the same Delta version. ``gold_customer_metrics`` is a running total, not windowed:
a backfill leaves it alone (``layer_full_refresh`` rebuilds it).

The job holds ``gold_aggregate``'s checkpoint lock while it writes, so it never runs beside
the streaming Gold job or the late corrections (Airflow also serialises them with the
``gold_layer`` pool).

Run::

    python -m spark_jobs.gold.gold_backfill --start 2018-08-01T10:00:00Z --end 2018-08-01T10:15:00Z
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from ingest_core.catalog import WindowSpec, get_catalog
from ingest_core.settings import PlatformSettings, get_settings
from ingest_core.time_range import TimeRange, TimeRangeError
from spark_jobs.gold.common import gold_watermark, window_source
from spark_jobs.job_cli import run_job

JOB_NAME = "gold_backfill"
#: A backfill's interval may span at most this long (one DAG run is normally 15 minutes).
MAX_INTERVAL = timedelta(days=31)


@dataclass(frozen=True)
class WindowedTable:
    """How one Gold table is recomputed for an interval.

    :param source: Silver table the rows come from.
    :param keys: columns identifying a row (the table's ``keys`` in ``include/pipeline.yaml``),
        the MERGE keys.
    :param start_col: column placing a row in an interval.
    :param end_col: column compared with the stream's watermark (finalised rows only).
    :param reach: how far before the interval's start and after its end the input rows can
        lie (window length); None: every row of the interval's keys (sessions).
    """

    source: str
    keys: tuple[str, ...]
    start_col: str
    end_col: str
    reach: timedelta | None
    aggregate: Callable[[DataFrame], DataFrame]
    #: the table's declared window (event-time column, grouping columns)
    window: WindowSpec


def windowed_tables(gap: str | None = None) -> dict[str, WindowedTable]:
    """The Gold tables a backfill recomputes (every windowed table of
    ``include/pipeline.yaml``), in the order it writes them (declaration order).

    :param gap: the session gap (default: the one the sessions' window declares, a setting of
        ``gold_aggregate``).
    """
    from spark_jobs.transforms.gold import aggregate_window

    catalog = get_catalog()
    tables = {}
    for table, window in catalog.windowed_tables().items():
        session = window.kind == "session"
        tables[table] = WindowedTable(
            window.source,
            tuple(catalog.table(table).keys),
            window.start_column,
            window.end_column,
            None if session else window.length,
            functools.partial(
                aggregate_window,
                window=window,
                gap=(gap or catalog.window_gap(table)) if session else None,
            ),
            window,
        )
    return tables


@dataclass
class TableReport:
    """What a backfill did to one table (counts of rows: windows or sessions).

    :param recomputed: finalised rows of the interval in the recomputation.
    :param open: rows of the interval whose window the stream has not finalised (skipped).
    :param changed: existing rows whose values were replaced.
    :param inserted: rows the table lacked.
    :param deleted: rows of the interval the recomputation no longer has.
    :param version: the table's Delta version afterwards (None: no table).
    """

    table: str
    recomputed: int = 0
    open: int = 0
    changed: int = 0
    inserted: int = 0
    deleted: int = 0
    version: int | None = None


def _interval_rows(df: DataFrame, spec: WindowedTable, interval: TimeRange) -> DataFrame:

    column = F.col(spec.start_col)
    return df.where((column >= F.lit(interval.start)) & (column < F.lit(interval.end)))


def _source(
    spark: SparkSession,
    spec: WindowedTable,
    settings: PlatformSettings | None,
    interval: TimeRange | None = None,
) -> DataFrame:
    """``spec.source``'s rows with late events; with ``interval``, only the rows its
    windows can reach (every Gold table of the source has a ``reach``), read from the
    partitions of those days only."""

    reaches = [s.reach for s in _specs().values() if s.source == spec.source]
    between = None
    if interval is not None and reaches and None not in reaches:
        reach = max(r for r in reaches if r is not None)
        between = (interval.start - reach, interval.end + reach)
    return window_source(spark, spec.source, settings, between=between).drop("late")


def recompute(
    spark: SparkSession,
    table: str,
    interval: TimeRange,
    settings: PlatformSettings | None = None,
    source: DataFrame | None = None,
) -> DataFrame:
    """The rows of Gold ``table`` that start in ``interval``, recomputed from Silver plus
    late events (all of them, finalised or not).

    :param source: the Silver rows (with late events) to use, when the caller already read
        them (several tables share a source); read here otherwise.
    :returns: the table's columns (see :mod:`spark_jobs.transforms.gold`).
    :raises KeyError: ``table`` is not a windowed Gold table.
    """

    spec = _specs()[table]
    rows = source if source is not None else _source(spark, spec, settings)
    time = F.col(spec.window.time_column)
    if spec.reach is not None:
        low, high = interval.start - spec.reach, interval.end + spec.reach
        rows = rows.where((time >= F.lit(low)) & (time < F.lit(high)))
    else:
        # A session starting in the interval may run on past its end: take every row of
        # the keys active in it, then keep the sessions that start in it.
        active = rows.where((time >= F.lit(interval.start)) & (time < F.lit(interval.end)))
        keys = spec.window.group_by
        rows = rows.join(active.select(*keys).distinct(), keys, "left_semi")
    aggregated = spec.aggregate(rows)
    if spec.reach is None:
        # Spark 4.2 pushes a filter on session_window's start below the aggregation, where
        # each row still has its own one-event window: the filter then cuts sessions short.
        # A local checkpoint materialises the sessions first.
        aggregated = aggregated.localCheckpoint()
    return _interval_rows(aggregated, spec, interval)


def _specs() -> dict[str, WindowedTable]:
    return windowed_tables()


def interval_changes(
    fresh: DataFrame, existing: DataFrame, keys: Sequence[str], final: Column
) -> dict[str, int]:
    """What replacing ``existing`` by the finalised rows of ``fresh`` would change, counted
    in one Spark query (a full outer join on ``keys``).

    :param fresh: the recomputed rows of an interval, finalised or not (a Gold table's
        columns).
    :param existing: the table's finalised rows of the interval, same columns.
    :param keys: the table's keys (``include/pipeline.yaml``); rows with equal keys are the
        same window or session, so they share finality.
    :param final: a boolean column of ``fresh``: the stream has finalised the row.
    :returns: counts of rows: ``recomputed`` (finalised rows of ``fresh``), ``open`` (the
        others), ``inserted`` (finalised, absent from ``existing``), ``deleted`` (in
        ``existing``, no finalised row in ``fresh``), ``changed`` (both, some value differs;
        nulls compare equal).
    """

    values = [c for c in existing.columns if c not in keys]
    s_in, t_in = F.col("s._final").isNotNull(), F.col("t._in").isNotNull()
    s_final = F.coalesce(F.col("s._final"), F.lit(False))
    same = F.lit(True)
    for column in values:
        same = same & F.col(f"s.{column}").eqNullSafe(F.col(f"t.{column}"))
    row = (
        fresh.withColumn("_final", final)
        .alias("s")
        .join(existing.withColumn("_in", F.lit(1)).alias("t"), list(keys), "full_outer")
        .agg(
            F.count(F.when(s_final, 1)).alias("recomputed"),
            F.count(F.when(s_in & ~s_final, 1)).alias("open"),
            F.count(F.when(s_final & ~t_in, 1)).alias("inserted"),
            F.count(F.when(t_in & ~s_final, 1)).alias("deleted"),
            F.count(F.when(s_final & t_in & ~same, 1)).alias("changed"),
        )
        .collect()[0]
    )
    return row.asDict()


def backfill_table(
    spark: SparkSession,
    table: str,
    interval: TimeRange,
    settings: PlatformSettings | None = None,
    source: DataFrame | None = None,
) -> TableReport:
    """Replace ``table``'s finalised rows of ``interval`` by their recomputation (one MERGE;
    no commit when nothing differs).

    :param source: see :func:`recompute`.
    :raises KeyError: ``table`` is not a windowed Gold table.
    """

    from ingest_core.delta_tables import delta_version
    from spark_jobs.delta_io import read_table

    settings = settings or get_settings()
    spec = _specs()[table]
    path = get_catalog().table(table).path(settings)
    watermark = gold_watermark(table, settings)
    current = read_table(spark, path)
    fresh_all = recompute(spark, table, interval, settings, source)
    if watermark is None or current is None:
        # The stream has not finalised anything yet.
        return TableReport(table, open=fresh_all.count())
    final = F.col(spec.end_col) <= F.lit(watermark)
    fresh = fresh_all.where(final)
    existing = _interval_rows(current, spec, interval).where(final).select(*fresh.columns)
    report = TableReport(table, **interval_changes(fresh_all, existing, spec.keys, final))
    if report.changed or report.inserted or report.deleted:
        start, end = (f"'{t.isoformat()}'" for t in (interval.start, interval.end))
        in_interval = (
            f"t.{spec.start_col} >= timestamp{start} AND t.{spec.start_col} < "
            f"timestamp{end} AND t.{spec.end_col} <= timestamp'{watermark.isoformat()}'"
        )
        (
            DeltaTable.forPath(spark, str(path))
            .alias("t")
            .merge(fresh.alias("s"), " AND ".join(f"t.{k} = s.{k}" for k in spec.keys))
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .whenNotMatchedBySourceDelete(in_interval)
            .execute()
        )
    report.version = delta_version(path)
    return report


def run(
    spark: SparkSession,
    interval: TimeRange,
    *,
    settings: PlatformSettings | None = None,
    tables: Sequence[str] | None = None,
) -> list[TableReport]:
    """Backfill every windowed Gold table (or ``tables``) for ``interval``; each Silver
    source is read once.

    :raises KeyError: an unknown table in ``tables``.
    """
    specs = _specs()
    sources: dict[str, DataFrame] = {}
    reports = []
    try:
        for table in tables or list(specs):
            spec = specs[table]
            if spec.source not in sources:
                sources[spec.source] = _source(spark, spec, settings, interval).persist()
            reports.append(backfill_table(spark, table, interval, settings, sources[spec.source]))
    finally:
        for frame in sources.values():
            frame.unpersist()
    return reports


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``--start``/``--end`` (ISO 8601 with a UTC offset) into ``args.interval``; a bad
    value exits 2 with a message saying what is wrong."""
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__.splitlines()[0])
    parser.add_argument("--start", required=True, help="interval start, e.g. 2018-08-01T10:00Z")
    parser.add_argument("--end", required=True, help="interval end (excluded)")
    parser.add_argument(
        "--table",
        action="append",
        dest="tables",
        help="only this Gold table (repeatable; default: every windowed one)",
    )
    args = parser.parse_args(argv)
    try:
        args.interval = TimeRange.parse(args.start, args.end, MAX_INTERVAL)
    except TimeRangeError as error:
        parser.error(str(error))
    known = _specs()
    for table in args.tables or []:
        if table not in known:
            parser.error(f"--table {table!r} is not a windowed Gold table; known: {sorted(known)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: prints one JSON line per table (see :class:`TableReport`);
    holds gold_aggregate's checkpoint lock (:func:`spark_jobs.job_cli.run_job`)."""
    args = parse_args(argv)

    def body(session: Callable[..., SparkSession]) -> None:
        spark = session()
        print(f"gold_backfill: interval {args.interval}")
        for report in run(spark, args.interval, tables=args.tables):
            print(json.dumps(asdict(report)))

    return run_job(JOB_NAME, body, lock="gold_aggregate")


if __name__ == "__main__":
    sys.exit(main())
