"""Recovery steps that need no Spark: half-written files and state left without offsets,
on hand-made checkpoint folders under a temporary ``INGEST_HOME``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest_core.catalog import get_catalog
from ingest_core.checkpoint_health import find_damage
from ingest_core.recovery import audit_log, recover, set_aside_unfinished_writes

pytestmark = pytest.mark.unit

UID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def _quarantine(checkpoint: Path) -> Path:
    (found,) = checkpoint.parent.glob(f".{checkpoint.name}.damaged-*")
    return found


def test_a_starting_driver_moves_half_written_files_aside_and_audits_it(
    ingest_home: Path,
) -> None:
    checkpoint = get_catalog().job("bronze_ingest").checkpoint()
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": "q-1"}))
    (checkpoint / "offsets" / f".0.{UID}.tmp").write_text("v1\n")
    (checkpoint / "offsets" / f"..0.{UID}.tmp.crc").write_bytes(b"crc")
    actions = set_aside_unfinished_writes("bronze_ingest")
    (action,) = actions
    assert f".0.{UID}.tmp" in action
    assert list((checkpoint / "offsets").iterdir()) == []  # what Spark needs to start
    moved = _quarantine(checkpoint) / "offsets"
    assert sorted(p.name for p in moved.iterdir()) == [f"..0.{UID}.tmp.crc", f".0.{UID}.tmp"]
    (entry,) = [json.loads(line) for line in audit_log().read_text().splitlines()]
    assert entry["action"] == "set-aside-unfinished-writes"
    assert set_aside_unfinished_writes("bronze_ingest") == []


def test_recover_moves_state_aside_with_the_only_offsets_no_sink_committed(
    ingest_home: Path,
) -> None:
    """A damaged ``offsets/0`` no sink committed goes aside and Spark starts the query anew;
    Spark refuses a new query whose state folder is not empty, so the state goes too."""
    query = get_catalog().job("gold_aggregate").checkpoint() / "gold_customer_metrics"
    (query / "offsets").mkdir(parents=True)
    (query / "metadata").write_text(json.dumps({"id": "q-gold"}))
    (query / "offsets" / "0").write_bytes(b"")
    (query / "state" / "0" / "0").mkdir(parents=True)
    (query / "state" / "0" / "0" / "1.delta").write_bytes(b"state of batch 0")
    (query / "offsets" / f".1.{UID}.tmp").write_text("v1\n")
    # Found by the breaker: a half-written state file made the state folder's move fail
    # half-way (its file had gone aside first).
    (query / "state" / "0" / "0" / f".2.delta.{UID}.tmp").write_bytes(b"")
    assert [d.kind for d in find_damage(query.parent)] == ["unfinished", "unfinished", "offsets"]
    recover("gold_aggregate")
    assert find_damage(query.parent) == []
    assert not (query / "state").exists()
    assert list((query / "offsets").iterdir()) == []
    moved = _quarantine(query.parent) / "gold_customer_metrics"
    assert (moved / "state" / "0" / "0" / "1.delta").read_bytes() == b"state of batch 0"
    assert (moved / "offsets" / "0").exists()
    assert (moved / "offsets" / f".1.{UID}.tmp").exists()
    assert (moved / "state" / "0" / "0" / f".2.delta.{UID}.tmp").exists()
    (entry,) = [json.loads(line) for line in audit_log().read_text().splitlines()]
    assert entry["action"] == "recover"


def test_a_state_folder_of_a_query_without_offsets_is_named_and_moved_aside(
    ingest_home: Path,
) -> None:
    """Spark would refuse to start the query as a new one (found by the breaker: after a
    repair that failed half-way, nothing said so)."""
    query = get_catalog().job("gold_aggregate").checkpoint() / "gold_customer_metrics"
    (query / "offsets").mkdir(parents=True)
    (query / "metadata").write_text(json.dumps({"id": "q-gold"}))
    (query / "state" / "0" / "0").mkdir(parents=True)
    (query / "state" / "0" / "0" / "1.delta").write_bytes(b"state")
    assert [(d.kind, d.path.name) for d in find_damage(query.parent)] == [("stale_state", "state")]
    recover("gold_aggregate")
    assert find_damage(query.parent) == []
    moved = _quarantine(query.parent) / "gold_customer_metrics" / "state" / "0" / "0"
    assert (moved / "1.delta").read_bytes() == b"state"


def test_two_repairs_in_one_second_keep_both_moved_aside_files(
    ingest_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the breaker: the second repair's rename replaced the first one's file."""
    from ingest_core import recovery

    monkeypatch.setattr(recovery, "_stamp", lambda: "20261201T120000Z")
    checkpoint = get_catalog().job("bronze_ingest").checkpoint()
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": "q-1"}))
    for text in ("first", "second"):
        (checkpoint / "offsets" / f".0.{UID}.tmp").write_text(text)
        set_aside_unfinished_writes("bronze_ingest")
    moved = sorted(checkpoint.parent.glob(".bronze_ingest.damaged-20261201T120000Z*"))
    assert [m.name[-2:] for m in moved] == ["0Z", "-1"]
    assert [(m / "offsets" / f".0.{UID}.tmp").read_text() for m in moved] == ["first", "second"]


