"""Interval-scoped Gold backfills (``spark_jobs.gold.gold_backfill``) on real Kafka, Spark and
Delta: a backfill over the incremental range changes nothing; after late events it gives
what an independent pandas computation gives; a repeated backfill commits nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from ingest_core.delta_tables import table_exists
from ingest_core.time_range import TimeRange, TimeRangeError
from ingestctl.replay.generator import generate_events
from spark_jobs.gold import gold_backfill
from spark_jobs.gold.gold_backfill import windowed_tables
from tests.integration.medallion import Platform, activity, payment

pytestmark = pytest.mark.integration
START = datetime(2026, 4, 1, 10, 0, tzinfo=UTC)
GAP = pd.Timedelta(minutes=10)  # gold_aggregate's session_gap (include/pipeline.yaml)


def _intervals(start: datetime, count: int) -> list[TimeRange]:
    step = timedelta(minutes=15)
    return [TimeRange(start=start + i * step, end=start + (i + 1) * step) for i in range(count)]


def _gold(platform: Platform) -> dict[str, pd.DataFrame]:
    frames = {}
    for table, spec in windowed_tables("10 minutes").items():
        if not table_exists(platform.path(table)):
            continue  # a window over a source this test sends nothing to (the reviews)
        frame = platform.read(table)
        frames[table] = frame.sort_values(list(spec.keys)).reset_index(drop=True)
    return frames


def _expected_totals(events: list[dict], interval: TimeRange) -> pd.DataFrame:
    """pandas: authorized payments per 5-minute window and currency, windows starting in
    the interval."""
    frame = pd.DataFrame([e for e in events if e["event_type"] == "payment"])
    frame = frame[frame.status == "authorized"].drop_duplicates("event_id")
    frame["window_start"] = pd.to_datetime(frame.event_time, utc=True, format="ISO8601").dt.floor(
        "5min"
    )
    frame["amount"] = frame.amount.astype(float)
    frame = frame[(frame.window_start >= interval.start) & (frame.window_start < interval.end)]
    grouped = frame.groupby(["window_start", "currency"], as_index=False).agg(
        payment_count=("event_id", "size"), amount_total=("amount", "sum")
    )
    return grouped.sort_values(["window_start", "currency"]).reset_index(drop=True)


def _expected_sessions(events: list[dict], interval: TimeRange) -> pd.DataFrame:
    """pandas: sessions per customer (a gap of 10 minutes or more ends one; end = last event
    + gap, Spark's convention), sessions starting in the interval."""
    frame = pd.DataFrame([e for e in events if e["event_type"] == "customer_activity"])
    frame = frame.drop_duplicates("event_id")
    frame["t"] = pd.to_datetime(frame.event_time, utc=True, format="ISO8601")
    rows = []
    for customer, group in frame.sort_values("t").groupby("customer_id"):
        times, kinds = list(group.t), list(group.activity)
        begin, last, count, checkout = times[0], times[0], 0, False
        for when, kind in zip(times, kinds, strict=True):
            if when >= last + GAP:
                rows.append((customer, begin, last + GAP, count, checkout))
                begin, count, checkout = when, 0, False
            last, count, checkout = when, count + 1, checkout or kind == "checkout"
        rows.append((customer, begin, last + GAP, count, checkout))
    sessions = pd.DataFrame(
        rows,
        columns=["customer_id", "session_start", "session_end", "event_count", "reached_checkout"],
    )
    sessions = sessions[
        (sessions.session_start >= interval.start) & (sessions.session_start < interval.end)
    ]
    return sessions.sort_values(["customer_id", "session_start"]).reset_index(drop=True)


def test_backfill_equals_incremental_corrects_late_events_and_is_idempotent(
    platform: Platform,
) -> None:
    events = [e.to_value() for e in generate_events(900, seed=5, start=START, rate=0.3)]
    # One event of each kind hours later moves every Gold watermark past the hour.
    later = START + timedelta(hours=3)
    events += [payment("wm-pay", later.isoformat()), activity("wm-act", later.isoformat(), "wm")]
    for topic in ("orders", "payments", "customer_activity"):
        platform.send(topic, [e for e in events if _topic(e) == topic])
    platform.all_layers()
    platform.correct_late()
    intervals = _intervals(START, 4)
    before = _gold(platform)
    versions = {table: platform.version(table) for table in before}
    assert min(len(frame) for frame in before.values()) > 5

    # 1. Over the incrementally computed hour, a backfill changes nothing, commits nothing.
    # (One run over the hour; tests/e2e runs one per 15-minute interval through Airflow.)
    hour = TimeRange(start=START, end=START + timedelta(hours=1))
    for report in gold_backfill.run(platform.spark, hour, tables=list(before)):
        assert report.recomputed > 0
        assert (report.changed, report.inserted, report.deleted, report.open) == (0, 0, 0, 0)
    assert {table: platform.version(table) for table in before} == versions
    for table, frame in _gold(platform).items():
        pd.testing.assert_frame_equal(frame, before[table])

    # 2. Late events (hours behind every watermark) reach silver_late_events, not Gold.
    late = [
        payment(f"late-p{i}", (START + timedelta(minutes=16 + i)).isoformat(), 100.0 + i)
        for i in range(6)
    ]
    late += [
        activity(
            f"late-a{i}",
            (START + timedelta(minutes=17, seconds=40 * i)).isoformat(),
            "late-customer",
            "checkout" if i == 3 else "page_view",
        )
        for i in range(4)
    ]
    platform.send("payments", [e for e in late if e["event_type"] == "payment"])
    platform.send("customer_activity", [e for e in late if e["event_type"] != "payment"])
    platform.bronze()
    platform.silver()
    assert len(platform.read("silver_late_events")) == len(late)
    target = intervals[1]  # 10:15-10:30: the late events' windows and session
    reports = {r.table: r for r in gold_backfill.run(platform.spark, target)}
    assert (
        reports["gold_payment_totals_5m"].changed + reports["gold_payment_totals_5m"].inserted > 0
    )
    assert reports["gold_customer_sessions"].inserted >= 1

    everything = events + late
    gold = platform.read("gold_payment_totals_5m")
    gold = gold[(gold.window_start >= target.start) & (gold.window_start < target.end)]
    gold = gold.sort_values(["window_start", "currency"]).reset_index(drop=True)
    expected = _expected_totals(everything, target)
    assert list(gold.payment_count) == list(expected.payment_count)
    assert [round(float(v), 2) for v in gold.amount_total] == [
        round(v, 2) for v in expected.amount_total
    ]
    assert list(gold.window_start) == list(expected.window_start)
    sessions = platform.read("gold_customer_sessions")
    sessions = sessions[
        (sessions.session_start >= target.start) & (sessions.session_start < target.end)
    ]
    sessions = sessions.sort_values(["customer_id", "session_start"]).reset_index(drop=True)
    expected_sessions = _expected_sessions(everything, target)
    columns = ["customer_id", "session_start", "session_end", "event_count", "reached_checkout"]
    assert (
        sessions[columns].astype(str).values.tolist()
        == expected_sessions[columns].astype(str).values.tolist()
    )
    # The other intervals' rows are untouched.
    for table, frame in _gold(platform).items():
        spec = windowed_tables("10 minutes")[table]
        outside = ~frame[spec.start_col].between(target.start, target.end, inclusive="left")
        old = before[table]
        old_outside = ~old[spec.start_col].between(target.start, target.end, inclusive="left")
        pd.testing.assert_frame_equal(
            frame[outside].reset_index(drop=True), old[old_outside].reset_index(drop=True)
        )

    # 3. The same backfill again: no commit, same content.
    after = _gold(platform)
    versions = {table: platform.version(table) for table in after}
    for report in gold_backfill.run(platform.spark, target):
        assert (report.changed, report.inserted, report.deleted) == (0, 0, 0)
    assert {table: platform.version(table) for table in after} == versions


def _topic(event: dict) -> str:
    from ingest_core.contracts import contract_for

    return contract_for(event["event_type"]).topic


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        ("2026-04-01T10:00:00", "2026-04-01T10:15:00Z", "no UTC offset"),
        ("2026-04-01T10:15:00Z", "2026-04-01T10:00:00Z", "not after start"),
        ("yesterday", "2026-04-01T10:00:00Z", "not an ISO 8601"),
        ("2026-01-01T00:00:00Z", "2026-03-01T00:00:00Z", "longer than the limit"),
        ("0001-01-01T00:00:00+01:00", "2026-03-01T00:00:00Z", "outside the representable"),
    ],
)
def test_backfill_refuses_a_bad_interval_before_spark(start: str, end: str, message: str) -> None:
    with pytest.raises(SystemExit) as exited:
        gold_backfill.parse_args(["--start", start, "--end", end])
    assert exited.value.code == 2
    with pytest.raises(TimeRangeError, match=message):
        TimeRange.parse(start, end, gold_backfill.MAX_INTERVAL)
