"""late_corrections on the real broker, Spark and Delta: late orders reach
``gold_customer_metrics``, late activity reaches ``gold_customer_sessions``, each exactly once,
checked against independent pandas computations over the events sent."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from spark_jobs.gold import late_corrections
from tests.integration.medallion import (
    Platform,
    activity,
    actual_sessions,
    expected_sessions,
    naive_utc,
    payment,
    windows,
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
    real_merge = late_corrections.merge_customer_metrics

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("driver killed")

    monkeypatch.setattr(late_corrections, "merge_customer_metrics", crash)
    with pytest.raises(RuntimeError, match="driver killed"):
        late_corrections.correct_customer_metrics(platform.spark)
    assert sorted(platform.read("gold_late_corrections").event_id) == ["l1", "l2"]
    pd.testing.assert_frame_equal(actual_metrics(platform), expected_metrics(ON_TIME_ORDERS))

    monkeypatch.setattr(late_corrections, "merge_customer_metrics", real_merge)
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


def test_a_payment_on_time_for_silver_but_behind_golds_watermark_reaches_gold(
    platform: Platform,
) -> None:
    """Soak run 4 (seed 1): Silver calls an event late only when it is older than its
    topic's watermark (``dedup_watermark``, 30 minutes behind the slowest partition), Gold's
    payment windows finalise 10 minutes behind the newest event. A payment between the two
    was kept by Silver, dropped by Gold's window queries, and in no late table: Gold missed
    it for good, and every later ``aggregate_gold`` failed its reconciliation. Now Gold's
    run skips those windows in its check and the late corrections rewrite them."""

    on_time = [
        payment("p1", "2026-01-01T10:00:00Z", 10.00),
        payment("p2", "2026-01-01T10:26:00Z", 20.00),
        payment("p3", "2026-01-01T10:50:00Z", 5.00),  # Gold 10:40, Silver 10:20
    ]
    platform.send("payments", on_time)
    platform.all_layers()
    behind = [payment("b1", "2026-01-01T10:27:00Z", 7.00)]  # [10:25, 10:30) is final in Gold
    platform.send("payments", behind)
    platform.all_layers()  # raised GoldReconciliationError before
    assert set(platform.read("silver_payments").event_id) == {"p1", "p2", "p3", "b1"}
    assert platform.read("silver_late_events").empty
    # Past the lookback (6 hours) the batch is no longer searched: the check then names it.
    later = datetime.now().timestamp() + 7 * 3600
    assert late_corrections.behind_gold(platform.spark, "gold_payment_totals_5m", now=later) is None

    changed = platform.correct_late()
    frame = pd.DataFrame(on_time + behind)
    frame = frame.assign(start=naive_utc(frame.event_time).dt.floor("5min"))
    final = frame[frame.start + pd.Timedelta(minutes=5) <= pd.Timestamp("2026-01-01 10:40")]
    want = {
        (start.strftime("%H:%M"), "BRL"): (len(rows), float(rows.amount.sum()))
        for start, rows in final.groupby("start")
    }
    assert want[("10:25", "BRL")] == (2, 27.0)  # hand-checked: p2 and b1
    assert windows(platform.read("gold_payment_totals_5m")) == want
    assert changed["gold_payment_totals_5m"] == 1
    assert changed["gold_payment_totals_10m_sliding"] == 2  # [10:20, 10:30) and [10:25, 10:35)
    assert late_corrections.reconcile_payment_totals(platform.spark, include_late=True) == 2

    version = platform.version("gold_payment_totals_5m")
    assert platform.correct_late()["gold_payment_totals_5m"] == 0
    assert platform.version("gold_payment_totals_5m") == version


def test_corrections_judge_only_what_golds_query_read_while_silver_moves_on(
    platform: Platform,
) -> None:
    """Soak run 17: a layer refresh's ``correct_late`` runs while the live medallion refines
    Silver; a payment Silver took after the rebuilt Gold query's last batch, in a window
    that query had already finalised, was "expected" by the reconciliation although the
    query had not read it: GoldReconciliationError, three attempts, the refresh failed for
    good. The corrections now judge only what the query read; once it reads the payment (and
    drops it, behind its watermark), the corrections bring it in."""
    on_time = [
        payment("p1", "2026-01-01T10:00:00Z", 10.00),
        payment("p2", "2026-01-01T10:26:00Z", 20.00),
        payment("p3", "2026-01-01T10:50:00Z", 5.00),  # Gold's watermark 10:40
    ]
    platform.send("payments", on_time)
    platform.all_layers()
    from spark_jobs.gold.common import gold_watermark

    watermark = gold_watermark("gold_payment_totals_5m")
    assert watermark is not None
    assert watermark.replace(tzinfo=None) >= datetime(2026, 1, 1, 10, 30)  # [10:25, 10:30) final
    behind = [payment("b1", "2026-01-01T10:27:00Z", 7.00)]
    platform.send("payments", behind)
    platform.bronze()
    platform.silver()  # Silver moved on; Gold has not read b1
    assert "b1" in set(platform.read("silver_payments").event_id)
    platform.correct_late()
    # The job's reconciliation after its corrections: raised GoldReconciliationError before.
    late_corrections.reconcile_payment_totals(platform.spark, include_late=True)
    assert windows(platform.read("gold_payment_totals_5m"))[("10:25", "BRL")] == (1, 20.0)

    platform.gold()  # reads b1, behind its watermark: dropped by the window query
    platform.correct_late()
    assert windows(platform.read("gold_payment_totals_5m"))[("10:25", "BRL")] == (2, 27.0)
    assert late_corrections.reconcile_payment_totals(platform.spark, include_late=True) >= 2


def test_activity_a_slow_partition_keeps_on_time_for_silver_reaches_customer_sessions(
    platform: Platform,
) -> None:
    """The same gap for sessions (both watermarks 30 minutes): Silver's trails its slowest
    partition, Gold's its newest event, so an event on a slow partition is on time for
    Silver and behind Gold's sessions watermark. It reaches ``gold_customer_sessions``."""
    slow = "a"  # kafka-python's murmur2: "f" -> partition 0, "a" -> 1, "k" -> 2
    platform.send("customer_activity", [activity("f1", "2026-01-01T10:00:00Z", "c1")], key="f")
    platform.send("customer_activity", [activity("f2", "2026-01-01T10:10:00Z", "c1")], key="f")
    platform.send("customer_activity", [activity("s1", "2026-01-01T10:20:00Z", "c2")], key=slow)
    platform.send("customer_activity", [activity("k1", "2026-01-01T11:30:00Z", "c9")], key="k")
    platform.all_layers()  # Silver's watermark 09:40, Gold's sessions 11:00
    behind = activity("s2", "2026-01-01T10:30:00Z", "c3")  # [10:30, 10:40) is final in Gold
    platform.send("customer_activity", [behind], key=slow)
    platform.all_layers()
    assert "s2" in set(platform.read("silver_customer_activity").event_id)
    assert platform.read("silver_late_events").empty

    assert platform.correct_late()["gold_customer_sessions"] == 1
    events = [
        activity("f1", "2026-01-01T10:00:00Z", "c1"),
        activity("f2", "2026-01-01T10:10:00Z", "c1"),
        activity("s1", "2026-01-01T10:20:00Z", "c2"),
        activity("k1", "2026-01-01T11:30:00Z", "c9"),
        behind,
    ]
    want = expected_sessions(events, datetime(2026, 1, 1, 11, 0))
    c3 = datetime(2026, 1, 1, 10, 30)
    assert ("c3", c3, c3 + timedelta(minutes=10), 1, False) in want  # hand-checked
    assert actual_sessions(platform) == want
    assert platform.correct_late()["gold_customer_sessions"] == 0
