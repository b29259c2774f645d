"""Every path that rolls a checkpoint back (recover, restore) in front of an idempotent sink
ends with every Kafka offset exactly once (real broker, Spark, Delta).

The hazard: Delta's streaming sink, and every ``txnAppId``/``txnVersion`` write, skips a
batch id it already committed for the query id, whatever the batch's offset range now is. A
recovery that re-plans such a batch over new offsets loses those offsets for good.

The base state of every case: 10 records on one partition, read in 5 AvailableNow batches
of 2 (batches 0-4, all committed by the sink), then 4 more records produced while the job is
stopped: the right value is always 14 Bronze rows, offsets 0-13 once each.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest

from ingest_core.catalog import get_catalog
from ingest_core.checkpoint_health import DamagedCheckpointError, check_before_start, find_damage
from ingest_core.checkpoints import backup, backups_root
from ingest_core.delta_tables import sink_committed_batch, txn_app_ids
from ingest_core.recovery import RestoreRefusedError, recover, restore
from ingest_core.settings import get_settings
from ingest_core.waiting import wait_until
from spark_jobs import bronze_ingest
from tests.integration.medallion import AVAILABLE_NOW, Platform, bronze_driver, payment

pytestmark = pytest.mark.integration

FIRST, LATER = 10, 4


def _bronze_in_batches_of_two(platform: Platform) -> None:
    bronze_ingest.start(
        platform.spark, trigger=AVAILABLE_NOW, max_offsets_per_trigger=2
    ).awaitTermination()


def _base(platform: Platform) -> Path:
    """Batches 0-4 committed over offsets 0-9; offsets 10-13 produced, not yet read."""
    # One key: every record on one partition, so the batches are exactly 2 records each.
    platform.send("payments", [payment(f"a{i}", "2026-01-01T10:00:00Z") for i in range(FIRST)])
    _bronze_in_batches_of_two(platform)
    checkpoint = get_catalog().job("bronze_ingest").checkpoint()
    assert sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()) == [
        0,
        1,
        2,
        3,
        4,
    ]
    platform.send("payments", [payment(f"b{i}", "2026-01-01T10:01:00Z") for i in range(LATER)])
    return checkpoint


def _assert_offsets_exactly_once(platform: Platform) -> None:
    bronze = platform.read("bronze_events")
    coordinates = bronze[["topic", "partition", "offset"]]
    assert not coordinates.duplicated().any()
    assert sorted(bronze.offset) == list(range(FIRST + LATER))


def _damage(path: Path, how: str) -> None:
    crc = path.with_name(f".{path.name}.crc")
    crc.unlink(missing_ok=True)  # as a crash leaves it: the checksum of a file never finished
    if how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(path.read_bytes()[:7])


def test_recovering_an_empty_offsets_file_of_a_batch_the_sink_committed_loses_nothing(
    platform: Platform,
) -> None:
    """Issue #15 case 1: commits 0-3, offsets/4 empty (crash), batch 4 already in the sink.
    Moving offsets/4 aside re-planned batch 4 over offsets 8-13 and the sink skipped it."""
    checkpoint = _base(platform)
    (checkpoint / "commits" / "4").unlink()
    _damage(checkpoint / "offsets" / "4", "empty")
    with pytest.raises(DamagedCheckpointError, match=r"offsets/4: empty"):
        check_before_start("bronze_ingest")
    actions = recover("bronze_ingest")
    assert any("offsets/4 (original, from bronze_events Delta version" in a for a in actions)
    check_before_start("bronze_ingest")
    platform.bronze()
    _assert_offsets_exactly_once(platform)


def test_recovering_an_older_offsets_file_never_replans_committed_batches(
    platform: Platform,
) -> None:
    """Issue #15 case 1, second form: offsets/3 empty while commits 0-4 exist."""
    checkpoint = _base(platform)
    _damage(checkpoint / "offsets" / "3", "empty")
    recover("bronze_ingest")
    assert (checkpoint / "offsets" / "4").exists()  # an intact committed batch stays
    assert (checkpoint / "commits" / "4").exists()
    platform.bronze()
    _assert_offsets_exactly_once(platform)


