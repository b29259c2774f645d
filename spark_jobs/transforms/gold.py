"""Gold transforms: event-time aggregations of Silver. Pure DataFrame -> DataFrame functions,
used both by the streaming job (with a watermark applied by the caller) and by batch
recomputation (late corrections, reconciliation, backfills), so both compute the same thing.

Money totals count **authorized** payments only (money that moved); success rates count
every attempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ingest_core.catalog import WindowSpec


def payment_totals(payments: DataFrame, duration: str, slide: str | None = None) -> DataFrame:
    """Count and sum of authorized payment amounts per currency and event-time window.

    :param payments: Silver payments: ``event_time`` timestamp, ``currency`` string,
        ``amount`` decimal(18,2), ``status`` string.
    :param duration: window length, e.g. ``"5 minutes"``.
    :param slide: slide interval for sliding windows (``None``: tumbling).
    :returns: ``window_start`` timestamp, ``window_end`` timestamp, ``currency`` string,
        ``payment_count`` bigint, ``amount_total`` decimal(28,2).
    """
    from pyspark.sql import functions as F

    window = F.window("event_time", duration, slide) if slide else F.window("event_time", duration)
    return (
        payments.where(F.col("status") == "authorized")
        .groupBy(window.alias("w"), "currency")
        .agg(F.count("*").alias("payment_count"), F.sum("amount").alias("amount_total"))
        .select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "currency",
            "payment_count",
            "amount_total",
        )
    )


def payment_success_rate(payments: DataFrame, duration: str) -> DataFrame:
    """Attempts, successes and success rate per payment method and window.

    :returns: ``window_start``, ``window_end`` timestamps, ``method`` string,
        ``attempts`` bigint, ``successes`` bigint, ``success_rate`` double in [0, 1].
    """
    from pyspark.sql import functions as F

    return (
        payments.groupBy(F.window("event_time", duration).alias("w"), "method")
        .agg(
            F.count("*").alias("attempts"),
            F.sum(F.when(F.col("status") == "authorized", 1).otherwise(0)).alias("successes"),
        )
        .select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "method",
            "attempts",
            F.col("successes").cast("long").alias("successes"),
            (F.col("successes") / F.col("attempts")).alias("success_rate"),
        )
    )


def customer_sessions(activity: DataFrame, gap: str) -> DataFrame:
    """Session windows per customer: a session ends after ``gap`` without activity.

    :param activity: Silver customer activity: ``customer_id``, ``activity`` strings,
        ``event_time`` timestamp.
    :returns: ``customer_id`` string, ``session_start``, ``session_end`` timestamps (end =
        last event + gap, Spark's session_window convention), ``event_count`` bigint,
        ``reached_checkout`` boolean.
    """
    from pyspark.sql import functions as F

    return (
        activity.groupBy(F.session_window("event_time", gap).alias("s"), "customer_id")
        .agg(
            F.count("*").alias("event_count"),
            F.max(F.col("activity") == "checkout").alias("reached_checkout"),
        )
        .select(
            "customer_id",
            F.col("s.start").alias("session_start"),
            F.col("s.end").alias("session_end"),
            "event_count",
            "reached_checkout",
        )
    )


def customer_metrics_increment(orders: DataFrame) -> DataFrame:
    """Per customer and currency, what a batch of placed orders adds to the running metrics.

    Guest orders (null ``customer_id``) have no customer to count against and are left out.

    :param orders: Silver orders: ``event_type``, ``customer_id``, ``currency`` strings,
        ``total`` decimal(18,2), ``event_time`` timestamp.
    :returns: ``customer_id``, ``currency`` strings, ``order_count`` bigint, ``spend``
        decimal(28,2), ``last_order_time`` timestamp.
    """
    from pyspark.sql import functions as F

    return (
        orders.where((F.col("event_type") == "order_placed") & F.col("customer_id").isNotNull())
        .groupBy("customer_id", "currency")
        .agg(
            F.count("*").alias("order_count"),
            F.sum("total").cast("decimal(28,2)").alias("spend"),
            F.max("event_time").alias("last_order_time"),
        )
    )


def aggregate_window(rows: DataFrame, window: WindowSpec, gap: str | None = None) -> DataFrame:
    """Compute a Gold table declared with ``window`` (``include/pipeline.yaml``) from its
    Silver ``rows``, with the function the window names.

    :param rows: the window's Silver source rows (see the named function for the columns).
    :param window: the table's window declaration.
    :param gap: the session gap interval (``"10 minutes"``), for a session window; its
        declaration names the job setting holding it (``Catalog.window_gap``).
    :returns: the named function's columns.
    :raises ValueError: a session window without ``gap``.
    """
    if window.aggregate == "customer_sessions":
        if gap is None:
            raise ValueError("a session window needs its gap")
        return customer_sessions(rows, gap)
    assert window.duration is not None  # validated: tumbling and sliding windows have one
    if window.aggregate == "payment_success_rate":
        return payment_success_rate(rows, window.duration)
    return payment_totals(rows, window.duration, window.slide)
