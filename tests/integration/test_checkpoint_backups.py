"""Checkpoint backups: a copy Spark could have left after a clean stop, verified by checksum."""

from __future__ import annotations

import json

import pytest

from ingest_core.catalog import get_catalog
from ingest_core.checkpoints import BackupError, backup, list_backups, verify
from tests.integration.medallion import Platform, payment

pytestmark = pytest.mark.integration


def test_backup_of_a_running_query_leaves_out_the_uncommitted_batch(platform: Platform) -> None:
    platform.send("payments", [payment(f"b{i}", f"2026-01-01T10:{i:02d}:00Z") for i in range(12)])
    platform.all_layers()
    bronze_cp = get_catalog().job("bronze_ingest").checkpoint()
    committed = max(int(p.name) for p in (bronze_cp / "commits").iterdir() if p.name.isdigit())
    # What a running query leaves between writing offsets and committing a batch:
    (bronze_cp / "offsets" / str(committed + 1)).write_text(
        (bronze_cp / "offsets" / str(committed)).read_text()
    )
    info = backup("bronze_ingest")
    manifest = verify(info.path)
    query = manifest["queries"][""]
    assert query["last_committed_batch"] == committed
    assert f"offsets/{committed + 1}" not in manifest["files"]
    assert f"offsets/{committed}" in manifest["files"]
    assert "metadata" in manifest["files"]
    assert sum(query["offsets"][platform.prefix + "payments"].values()) == 12
    assert query["sink_delta_version"] is not None

    gold = backup("gold_aggregate")  # one checkpoint per Gold table, state included
    assert "gold_payment_totals_5m" in gold.manifest["queries"]
    state = [f for f in gold.manifest["files"] if "/state/" in f and f.endswith(".delta")]
    assert state, "stateful queries' state files are backed up"
    assert [b.backup_id for b in list_backups("bronze_ingest")] == [info.backup_id]


def test_a_damaged_backup_does_not_verify(platform: Platform) -> None:
    platform.send("payments", [payment("c1", "2026-01-01T10:00:00Z")])
    platform.bronze()
    info = backup("bronze_ingest")
    (info.path / "metadata").write_text(json.dumps({"id": "another-query"}))
    with pytest.raises(BackupError, match="metadata does not match its checksum"):
        verify(info.path)


def test_no_metadata_no_backup(platform: Platform) -> None:
    platform.send("payments", [payment("c1", "2026-01-01T10:00:00Z")])
    platform.bronze()
    (get_catalog().job("bronze_ingest").checkpoint() / "metadata").unlink()
    with pytest.raises(BackupError, match="no metadata file"):
        backup("bronze_ingest")
    assert list_backups("bronze_ingest") == []
