"""Payment alert rules called directly on a handful of hand-made payments.

Expected alert ids are computed here with :mod:`hashlib` from the rule and its parts (the
module's documented recipe: SHA-256 of ``rule|part|...``, first 32 hex digits), never by
calling the code under test. Event times are UTC, like the platform's Spark session.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from pyspark.testing import assertDataFrameEqual, assertSchemaEqual

from spark_jobs.transforms.alerts import (
    ALERTS_DDL,
    AMOUNT_RULE,
    STATELESS_RULES,
    VELOCITY_RULE,
    alert_id,
    alert_records,
    alerts_from_records,
    amount_alerts,
    stateless_alerts,
    velocity_alerts,
)

pytestmark = pytest.mark.unit

PAYMENTS = (
    "event_id string, customer_id string, amount decimal(18,2), currency string, "
    "event_time timestamp"
)
# The alert row, as the module docstring states it.
ALERT = (
    "alert_id string, rule string, customer_id string, event_id string, payment_count bigint, "
    "amount decimal(18,2), currency string, window_start timestamp, window_end timestamp, "
    "event_time timestamp, detail string"
)
VELOCITY = {"window": "5 minutes", "watermark": "10 minutes", "max_payments": 2}


def at(hour: int, minute: int, second: int = 0) -> datetime:
    """2026-01-01 at the given UTC time of day."""
    return datetime(2026, 1, 1, hour, minute, second, tzinfo=UTC)


def d(text: str) -> Decimal:
    return Decimal(text)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def schema(spark, ddl: str) -> StructType:
    return spark.createDataFrame([], ddl).schema


def ids(frame) -> list[str]:
    return sorted(r.alert_id for r in frame.collect())


# -- alert_id --------------------------------------------------------------------------------


def test_alert_id_is_the_first_32_hex_digits_of_sha256_of_rule_and_parts(spark) -> None:
    rows = spark.createDataFrame(
        [("e1", "c1", at(12, 0)), ("e1", "c1", at(12, 0)), ("e2", "c1", at(12, 0))],
        "a string, b string, t timestamp",
    )
    actual = rows.select(
        alert_id("r", F.col("a")).alias("one"),
        alert_id("r", F.col("a"), F.col("b"), F.col("t")).alias("three"),
        alert_id("other", F.col("a")).alias("other_rule"),
        alert_id("r", F.col("b"), F.col("a")).alias("swapped"),
    )
    expected = spark.createDataFrame(
        [
            (sha("r|e1"), sha("r|e1|c1|2026-01-01 12:00:00"), sha("other|e1"), sha("r|c1|e1")),
            (sha("r|e1"), sha("r|e1|c1|2026-01-01 12:00:00"), sha("other|e1"), sha("r|c1|e1")),
            (sha("r|e2"), sha("r|e2|c1|2026-01-01 12:00:00"), sha("other|e2"), sha("r|c1|e2")),
        ],
        "one string, three string, other_rule string, swapped string",
    )
    assertDataFrameEqual(actual, expected)
    # Same input, same id; a different part, rule or order of parts, a different id.
    first, again, other = actual.collect()
    assert first == again
    assert len({first.one, other.one, first.other_rule, first.swapped}) == 4
    assert all(len(v) == 32 and int(v, 16) >= 0 for v in first)


# -- amount_alerts ---------------------------------------------------------------------------


def test_amount_alerts_output_schema_is_the_alert_row_and_the_table_adds_detected_at(spark) -> None:
    payments = spark.createDataFrame([("e1", "c1", d("9.00"), "BRL", at(12, 0))], PAYMENTS)
    actual = amount_alerts(payments, 1.0).schema
    assertSchemaEqual(actual, schema(spark, ALERT))
    table = schema(spark, ALERTS_DDL)
    assertSchemaEqual(actual.add("detected_at", "timestamp"), table)


def test_amount_alerts_fire_strictly_above_the_threshold(spark) -> None:
    """Equal to the threshold: no alert; a cent above: an alert. A null amount never alerts;
    a payment without customer still does (``customer_id`` null)."""
    payments = spark.createDataFrame(
        [
            ("e1", "c1", d("1000.00"), "BRL", at(12, 0)),  # == threshold
            ("e2", "c1", d("1000.01"), "BRL", at(12, 1)),  # 1000.01 > 1000
            ("e3", None, d("5000.00"), "USD", at(12, 2)),
            ("e4", "c2", None, "BRL", at(12, 3)),
            ("e5", "c2", d("0.00"), "BRL", at(12, 4)),
            ("e6", "c3", d("999.99"), "BRL", at(12, 5)),
        ],
        PAYMENTS,
    )
    no_window = None
    expected = spark.createDataFrame(
        [
            (
                sha("amount_above_threshold|e2"),
                "amount_above_threshold",
                "c1",
                "e2",
                1,
                d("1000.01"),
                "BRL",
                no_window,
                no_window,
                at(12, 1),
                "amount above 1000: 1000.01",
            ),
            (
                sha("amount_above_threshold|e3"),
                "amount_above_threshold",
                None,
                "e3",
                1,
                d("5000.00"),
                "USD",
                no_window,
                no_window,
                at(12, 2),
                "amount above 1000: 5000.00",
            ),
        ],
        ALERT,
    )
    assert AMOUNT_RULE == "amount_above_threshold"
    assertDataFrameEqual(amount_alerts(payments, 1000.0), expected)


def test_amount_alert_id_depends_on_the_payment_only(spark) -> None:
    """The same payment seen again (a retry, a restarted query, another threshold) gets the
    same id, so the at-least-once topic's consumers can deduplicate; another payment gets
    another id even with identical amount, customer and time."""
    row = ("e1", "c1", d("700.00"), "BRL", at(12, 0))
    once = amount_alerts(spark.createDataFrame([row], PAYMENTS), 500.0).collect()
    again = amount_alerts(spark.createDataFrame([row, row], PAYMENTS), 100.0).collect()
    other = amount_alerts(spark.createDataFrame([("e2", *row[1:])], PAYMENTS), 500.0).collect()
    assert [a.alert_id for a in once] == [sha("amount_above_threshold|e1")]
    assert [a.alert_id for a in again] == [sha("amount_above_threshold|e1")] * 2
    assert [a.alert_id for a in other] == [sha("amount_above_threshold|e2")]


# -- velocity_alerts -------------------------------------------------------------------------


def test_velocity_alerts_output_schema_is_the_alert_row(spark) -> None:
    payments = spark.createDataFrame([("e1", "c1", d("9.00"), "BRL", at(12, 0))], PAYMENTS)
    assertSchemaEqual(velocity_alerts(payments, **VELOCITY).schema, schema(spark, ALERT))


def test_velocity_alerts_fire_above_the_limit_per_customer_and_tumbling_window(spark) -> None:
    """Limit 2 per 5-minute window: 3 payments alert, exactly 2 do not. A payment at exactly
    12:05:00 belongs to [12:05, 12:10), not [12:00, 12:05). The alert carries the window's
    total, its newest event time and the smallest currency code; a zero amount is still a
    payment; payments without customer are never counted."""
    payments = spark.createDataFrame(
        [
            # c1: 3 payments in [12:00, 12:05): alert.
            ("a1", "c1", d("10.00"), "USD", at(12, 0)),
            ("a2", "c1", d("20.00"), "BRL", at(12, 1)),
            ("a3", "c1", d("0.00"), "USD", at(12, 4, 59)),
            # c2: exactly the limit: no alert.
            ("b1", "c2", d("1.00"), "BRL", at(12, 0)),
            ("b2", "c2", d("1.00"), "BRL", at(12, 2)),
            # c3: 2 in [12:00, 12:05) + 1 at exactly 12:05:00, in the next window: no alert.
            ("c1", "c3", d("1.00"), "BRL", at(12, 1)),
            ("c2", "c3", d("1.00"), "BRL", at(12, 3)),
            ("c3", "c3", d("1.00"), "BRL", at(12, 5)),
            # c4: 3 in [12:05, 12:10): alert; smallest currency code EUR < USD.
            ("d1", "c4", d("5.00"), "USD", at(12, 5)),
            ("d2", "c4", d("6.00"), "EUR", at(12, 6)),
            ("d3", "c4", d("7.50"), "USD", at(12, 9, 59)),
            # No customer: never counted, even 3 in one window.
            ("n1", None, d("1.00"), "BRL", at(12, 0)),
            ("n2", None, d("1.00"), "BRL", at(12, 1)),
            ("n3", None, d("1.00"), "BRL", at(12, 2)),
        ],
        PAYMENTS,
    )
    expected = spark.createDataFrame(
        [
            (
                sha("payment_velocity|c1|2026-01-01 12:00:00"),
                "payment_velocity",
                "c1",
                None,
                3,
                d("10.00") + d("20.00") + d("0.00"),
                "BRL",  # min("USD", "BRL", "USD")
                at(12, 0),
                at(12, 5),
                at(12, 4, 59),
                "3 payments in 5 minutes (limit 2)",
            ),
            (
                sha("payment_velocity|c4|2026-01-01 12:05:00"),
                "payment_velocity",
                "c4",
                None,
                3,
                d("5.00") + d("6.00") + d("7.50"),
                "EUR",  # min("USD", "EUR", "USD")
                at(12, 5),
                at(12, 10),
                at(12, 9, 59),
                "3 payments in 5 minutes (limit 2)",
            ),
        ],
        ALERT,
    )
    assert VELOCITY_RULE == "payment_velocity"
    assertDataFrameEqual(velocity_alerts(payments, **VELOCITY), expected)


def test_velocity_counts_a_retried_event_id_once(spark) -> None:
    """A producer retry re-sends the same event: 2 distinct payments + 1 retry is at the limit
    (no alert); a third distinct payment is above it, and the retry adds nothing to the
    total."""
    retry = ("p2", "c1", d("20.00"), "BRL", at(12, 2))
    two = [("p1", "c1", d("10.00"), "BRL", at(12, 1)), retry, retry]
    assert velocity_alerts(spark.createDataFrame(two, PAYMENTS), **VELOCITY).count() == 0
    three = [*two, ("p3", "c1", d("30.00"), "BRL", at(12, 3))]
    actual = velocity_alerts(spark.createDataFrame(three, PAYMENTS), **VELOCITY)
    assert [(r.payment_count, r.amount) for r in actual.collect()] == [
        (3, d("10.00") + d("20.00") + d("30.00"))
    ]


def test_velocity_counts_distinct_payments_by_event_id_even_if_a_resend_differs(spark) -> None:
    """Distinct payments "by event_id": a re-sent event whose amount differs from the first
    send (a conflict, in Silver's words) is still one payment, so 2 event ids are at the limit
    of 2 and raise no alert."""
    payments = spark.createDataFrame(
        [
            ("p1", "c1", d("10.00"), "BRL", at(12, 1)),
            ("p2", "c1", d("20.00"), "BRL", at(12, 2)),
            ("p2", "c1", d("25.00"), "BRL", at(12, 2)),  # same event id, another amount
        ],
        PAYMENTS,
    )
    assert velocity_alerts(payments, **VELOCITY).collect() == []
    # With a third event id the window is above the limit; of p2's two amounts the smallest
    # counts (a rule that does not depend on the order the sends arrived in).
    third = payments.union(
        spark.createDataFrame([("p3", "c1", d("30.00"), "BRL", at(12, 3))], PAYMENTS)
    )
    actual = velocity_alerts(third, **VELOCITY)
    assert [(r.payment_count, r.amount) for r in actual.collect()] == [
        (3, d("10.00") + min(d("20.00"), d("25.00")) + d("30.00"))
    ]


def test_velocity_alert_id_is_the_customer_and_window_only(spark) -> None:
    """Later updates of the same window (a fourth payment) carry the same id; another window
    or another customer gets another id."""
    base = [(f"p{i}", "c1", d("1.00"), "BRL", at(12, i)) for i in range(3)]  # 12:00..12:02
    fourth = ("p9", "c1", d("1.00"), "BRL", at(12, 4))
    next_window = [(f"q{i}", "c1", d("1.00"), "BRL", at(12, 5 + i)) for i in range(3)]
    other_customer = [(f"r{i}", "c2", d("1.00"), "BRL", at(12, i)) for i in range(3)]

    first = ids(velocity_alerts(spark.createDataFrame(base, PAYMENTS), **VELOCITY))
    update = velocity_alerts(spark.createDataFrame([*base, fourth], PAYMENTS), **VELOCITY)
    assert [r.payment_count for r in update.collect()] == [4]
    everything = spark.createDataFrame([*base, *next_window, *other_customer], PAYMENTS)
    assert first == [sha("payment_velocity|c1|2026-01-01 12:00:00")]
    assert ids(update) == first
    assert ids(velocity_alerts(everything, **VELOCITY)) == sorted(
        [
            sha("payment_velocity|c1|2026-01-01 12:00:00"),
            sha("payment_velocity|c1|2026-01-01 12:05:00"),
            sha("payment_velocity|c2|2026-01-01 12:00:00"),
        ]
    )


# -- stateless rules and the alerts topic's records ------------------------------------------


def test_the_stateless_rules_are_the_amount_rule(spark) -> None:
    payments = spark.createDataFrame(
        [("e1", "c1", d("10.00"), "BRL", at(12, 0)), ("e2", "c1", d("900.00"), "BRL", at(12, 1))],
        PAYMENTS,
    )
    assert STATELESS_RULES == (AMOUNT_RULE,)
    assertDataFrameEqual(stateless_alerts(payments, 500.0), amount_alerts(payments, 500.0))


def test_alert_records_round_trip_through_the_topic_with_a_per_row_detection_time(spark) -> None:
    """key = alert_id; value = the alert as JSON plus detected_at (wall clock, not the batch's
    start); reading the records back gives the alert row unchanged."""
    from datetime import datetime

    payments = spark.createDataFrame(
        [
            ("e1", "c1", d("900.50"), "BRL", at(12, 0).replace(microsecond=123456)),
            ("e2", None, d("600.00"), "USD", at(12, 1)),
        ],
        PAYMENTS,
    )
    alerts = amount_alerts(payments, 500.0)
    before = datetime.now(UTC)
    records = alert_records(alerts).collect()
    after = datetime.now(UTC)
    assert sorted(r.key for r in records) == [
        sha("amount_above_threshold|e1"),
        sha("amount_above_threshold|e2"),
    ]
    for record in records:
        detected = datetime.fromisoformat(json.loads(record.value)["detected_at"])
        assert before.replace(microsecond=0) <= detected.astimezone(UTC) <= after
    kafka_rows = spark.createDataFrame(
        [(bytearray(r.value.encode()), "alerts", 0, i) for i, r in enumerate(records)],
        "value binary, topic string, partition int, offset long",
    )
    back = alerts_from_records(kafka_rows)
    assert all(r._valid for r in back.collect())
    assertDataFrameEqual(back.select(*alerts.columns), alerts)


def test_records_that_are_not_alerts_are_flagged_not_dropped(spark) -> None:
    """Not JSON, no alert_id, an unknown rule, an id that is not 32 hex digits: flagged (a
    stray record must not take a real alert's id in the table)."""
    good = sha("amount_above_threshold|e1")
    kafka_rows = spark.createDataFrame(
        [
            (bytearray(b"not json"), "alerts", 0, 0),
            (bytearray(b'{"rule": "amount_above_threshold"}'), "alerts", 0, 1),
            (bytearray(f'{{"alert_id": "{good}", "rule": "r"}}'.encode()), "alerts", 0, 2),
            (bytearray(b'{"alert_id": "x", "rule": "payment_velocity"}'), "alerts", 0, 3),
            (
                bytearray(f'{{"alert_id": "{good}", "rule": "{AMOUNT_RULE}"}}'.encode()),
                "alerts",
                1,
                7,
            ),
        ],
        "value binary, topic string, partition int, offset long",
    )
    flagged = {(r.partition, r.offset): r._valid for r in alerts_from_records(kafka_rows).collect()}
    assert flagged == {(0, 0): False, (0, 1): False, (0, 2): False, (0, 3): False, (1, 7): True}
