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
    assert [d.kind for d in find_damage(query.parent)] == ["unfinished", "offsets"]
    recover("gold_aggregate")
    assert find_damage(query.parent) == []
    assert not (query / "state").exists()
    assert list((query / "offsets").iterdir()) == []
    moved = _quarantine(query.parent) / "gold_customer_metrics"
    assert (moved / "state" / "0" / "0" / "1.delta").read_bytes() == b"state of batch 0"
    assert (moved / "offsets" / "0").exists()
    assert (moved / "offsets" / f".1.{UID}.tmp").exists()
