"""Which Delta commits change data (issue 51): maintenance (OPTIMIZE, VACUUM, table
properties) and empty batches do not, so they neither start a scheduled job's Spark nor make
a gate's increment. On real tables written and maintained with delta-rs, and on the commit
infos Spark writes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from ingest_core.catalog import get_catalog
from ingest_core.delta_tables import _data_commit, changes_data, delta_version, last_data_commit

pytestmark = pytest.mark.unit

ROWS = pa.table({"event_id": ["a", "b"], "n": [1, 2]})


def _maintain(path: Path) -> None:
    """What table_maintenance commits: compaction, vacuum, a table property."""
    DeltaTable(str(path)).optimize.compact()
    DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    DeltaTable(str(path)).alter.set_table_properties(
        {"delta.logRetentionDuration": "interval 30 days"}
    )


def test_maintenance_and_empty_appends_are_not_data(tmp_path: Path) -> None:
    path = tmp_path / "t"
    assert last_data_commit(path) is None
    write_deltalake(str(path), ROWS)
    write_deltalake(str(path), ROWS, mode="append")
    _maintain(path)
    write_deltalake(str(path), ROWS.slice(0, 0), mode="append")  # an empty batch
    assert delta_version(path) == 6
    commit = last_data_commit(path)
    assert commit is not None
    assert (commit.version, commit.operation, commit.rows) == (1, "WRITE", 2)
    write_deltalake(str(path), ROWS.slice(0, 1), mode="append")
    assert last_data_commit(path).version == 7  # type: ignore[union-attr]


def test_spark_commit_infos() -> None:
    def info(operation: str, mode: str | None = None, **metrics: str) -> dict:
        return {
            "operation": operation,
            "operationParameters": {"mode": f'"{mode}"'} if mode else {},
            "operationMetrics": metrics,
        }

    assert changes_data(info("STREAMING UPDATE", numOutputRows="5"))
    assert not changes_data(info("STREAMING UPDATE", numOutputRows="0"))
    assert not changes_data(info("WRITE", "Append", numOutputRows="0", numFiles="0"))
    assert changes_data(
        info("WRITE", "Overwrite", numOutputRows="0")
    )  # an empty overwrite truncates
    assert not changes_data(
        info("MERGE", numTargetRowsInserted="0", numTargetRowsUpdated="0", numTargetRowsDeleted="0")
    )
    assert changes_data(info("MERGE", numTargetRowsInserted="0", numTargetRowsUpdated="3"))
    assert changes_data(info("DELETE", numDeletedRows="4"))
    assert not changes_data(info("DELETE", num_deleted_rows="4") | {"ingest.maintenance": "x"})
    assert not changes_data(info("OPTIMIZE", numAddedFiles="1", numRemovedFiles="9"))
    assert not changes_data(info("VACUUM END"))
    assert not changes_data(info("SET TBLPROPERTIES"))
    assert changes_data(info("RESTORE"))  # unknown here: counted as a change
    assert changes_data(info("CREATE TABLE AS SELECT"))


def test_the_inputs_check_and_the_gates_ignore_maintenance(ingest_home: Path) -> None:
    """A scheduled job's inputs snapshot and a gate's pending increment stay as they were
    after maintenance commits, and move with the next data commit."""
    from ingest_core.quality.state import pending
    from ingest_platform.hooks import inputs_snapshot

    bronze = get_catalog().table("bronze_events").path()
    payments = get_catalog().table("silver_payments").path()
    for path in (bronze, payments):
        write_deltalake(str(path), ROWS)
    before = inputs_snapshot("silver_refine", ["bronze_events"])
    gated = {inc.table: (inc.from_version, inc.to_version) for inc in pending("silver")}
    assert gated["silver_payments"] == (0, 0)
    for path in (bronze, payments):
        _maintain(path)
    assert inputs_snapshot("silver_refine", ["bronze_events"]) == before
    assert {inc.table: (inc.from_version, inc.to_version) for inc in pending("silver")} == gated
    for path in (bronze, payments):
        write_deltalake(str(path), ROWS, mode="append")
    assert inputs_snapshot("silver_refine", ["bronze_events"]) != before
    moved = {inc.table: (inc.from_version, inc.to_version) for inc in pending("silver")}
    assert moved["silver_payments"] == (0, delta_version(payments))


def _offsets_file(checkpoint: Path, batch: int, watermark_ms: int, source: dict | None) -> None:
    meta = {"batchWatermarkMs": watermark_ms, "batchTimestampMs": 1000 * batch, "conf": {}}
    line = "-" if source is None else json.dumps({"sourceVersion": 1, **source})
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{line}\n")


def _delta(version: int, index: int = -1, starting: bool = False) -> dict:
    return {"reservoirVersion": version, "index": index, "isStartingVersion": starting}


def test_delta_source_batches_give_each_batch_its_versions_and_watermark(tmp_path: Path) -> None:
    """What a Gold query read per batch (the late corrections find the rows Gold's watermark
    dropped from it): ``(v, -1)`` is "before version v", ``(v, i >= 0)`` is "inside v"."""
    from ingest_core.delta_tables import DeltaSourceBatch, delta_source_batches

    checkpoint = tmp_path / "cp"
    assert delta_source_batches(checkpoint) == []
    steps = [
        (0, _delta(3, 2, starting=True)),  # the snapshot of version 3, in part
        (0, _delta(4, -1, starting=False)),  # the rest of the snapshot
        (600_000, _delta(4, -1)),  # a no-data batch: the watermark moves
        (600_000, _delta(6, -1)),  # versions 4 and 5
        (900_000, _delta(7, 0)),  # version 6 and the first file of 7
        (900_000, _delta(8, -1)),  # the rest of 7
        (1_200_000, _delta(9, -1)),  # not committed: left out
    ]
    for batch, (watermark, offset) in enumerate(steps):
        _offsets_file(checkpoint, batch, watermark, offset)
        if batch < 6:
            (checkpoint / "commits").mkdir(exist_ok=True)
            (checkpoint / "commits" / str(batch)).write_text("v1\n{}\n")
    assert delta_source_batches(checkpoint) == [
        DeltaSourceBatch(1, 0, 1000, 0, 3, snapshot=True),
        DeltaSourceBatch(3, 600_000, 3000, 4, 5, snapshot=False),
        DeltaSourceBatch(4, 900_000, 4000, 6, 7, snapshot=False),
        DeltaSourceBatch(5, 900_000, 5000, 7, 7, snapshot=False),
    ]
    # Spark purged batches 0-2: batch 3's start is gone with batch 2, so it is left out.
    for batch in range(3):
        (checkpoint / "offsets" / str(batch)).unlink()
    assert [b.batch_id for b in delta_source_batches(checkpoint)] == [4, 5]


def test_rows_added_by_a_merge_are_its_inserted_rows() -> None:
    """Spark's MERGE also reports ``numOutputRows``, which counts the unchanged rows it
    copied: a fresh clone's Streaming page showed 1,378 rows added for 5 updated."""
    merge = {
        "version": 3,
        "timestamp": 0,
        "operation": "MERGE",
        "operationMetrics": {
            "numOutputRows": "1378",
            "numTargetRowsInserted": "0",
            "numTargetRowsUpdated": "5",
            "numTargetRowsCopied": "1373",
        },
    }
    assert _data_commit(merge).rows == 0
    write = {"version": 4, "timestamp": 0, "operation": "WRITE"}
    assert _data_commit(write | {"operationMetrics": {"numOutputRows": "7"}}).rows == 7
