"""find_damage on hand-made checkpoint folders (no Spark): each damage class is named."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ingest_core.catalog import get_catalog
from ingest_core.checkpoint_health import find_damage, query_dirs

pytestmark = pytest.mark.unit

OFFSETS = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"t":{"0":%d}}'
COMMIT = 'v1\n{"nextBatchWatermarkMs":0}'


def _checkpoint(folder: Path, offsets: range, commits: range, query_id: str = "q-1") -> Path:
    for kind, batches, text in (("offsets", offsets, OFFSETS), ("commits", commits, COMMIT)):
        (folder / kind).mkdir(parents=True, exist_ok=True)
        for batch in batches:
            (folder / kind / str(batch)).write_text(text % batch if "%d" in text else text)
    (folder / "metadata").write_text(json.dumps({"id": query_id}))
    return folder


def _named(folder: Path) -> list[tuple[str, int, str]]:
    return [(d.kind, d.batch, d.path.name) for d in find_damage(folder)]


def test_an_intact_checkpoint_and_one_that_spark_purged_have_no_damage(tmp_path: Path) -> None:
    assert _named(_checkpoint(tmp_path / "a", range(5), range(5))) == []
    assert _named(_checkpoint(tmp_path / "b", range(3, 9), range(3, 8))) == []  # retention


def test_a_hole_in_the_offsets_log_is_named(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path, range(5), range(3))
    (folder / "offsets" / "3").unlink()
    assert _named(folder) == [("offsets", 3, "3")]


def test_offsets_missing_under_an_existing_commit_are_named(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path, range(5), range(5))
    (folder / "offsets" / "4").unlink()
    damage = find_damage(folder)
    assert [(d.kind, d.batch) for d in damage] == [("offsets", 4)]
    assert "commits/4 exists" in damage[0].problem


def test_a_checksum_left_without_its_file_is_named(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path, range(5), range(4))
    (folder / "commits" / ".4.crc").write_bytes(b"crc")
    assert _named(folder) == [("commits", 4, ".4.crc")]


@pytest.mark.parametrize("content", [None, "", '{"id": ', "{}"])
def test_missing_or_unreadable_metadata_is_named(tmp_path: Path, content: str | None) -> None:
    folder = _checkpoint(tmp_path, range(2), range(2))
    if content is None:
        (folder / "metadata").unlink()
    else:
        (folder / "metadata").write_text(content)
    assert _named(folder) == [("metadata", -1, "metadata")]


def test_a_checkpoint_with_commits_only_is_one_query_and_damaged(tmp_path: Path) -> None:
    """Found by the breaker: no metadata and no offsets/ made the folder look like a parent
    of query folders (commits/, sources/), and the check said 'intact'."""
    folder = _checkpoint(tmp_path, range(0), range(3))
    (folder / "metadata").unlink()
    (folder / "offsets").rmdir()
    assert list(query_dirs(folder)) == [""]
    assert {d.kind for d in find_damage(folder)} == {"metadata", "offsets"}


def test_two_query_folders_with_one_query_id_are_named(tmp_path: Path) -> None:
    """Found by the breaker: gold_aggregate's query folders each have their own id; one
    copied from another makes its sink skip batches it never wrote."""
    _checkpoint(tmp_path / "gold_a", range(3), range(3), "q-a")
    _checkpoint(tmp_path / "gold_b", range(3), range(3), "q-a")
    damage = find_damage(tmp_path)
    assert [(d.kind, d.path.parent.name) for d in damage] == [("metadata", "gold_b")]
    assert "same query id as query folder 'gold_a'" in damage[0].problem


def test_files_a_crash_left_half_written_are_named_with_their_checksums_moving_along(
    tmp_path: Path,
) -> None:
    """Found in CI: a driver killed while Spark wrote ``offsets/0`` left ``.0.<uuid>.tmp``
    (Hadoop's atomic write), and Spark 4.1+ refused every later start of the query."""
    folder = _checkpoint(tmp_path, range(3), range(3))
    uid = "0f8fad5b-d9cb-469f-a165-70867728950e"
    (folder / "offsets" / f".3.{uid}.tmp").write_text("v1\n{")
    (folder / "offsets" / f"..3.{uid}.tmp.crc").write_bytes(b"crc")  # goes with its file
    (folder / "commits" / f"..2.{uid}.tmp.crc").write_bytes(b"crc")  # its file is gone
    (folder / f".metadata.{uid}.tmp").write_text("")
    (folder / "state" / "0" / "0").mkdir(parents=True)
    (folder / "state" / "0" / "0" / f".1.delta.{uid}.tmp").write_bytes(b"")
    (folder / "offsets" / ".3.tmp").write_text("not Hadoop's name")
    found = [(d.kind, d.batch, str(d.path.relative_to(folder))) for d in find_damage(folder)]
    assert found == [
        ("unfinished", -1, f".metadata.{uid}.tmp"),
        ("unfinished", -1, f"commits/..2.{uid}.tmp.crc"),
        ("unfinished", -1, f"offsets/.3.{uid}.tmp"),
        ("unfinished", -1, f"state/0/0/.1.delta.{uid}.tmp"),
    ]


def _recorded_with(job_name: str, edit: Callable[[dict], None]) -> Path:
    """Record ``job_name``'s fingerprint as its first start does, then ``edit`` the recorded
    configuration: the checkpoint as an older catalog left it."""
    from ingest_core.checkpoint_health import check_before_start, fingerprint_file

    job = get_catalog().job(job_name)
    check_before_start(job_name)  # no checkpoint yet: records the fingerprint
    record = fingerprint_file(job)
    document = json.loads(record.read_text())
    edit(document["config"])
    record.write_text(json.dumps(document))
    return record


def test_a_newly_declared_gold_window_starts_beside_the_existing_checkpoint(
    ingest_home: Path,
) -> None:
    from ingest_core.checkpoint_health import check_before_start

    newest = list(get_catalog().windowed_tables())[-1]

    def before_it(config: dict) -> None:
        del config["queries"][newest]
        config["settings"].pop("session_gap")  # and a setting added with it

    record = _recorded_with("gold_aggregate", before_it)
    check_before_start("gold_aggregate")  # additions only: accepted ...
    recorded = json.loads(record.read_text())["config"]
    assert newest in recorded["queries"]  # ... and recorded
    assert recorded["settings"]["session_gap"] == "10 minutes"


@pytest.mark.parametrize(
    ("edit", "change"),
    [
        (
            lambda c: c["queries"]["gold_payment_totals_5m"]["measures"].pop("amount_total"),
            "queries.gold_payment_totals_5m.measures.amount_total: None -> {'kind': 'sum'",
        ),
        (
            lambda c: c["queries"]["gold_customer_sessions"].update(group_by=["session_id"]),
            "queries.gold_customer_sessions.group_by: ['session_id'] -> ['customer_id']",
        ),
        (
            lambda c: c["settings"].update(payments_watermark="5 minutes"),
            "settings.payments_watermark: '5 minutes' -> '10 minutes'",
        ),
        (
            # an addition beside a change is still a change
            lambda c: (
                c["queries"].pop(list(c["queries"])[-1]),
                c["settings"].update(session_gap="5 minutes"),
            ),
            "settings.session_gap: '5 minutes' -> '10 minutes'",
        ),
    ],
    ids=["measure", "grouping", "watermark", "addition-and-change"],
)
def test_a_changed_window_or_setting_is_refused_naming_it(
    ingest_home: Path, edit: Callable[[dict], object], change: str
) -> None:
    from ingest_core.checkpoint_health import ConfigurationChangedError, check_before_start

    _recorded_with("gold_aggregate", edit)
    with pytest.raises(ConfigurationChangedError) as refused:
        check_before_start("gold_aggregate")
    assert change in str(refused.value)
