"""Payment alert rules: pure DataFrame functions (stream or batch in, alerts out).

Every alert has a deterministic ``alert_id`` (SHA-256 of the rule and what it is about,
first 32 hex digits), so that consumers of the at-least-once Kafka topic can deduplicate and
the Delta table keeps one row per alert.

Alert rows: ``alert_id`` string, ``rule`` string (``amount_above_threshold`` or
``payment_velocity``), ``customer_id`` string (may be null for the amount rule),
``event_id`` string (the payment; null for velocity), ``payment_count`` bigint, ``amount``
decimal(18,2) (the payment's, or the window's total), ``currency`` string (for velocity:
the smallest currency code seen in the window), ``window_start``/``window_end`` timestamps
(velocity only), ``event_time`` timestamp (the payment's, or the window's newest), ``detail``
string.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

AMOUNT_RULE = "amount_above_threshold"
VELOCITY_RULE = "payment_velocity"
#: Rules judged on one payment alone (no state): real-time mode runs them
#: (``spark_jobs.payment_alerts_rt``); the others stay on micro-batches.
STATELESS_RULES = (AMOUNT_RULE,)
#: JSON timestamps of the alert records: microseconds, as the table keeps them (Spark's
#: default JSON format stops at milliseconds).
_JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
#: Spark DDL of ``gold_payment_alerts`` (the alert columns plus ``detected_at``).
ALERTS_DDL = (
    "alert_id string, rule string, customer_id string, event_id string, payment_count bigint, "
    "amount decimal(18,2), currency string, window_start timestamp, window_end timestamp, "
    "event_time timestamp, detail string, detected_at timestamp"
)


def alert_id(rule: str, *parts: Column) -> Column:
    """Deterministic alert id: ``sha2(rule|part|...)`` truncated to 32 hex digits."""

    joined = F.concat_ws("|", F.lit(rule), *[p.cast("string") for p in parts])
    return F.substring(F.sha2(joined, 256), 1, 32)


def amount_alerts(payments: DataFrame, threshold: float) -> DataFrame:
    """One alert per payment whose ``amount`` exceeds ``threshold``. Stateless.

    :param payments: parsed payments (``event_id``, ``customer_id``, ``amount``,
        ``currency``, ``event_time``), as Silver types them.
    """

    big = payments.where(F.col("amount") > F.lit(threshold))
    return big.select(
        alert_id(AMOUNT_RULE, F.col("event_id")).alias("alert_id"),
        F.lit(AMOUNT_RULE).alias("rule"),
        "customer_id",
        "event_id",
        F.lit(1).cast("bigint").alias("payment_count"),
        F.col("amount").cast("decimal(18,2)").alias("amount"),
        "currency",
        F.lit(None).cast("timestamp").alias("window_start"),
        F.lit(None).cast("timestamp").alias("window_end"),
        "event_time",
        F.concat(F.lit(f"amount above {threshold:g}: "), F.col("amount").cast("string")).alias(
            "detail"
        ),
    )


def stateless_alerts(payments: DataFrame, threshold: float) -> DataFrame:
    """The alerts of every rule in :data:`STATELESS_RULES` (today the amount rule), in the
    alert row shape: no aggregation, no state, so a real-time query may run it."""
    return amount_alerts(payments, threshold)


def alert_records(alerts: DataFrame) -> DataFrame:
    """Alert rows -> the records of the alerts topic.

    :returns: ``key`` string (the ``alert_id``) and ``value`` string (JSON of the alert
        with ``detected_at``, the wall-clock time the alert was computed, to the
        millisecond: read per row with ``java.lang.System.currentTimeMillis`` because
        ``current_timestamp()`` is the batch's start, a minute early in real-time mode;
        timestamps in microseconds, :data:`_JSON_OPTIONS`).
    """

    now_ms = F.expr("reflect('java.lang.System', 'currentTimeMillis')").cast("bigint")
    stamped = alerts.withColumn("detected_at", F.timestamp_millis(now_ms))
    return stamped.select(
        F.col("alert_id").alias("key"),
        F.to_json(F.struct(*stamped.columns), _JSON_OPTIONS).alias("value"),
    )


def alerts_from_records(records: DataFrame) -> DataFrame:
    """Records of the alerts topic -> ``gold_payment_alerts`` rows (:data:`ALERTS_DDL`).

    :param records: Kafka source rows (``value`` binary, ``topic``, ``partition``,
        ``offset``).
    :returns: the alert columns of :data:`ALERTS_DDL`, plus ``_valid`` boolean: false for a
        record that is not an alert (not JSON, a rule this module does not have, or an
        ``alert_id`` that is not 32 lower-case hex digits), which the caller reports and
        keeps out of the table (a stray record must not take a real alert's id).
    """

    alert = F.from_json(F.col("value").cast("string"), ALERTS_DDL, _JSON_OPTIONS)
    parsed = records.select(alert.alias("_a"), "topic", "partition", "offset")
    valid = F.coalesce(
        F.col("_a.rule").isin(AMOUNT_RULE, VELOCITY_RULE)
        & F.col("_a.alert_id").rlike("^[0-9a-f]{32}$"),
        F.lit(False),
    )
    return parsed.select("_a.*", "topic", "partition", "offset", valid.alias("_valid"))


def velocity_alerts(
    payments: DataFrame, *, window: str, watermark: str, max_payments: int
) -> DataFrame:
    """Customers with more than ``max_payments`` distinct payments (by ``event_id``) in one
    tumbling event-time window. An ``event_id`` sent more than once counts once, with its
    smallest amount if the sends disagree.

    Stateful (a windowed count per customer, kept until the watermark passes the window's
    end); run in ``update`` output mode, so an alert appears in the micro-batch in which the
    count first exceeds the limit (later updates of the same window carry the same id).

    :param window: window length, e.g. ``5 minutes``.
    :param watermark: how late a payment may arrive and still count, e.g. ``10 minutes``.
    """

    # Distinct payments: a producer retry re-sends the same event_id, which must not look
    # like a second payment (Silver drops such duplicates; this job reads Kafka directly).
    distinct = F.collect_set(F.struct("event_id", "amount")).alias("_payments")
    # The set still holds an event_id twice if its sends disagree on the amount (a conflict,
    # in Silver's words): sorted by (event_id, amount), only the first entry of each event_id
    # is kept, i.e. the smallest amount, whatever order the sends arrived in. Done after the
    # aggregation, so the streaming state (the set) is unchanged.
    ordered = F.array_sort("_payments")
    by_event_id = F.filter(
        ordered, lambda p, i: (i == 0) | (p["event_id"] != F.get(ordered, i - 1)["event_id"])
    )
    counts = (
        payments.where(F.col("customer_id").isNotNull())
        .withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window).alias("w"), "customer_id")
        .agg(distinct, F.min("currency").alias("currency"), F.max("event_time").alias("event_time"))
        .withColumn("_payments", by_event_id)
        .withColumn("payment_count", F.size("_payments").cast("bigint"))
        .withColumn(
            "amount",
            F.aggregate(
                "_payments",
                F.lit(0).cast("decimal(28,2)"),
                lambda total, p: (total + p["amount"]).cast("decimal(28,2)"),
            ).cast("decimal(18,2)"),
        )
    )
    over = counts.where(F.col("payment_count") > max_payments)
    return over.select(
        alert_id(VELOCITY_RULE, F.col("customer_id"), F.col("w.start")).alias("alert_id"),
        F.lit(VELOCITY_RULE).alias("rule"),
        "customer_id",
        F.lit(None).cast("string").alias("event_id"),
        "payment_count",
        "amount",
        "currency",
        F.col("w.start").alias("window_start"),
        F.col("w.end").alias("window_end"),
        "event_time",
        F.concat(
            F.col("payment_count").cast("string"),
            F.lit(f" payments in {window} (limit {max_payments})"),
        ).alias("detail"),
    )
