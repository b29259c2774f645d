"""Gold transforms: event-time aggregations of Silver. Pure DataFrame -> DataFrame functions,
used both by the streaming job (with a watermark applied by the caller) and by batch
recomputation (late corrections, reconciliation, backfills), so both compute the same thing.

The windowed tables are declared in ``include/pipeline.yaml`` (window, grouping, ``where``,
measures) and compiled here by :func:`aggregate_window`; ``gold_customer_metrics``, a running
total MERGEd per batch, is code (:func:`customer_metrics_increment`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from ingest_core.catalog import Condition, Measure, WindowSpec


def customer_metrics_increment(orders: DataFrame) -> DataFrame:
    """Per customer and currency, what a batch of placed orders adds to the running metrics.

    Guest orders (null ``customer_id``) have no customer to count against and are left out.

    :param orders: Silver orders: ``event_type``, ``customer_id``, ``currency`` strings,
        ``total`` decimal(18,2), ``event_time`` timestamp.
    :returns: ``customer_id``, ``currency`` strings, ``order_count`` bigint, ``spend``
        decimal(28,2), ``last_order_time`` timestamp.
    """

    return (
        orders.where((F.col("event_type") == "order_placed") & F.col("customer_id").isNotNull())
        .groupBy("customer_id", "currency")
        .agg(
            F.count("*").alias("order_count"),
            F.sum("total").cast("decimal(28,2)").alias("spend"),
            F.max("event_time").alias("last_order_time"),
        )
    )


def condition(cond: Condition) -> Column:
    """The Spark predicate of a declared :class:`~ingest_core.catalog.Condition` (null when
    the column is null, which ``where`` and ``count_if`` treat as false)."""

    column = F.col(cond.column)
    if cond.equals is not None:
        return column == F.lit(cond.equals)
    if cond.in_ is not None:
        return column.isin(list(cond.in_))
    if cond.at_least is not None:
        return column >= F.lit(cond.at_least)
    return column <= F.lit(cond.at_most)


def _measure(name: str, measure: Measure) -> Column:

    if measure.kind == "count":
        return F.count(F.lit(1)).alias(name)
    if measure.where is not None:
        matches = condition(measure.where)
        if measure.kind == "any":
            return F.max(F.coalesce(matches, F.lit(False))).alias(name)
        return F.count(F.when(matches, 1)).alias(name)  # count_if: a bigint, 0 for none
    aggregate = {"sum": F.sum, "min": F.min, "max": F.max, "avg": F.avg}[measure.kind]
    assert measure.column is not None  # validated: a column measure names its column
    return aggregate(measure.column).alias(name)


def _window_column(window: WindowSpec, gap: str | None) -> Column:

    if window.kind == "session":
        if gap is None:
            raise ValueError("a session window needs its gap")
        return F.session_window(window.time_column, gap)
    assert window.duration is not None  # validated: tumbling and sliding windows have one
    if window.slide:
        return F.window(window.time_column, window.duration, window.slide)
    return F.window(window.time_column, window.duration)


def aggregate_window(rows: DataFrame, window: WindowSpec, gap: str | None = None) -> DataFrame:
    """Compute a Gold table declared with ``window`` (``include/pipeline.yaml``) from its
    Silver ``rows``: keep the rows matching ``where``, group them by event-time window (or
    session) and ``group_by``, compute the measures.

    The same function serves the stream (the caller applies the watermark first) and every
    batch recomputation (late corrections, backfills, reconciliation), so they agree.

    :param rows: the window's Silver rows, with at least :attr:`WindowSpec.reads`.
    :param window: the table's window declaration.
    :param gap: the session gap interval (``"10 minutes"``), for a session window; its
        declaration names the job setting holding it (``Catalog.window_gap``).
    :returns: :attr:`WindowSpec.columns`: ``window_start``, ``window_end`` timestamps (a
        session: ``session_start``, ``session_end``, end = last event + gap, Spark's
        convention), the grouping columns, then one column per measure (``count`` and
        ``count_if`` bigint, ``any`` boolean, ``ratio`` double, others Spark's type for the
        aggregate of that column).
    :raises ValueError: a session window without ``gap``.
    """

    if window.where is not None:
        rows = rows.where(condition(window.where))
    aggregates = [_measure(n, m) for n, m in window.measures.items() if m.kind != "ratio"]
    grouped = rows.groupBy(_window_column(window, gap).alias("_w"), *window.group_by).agg(
        *aggregates
    )
    outputs: dict[str, Column] = {
        window.start_column: F.col("_w.start"),
        window.end_column: F.col("_w.end"),
        **{c: F.col(c) for c in window.group_by},
    }
    for name, measure in window.measures.items():
        if measure.of is not None:
            numerator, denominator = (F.col(c) for c in measure.of)
            outputs[name] = (numerator / F.nullif(denominator, F.lit(0))).cast("double")
        else:
            outputs[name] = F.col(name)
    return grouped.select(*(outputs[c].alias(c) for c in window.columns))


def window_keys(rows: DataFrame, window: WindowSpec) -> DataFrame:
    """The windows (start, end and grouping values) that ``rows`` fall in, whether or not
    they match the window's ``where``: the windows a late row may change. Tumbling and
    sliding windows only (a session depends on its neighbours: recompute it).

    :returns: distinct rows of :func:`ingest_core.catalog.WindowSpec` start, end and
        ``group_by`` columns.
    :raises ValueError: a session window.
    """

    if window.kind == "session":
        raise ValueError("a session's bounds depend on its neighbours: recompute sessions")
    return (
        rows.select(_window_column(window, None).alias("_w"), *window.group_by)
        .select(
            F.col("_w.start").alias(window.start_column),
            F.col("_w.end").alias(window.end_column),
            *window.group_by,
        )
        .distinct()
    )
