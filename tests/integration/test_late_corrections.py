"""late_corrections on the real broker, Spark and Delta: late orders reach
``gold_customer_metrics``, late activity reaches ``gold_customer_sessions``, each exactly once,
checked against independent pandas computations over the events sent."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from spark_jobs import gold_aggregate, late_corrections
from tests.integration.medallion import (
    Platform,
    activity,
    actual_sessions,
    expected_sessions,
    naive_utc,
)

pytestmark = pytest.mark.integration


def order(event_id: str, when: str, customer: str | None, total: float, **extra: Any) -> dict:
    """A valid ``order_placed`` event (one item) at ``when``."""
    return {
        "event_id": event_id,
        "event_type": "order_placed",
        "event_time": when,
        "schema_version": 1,
        "order_id": f"o-{event_id}",
        "customer_id": customer,
        "status": "created",
        "items": [{"product_id": "sku", "quantity": 1, "price": total}],
        "total": total,
        "currency": "BRL",
    } | extra


ON_TIME_ORDERS = [
    order("o1", "2026-01-01T10:00:00Z", "c1", 10.00),
    order("o2", "2026-01-01T10:05:00Z", "c2", 20.00),
    order("o3", "2026-01-01T10:50:00Z", "c1", 5.25),  # Silver's watermark -> 10:20
]
LATE_ORDERS = [
    order("l1", "2026-01-01T10:01:00Z", "c1", 7.00),
    order("l2", "2026-01-01T10:02:00Z", "c3", 3.10),  # a customer only late data knows
    order("l3", "2026-01-01T10:03:00Z", None, 99.00),  # a guest order: no customer to count
    order("o1", "2026-01-01T10:00:00Z", "c1", 10.00),  # o1 re-sent after the watermark
    order("l4", "2026-01-01T10:04:00Z", "c2", 1.50, event_type="order_canceled"),
]


def expected_metrics(events: list[dict]) -> pd.DataFrame:
    """Independent computation: one row per event id (first sent wins), placed orders with a
    customer, count / spend / last order time per customer and currency."""
    frame = pd.DataFrame(events).drop_duplicates("event_id", keep="first")
    frame = frame[(frame.event_type == "order_placed") & frame.customer_id.notna()]
    frame = frame.assign(event_time=naive_utc(frame.event_time))
    grouped = frame.groupby(["customer_id", "currency"], as_index=False).agg(
        order_count=("event_id", "count"),
        spend=("total", "sum"),
        last_order_time=("event_time", "max"),
    )
    return grouped.sort_values("customer_id").reset_index(drop=True)


def actual_metrics(platform: Platform) -> pd.DataFrame:
    frame = platform.read("gold_customer_metrics")
    frame = frame.assign(
        spend=frame.spend.astype(float),
        order_count=frame.order_count.astype("int64"),
        last_order_time=naive_utc(frame.last_order_time),
    )
    columns = ["customer_id", "currency", "order_count", "spend", "last_order_time"]
    return frame[columns].sort_values("customer_id").reset_index(drop=True)


def test_late_orders_reach_customer_metrics_once(platform: Platform) -> None:
    platform.send("orders", ON_TIME_ORDERS)
    platform.all_layers()
    platform.send("orders", LATE_ORDERS)
    platform.all_layers()
    late_ids = set(platform.read("silver_late_events").event_id)
    assert late_ids == {"l1", "l2", "l3", "o1", "l4"}
    pd.testing.assert_frame_equal(actual_metrics(platform), expected_metrics(ON_TIME_ORDERS))

    changed = platform.correct_late()
    assert changed["gold_customer_metrics"] == 2  # (c1, BRL) incremented, (c3, BRL) added
    want = expected_metrics(ON_TIME_ORDERS + LATE_ORDERS)
    assert list(want.order_count) == [3, 1, 1]  # c1 with l1, c2 unchanged, c3 from l2
    pd.testing.assert_frame_equal(actual_metrics(platform), want)
    ledger = platform.read("gold_late_corrections")
    assert sorted(ledger.event_id) == ["l1", "l2"]

    tables = ("gold_customer_metrics", "gold_late_corrections", "gold_customer_sessions")
    versions = {t: platform.version(t) for t in tables if platform.path(t).exists()}
    again = platform.correct_late()
    assert again["gold_customer_metrics"] == 0
    assert {t: platform.version(t) for t in versions} == versions  # nothing committed
    pd.testing.assert_frame_equal(actual_metrics(platform), want)

    # A later late order is added by the next run, on top of the earlier ones, once.
    platform.send("orders", [order("l5", "2026-01-01T10:06:00Z", "c2", 4.00)])
    platform.all_layers()
    assert platform.correct_late()["gold_customer_metrics"] == 1
    want = expected_metrics(
        ON_TIME_ORDERS + LATE_ORDERS + [order("l5", "2026-01-01T10:06:00Z", "c2", 4.00)]
    )
    pd.testing.assert_frame_equal(actual_metrics(platform), want)
    assert platform.correct_late()["gold_customer_metrics"] == 0
    pd.testing.assert_frame_equal(actual_metrics(platform), want)


def test_a_run_stopped_between_ledger_and_merge_is_finished_once(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger is written, then the process dies before the metrics MERGE: the next run
    adds that run's orders (once), and a run after it adds nothing."""
    platform.send("orders", ON_TIME_ORDERS)
    platform.all_layers()
    platform.send("orders", LATE_ORDERS)
    platform.all_layers()
    real_merge = gold_aggregate.merge_customer_metrics

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("driver killed")

    monkeypatch.setattr(gold_aggregate, "merge_customer_metrics", crash)
    with pytest.raises(RuntimeError, match="driver killed"):
        late_corrections.correct_customer_metrics(platform.spark)
    assert sorted(platform.read("gold_late_corrections").event_id) == ["l1", "l2"]
    pd.testing.assert_frame_equal(actual_metrics(platform), expected_metrics(ON_TIME_ORDERS))

    monkeypatch.setattr(gold_aggregate, "merge_customer_metrics", real_merge)
    late_corrections.correct_customer_metrics(platform.spark)
    want = expected_metrics(ON_TIME_ORDERS + LATE_ORDERS)
    pd.testing.assert_frame_equal(actual_metrics(platform), want)
    version = platform.version("gold_customer_metrics")
    assert late_corrections.correct_customer_metrics(platform.spark) == 0
    assert platform.version("gold_customer_metrics") == version  # the re-issued MERGE skipped
    pd.testing.assert_frame_equal(actual_metrics(platform), want)