def test_backups_never_take_half_written_files() -> None:
    from ingest_core.checkpoints import _keep

    assert _keep(Path("offsets/3"), committed=5)
    assert not _keep(Path(f"offsets/.3.{UID}.tmp"), committed=5)
    assert not _keep(Path(f"state/0/0/..4.delta.{UID}.tmp.crc"), committed=5)


def _batch(query: Path, batch: int, *, commit: bool) -> None:
    """Batch ``batch``'s offsets file (``payments`` partition 0 up to ``10 * (batch + 1)``),
    and its commit when ``commit``: the files Spark's logs write, in their formats."""
    (query / "offsets").mkdir(parents=True, exist_ok=True)
    (query / "offsets" / str(batch)).write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n'
        + json.dumps({"payments": {"0": 10 * (batch + 1)}})
    )
    if commit:
        (query / "commits").mkdir(exist_ok=True)
        (query / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def _started_query(query: Path, query_id: str) -> None:
    """A query as Spark leaves it when it starts: ``metadata`` and, for a Kafka source, the
    starting offsets it resolved (``sources/0/0``)."""
    (query / "sources" / "0").mkdir(parents=True)
    (query / "metadata").write_text(json.dumps({"id": query_id}))
    (query / "sources" / "0" / "0").write_text('v1\n{"payments":{"0":0}}')


def test_a_query_idle_since_its_start_is_backed_up_and_restored_to_start_afresh(
    ingest_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Soak run 9: a backup refused all of ``payment_alerts`` because its landing query had
    not committed a batch yet. It now keeps that query as Spark leaves a query stopped
    before its first commit (metadata and its recorded starting offsets, no planned batch);
    the restore carries over what the live query did since, like any query's."""
    from ingest_core import recovery
    from ingest_core.checkpoints import BackupError, backup, verify

    job = get_catalog().job("payment_alerts")
    velocity, landing = job.checkpoint() / "velocity", job.checkpoint() / "landing"
    _started_query(landing, "q-landing")
    _batch(landing, 0, commit=False)  # planned, running: not a committed batch
    with pytest.raises(BackupError, match="no committed batch yet"):
        backup("payment_alerts")  # nothing committed anywhere: nothing to back up
    _started_query(velocity, "q-velocity")
    for batch in (0, 1):
        _batch(velocity, batch, commit=True)

    info = backup("payment_alerts")
    assert info.manifest["queries"]["landing"]["last_committed_batch"] is None
    assert info.manifest["queries"]["velocity"]["last_committed_batch"] == 1
    assert "landing: batch none yet" in info.describe()
    copied = sorted(str(p.relative_to(info.path)) for p in info.path.rglob("*") if p.is_file())
    assert [p for p in copied if p.startswith("landing/")] == [
        "landing/metadata",
        "landing/sources/0/0",
    ]
    verify(info.path)

    # The live landing query commits its first batch and plans the next after the backup.
    _batch(landing, 0, commit=True)
    _batch(landing, 1, commit=False)
    # Kafka's check has its own integration tests; these offsets are hand-made.
    monkeypatch.setattr(recovery, "_kafka_gaps", lambda *args: [])
    result = recovery.restore("payment_alerts", info.backup_id)
    assert result.restored_batch == {"landing": None, "velocity": 1}
    assert result.resumes_after == {"landing": 0, "velocity": 1}
    assert (landing / "commits" / "0").exists()
    assert (landing / "offsets" / "1").exists()  # re-run over its original range

    # Without a live checkpoint, the idle query starts afresh from its recorded offsets.
    for query in (velocity, landing):
        for kind in ("offsets", "commits"):
            for file in (query / kind).iterdir():
                file.unlink()
    result = recovery.restore("payment_alerts", info.backup_id)
    assert result.resumes_after == {"landing": None, "velocity": 1}
    assert not list(landing.glob("offsets/*"))
    assert (landing / "sources" / "0" / "0").read_text() == 'v1\n{"payments":{"0":0}}'
    assert (landing / "metadata").exists()
    assert (velocity / "commits" / "1").exists()


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}


def test_a_restore_run_again_after_it_succeeded_leaves_the_same_checkpoint(
    ingest_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Soak run 21: ``restore_checkpoint`` restored the checkpoint, then failed reporting it
    (the metadata database was killed), so its retry restores the same backup again. The
    second restore carries over the same batches and leaves the same files: the checkpoint,
    the result and the batch the query resumes after are those of the first."""
    from ingest_core import recovery
    from ingest_core.checkpoints import backup

    job = get_catalog().job("payment_alerts")
    checkpoint = job.checkpoint()
    for name in ("velocity", "landing"):
        _started_query(checkpoint / name, f"q-{name}")
        for batch in (0, 1):
            _batch(checkpoint / name, batch, commit=True)
    info = backup("payment_alerts")
    for name in ("velocity", "landing"):  # the live queries go on after the backup
        _batch(checkpoint / name, 2, commit=True)
        _batch(checkpoint / name, 3, commit=False)
    monkeypatch.setattr(recovery, "_kafka_gaps", lambda *args: [])

    first = recovery.restore("payment_alerts", info.backup_id)
    restored = _files(checkpoint)
    second = recovery.restore("payment_alerts", info.backup_id)

    assert first.resumes_after == second.resumes_after == {"landing": 2, "velocity": 2}
    assert first.restored_batch == second.restored_batch
    assert _files(checkpoint) == restored
    assert second.moved_aside != first.moved_aside  # each restore keeps what it replaced
    assert _files(second.moved_aside) == restored
