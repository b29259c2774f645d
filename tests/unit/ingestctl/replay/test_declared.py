"""CSV files replayed through a mapping declared in a contract (``x-ingest-replay``):
checked against pandas' own read of the same CSV, and each refusal of a bad mapping."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pandas as pd
import pytest
import yaml

from ingest_core.contracts import load_contracts
from ingest_core.replay_mappings import mapping_problems
from ingest_core.settings import INCLUDE_DIR
from ingestctl.replay.declared import declared_events
from ingestctl.replay.model import SourceError

pytestmark = pytest.mark.unit

SAO_PAULO = ZoneInfo("America/Sao_Paulo")
MAPPING = {
    "dataset": "olist",
    "file": "reviews.csv",
    "event_type": "review_submitted",
    "event_time": "review_creation_date",
    "ref": ["review_id", "order_id"],
    "fields": {
        "review_id": "review_id",
        "order_id": "order_id",
        "score": "review_score",
        "title": "review_comment_title",
        "message": "review_comment_message",
        "answered_at": "review_answer_timestamp",
    },
}
CSV = (
    "review_id,order_id,review_score,review_comment_title,review_comment_message,"
    "review_creation_date,review_answer_timestamp\n"
    'r1,o1,5,Ótimo,"Chegou antes do prazo.\nRecomendo",2018-01-04 00:00:00,2018-01-05 10:00:00\n'
    "r2,o2,,,,2018-01-05 12:30:00,\n"  # no score: null (Silver quarantines the missing field)
    "r3,o3,five,,,2018-01-06 00:00:00,\n"  # not an integer: sent as it is (type_mismatch)
    "r1,o4,2,,Mesmo review para outro pedido,2018-01-07 00:00:00,\n"  # Olist repeats ids
)


def _contracts(tmp_path: Path, mapping: Any) -> Path:
    """A copy of the repository's contracts, the reviews' mapping replaced by ``mapping``."""
    folder = tmp_path / "contracts"
    shutil.copytree(INCLUDE_DIR / "contracts", folder)
    reviews = yaml.safe_load((folder / "reviews.yaml").read_text(encoding="utf-8"))
    reviews["x-ingest-replay"] = mapping
    (folder / "reviews.yaml").write_text(yaml.safe_dump(reviews, allow_unicode=True))
    return folder


def test_declared_rows_become_events_typed_by_the_contract(tmp_path: Path) -> None:
    contracts = load_contracts(_contracts(tmp_path, [MAPPING]))
    (tmp_path / "reviews.csv").write_text(CSV, encoding="utf-8")
    events = declared_events("olist", tmp_path, SAO_PAULO, contracts)

    expected = pd.read_csv(tmp_path / "reviews.csv", dtype=str, keep_default_na=False)
    assert len(events) == len(expected)
    for event, (_, row) in zip(events, expected.iterrows(), strict=True):
        assert event.event_type == "review_submitted"
        assert event.source_ref == f"olist:review_submitted:{row.review_id}:{row.order_id}"
        # offset-less local time in Sao Paulo (summer time in January 2018, UTC-2)
        local = datetime.fromisoformat(row.review_creation_date).replace(tzinfo=SAO_PAULO)
        assert event.event_time.astimezone(UTC) == local.astimezone(UTC)
        score = int(row.review_score) if row.review_score.isdigit() else row.review_score or None
        assert event.payload == {
            "review_id": row.review_id,
            "order_id": row.order_id,
            "score": score,
            "title": row.review_comment_title or None,
            "message": row.review_comment_message or None,
            "answered_at": row.review_answer_timestamp or None,
        }
    assert events[0].payload["message"] == "Chegou antes do prazo.\nRecomendo"
    assert events[1].payload["score"] is None
    assert events[2].payload["score"] == "five"
    assert len({e.event_id for e in events}) == 4  # r1 twice, but for two orders


def test_a_reference_twice_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    contracts = load_contracts(_contracts(tmp_path, [MAPPING | {"ref": ["review_id"]}]))
    (tmp_path / "reviews.csv").write_text(CSV, encoding="utf-8")
    with pytest.raises(SourceError, match=r"reviews.csv:\d+: \('review_id',\) 'r1' twice"):
        declared_events("olist", tmp_path, SAO_PAULO, contracts)


def test_a_missing_file_or_column_is_refused(tmp_path: Path) -> None:
    contracts = load_contracts(_contracts(tmp_path, [MAPPING]))
    with pytest.raises(SourceError, match=r"maps reviews\.csv of olist, not found in"):
        declared_events("olist", tmp_path, SAO_PAULO, contracts)
    (tmp_path / "reviews.csv").write_text("review_id,order_id\nr1,o1\n", encoding="utf-8")
    with pytest.raises(SourceError, match="lacks columns"):
        declared_events("olist", tmp_path, SAO_PAULO, contracts)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"dataset": "kaggle"}, "x-ingest-replay[0].dataset: dataset 'kaggle' is none of"),
        ({"event_type": "review_edited"}, "event_type 'review_edited' is none of the source's"),
        ({"fields": {"review_id": "review_id", "stars": "review_score"}}, "['stars'] are not"),
        ({"fields": {"review_id": "review_id"}}, "required fields ['order_id', 'score'] are not"),
        ({"file": "../reviews.csv"}, "x-ingest-replay[0].file: String should match pattern"),
        ({"ref": []}, "x-ingest-replay[0].ref: Tuple should have at least 1 item"),
        ({"columns": ["x"]}, "Extra inputs are not permitted"),
    ],
)
def test_a_bad_mapping_is_one_line_of_the_catalog_check(
    tmp_path: Path, change: dict[str, Any], problem: str
) -> None:
    contracts = load_contracts(_contracts(tmp_path, [MAPPING | change]))
    (line,) = mapping_problems(contracts)
    assert line.startswith("contracts/reviews.yaml: x-ingest-replay")
    assert problem in line
    with pytest.raises(SourceError, match="x-ingest-replay"):
        declared_events("olist", tmp_path, SAO_PAULO, contracts)
