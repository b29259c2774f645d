"""ingest_core.kafka_offsets.resume_after_gaps on a checkpoint written the way Spark writes
it (no Spark, no Kafka): the positions Spark reads on restart move past accepted gaps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest_core.kafka_offsets import KafkaInspection, record_topic_ids, recorded_topic_ids
from ingest_core.kafka_offsets import resume_after_gaps as resume

pytestmark = pytest.mark.unit

META = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'


def _offsets(checkpoint: Path, batch: int, source: dict[str, dict[str, int]]) -> None:
    folder = checkpoint / "offsets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(batch)).write_text(f"v1\n{META}\n{json.dumps(source)}")
    (folder / f".{batch}.crc").write_bytes(b"crc\x00stale")


def _commit(checkpoint: Path, batch: int) -> None:
    folder = checkpoint / "commits"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def _source(checkpoint: Path, batch: int) -> dict[str, dict[str, int]]:
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    assert lines[:2] == ["v1", META]
    return dict(json.loads(lines[2]))


def test_committed_and_pending_batches_move_past_the_gaps(tmp_path: Path) -> None:
    old = {"t": {"0": 40, "1": 30, "2": 35}, "u": {"0": 5}}
    _offsets(tmp_path, 6, {"t": {"0": 1, "1": 1, "2": 1}, "u": {"0": 1}})  # older: untouched
    _offsets(tmp_path, 7, old)
    _commit(tmp_path, 7)
    _offsets(tmp_path, 8, {"t": {"0": 45, "1": 33, "2": 40}, "u": {"0": 9}})  # not committed
    found = KafkaInspection(
        restart_at={("t", 0): 0}, vanished={("t", 1), ("t", 2)}, floor={("u", 0): 7}
    )

    assert resume(tmp_path, found) == [7, 8]

    # Recreated t[0] restarts at the new topic's first offset in both: the pending batch
    # reads nothing of it, the next one reads it from 0. t[1], t[2] are gone; u[0] starts
    # at Kafka's earliest offset, and the pending batch's end above it stays.
    assert _source(tmp_path, 7) == {"t": {"0": 0}, "u": {"0": 7}}
    assert _source(tmp_path, 8) == {"t": {"0": 0}, "u": {"0": 9}}
    assert _source(tmp_path, 6) == {"t": {"0": 1, "1": 1, "2": 1}, "u": {"0": 1}}
    # Hadoop would reject a rewritten file against its old checksum; without one it reads it.
    assert not (tmp_path / "offsets" / ".7.crc").exists()
    assert not (tmp_path / "offsets" / ".8.crc").exists()
    assert (tmp_path / "offsets" / ".6.crc").exists()
    assert sorted(p.name for p in (tmp_path / "offsets").iterdir()) == [".6.crc", "6", "7", "8"]


def test_nothing_to_move_or_nothing_committed_rewrites_nothing(tmp_path: Path) -> None:
    _offsets(tmp_path, 0, {"t": {"0": 4}})
    before = (tmp_path / "offsets" / "0").read_text()
    assert resume(tmp_path, KafkaInspection(restart_at={("t", 0): 0})) == []  # no commit
    _commit(tmp_path, 0)
    assert resume(tmp_path, KafkaInspection()) == []
    assert (tmp_path / "offsets" / "0").read_text() == before


def test_topic_ids_are_recorded_beside_spark_files_and_merged(tmp_path: Path) -> None:
    checkpoint = tmp_path / "bronze_ingest"
    assert recorded_topic_ids(checkpoint) == {}
    record_topic_ids(checkpoint, {"t": "id-1", "u": None})
    record_topic_ids(checkpoint, {"u": "id-2"})
    assert recorded_topic_ids(checkpoint) == {"t": "id-1", "u": "id-2"}
    record_topic_ids(checkpoint, {"t": "id-3"})  # re-created
    assert recorded_topic_ids(checkpoint) == {"t": "id-3", "u": "id-2"}
    (checkpoint / "kafka_topic_ids.json").write_text("{not json")
    assert recorded_topic_ids(checkpoint) == {}  # unreadable: detection by offsets only
