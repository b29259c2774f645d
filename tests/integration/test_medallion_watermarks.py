"""Issue 15, case 4 on the real broker, Spark and Delta: one record far ahead in event time
must not make anyone else's on-time events late. Watermarks are per topic (the minimum over
its partitions); a record further ahead than ``event_time_skew`` is quarantined as
``event_time_skew``; the fault injector's records get the reasons they claim. Expected
values come from independent pandas computations over what was sent."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ingestctl.replay.faults import FaultConfig, malformed_record
from tests.integration.medallion import Platform, activity, payment

pytestmark = pytest.mark.integration
DAY1 = datetime(2010, 12, 1, 8, 0, tzinfo=UTC)
DAY2 = DAY1 + timedelta(days=1)


def order(n: int, when: datetime, customer: str, total: float) -> dict[str, Any]:
    return {
        "event_id": f"o{n}",
        "event_type": "order_placed",
        "event_time": when.isoformat(),
        "schema_version": 1,
        "order_id": f"order-{n}",
        "customer_id": customer,
        "status": "created",
        "total": total,
        "currency": "GBP",
    }


def _send_keyed(platform: Platform, topic: str, values: list[dict[str, Any]], field: str) -> None:
    for value in values:  # the entity id as key, as producers do: spread over partitions
        platform.send(topic, [value], key=str(value[field]))


def _expected_metrics(orders: list[dict[str, Any]]) -> pd.DataFrame:
    """pandas: per customer and currency, order count and spend of the orders kept."""
    frame = pd.DataFrame(orders)
    frame["spend"] = frame.total.map(lambda t: Decimal(str(t)))
    return (
        frame.groupby(["customer_id", "currency"], as_index=False)
        .agg(order_count=("event_id", "size"), spend=("spend", "sum"))
        .sort_values(["customer_id", "currency"])
        .reset_index(drop=True)
    )


def _metrics(platform: Platform) -> pd.DataFrame:
    gold = platform.read("gold_customer_metrics")[
        ["customer_id", "currency", "order_count", "spend"]
    ]
    gold = gold.assign(order_count=gold.order_count.astype("int64"))
    return gold.sort_values(["customer_id", "currency"]).reset_index(drop=True)


def test_an_order_days_ahead_makes_no_other_event_late(platform: Platform) -> None:
    """Run 1: the morning of day 1 on every topic, an order 20 hours ahead (under the skew
    limit: a real order) and the fault injector's order 3 days ahead. Run 2: the afternoon
    of day 1 and day 2, clean. With one watermark for everything, run 2 went entirely to
    silver_late_events and the 3-day order was counted as a real one."""
    morning = [order(i, DAY1 + timedelta(minutes=20 * i), f"c{i % 5}", 10.0 + i) for i in range(12)]
    ahead_20h = order(90, DAY1 + timedelta(hours=21), "c1", 46.85)
    outlier = malformed_record("event_time_skew", morning[4], 1)
    assert isinstance(outlier, dict)
    afternoon = [
        order(i, DAY1 + timedelta(hours=6, minutes=15 * (i - 20)), f"c{i % 5}", 5.0 + i)
        for i in range(20, 30)
    ]
    day2 = [
        order(i, DAY2 + timedelta(minutes=10 * (i - 40)), f"c{i % 7}", 1.5 * i)
        for i in range(40, 52)
    ]

    def at(start: datetime, minutes: int) -> str:
        return (start + timedelta(minutes=minutes)).isoformat()

    _send_keyed(platform, "orders", [*morning[:5], outlier, *morning[5:], ahead_20h], "order_id")
    platform.send("payments", [payment(f"p{i}", at(DAY1, 15 * i)) for i in range(6)])
    platform.send("customer_activity", [activity(f"a{i}", at(DAY1, 9 * i), "c1") for i in range(6)])
    platform.bronze()
    platform.silver()

    _send_keyed(platform, "orders", [*afternoon, *day2], "order_id")
    platform.send("payments", [payment(f"p{i}", at(DAY1, 300 + i)) for i in range(10, 14)])
    platform.send(
        "customer_activity", [activity(f"a{i}", at(DAY2, i), "c2") for i in range(10, 14)]
    )
    platform.all_layers()

    assert platform.read("silver_late_events").empty
    quarantine = platform.read("silver_quarantine")
    assert list(zip(quarantine.event_id, quarantine.reason, strict=True)) == [
        (outlier["event_id"], "event_time_skew")
    ]
    assert "ahead of the rest of its partition" in quarantine.detail.iloc[0]
    kept = [*morning, ahead_20h, *afternoon, *day2]
    silver = platform.read("silver_orders")
    assert sorted(silver.event_id) == sorted(o["event_id"] for o in kept)
    assert sorted(platform.read("silver_payments").event_id) == sorted(
        f"p{i}" for i in (*range(6), *range(10, 14))
    )
    pd.testing.assert_frame_equal(_metrics(platform), _expected_metrics(kept))

    # The watermarks recorded after run 1, recomputed with pandas from Silver: per topic the
    # slowest partition's newest event minus 30 minutes; the run's single one the minimum.
    recon = platform.read("silver_reconciliation").sort_values("batch_id")
    first = recon.iloc[0]
    run1 = silver[silver.event_id.isin([o["event_id"] for o in [*morning, ahead_20h]])]
    delay = pd.Timedelta(minutes=30)
    expected_orders = run1.groupby("partition").event_time.max().min() - delay
    assert pd.Timestamp(dict(first.topic_watermarks)["orders"]) == expected_orders
    assert run1.partition.nunique() > 1  # the 20-hour order's partition did not decide it
    marks = [pd.Timestamp(t) for t in dict(first.topic_watermarks).values()]
    assert pd.Timestamp(first.watermark) == min(marks)
    balance = (
        recon.records_written
        + recon.records_quarantined
        + recon.duplicates_dropped
        + recon.late_events
    )
    assert (balance == recon.records_read).all()


def _uci_expected(csv: Path) -> tuple[pd.DataFrame, set[str]]:
    """pandas, from the CSV itself: customer metrics of one UCI day's valid invoices, and
    the invoices Silver must quarantine as invalid_value (a negative total, a line whose
    quantity is not positive, a price below 0 or with more than 2 decimals)."""
    lines = pd.read_csv(csv, dtype={"InvoiceNo": str, "CustomerID": str, "UnitPrice": str})
    lines = lines[~lines.InvoiceNo.str.startswith("C")]
    price = lines.UnitPrice.map(Decimal)
    lines = lines.assign(
        price=price,
        amount=price * lines.Quantity.map(lambda q: Decimal(int(q))),
        bad_line=(lines.Quantity <= 0)
        | (price < 0)
        | (price != price.map(lambda p: p.quantize(Decimal("0.01")))),
    )
    invoices = lines.groupby("InvoiceNo").agg(
        total=("amount", "sum"), bad=("bad_line", "any"), customer=("CustomerID", "first")
    )
    invalid = invoices.bad | (invoices.total < 0)
    valid = invoices[~invalid & invoices.customer.notna()]
    valid = valid.assign(
        customer_id=valid.customer.map(lambda c: str(int(float(c)))),
        currency="GBP",
        spend=valid.total.map(lambda t: t.quantize(Decimal("0.01"))),
    )
    metrics = (
        valid.groupby(["customer_id", "currency"], as_index=False)
        .agg(order_count=("spend", "size"), spend=("spend", "sum"))
        .sort_values(["customer_id", "currency"])
        .reset_index(drop=True)
    )
    return metrics, set(invoices.index[invalid])


def test_uci_days_replayed_with_faults_give_pandas_gold_and_the_claimed_reasons(
    platform: Platform, uci_path: Path
) -> None:
    """Replay 2010-12-01 through the replay runner with the fault injector (every quarantine
    reason it knows, two or three of each), then 2010-12-02 clean: each injected reason is
    quarantined exactly as often as injected (invalid_value also for the day's own stock
    adjustments), nothing is late, and Gold's customer metrics equal pandas on the CSVs."""
    from ingestctl.replay import runner
    from ingestctl.replay.uci_retail import read_events

    day1, day2 = uci_path / "2010-12-01.csv", uci_path / "2010-12-02.csv"
    faults = FaultConfig(malformed_rate=0.2, seed=15)  # 2 of each reason, 3 of two
    sent = runner.run(
        "uci-retail",
        read_events(day1),
        bootstrap_servers=platform.bootstrap,
        faults=faults,
        pace=runner.Pace(None),
        topic_prefix=platform.prefix,
        progress=False,
    )
    assert sent.produce.failed == 0
    platform.bronze()
    platform.silver()
    clean = runner.run(
        "uci-retail",
        read_events(day2),
        bootstrap_servers=platform.bootstrap,
        faults=FaultConfig(),
        pace=runner.Pace(None),
        topic_prefix=platform.prefix,
        progress=False,
    )
    assert clean.produce.failed == 0
    platform.all_layers()

    metrics1, invalid1 = _uci_expected(day1)
    metrics2, invalid2 = _uci_expected(day2)
    injected = Counter(sent.faults.malformed)
    assert injected["invalid_value"] == injected["event_time_skew"] == 2
    expected = injected + Counter({"invalid_value": len(invalid1) + len(invalid2)})
    quarantine = platform.read("silver_quarantine")
    assert Counter(quarantine.reason) == expected
    assert platform.read("silver_late_events").empty

    both = pd.concat([metrics1, metrics2])
    expected_metrics = (
        both.groupby(["customer_id", "currency"], as_index=False)
        .agg(order_count=("order_count", "sum"), spend=("spend", "sum"))
        .sort_values(["customer_id", "currency"])
        .reset_index(drop=True)
    )
    pd.testing.assert_frame_equal(_metrics(platform), expected_metrics)