ON_TIME_ACTIVITY = [
    activity("a1", "2026-01-01T10:00:00Z", "c1"),
    activity("a2", "2026-01-01T10:05:00Z", "c1"),
    activity("a3", "2026-01-01T10:22:00Z", "c1", "checkout"),
    activity("a4", "2026-01-01T10:45:00Z", "c2"),
    activity("a5", "2026-01-01T11:30:00Z", "c9"),  # moves both watermarks to 11:00
]
LATE_ACTIVITY = [
    activity("l1", "2026-01-01T10:13:00Z", "c1"),  # joins c1's two sessions into one
    activity("l2", "2026-01-01T10:10:00Z", "c3"),  # a session only late data has
    activity("a4", "2026-01-01T10:45:00Z", "c2"),  # a4 re-sent after the watermark
]


def test_late_activity_reaches_customer_sessions_once(platform: Platform) -> None:
    platform.send("customer_activity", ON_TIME_ACTIVITY)
    platform.all_layers()
    watermark = datetime(2026, 1, 1, 11, 0)
    assert actual_sessions(platform) == expected_sessions(ON_TIME_ACTIVITY, watermark)
    platform.send("customer_activity", LATE_ACTIVITY)
    platform.all_layers()
    assert set(platform.read("silver_late_events").event_id) == {"l1", "l2", "a4"}

    changed = platform.correct_late()
    want = expected_sessions(ON_TIME_ACTIVITY + LATE_ACTIVITY, watermark)
    c1 = datetime(2026, 1, 1, 10, 0)
    assert ("c1", c1, c1 + timedelta(minutes=32), 4, True) in want  # hand-checked
    assert actual_sessions(platform) == want
    # c1: [10:00, 10:32) updated, [10:22, 10:32) deleted; c3: [10:10, 10:20) inserted
    assert changed["gold_customer_sessions"] == 3

    version = platform.version("gold_customer_sessions")
    assert platform.correct_late()["gold_customer_sessions"] == 0
    assert platform.version("gold_customer_sessions") == version
    assert actual_sessions(platform) == want
