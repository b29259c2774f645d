"""Gold's pure transforms called directly on a handful of hand-made Silver rows: the
repository's declared windows (``include/pipeline.yaml``) as compiled by
:func:`aggregate_window`, declarations made here for each kind of measure, and the customer
metrics (code).

Every expected value is worked out by hand below (the arithmetic is written out), never by
calling the code under test. Event times are UTC, like the platform's Spark session.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType
from pyspark.testing import assertDataFrameEqual, assertSchemaEqual

from ingest_core.catalog import WindowSpec, get_catalog
from spark_jobs.transforms.gold import aggregate_window, customer_metrics_increment, window_keys

pytestmark = pytest.mark.unit

PAYMENTS = (
    "event_time timestamp, method string, currency string, amount decimal(18,2), status string"
)
ACTIVITY = "customer_id string, activity string, event_time timestamp"
ORDERS = (
    "event_type string, customer_id string, currency string, total decimal(18,2), "
    "event_time timestamp"
)
# Output schemas as the docstrings state them.
TOTALS = (
    "window_start timestamp, window_end timestamp, currency string, payment_count bigint, "
    "amount_total decimal(28,2)"
)
SUCCESS = (
    "window_start timestamp, window_end timestamp, method string, attempts bigint, "
    "successes bigint, success_rate double"
)
SESSIONS = (
    "customer_id string, session_start timestamp, session_end timestamp, event_count bigint, "
    "reached_checkout boolean"
)
METRICS = (
    "customer_id string, currency string, order_count bigint, spend decimal(28,2), "
    "last_order_time timestamp"
)


def at(hour: int, minute: int, second: int = 0, micro: int = 0) -> datetime:
    """2026-01-01 at the given UTC time of day."""
    return datetime(2026, 1, 1, hour, minute, second, micro, tzinfo=UTC)


def d(text: str) -> Decimal:
    return Decimal(text)


def schema(spark, ddl: str) -> StructType:
    return spark.createDataFrame([], ddl).schema


def declared(table: str) -> WindowSpec:
    return get_catalog().window(table)


def payment_totals(payments: DataFrame, duration: str, slide: str | None = None) -> DataFrame:
    """The declared payment totals (tumbling or sliding) of ``duration`` and ``slide``."""
    table = "gold_payment_totals_10m_sliding" if slide else "gold_payment_totals_5m"
    assert (declared(table).duration, declared(table).slide) == (duration, slide)
    return aggregate_window(payments, declared(table))


def payment_success_rate(payments: DataFrame, duration: str) -> DataFrame:
    assert declared("gold_payment_success_rate_15m").duration == duration
    return aggregate_window(payments, declared("gold_payment_success_rate_15m"))


def customer_sessions(activity: DataFrame, gap: str) -> DataFrame:
    return aggregate_window(activity, declared("gold_customer_sessions"), gap)


# -- payment_totals ------------------------------------------------------------------------


def test_payment_totals_output_schema_is_the_documented_one(spark) -> None:
    payments = spark.createDataFrame([(at(12, 0), "pix", "BRL", d("1.00"), "authorized")], PAYMENTS)
    assertSchemaEqual(payment_totals(payments, "5 minutes").schema, schema(spark, TOTALS))
    sliding = payment_totals(payments, "10 minutes", "5 minutes")
    assertSchemaEqual(sliding.schema, schema(spark, TOTALS))


def test_payment_totals_tumbling_windows_per_currency_authorized_only(spark) -> None:
    """Windows are [start, end): an event at exactly 12:05:00 belongs to [12:05, 12:10), one a
    microsecond earlier to [12:00, 12:05). Declined payments add neither count nor money; a
    zero amount is still a payment."""
    payments = spark.createDataFrame(
        [
            (at(12, 0), "credit_card", "BRL", d("10.00"), "authorized"),
            (at(12, 4, 59, 999_999), "pix", "BRL", d("5.50"), "authorized"),
            (at(12, 5), "pix", "BRL", d("7.25"), "authorized"),  # exactly at the window end
            (at(12, 2), "credit_card", "BRL", d("100.00"), "declined"),
            (at(12, 1), "credit_card", "USD", d("3.00"), "authorized"),
            (at(12, 3), "voucher", "USD", d("0.00"), "authorized"),
        ],
        PAYMENTS,
    )
    expected = spark.createDataFrame(
        [
            (at(12, 0), at(12, 5), "BRL", 2, d("10.00") + d("5.50")),  # 15.50; 100.00 declined
            (at(12, 5), at(12, 10), "BRL", 1, d("7.25")),
            (at(12, 0), at(12, 5), "USD", 2, d("3.00") + d("0.00")),
        ],
        TOTALS,
    )
    assertDataFrameEqual(payment_totals(payments, "5 minutes"), expected)


def test_payment_totals_null_amount_counts_but_adds_nothing(spark) -> None:
    """SQL aggregate semantics: ``count(*)`` counts the payment, ``sum`` skips the null; a
    window whose only amounts are null has a null total (not 0)."""
    payments = spark.createDataFrame(
        [
            (at(12, 0), "pix", "BRL", d("4.00"), "authorized"),
            (at(12, 1), "pix", "BRL", None, "authorized"),
            (at(12, 2), "pix", "EUR", None, "authorized"),
        ],
        PAYMENTS,
    )
    expected = spark.createDataFrame(
        [(at(12, 0), at(12, 5), "BRL", 2, d("4.00")), (at(12, 0), at(12, 5), "EUR", 1, None)],
        TOTALS,
    )
    assertDataFrameEqual(payment_totals(payments, "5 minutes"), expected)


def test_payment_totals_sliding_windows_count_an_event_in_each_window_holding_it(spark) -> None:
    """10-minute windows sliding by 5: every event lies in two windows, so it is counted (and
    summed) twice overall; an event at exactly 12:10 is in [12:05, 12:15) and [12:10, 12:20),
    not in [12:00, 12:10)."""
    payments = spark.createDataFrame(
        [
            (at(12, 2), "pix", "BRL", d("10.00"), "authorized"),  # [11:55,12:05) [12:00,12:10)
            (at(12, 7), "pix", "BRL", d("2.00"), "authorized"),  # [12:00,12:10) [12:05,12:15)
            (at(12, 10), "pix", "BRL", d("1.00"), "authorized"),  # [12:05,12:15) [12:10,12:20)
            (at(12, 8), "pix", "BRL", d("50.00"), "refused"),
        ],
        PAYMENTS,
    )
    expected = spark.createDataFrame(
        [
            (at(11, 55), at(12, 5), "BRL", 1, d("10.00")),
            (at(12, 0), at(12, 10), "BRL", 2, d("10.00") + d("2.00")),
            (at(12, 5), at(12, 15), "BRL", 2, d("2.00") + d("1.00")),
            (at(12, 10), at(12, 20), "BRL", 1, d("1.00")),
        ],
        TOTALS,
    )
    actual = payment_totals(payments, "10 minutes", "5 minutes")
    assertDataFrameEqual(actual, expected)
    # 3 authorized events x 2 windows each = 6 counted appearances.
    assert sum(r.payment_count for r in actual.collect()) == 3 * 2


# -- payment_success_rate --------------------------------------------------------------------


def test_payment_success_rate_output_schema_is_the_documented_one(spark) -> None:
    payments = spark.createDataFrame([(at(12, 0), "pix", "BRL", d("1.00"), "declined")], PAYMENTS)
    assertSchemaEqual(payment_success_rate(payments, "15 minutes").schema, schema(spark, SUCCESS))


def test_payment_success_rate_counts_every_attempt_per_method_and_window(spark) -> None:
    """Attempts are every status (a null status too); successes are ``authorized`` only. An
    attempt at exactly 12:15:00 opens the next 15-minute window."""
    payments = spark.createDataFrame(
        [
            (at(12, 0), "credit_card", "BRL", d("10.00"), "authorized"),
            (at(12, 5), "credit_card", "BRL", d("10.00"), "declined"),
            (at(12, 14, 59), "credit_card", "USD", d("10.00"), "authorized"),
            (at(12, 15), "credit_card", "BRL", d("10.00"), "declined"),  # next window
            (at(12, 1), "pix", "BRL", d("0.00"), "authorized"),
            (at(12, 3), "pix", "BRL", None, None),
            (at(12, 2), "boleto", "BRL", d("9.00"), "declined"),
        ],
        PAYMENTS,
    )
    expected = spark.createDataFrame(
        [
            (at(12, 0), at(12, 15), "credit_card", 3, 2, 2 / 3),
            (at(12, 15), at(12, 30), "credit_card", 1, 0, 0 / 1),
            (at(12, 0), at(12, 15), "pix", 2, 1, 1 / 2),
            (at(12, 0), at(12, 15), "boleto", 1, 0, 0 / 1),
        ],
        SUCCESS,
    )
    actual = payment_success_rate(payments, "15 minutes")
    assertDataFrameEqual(actual, expected)
    assert all(0.0 <= r.success_rate <= 1.0 for r in actual.collect())


# -- customer_sessions -----------------------------------------------------------------------


def test_customer_sessions_output_schema_is_the_documented_one(spark) -> None:
    activity = spark.createDataFrame([("c1", "page_view", at(12, 0))], ACTIVITY)
    assertSchemaEqual(customer_sessions(activity, "10 minutes").schema, schema(spark, SESSIONS))


def test_customer_sessions_gap_exactly_at_the_limit_joins_longer_splits(spark) -> None:
    """Spark's session_window convention (also the one tests/integration/medallion.py's
    independent sessioniser follows): an event exactly ``gap`` after the previous one joins
    its session, one a second later starts a new session; a session ends ``gap`` after its
    last event. Sessions are per customer: c2's events never extend c1's sessions."""
    activity = spark.createDataFrame(
        [
            ("c1", "page_view", at(12, 0)),
            ("c1", "add_to_cart", at(12, 10)),  # 12:10 - 12:00 = 10 min: joins
            ("c1", "page_view", at(12, 20, 1)),  # 12:20:01 - 12:10 = 10 min 1 s: new session
            ("c1", "checkout", at(12, 25)),
            ("c2", "checkout", at(12, 0)),
            ("c2", "page_view", at(12, 15)),  # 15 min later: new session
            ("c2", "page_view", at(12, 16)),
        ],
        ACTIVITY,
    )
    expected = spark.createDataFrame(
        [
            ("c1", at(12, 0), at(12, 10 + 10), 2, False),
            ("c1", at(12, 20, 1), at(12, 25 + 10), 2, True),
            ("c2", at(12, 0), at(12, 0 + 10), 1, True),
            ("c2", at(12, 15), at(12, 16 + 10), 2, False),
        ],
        SESSIONS,
    )
    assertDataFrameEqual(customer_sessions(activity, "10 minutes"), expected)


# -- customer_metrics_increment --------------------------------------------------------------


def test_customer_metrics_increment_output_schema_is_the_documented_one(spark) -> None:
    orders = spark.createDataFrame([("order_placed", "c1", "BRL", d("1.00"), at(12, 0))], ORDERS)
    assertSchemaEqual(customer_metrics_increment(orders).schema, schema(spark, METRICS))


def test_customer_metrics_increment_per_customer_and_currency_placed_orders_only(spark) -> None:
    """Only ``order_placed`` counts (a later cancellation moves neither count, spend nor the
    last order time); guest orders (null customer) are left out; each currency is its own
    row; a zero total is still an order."""
    orders = spark.createDataFrame(
        [
            ("order_placed", "c1", "BRL", d("10.00"), at(12, 0)),
            ("order_placed", "c1", "BRL", d("20.50"), at(12, 30)),
            ("order_placed", "c1", "USD", d("5.00"), at(12, 10)),
            ("order_cancelled", "c1", "BRL", d("99.00"), at(13, 0)),
            ("order_placed", None, "BRL", d("50.00"), at(12, 40)),  # guest
            ("order_placed", "c2", "BRL", d("0.00"), at(12, 5)),
        ],
        ORDERS,
    )
    expected = spark.createDataFrame(
        [
            ("c1", "BRL", 2, d("10.00") + d("20.50"), max(at(12, 0), at(12, 30))),
            ("c1", "USD", 1, d("5.00"), at(12, 10)),
            ("c2", "BRL", 1, d("0.00"), at(12, 5)),
        ],
        METRICS,
    )
    assertDataFrameEqual(customer_metrics_increment(orders), expected)


def test_customer_metrics_increment_of_nothing_placed_is_empty(spark) -> None:
    orders = spark.createDataFrame(
        [
            ("order_cancelled", "c1", "BRL", d("1.00"), at(12, 0)),
            ("order_placed", None, "BRL", d("2.00"), at(12, 1)),
        ],
        ORDERS,
    )
    assertDataFrameEqual(customer_metrics_increment(orders), spark.createDataFrame([], METRICS))


# -- declared measures of every kind -------------------------------------------------------

REVIEWS = "event_id string, event_time timestamp, score int, order_id string"


def review_window(**change: object) -> WindowSpec:
    """A daily window over reviews with no grouping column, one measure of each kind."""
    declaration = {
        "kind": "tumbling",
        "source": "silver_reviews",
        "duration": "1 day",
        "watermark": "reviews_watermark",
        "measures": {
            "review_count": "count",
            "average_score": {"avg": "score"},
            "lowest": {"min": "score"},
            "highest": {"max": "score"},
            "score_total": {"sum": "score"},
            "low_scores": {"count_if": {"column": "score", "at_most": 2}},
            "any_top": {"any": {"column": "score", "in": [5]}},
            "low_share": {"ratio": ["low_scores", "review_count"]},
        },
    }
    return WindowSpec.model_validate(declaration | change)


def test_every_measure_kind_on_a_window_without_grouping_columns(spark) -> None:
    reviews = spark.createDataFrame(
        [
            ("r1", at(9, 0), 5, "o1"),
            ("r2", at(13, 30), 1, "o2"),
            ("r3", at(23, 59, 59), 2, "o3"),
            ("r4", at(10, 0), None, "o4"),  # no score: counted, aggregates skip it
            ("r5", datetime(2026, 1, 2, 0, 0, tzinfo=UTC), 3, "o5"),  # the next day
        ],
        REVIEWS,
    )
    actual = aggregate_window(reviews, review_window())
    assert actual.columns == [
        "window_start",
        "window_end",
        "review_count",
        "average_score",
        "lowest",
        "highest",
        "score_total",
        "low_scores",
        "any_top",
        "low_share",
    ]
    day1, day2, day3 = (datetime(2026, 1, n, tzinfo=UTC) for n in (1, 2, 3))
    expected = spark.createDataFrame(
        [
            # 4 reviews, scores 5, 1, 2 (one null): mean 8/3, min 1, max 5, sum 8;
            # at most 2: the 1 and the 2; a 5 among them; share of low ones 2/4
            (day1, day2, 4, 8 / 3, 1, 5, 8, 2, True, 0.5),
            # one review scored 3: nothing low, no 5
            (day2, day3, 1, 3.0, 3, 3, 3, 0, False, 0.0),
        ],
        "window_start timestamp, window_end timestamp, review_count bigint, average_score "
        "double, lowest int, highest int, score_total bigint, low_scores bigint, any_top "
        "boolean, low_share double",
    )
    assertDataFrameEqual(actual, expected)


def test_where_keeps_only_matching_rows_and_a_ratio_over_zero_is_null(spark) -> None:
    window = review_window(
        where={"column": "score", "at_least": 2},
        measures={
            "review_count": "count",
            "top": {"count_if": {"column": "score", "equals": 5}},
            "ones": {"count_if": {"column": "score", "equals": 1}},
            "top_per_one": {"ratio": ["top", "ones"]},
        },
    )
    reviews = spark.createDataFrame(
        [("r1", at(9, 0), 5, "o1"), ("r2", at(9, 1), 1, "o2"), ("r3", at(9, 2), 4, "o3")],
        REVIEWS,
    )
    # the score-1 review is filtered out: 2 reviews, one 5, no 1, so 1/0 is null (not an error)
    expected = spark.createDataFrame(
        [(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC), 2, 1, 0, None)],
        "window_start timestamp, window_end timestamp, review_count bigint, top bigint, "
        "ones bigint, top_per_one double",
    )
    assertDataFrameEqual(aggregate_window(reviews, window), expected)


def test_window_keys_name_the_windows_of_rows_whatever_where_says(spark) -> None:
    payments = spark.createDataFrame(
        [
            (at(12, 1), "pix", "BRL", d("1.00"), "refused"),  # fails the window's where
            (at(12, 4), "pix", "BRL", d("2.00"), "refused"),
            (at(12, 7), "pix", "USD", d("3.00"), "authorized"),
        ],
        PAYMENTS,
    )
    keys = window_keys(payments, declared("gold_payment_totals_5m"))
    expected = spark.createDataFrame(
        [(at(12, 0), at(12, 5), "BRL"), (at(12, 5), at(12, 10), "USD")],
        "window_start timestamp, window_end timestamp, currency string",
    )
    assertDataFrameEqual(keys, expected)
    with pytest.raises(ValueError, match="recompute sessions"):
        window_keys(payments, declared("gold_customer_sessions"))
