"""Restores, crash recovery and retention on real checkpoints (real broker, Spark, Delta):
no duplicate and no missing row after any of them, and refusals that touch nothing."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from kafka import KafkaAdminClient

from ingest_core.catalog import get_catalog
from ingest_core.checkpoint_health import (
    ConfigurationChangedError,
    DamagedCheckpointError,
    check_before_start,
    find_damage,
    fingerprint_file,
)
from ingest_core.checkpoints import backup, list_backups
from ingest_core.locks import checkpoint_lock
from ingest_core.recovery import RestoreRefusedError, prune, recover, restore
from ingest_core.settings import get_settings
from ingest_core.waiting import wait_until
from ingest_platform import supervisor
from spark_jobs.job_cli import owned_checkpoint
from tests.integration.medallion import Platform, bronze_driver, payment

pytestmark = pytest.mark.integration


def order(event_id: str, when: str, customer: str, total: float) -> dict:
    return {
        "event_id": event_id,
        "event_type": "order_placed",
        "event_time": when,
        "schema_version": 1,
        "order_id": f"o-{event_id}",
        "customer_id": customer,
        "status": "created",
        "total": total,
        "currency": "BRL",
    }


def _round(platform: Platform, index: int, sent: list[dict]) -> None:
    """Six orders and two payments (stateful Gold windows), then every layer once."""
    events = [
        order(f"r{index}-{i}", f"2026-01-01T1{index}:{i:02d}:00Z", f"c{i % 3}", 1.0 + i)
        for i in range(6)
    ]
    sent.extend(events)
    platform.send("orders", events)
    platform.send(
        "payments", [payment(f"p{index}-{i}", f"2026-01-01T1{index}:0{i}:00Z") for i in range(2)]
    )
    platform.all_layers()


def _messages(sent: list[dict]) -> int:
    """Records sent by the rounds: their orders plus two payments per six orders."""
    return len(sent) + len(sent) // 3


def _assert_bronze_exactly_once(platform: Platform, expected: int) -> None:
    bronze = platform.read("bronze_events")[["topic", "partition", "offset"]]
    assert not bronze.duplicated().any()
    assert len(bronze) == expected
    for _, group in bronze.groupby(["topic", "partition"]):
        assert sorted(group.offset) == list(range(len(group)))


def _assert_metrics_match(platform: Platform, sent: list[dict]) -> None:
    expected = (
        pd.DataFrame(sent)
        .groupby("customer_id")
        .agg(order_count=("event_id", "size"), spend=("total", "sum"))
    )
    metrics = platform.read("gold_customer_metrics").set_index("customer_id").sort_index()
    assert list(metrics.index) == list(expected.index)
    assert list(metrics.order_count) == list(expected.order_count)
    assert [float(v) for v in metrics.spend] == list(expected.spend)


def test_restore_three_batches_old_neither_duplicates_nor_loses(platform: Platform) -> None:
    sent: list[dict] = []
    _round(platform, 0, sent)
    bronze_backup = backup("bronze_ingest").backup_id
    gold_backup = backup("gold_aggregate").backup_id
    for index in (1, 2, 3):  # three more batches in every query
        _round(platform, index, sent)
    bronze_result = restore("bronze_ingest", bronze_backup)
    gold_result = restore("gold_aggregate", gold_backup)
    assert bronze_result.moved_aside is not None
    assert bronze_result.moved_aside.is_dir()  # the live checkpoint is kept
    assert bronze_result.resumes_after[""] >= bronze_result.restored_batch[""] + 3
    assert (
        gold_result.restored_batch["gold_customer_metrics"]
        < (gold_result.resumes_after["gold_customer_metrics"])
    )
    _round(platform, 4, sent)  # restart after the restore, with new data
    _assert_bronze_exactly_once(platform, _messages(sent))
    _assert_metrics_match(platform, sent)  # the foreachBatch MERGE table
    audit = get_settings().storage.data_path.parent / "checkpoint_backups" / "audit.jsonl"
    assert [json.loads(line)["action"] for line in audit.read_text().splitlines()] == [
        "restore",
        "restore",
    ]


def test_damaged_offsets_commits_and_state_are_named_and_recovered(platform: Platform) -> None:
    sent: list[dict] = []
    _round(platform, 0, sent)
    backup("gold_aggregate")
    _round(platform, 1, sent)
    bronze_cp = get_catalog().job("bronze_ingest").checkpoint()
    newest = max(int(p.name) for p in (bronze_cp / "commits").iterdir() if p.name.isdigit())
    # A crash while writing the next batch's offsets: a zero-byte file.
    (bronze_cp / "offsets" / str(newest + 1)).write_bytes(b"")
    with pytest.raises(DamagedCheckpointError, match=rf"offsets/{newest + 1}: empty"):
        check_before_start("bronze_ingest")
    actions = recover("bronze_ingest")
    assert [a for a in actions if f"offsets/{newest + 1}" in a]
    check_before_start("bronze_ingest")
    # A crash while writing a commit: truncated JSON; its offsets stay (re-run, same range).
    commit = bronze_cp / "commits" / str(newest)
    commit.write_text(commit.read_text()[:5])
    with pytest.raises(DamagedCheckpointError, match=rf"commits/{newest}: truncated"):
        check_before_start("bronze_ingest")
    recover("bronze_ingest")
    assert (bronze_cp / "offsets" / str(newest)).exists()
    assert not commit.exists()
    # A state file lost: copied back from the backup that has it.
    gold_cp = get_catalog().job("gold_aggregate").checkpoint() / "gold_payment_totals_5m"
    state_files = sorted((gold_cp / "state").rglob("2.delta"))  # state after batch 1
    assert state_files
    state_files[0].unlink()
    with pytest.raises(DamagedCheckpointError, match="state file missing"):
        check_before_start("gold_aggregate")
    actions = recover("gold_aggregate")
    assert any("copied" in a and "from backup" in a for a in actions)
    assert state_files[0].exists()
    _round(platform, 2, sent)
    _assert_bronze_exactly_once(platform, _messages(sent))
    _assert_metrics_match(platform, sent)
    damaged = list(bronze_cp.parent.glob(".bronze_ingest.damaged-*"))
    assert damaged  # moved aside, never deleted


def test_restore_refusals_touch_nothing(platform: Platform, monkeypatch) -> None:
    platform.send("payments", [payment("a", "2026-01-01T10:00:00Z")])
    platform.bronze()
    info = backup("bronze_ingest")
    checkpoint = get_catalog().job("bronze_ingest").checkpoint()
    before = sorted(p.name for p in checkpoint.rglob("*"))
    # While the job runs (its driver holds the lock):
    with checkpoint_lock(checkpoint), pytest.raises(RestoreRefusedError, match="is running"):
        restore("bronze_ingest", info.backup_id)
    # A backup without metadata:
    broken = info.path.with_name(info.backup_id[:-1] + "9Z")
    shutil.copytree(info.path, broken)
    (broken / "metadata").unlink()
    with pytest.raises(RestoreRefusedError, match="metadata is missing"):
        restore("bronze_ingest", broken.name)
    shutil.rmtree(broken)
    # A query id that is not the live one (restoring would disable the sink's protection):
    metadata = checkpoint / "metadata"
    original_metadata = metadata.read_text()
    metadata.write_text(json.dumps({"id": "00000000-0000-0000-0000-000000000000"}))
    with pytest.raises(RestoreRefusedError, match="query id differs"):
        restore("bronze_ingest", info.backup_id)
    metadata.write_text(original_metadata)
    # Kafka down (soak run 4 met a raw KafkaTimeoutError): refused, saying so.
    from tests.conftest import free_ports

    (nowhere,) = free_ports(1)
    monkeypatch.setenv("INGEST_KAFKA__PORT", str(nowhere))
    get_settings.cache_clear()
    with pytest.raises(RestoreRefusedError, match=r"does not answer.*once the broker is back"):
        restore("bronze_ingest", info.backup_id)
    monkeypatch.setenv("INGEST_KAFKA__PORT", platform.bootstrap.rsplit(":", 1)[1])
    get_settings.cache_clear()
    # Offsets gone from Kafka: the topic deleted and recreated (empty).
    admin = KafkaAdminClient(bootstrap_servers=platform.bootstrap)
    topic = platform.prefix + "payments"
    admin.delete_topics([topic])
    time.sleep(2)
    from ingest_core.topics import ensure_topics

    ensure_topics(platform.bootstrap, [topic], partitions=3)
    admin.close()
    with pytest.raises(RestoreRefusedError, match="Kafka no longer holds offsets"):
        restore("bronze_ingest", info.backup_id)
    assert sorted(p.name for p in checkpoint.rglob("*")) == before
    with pytest.raises(RestoreRefusedError, match="no backup 'nope'"):
        restore("bronze_ingest", "nope")


def test_changed_configuration_is_refused_with_what_changed(platform: Platform) -> None:
    platform.send("payments", [payment("a", "2026-01-01T10:00:00Z")])
    platform.bronze()
    check_before_start("silver_refine")  # records the fingerprint on first start
    record = fingerprint_file(get_catalog().job("silver_refine"))
    recorded = json.loads(record.read_text())
    recorded["config"]["settings"]["dedup_watermark"] = "10 minutes"
    record.write_text(json.dumps(recorded))
    changed = r"settings.dedup_watermark: '10 minutes' -> '30 minutes'"
    with pytest.raises(ConfigurationChangedError, match=changed):
        check_before_start("silver_refine")


def test_retention_keeps_exactly_what_the_policy_says(platform: Platform, monkeypatch) -> None:
    monkeypatch.setenv("INGEST_CHECKPOINTS__KEEP_LAST", "2")
    monkeypatch.setenv("INGEST_CHECKPOINTS__KEEP_DAYS", "3")
    get_settings.cache_clear()
    platform.send("payments", [payment("a", "2026-01-01T10:00:00Z")])
    platform.bronze()
    original = backup("bronze_ingest")
    now = datetime.now(UTC)
    ages = {
        "20260101T000000000000Z": 10,
        "20260102T000000000000Z": 5,
        "20260103T000000000000Z": 2,
        "20260104T000000000000Z": 1,
    }
    for backup_id, days in ages.items():
        copy = original.path.with_name(backup_id)
        shutil.copytree(original.path, copy)
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["created_at"] = (now - timedelta(days=days)).isoformat()
        (copy / "manifest.json").write_text(json.dumps(manifest))
    # Newest 2 by id: the original (now) and 20260104; younger than 3 days: 20260103 too.
    removed = prune("bronze_ingest")
    assert sorted(removed) == ["20260101T000000000000Z", "20260102T000000000000Z"]
    assert sorted(b.backup_id for b in list_backups("bronze_ingest")) == sorted(
        [original.backup_id, "20260103T000000000000Z", "20260104T000000000000Z"]
    )


def _abandoned_write(spark: Any, path: Path) -> None:
    """Start Spark's own atomic write of ``path`` (``CheckpointFileManager.createAtomic``)
    and never finish it: the half-written temporary file a driver killed mid-write leaves."""
    jvm = spark._jvm
    target = jvm.org.apache.hadoop.fs.Path(str(path))
    managers = getattr(
        jvm.org.apache.spark.sql.execution.streaming.checkpointing, "CheckpointFileManager$"
    )
    manager = getattr(managers, "MODULE$").create(
        target.getParent(), spark._jsc.hadoopConfiguration()
    )
    manager.createAtomic(target, False).write(bytearray(b'v1\n{"batchWatermarkMs":'))


@pytest.mark.parametrize("repair", ["the driver's start", "recover"])
def test_a_driver_killed_while_writing_its_first_offsets_starts_again(
    platform: Platform, repair: str
) -> None:
    """Found in CI: a bronze driver killed while Spark wrote ``offsets/0`` left
    ``.0.<uuid>.tmp``, and Spark 4.1+ refused every later start on that checkpoint
    (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``): a starting driver and ``recover`` both
    move it aside, and every record lands once."""
    platform.send("payments", [payment(f"u{i}", "2026-01-01T10:00:00Z") for i in range(5)])
    checkpoint = get_catalog().job("bronze_ingest").checkpoint()
    (checkpoint / "offsets").mkdir(parents=True)
    _abandoned_write(platform.spark, checkpoint / "offsets" / "0")
    assert [d.kind for d in find_damage(checkpoint)] == ["unfinished"]
    if repair == "recover":
        assert len(recover("bronze_ingest")) == 1
        platform.bronze()
    else:
        with owned_checkpoint("bronze_ingest"):
            platform.bronze()
    _assert_bronze_exactly_once(platform, 5)
    (quarantine,) = checkpoint.parent.glob(".bronze_ingest.damaged-*")
    assert [p.name.split(".")[1] for p in (quarantine / "offsets").glob(".*.tmp")] == ["0"]


@pytest.mark.slow
@pytest.mark.faults
def test_kill_9_five_times_while_producing_keeps_bronze_exactly_once(platform: Platform) -> None:
    """20,000 events produced while the bronze_ingest driver is killed at random moments."""
    command = bronze_driver("--max-offsets-per-trigger", "3000")
    events = [payment(f"k{i}", f"2026-01-01T10:{i % 60:02d}:00Z") for i in range(20_000)]
    rng = random.Random(5)

    def send() -> None:
        for start in range(0, len(events), 1000):
            platform.send("payments", events[start : start + 1000])
            time.sleep(0.3)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        for _ in range(5):
            pid = supervisor.start("bronze_ingest", command, wait_s=120)
            time.sleep(rng.uniform(4, 12))
            import os
            import signal

            os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(TimeoutError):  # the next round copes with a slow exit
                wait_until(lambda: not supervisor.driver_pid("bronze_ingest"), 30, 0.2)
    finally:
        sender.join()
    recover("bronze_ingest")  # whatever the kills left half-written
    platform.bronze()  # a last run drains what is left
    _assert_bronze_exactly_once(platform, len(events))


def test_restore_refuses_to_replan_batches_a_sink_committed(platform: Platform) -> None:
    """silver_refine's sink cannot rebuild offsets (a Delta source): with the live
    checkpoint gone and the sink past the backup, the restore is refused with the numbers.
    (bronze_ingest rebuilds them from its own rows: test_checkpoint_rollback.py.)"""
    platform.send("payments", [payment("a", "2026-01-01T10:00:00Z")])
    platform.bronze()
    platform.silver()
    info = backup("silver_refine")
    platform.send("payments", [payment("b", "2026-01-01T10:01:00Z")])
    platform.bronze()
    platform.silver()  # the sink moves past the backup
    checkpoint = get_catalog().job("silver_refine").checkpoint()
    shutil.rmtree(checkpoint)  # the live checkpoint lost (deleted by hand)
    with pytest.raises(RestoreRefusedError, match=r"committed batch 1 .* would re-plan batch ids"):
        restore("silver_refine", info.backup_id)
    assert not checkpoint.exists()  # refused before anything was touched
