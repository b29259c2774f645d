"""Table maintenance on real Delta tables written with delta-rs (no Spark): row retention,
compaction, VACUUM with the floor, refusals, writer locks, and the reset guard.

The Spark side (a paused stream and a checkpoint backup holding the retention back) is in
tests/integration/test_table_maintenance.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from ingest_core.catalog import MaintenanceSpec, get_catalog
from ingest_core.locks import checkpoint_lock
from ingest_core.settings import get_settings
from ingest_core.table_maintenance import (
    PRUNED_BEFORE,
    RetentionRefusedError,
    TableBusyError,
    maintain_table,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
#: No floor, no waiting: what the tests need to see files go.
AGGRESSIVE = MaintenanceSpec(
    retention_floor="0 hours", log_retention="0 hours", on_busy="skip", lock_wait="0 seconds"
)


@pytest.fixture
def home(ingest_home: Path) -> Path:
    return ingest_home


def path_of(table: str) -> Path:
    return get_catalog().table(table).path(get_settings())


def utc(values: list[datetime]) -> pa.Array:
    return pa.array(values, pa.timestamp("us", tz="UTC"))


def gate_results(days_ago: list[int], table: str = "silver_orders", status: str = "passed"):
    return pa.table(
        {
            "run_id": [f"{table}-{status}-{d}" for d in days_ago],
            "table": [table] * len(days_ago),
            "status": [status] * len(days_ago),
            "validated_at": utc([NOW - timedelta(days=d) for d in days_ago]),
        }
    )


def test_gate_results_keep_recent_rows_and_the_newest_ten_per_table_and_status(home) -> None:
    path = path_of("ops_gate_results")
    write_deltalake(str(path), gate_results(list(range(0, 300, 20))))  # 15 passed, 0..280 days
    write_deltalake(str(path), gate_results([200, 250], status="failed"), mode="append")
    write_deltalake(str(path), gate_results([120], table="gold_x"), mode="append")
    before = DeltaTable(str(path)).to_pandas()

    report = maintain_table("ops_gate_results", policy=AGGRESSIVE, now=NOW)

    # independent: per (table, status) the newest 10 survive, and anything younger than 90 d
    before["age"] = (pd.Timestamp(NOW) - before["validated_at"]).dt.days
    before["rank"] = before.groupby(["table", "status"])["validated_at"].rank(ascending=False)
    expected = before[(before["age"] < 90) | (before["rank"] <= 10)]
    after = DeltaTable(str(path)).to_pandas()
    assert sorted(after["run_id"]) == sorted(expected["run_id"])
    assert report.rows_removed == len(before) - len(expected) == 5
    assert "keeping the newest 10" in "\n".join(report.lines())
    # The retention's DELETE is maintenance, not new data (a fresh clone's demo showed
    # silver_event_ids fresh, "rows added: none", right after maintenance): the last data
    # commit is still the last append.
    from ingest_core.delta_tables import last_data_commit

    commit = last_data_commit(path)
    assert commit is not None
    assert (commit.version, commit.operation, commit.rows) == (2, "WRITE", 1)


def test_id_history_is_pruned_behind_the_watermark_and_a_reset_is_then_refused(home) -> None:
    from ingest_core.recovery import RestoreRefusedError, reset

    mark = datetime(2026, 6, 1, tzinfo=UTC)
    write_deltalake(
        str(path_of("silver_reconciliation")),
        pa.table(
            {
                "job": ["silver_refine", "silver_refine"],
                "query_id": ["q", "q"],
                "watermark": utc([mark - timedelta(days=10), mark]),
                "batch_time": utc([NOW - timedelta(hours=2), NOW - timedelta(hours=1)]),
            }
        ),
    )
    times = [mark - timedelta(days=d) for d in (0, 29, 31, 400)]
    ids = path_of("silver_event_ids")
    write_deltalake(
        str(ids), pa.table({"event_id": ["e0", "e29", "e31", "e400"], "event_time": utc(times)})
    )
    checkpoint = get_catalog().job("silver_refine").checkpoint()
    (checkpoint / "commits").mkdir(parents=True)

    report = maintain_table("silver_event_ids", policy=AGGRESSIVE, now=NOW)

    assert sorted(DeltaTable(str(ids)).to_pandas()["event_id"]) == ["e0", "e29"]
    assert report.rows_removed == 2
    assert PRUNED_BEFORE in DeltaTable(str(ids)).metadata().configuration
    # The newest batch's watermark (not the older one) measures the 30 days.
    assert "silver_refine watermark 2026-06-01" in "\n".join(report.lines())
    with pytest.raises(RestoreRefusedError, match="layer_full_refresh"):
        reset("silver_refine")
    assert checkpoint.is_dir()


def silver_orders_in_small_files(count: int) -> Path:
    path = path_of("silver_orders")
    for i in range(count):
        write_deltalake(
            str(path),
            pa.table(
                {
                    "event_id": [f"o{i}"],
                    "amount": [float(i)],
                    "event_date": ["2026-01-01" if i % 2 else "2026-01-02"],
                }
            ),
            partition_by=["event_date"],
            mode="append",
        )
    return path


def test_optimize_compacts_closed_partitions_vacuum_removes_what_it_replaced(home) -> None:
    path = silver_orders_in_small_files(8)
    rows = DeltaTable(str(path)).to_pandas().sort_values("event_id").reset_index(drop=True)

    report = maintain_table("silver_orders", policy=AGGRESSIVE, now=NOW)

    assert (report.before.files, report.after.files) == (8, 2)  # one per event_date
    assert report.after.stored_files == 2, "VACUUM at a 0 h retention removed the small files"
    assert report.vacuumed_files == 8
    after = DeltaTable(str(path)).to_pandas().sort_values("event_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(after[rows.columns], rows, check_dtype=False)
    assert report.retention_set_by is not None
    assert report.retention_set_by.kind == "floor"
    assert DeltaTable(str(path)).metadata().configuration["delta.logRetentionDuration"] == (
        "interval 0 days"
    )


def test_the_floor_keeps_files_and_a_dry_run_changes_nothing(home) -> None:
    path = silver_orders_in_small_files(4)
    version = DeltaTable(str(path)).version()
    report = maintain_table("silver_orders", dry_run=True, now=NOW)
    assert DeltaTable(str(path)).version() == version
    assert report.status == "dry run"
    assert report.retention_hours == 7 * 24

    maintain_table("silver_orders", now=NOW)  # the catalog's 7-day floor
    assert len(list(path.rglob("*.parquet"))) == 4 + 2, "compacted, nothing vacuumed yet"


def test_a_retention_below_the_floor_is_refused_with_the_numbers(home) -> None:
    silver_orders_in_small_files(2)
    with pytest.raises(RetentionRefusedError, match=r"24 h is refused: 168 h .*\(c\) floor"):
        maintain_table("silver_orders", retention_hours=24, now=NOW)


def test_a_writer_holding_its_lock_makes_the_table_skipped(home) -> None:
    silver_orders_in_small_files(2)
    lock = checkpoint_lock(get_catalog().job("silver_refine").checkpoint())
    busy = pytest.raises(TableBusyError, match="silver_refine holds its checkpoint lock")
    with lock, busy:
        maintain_table("silver_orders", policy=AGGRESSIVE, now=NOW)
    assert maintain_table("silver_orders", policy=AGGRESSIVE, now=NOW).status == "maintained"


def test_a_missing_table_is_reported_not_created(home) -> None:
    report = maintain_table("gold_customer_metrics", now=NOW)
    assert report.status == "missing"
    assert not path_of("gold_customer_metrics").exists()


def test_gate_results_retention_keeps_what_the_volume_band_reads() -> None:
    """The row-count band is learned from the last quality.volume_history passed runs."""
    keep = get_catalog().table("ops_gate_results").maintenance.keep_rows
    assert keep is not None
    assert "status" in keep.newest_per
    assert keep.keep_newest >= get_settings().quality.volume_history


def stream_reads(table: str, version: int, *, committed: bool, line: str | None = None) -> Path:
    """A gold_aggregate query checkpoint whose batch 0 reads ``table`` from ``version``
    (Spark's offsets format), committed or not."""
    query = get_catalog().job("gold_aggregate").checkpoint(query="gold_payment_totals_5m")
    (query / "offsets").mkdir(parents=True)
    source = line or json.dumps(
        {
            "sourceVersion": 1,
            "reservoirId": DeltaTable(str(path_of(table))).metadata().id,
            "reservoirVersion": version,
            "index": -1,
            "isStartingVersion": True,
        }
    )
    (query / "offsets" / "0").write_text(f"v1\n{{}}\n{source}\n")
    if committed:
        (query / "commits").mkdir()
        (query / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    return query


def test_an_uncommitted_first_batch_holds_the_snapshot_it_will_read(home) -> None:
    path = silver_orders_in_small_files(4)
    stream_reads("silver_orders", 3, committed=False)  # Spark re-runs it over version 3
    report = maintain_table("silver_orders", policy=AGGRESSIVE)
    assert report.retention_set_by is not None
    assert report.retention_set_by.kind == "stream"
    assert report.vacuumed_files == 0
    assert len(DeltaTable(str(path), version=3).file_uris()) == 4
    assert all(
        Path(uri.removeprefix("file://")).exists()
        for uri in DeltaTable(str(path), version=3).file_uris()
    )


def test_an_unreadable_offsets_file_keeps_every_version_and_is_named(home) -> None:
    silver_orders_in_small_files(4)
    stream_reads("silver_orders", 0, committed=True, line='{"reservoirId": ')
    report = maintain_table("silver_orders", policy=AGGRESSIVE)
    assert report.vacuumed_files == 0
    assert report.retention_set_by is not None
    assert "offsets 0 unreadable" in report.retention_set_by.source


def test_a_gate_pin_holds_vacuum_and_the_log_keeps_its_retention_beyond_it(home) -> None:
    path = silver_orders_in_small_files(4)
    pin = [("gate", "quality gate (validated through version 1)", 1)]
    report = maintain_table(
        "silver_orders",
        policy=AGGRESSIVE.model_copy(update={"log_retention": "30 days"}),
        pinned=pin,
        now=datetime.now(UTC) + timedelta(hours=5),
    )
    binding = report.retention_set_by
    assert binding is not None
    assert binding.kind == "gate"
    assert report.retention_hours == 7  # 5 h and some seconds since version 1, + 1 h, rounded up
    assert "(d) gate" in "\n".join(report.lines())
    configuration = DeltaTable(str(path)).metadata().configuration
    # 30 days beyond the 5-hour-old version the gate still reads, rounded up to whole days
    assert configuration["delta.logRetentionDuration"] == "interval 31 days"
    assert configuration["delta.deletedFileRetentionDuration"] == "interval 31 days"


@pytest.mark.parametrize("hours", [float("inf"), float("nan"), 1e13, -1.0])
def test_an_out_of_range_retention_is_refused_before_anything_changes(home, hours) -> None:
    path = silver_orders_in_small_files(2)
    version = DeltaTable(str(path)).version()
    with pytest.raises(ValueError, match="retention_hours must be a number of hours from 0"):
        maintain_table("silver_orders", retention_hours=hours, policy=AGGRESSIVE)
    assert DeltaTable(str(path)).version() == version


def test_a_longer_retention_asked_for_is_named_as_what_set_it(home) -> None:
    silver_orders_in_small_files(2)
    report = maintain_table("silver_orders", retention_hours=500, policy=AGGRESSIVE)
    assert report.retention_hours == 500
    assert report.retention_set_by is not None
    assert report.retention_set_by.kind == "request"


def test_change_feed_files_go_once_older_than_the_retention(home) -> None:
    path = path_of("gold_customer_metrics")
    write_deltalake(
        str(path),
        pa.table({"customer_id": ["a", "b"], "orders": [1, 2]}),
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    DeltaTable(str(path)).delete("customer_id = 'a'")
    assert list((path / "_change_data").glob("*.parquet")), "the delete wrote change data"
    maintain_table("gold_customer_metrics", policy=AGGRESSIVE)
    assert not list((path / "_change_data").glob("*.parquet"))
    assert DeltaTable(str(path)).to_pandas()["customer_id"].tolist() == ["b"]
