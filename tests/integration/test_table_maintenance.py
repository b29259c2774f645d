"""Table maintenance beside real streaming checkpoints (real Kafka, Spark and Delta): with no
floor at all, VACUUM's retention is held back by a paused stream (a) and by a checkpoint
backup (b), so the stream reads on, the backup restores, and every table keeps its rows."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from ingest_core.catalog import MaintenanceSpec
from ingest_core.checkpoints import backup
from ingest_core.recovery import restore
from ingest_core.table_maintenance import RetentionRefusedError, maintain_table
from tests.integration.medallion import Platform, payment, windows

pytestmark = pytest.mark.integration

AGGRESSIVE = MaintenanceSpec(
    retention_floor="0 hours", log_retention="0 hours", on_busy="skip", lock_wait="0 seconds"
)
LOTS = [
    [payment("p1", "2026-01-01T10:01:00Z", 10.0), payment("p2", "2026-01-01T10:04:00Z", 20.0)],
    [payment("p3", "2026-01-01T10:06:00Z", 5.0), payment("p4", "2026-01-01T10:08:00Z", 7.0)],
    [payment("p5", "2026-01-01T10:12:00Z", 3.0)],
    [payment("p6", "2026-01-01T10:40:00Z", 1.0)],  # the watermark passes every window above
    [payment("p7", "2026-01-01T10:41:00Z", 2.0)],
]


SENT = [event for lot in LOTS for event in lot]


def expected_5m(sent: list[dict]) -> dict[tuple[str, str], tuple[int, float]]:
    """Closed 5-minute windows per currency, computed with pandas from what was sent."""
    frame = pd.DataFrame(sent)
    frame["time"] = pd.to_datetime(frame["event_time"])
    watermark = frame["time"].max() - timedelta(minutes=10)
    frame["start"] = frame["time"].dt.floor("5min")
    closed = frame[frame["start"] + timedelta(minutes=5) <= watermark]
    grouped = closed.groupby(["start", "currency"])["amount"].agg(["count", "sum"])
    return {
        (start.strftime("%H:%M"), currency): (int(row["count"]), float(row["sum"]))
        for (start, currency), row in grouped.iterrows()
    }


def snapshot(platform: Platform, table: str) -> pd.DataFrame:
    frame = platform.read(table)
    return frame.sort_values(sorted(frame.columns)[:3]).reset_index(drop=True)


def test_a_paused_stream_and_a_backup_hold_vacuum_back(platform: Platform) -> None:
    platform.send("payments", LOTS[0])
    platform.all_layers()
    # gold_aggregate paused: two more lots reach Silver, in small files it has not read
    for lot in LOTS[1:3]:
        platform.send("payments", lot)
        platform.bronze()
        platform.silver()
    silver_before = snapshot(platform, "silver_payments")

    report = maintain_table("silver_payments", policy=AGGRESSIVE)

    binding = report.retention_set_by
    assert binding is not None
    assert binding.kind == "stream", report.lines()
    assert "gold_aggregate" in binding.source
    assert binding.version is not None
    assert report.after is not None
    assert report.before is not None
    assert report.after.files < report.before.files, "OPTIMIZE compacted the small files"
    assert report.vacuumed_files == 0, "every replaced file is still needed by the stream"
    pd.testing.assert_frame_equal(snapshot(platform, "silver_payments"), silver_before)

    platform.gold()  # reads on from its old version: no missing file
    info = backup("gold_aggregate")
    # The live checkpoint moves past the backup, and Spark purges its old offsets files.
    platform.spark.conf.set("spark.sql.streaming.minBatchesToRetain", "2")
    try:
        for lot in LOTS[3:]:
            platform.send("payments", lot)
            platform.all_layers()
    finally:
        platform.spark.conf.unset("spark.sql.streaming.minBatchesToRetain")
    assert windows(platform.read("gold_payment_totals_5m")) == expected_5m(SENT)

    again = maintain_table("silver_payments", policy=AGGRESSIVE)
    assert again.retention_set_by is not None
    assert again.retention_set_by.kind == "backup"
    assert info.backup_id in again.retention_set_by.source
    with pytest.raises(RetentionRefusedError, match=r"\(b\) backup"):
        maintain_table("silver_payments", policy=AGGRESSIVE, retention_hours=0)

    for table in ("bronze_events", "silver_event_ids", "gold_payment_totals_5m"):
        before = snapshot(platform, table)
        maintain_table(table, policy=AGGRESSIVE)
        pd.testing.assert_frame_equal(snapshot(platform, table), before)

    restore("gold_aggregate", info.backup_id)  # verifies, then rolls forward to the sink
    platform.gold()
    assert windows(platform.read("gold_payment_totals_5m")) == expected_5m(SENT)