@pytest.mark.slow
def test_check_and_recover_matrix_keeps_every_offset_exactly_once(
    platform: Platform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """{missing, empty, truncated} x {offsets/N, offsets/N-1, commits/N, metadata}: the check
    names the damage (a missing commits/N is an ordinary crash state, not damage), recover
    repairs it, and the next run leaves offsets 0-13 in Bronze once each."""
    _base(platform)
    snapshot = tmp_path / "snapshot"
    shutil.copytree(platform.home, snapshot)
    targets = {
        "offsets/N": "offsets/4",
        "offsets/N-1": "offsets/3",
        "commits/N": "commits/4",
        "metadata": "metadata",
    }
    failures = []
    for target, relative in targets.items():
        for how in ("missing", "empty", "truncated"):
            # A home of its own per case: Delta caches each table's log by path.
            home = tmp_path / f"{relative.replace('/', '-')}-{how}"
            shutil.copytree(snapshot, home)
            monkeypatch.setenv("INGEST_HOME", str(home))
            get_settings.cache_clear()
            checkpoint = get_catalog().job("bronze_ingest").checkpoint()
            _damage(checkpoint / relative, how)
            damage = find_damage(checkpoint)
            if (target, how) == ("commits/N", "missing"):
                assert damage == []
            else:
                assert [d.path.name for d in damage] == [Path(relative).name], (target, how)
            recover("bronze_ingest")
            assert find_damage(checkpoint) == [], (target, how)
            platform.bronze()
            bronze = platform.read("bronze_events")
            if sorted(bronze.offset) != list(range(FIRST + LATER)):
                failures.append((target, how, sorted(bronze.offset)))
    assert failures == []


def test_a_hole_and_a_missing_offsets_file_with_its_commit_are_named_and_repaired(
    platform: Platform,
) -> None:
    """Issue #15 case 2 (a) and (c): a hole in the offsets log, and offsets/4 missing while
    commits/4 exists, were 'intact' to the check and then failed in Spark or with Errno 2."""
    checkpoint = _base(platform)
    (checkpoint / "offsets" / "3").unlink()
    (checkpoint / "commits" / "3").unlink()
    (checkpoint / "commits" / "4").unlink()
    with pytest.raises(DamagedCheckpointError, match=r"offsets/3: missing: a hole"):
        check_before_start("bronze_ingest")
    recover("bronze_ingest")
    platform.bronze()
    _assert_offsets_exactly_once(platform)


def test_recover_takes_a_committed_batch_offsets_from_a_verified_backup_or_refuses(
    platform: Platform,
) -> None:
    """Issue #15 case 2 (d), for a job whose sink cannot rebuild offsets (silver_refine reads
    a Delta source and writes through txnAppId/txnVersion): the backup's intact file is used;
    without a backup the recovery is refused with the numbers and changes nothing."""
    platform.send("payments", [payment("s0", "2026-01-01T10:00:00Z")])
    platform.bronze()
    platform.silver()
    platform.send("payments", [payment("s1", "2026-01-01T10:01:00Z")])
    platform.bronze()
    platform.silver()
    settings = get_settings()
    checkpoint = get_catalog().job("silver_refine").checkpoint(settings)
    newest = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    query_id = (checkpoint / "metadata").read_text()
    tables = [t.path(settings) for t in get_catalog().tables.values()]
    committed = sink_committed_batch(
        tables, txn_app_ids("silver_refine", json.loads(query_id)["id"])
    )
    assert committed == newest
    info = backup("silver_refine")
    (checkpoint / "commits" / str(newest)).unlink()
    _damage(checkpoint / "offsets" / str(newest), "empty")
    actions = recover("silver_refine")
    assert any(f"offsets/{newest} (original, from backup {info.backup_id})" in a for a in actions)
    platform.send("payments", [payment("s2", "2026-01-01T10:02:00Z")])
    platform.bronze()
    platform.silver()
    assert sorted(platform.read("silver_payments").event_id) == ["s0", "s1", "s2"]
    # Without any backup: refused with the numbers, nothing touched.
    newest += 1
    shutil.rmtree(backups_root() / "silver_refine")
    (checkpoint / "commits" / str(newest)).unlink()
    _damage(checkpoint / "offsets" / str(newest), "truncated")
    before = sorted((p.name, p.stat().st_size) for p in checkpoint.rglob("*") if p.is_file())
    with pytest.raises(RestoreRefusedError, match=rf"batch {newest} .*offsets of batch {newest}"):
        recover("silver_refine")
    assert (
        sorted((p.name, p.stat().st_size) for p in checkpoint.rglob("*") if p.is_file()) == before
    )


def test_restore_past_a_committed_batch_rebuilds_its_offsets_instead_of_losing_rows(
    platform: Platform,
) -> None:
    """A backup from batch 2, the live checkpoint lost, the sink at batch 4: the restore
    rebuilds offsets 3-4 from the sink (bronze keeps Kafka coordinates) and nothing is lost."""
    platform.send("payments", [payment(f"a{i}", "2026-01-01T10:00:00Z") for i in range(6)])
    _bronze_in_batches_of_two(platform)  # batches 0-2
    info = backup("bronze_ingest")
    platform.send("payments", [payment(f"a{i}", "2026-01-01T10:00:00Z") for i in range(6, 10)])
    _bronze_in_batches_of_two(platform)  # batches 3-4 reach the sink
    checkpoint = get_catalog().job("bronze_ingest").checkpoint()
    shutil.rmtree(checkpoint)
    result = restore("bronze_ingest", info.backup_id)
    assert result.resumes_after[""] == 4
    platform.send("payments", [payment(f"b{i}", "2026-01-01T10:01:00Z") for i in range(LATER)])
    platform.bronze()
    _assert_offsets_exactly_once(platform)


def test_restore_of_a_backup_older_than_the_batches_spark_keeps_loses_nothing(
    platform: Platform,
) -> None:
    """A backup from batch 1, then batches 2-6 with Spark keeping only the newest few: the
    live checkpoint no longer has batches 2-3 to carry over (the restore crashed on them);
    it carries what Spark kept, and every offset lands once."""
    platform.send("payments", [payment(f"a{i}", "2026-01-01T10:00:00Z") for i in range(4)])
    _bronze_in_batches_of_two(platform)  # batches 0-1
    info = backup("bronze_ingest")
    platform.spark.conf.set("spark.sql.streaming.minBatchesToRetain", "2")
    try:
        platform.send("payments", [payment(f"a{i}", "2026-01-01T10:00:00Z") for i in range(4, 14)])
        _bronze_in_batches_of_two(platform)  # batches 2-6; Spark purges the old ones
    finally:
        platform.spark.conf.unset("spark.sql.streaming.minBatchesToRetain")
    checkpoint = get_catalog().job("bronze_ingest").checkpoint()
    assert not {"2", "3"} & {p.name for p in (checkpoint / "offsets").iterdir()}
    result = restore("bronze_ingest", info.backup_id)
    assert result.resumes_after[""] == 6
    platform.send("payments", [payment(f"b{i}", "2026-01-01T10:01:00Z") for i in range(4)])
    platform.bronze()
    bronze = platform.read("bronze_events")
    assert not bronze[["topic", "partition", "offset"]].duplicated().any()
    assert sorted(bronze.offset) == list(range(18))


@pytest.mark.slow
def test_the_supervisors_own_repair_then_restart_loses_nothing(platform: Platform) -> None:
    """Issue #15 case 1 through streaming_supervisor: it repaired the checkpoint by itself,
    then the always-on driver lost offsets 10-13 (2 of 2 runs), or the run after the repair
    refused with 'already runs (pid N)' while no driver ran."""

    from ingest_platform import supervisor

    checkpoint = _base(platform)
    (checkpoint / "commits" / "4").unlink()
    _damage(checkpoint / "offsets" / "4", "empty")
    command = bronze_driver()
    said: list[str] = []
    try:
        outcome = supervisor.supervise("bronze_ingest", command, echo=said.append)
        assert "started" in outcome, (outcome, said)
        assert any("checkpoint recovery: wrote" in line for line in said)
        with contextlib.suppress(TimeoutError):  # the exactly-once check below says what is missing
            wait_until(lambda: len(platform.read("bronze_events")) >= FIRST + LATER, 240, 2)
    finally:
        supervisor.stop("bronze_ingest")
    _assert_offsets_exactly_once(platform)


def test_damaged_offsets_of_old_batches_are_moved_aside_like_spark_retention(
    platform: Platform,
) -> None:
    """Found by the breaker: an empty offsets/0 with batches up to 4 committed was refused,
    though Spark needs only the newest two offsets files (its own retention purges older)."""
    checkpoint = _base(platform)
    _damage(checkpoint / "offsets" / "0", "empty")
    actions = recover("bronze_ingest")
    assert any("offsets/0 to" in a for a in actions)
    assert any("commits/0 to" in a for a in actions)
    platform.bronze()
    _assert_offsets_exactly_once(platform)


def test_a_gold_querys_lost_metadata_comes_back_with_its_own_id(platform: Platform) -> None:
    """Found by the breaker: gold_aggregate has one query folder per Gold table; a lost
    metadata was rebuilt from gold_payment_totals_5m's commits, i.e. another query's id, and
    the re-run batch was appended a second time."""
    platform.send("payments", [payment(f"g{i}", f"2026-01-01T10:0{i}:00Z") for i in range(5)])
    platform.all_layers()
    platform.send("payments", [payment("g9", "2026-01-01T11:00:00Z")])  # closes 10:00-10:15
    platform.all_layers()
    before = platform.read("gold_payment_success_rate_15m")
    assert len(before) >= 1
    folder = get_catalog().job("gold_aggregate").checkpoint() / "gold_payment_success_rate_15m"
    original = (folder / "metadata").read_text()
    newest = max(int(p.name) for p in (folder / "commits").iterdir() if p.name.isdigit())
    for path in (folder / "commits" / str(newest), folder / "metadata"):
        _damage(path, "missing")  # a crash between the sink's commit and the checkpoint's
    recover("gold_aggregate")
    assert json.loads((folder / "metadata").read_text())["id"] == json.loads(original)["id"]
    platform.gold()
    after = platform.read("gold_payment_success_rate_15m")
    assert len(after) == len(before)
    assert not after[["window_start", "method"]].duplicated().any()
