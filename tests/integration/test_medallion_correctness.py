"""Gold on thousands of generated events with duplicates and late arrivals equals an
independent pandas computation; a crash between a batch's Delta writes and its checkpoint
commit neither duplicates nor loses rows."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from ingest_core.catalog import get_catalog
from ingest_core.settings import get_settings
from ingestctl.producer import Message, produce
from ingestctl.replay.faults import DelayDistribution, FaultConfig, FaultCounts, inject
from ingestctl.replay.generator import generate_events
from spark_jobs.gold.late_corrections import gold_watermark
from tests.integration.medallion import Platform, actual_sessions, expected_sessions, payment

pytestmark = pytest.mark.integration


def _expected_totals(values: list[dict], watermark: datetime) -> pd.DataFrame:
    """pandas: 5-minute windows of authorized payments per currency, one row per event_id."""
    frame = pd.DataFrame([v for v in values if v.get("event_type") == "payment"])
    frame = frame.drop_duplicates("event_id")
    frame = frame[frame.status == "authorized"]
    frame["event_time"] = pd.to_datetime(frame.event_time, utc=True, format="ISO8601")
    frame["window_start"] = frame.event_time.dt.floor("5min")
    frame["amount"] = frame.amount.astype(float)
    expected = frame.groupby(["window_start", "currency"], as_index=False).agg(
        payment_count=("event_id", "size"), amount_total=("amount", "sum")
    )
    end = expected.window_start + pd.Timedelta(minutes=5)
    return expected[end <= pd.Timestamp(watermark)]


def test_gold_equals_pandas_on_generated_events_with_duplicates_and_late(
    platform: Platform,
) -> None:
    start = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
    events = list(generate_events(2400, seed=21, start=start, rate=0.4))  # ~100 minutes
    config = FaultConfig(
        duplicate_rate=0.03,
        late_rate=0.04,
        # 45-60 minutes: past Silver's 30-minute watermark.
        late_delay=DelayDistribution.parse("uniform:2700:3600"),
        out_of_order_rate=0.02,
        seed=8,
    )
    scheduled = list(inject(events, config, FaultCounts()))
    sent: list[dict] = []
    for round_ in range(3):  # three cycles' worth of arrivals: the watermark moves between
        chunk = scheduled[round_ * len(scheduled) // 3 : (round_ + 1) * len(scheduled) // 3]
        produce(
            platform.bootstrap,
            [
                Message(platform.prefix + s.message.topic, s.message.key, s.message.value)
                for s in chunk
            ],
        )
        sent += [s.message.value for s in chunk]
        platform.bronze()
        platform.silver()
    platform.gold()
    assert len(platform.read("silver_late_events")) > 0  # the test exercises lateness
    platform.correct_late()

    watermark = gold_watermark("gold_payment_totals_5m")
    assert watermark is not None
    expected = _expected_totals(sent, watermark).sort_values(["window_start", "currency"])
    gold = platform.read("gold_payment_totals_5m")
    gold = gold[gold.window_end <= pd.Timestamp(watermark)]
    gold = gold.sort_values(["window_start", "currency"])
    assert len(expected) > 10
    assert list(zip(gold.window_start, gold.currency, gold.payment_count, strict=True)) == list(
        zip(expected.window_start, expected.currency, expected.payment_count, strict=True)
    )
    assert [round(float(x), 2) for x in gold.amount_total] == [
        round(x, 2) for x in expected.amount_total
    ]
    # Every payment is in Silver, on time exactly once or late; an id both on time and late,
    # or late twice, is a re-sent copy (docs/jobs.md: the on-time row, or the first late
    # one, is what Gold counts).
    late = platform.read("silver_late_events")
    late_ids = [
        json.loads(p)["event_id"]
        for p, t in zip(late.payload_json, late.event_type, strict=True)
        if t == "payment"
    ]
    on_time_ids = list(platform.read("silver_payments").event_id)
    sends = Counter(v["event_id"] for v in sent if v["event_type"] == "payment")
    assert len(on_time_ids) == len(set(on_time_ids))
    assert set(on_time_ids) | set(late_ids) == set(sends)
    copies = Counter(on_time_ids + late_ids)
    assert all(sends[i] >= n for i, n in copies.items()), "a copy Kafka never received"

    # Late activity reaches the sessions (issue 15 case 6); with this seed no placed order
    # arrives late (test_late_corrections covers those), so the metrics equal the stream's.
    late_types = set(platform.read("silver_late_events").event_type)
    assert "customer_activity" in late_types  # the test exercises late sessions
    orders = pd.DataFrame([v for v in sent if v["event_type"] == "order_placed"])
    orders = orders.drop_duplicates("event_id")
    orders = orders[orders.customer_id.notna()]
    orders = orders.assign(currency=orders.currency.str.upper(), total=orders.total.astype(float))
    want = orders.groupby(["customer_id", "currency"]).agg(
        order_count=("event_id", "size"), spend=("total", "sum")
    )
    metrics = platform.read("gold_customer_metrics")
    assert {
        (r.customer_id, r.currency): (int(r.order_count), round(float(r.spend), 2))
        for r in metrics.itertuples()
    } == {key: (int(r.order_count), round(r.spend, 2)) for key, r in want.iterrows()}
    session_watermark = gold_watermark("gold_customer_sessions")
    assert session_watermark is not None
    activity = [v for v in sent if v["event_type"] == "customer_activity"]
    want_sessions = expected_sessions(activity, session_watermark)
    assert len(want_sessions) > 10
    assert actual_sessions(platform) == want_sessions


def _drop_last_commit(checkpoint: Path) -> int:
    """Leave the checkpoint as a crash between the sink's writes and the commit leaves it."""
    commits = sorted(
        (checkpoint / "commits").iterdir(),
        key=lambda p: int(p.name.split(".")[0]) if p.name.split(".")[0].isdigit() else -1,
    )
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    (checkpoint / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    return int(last.name)


def test_crash_between_delta_write_and_commit_replays_without_duplicates(
    platform: Platform,
) -> None:
    catalog, settings = get_catalog(), get_settings()
    platform.send("payments", [payment(f"x{i}", f"2026-01-01T10:{i:02d}:00Z") for i in range(20)])
    platform.send(
        "orders",
        [
            {
                "event_id": "o1",
                "event_type": "order_placed",
                "event_time": "2026-01-01T10:00:00Z",
                "schema_version": 1,
                "order_id": "o1",
                "customer_id": "c1",
                "status": "created",
                "total": 12.5,
                "currency": "BRL",
            }
        ],
        key="o1",
    )
    platform.all_layers()
    before = {
        t: platform.read(t)
        for t in (
            "bronze_events",
            "silver_payments",
            "silver_reconciliation",
            "gold_customer_metrics",
        )
    }

    for job, query in (
        ("bronze_ingest", None),
        ("silver_refine", None),
        ("gold_aggregate", "gold_customer_metrics"),
    ):
        _drop_last_commit(catalog.job(job).checkpoint(settings, query))
    platform.all_layers()  # each query replays its last batch

    bronze = platform.read("bronze_events")
    assert len(bronze) == len(before["bronze_events"]) == 21
    assert not bronze.duplicated(["topic", "partition", "offset"]).any()
    assert sorted(platform.read("silver_payments").event_id) == sorted(
        before["silver_payments"].event_id
    )
    recon = platform.read("silver_reconciliation")
    assert not recon.duplicated(["job", "query_id", "batch_id"]).any()
    metrics = platform.read("gold_customer_metrics")
    assert (
        metrics.order_count.tolist() == before["gold_customer_metrics"].order_count.tolist() == [1]
    )
