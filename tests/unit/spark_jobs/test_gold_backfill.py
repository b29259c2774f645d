"""gold_backfill's comparison of a recomputed interval with the table, on hand-made rows.

Each row's fate is written beside it; the expected counts are those fates tallied by hand.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql import functions as F

from spark_jobs.gold.gold_backfill import interval_changes

pytestmark = pytest.mark.unit

COLUMNS = "window_start timestamp, window_end timestamp, currency string, payment_count bigint"
KEYS = ("window_start", "currency")
WATERMARK = datetime(2024, 5, 1, 10, 20, tzinfo=UTC)


def _at(minute: int) -> datetime:
    return datetime(2024, 5, 1, 10, minute, tzinfo=UTC)


def _rows(*rows: tuple[int, str, int | None]) -> list[tuple[Any, ...]]:
    """5-minute windows ``(start minute, currency, payment_count)``."""
    return [(_at(m), _at(m + 5), currency, count) for m, currency, count in rows]


def test_interval_changes_counts_each_fate_once(spark: Any) -> None:
    fresh = spark.createDataFrame(
        _rows(
            (0, "BRL", 3),  # finalised, same as the table: recomputed only
            (5, "BRL", 4),  # finalised, the table has 2: changed
            (5, "USD", None),  # finalised, the table has null too: unchanged (nulls equal)
            (10, "BRL", 1),  # finalised, not in the table: inserted
            (15, "USD", 7),  # ends at 10:20 = the watermark: finalised, inserted
            (20, "BRL", 9),  # ends after the watermark: open, neither inserted nor compared
        ),
        COLUMNS,
    )
    existing = spark.createDataFrame(
        _rows(
            (0, "BRL", 3),
            (5, "BRL", 2),
            (5, "USD", None),
            (10, "USD", 5),  # no recomputed row: deleted
        ),
        COLUMNS,
    )
    final = F.col("window_end") <= F.lit(WATERMARK)

    counts = interval_changes(fresh, existing, KEYS, final)

    assert counts == {"recomputed": 5, "open": 1, "inserted": 2, "deleted": 1, "changed": 1}


def test_an_interval_equal_to_the_table_changes_nothing(spark: Any) -> None:
    rows = _rows((0, "BRL", 3), (5, "BRL", 4))
    fresh = spark.createDataFrame(rows, COLUMNS)
    existing = spark.createDataFrame(rows, COLUMNS)

    counts = interval_changes(fresh, existing, KEYS, F.col("window_end") <= F.lit(WATERMARK))

    assert counts == {"recomputed": 2, "open": 0, "inserted": 0, "deleted": 0, "changed": 0}
