"""The demo's closing summary: what its counts mean (no services)."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pytest

from ingest_core.settings import PlatformSettings
from ingestctl.demo import _summary, _utc_minute

pytestmark = pytest.mark.unit


def test_a_bookkeeping_table_says_that_maintenance_prunes_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    lines: list[str] = []
    _summary(PlatformSettings(), {"silver_orders": 3043, "silver_event_ids": 1914}, lines.append)
    orders = next(i for i, line in enumerate(lines) if "silver_orders" in line)
    ids = next(i for i, line in enumerate(lines) if "silver_event_ids" in line)
    assert "1914 rows" in lines[ids]
    # The line under the count, from the catalog's row retention of silver_event_ids.
    assert (
        "table_maintenance drops rows whose event_time is more than 30 days before "
        "silver_refine's watermark" in lines[ids + 1]
    )
    # A data table gets no such line.
    assert "table_maintenance" not in lines[orders + 1]


@pytest.mark.parametrize(
    "value",
    [
        pd.Timestamp("2018-08-25 17:55:00"),
        pd.Timestamp("2018-08-25 17:55:00", tz="UTC"),
        pd.Timestamp("2018-08-25 14:55:00", tz="America/Sao_Paulo"),
        datetime(2018, 8, 25, 17, 55, tzinfo=UTC),
    ],
)
def test_window_starts_print_the_same_with_or_without_a_zone(value) -> None:
    assert _utc_minute(value) == "2018-08-25 17:55 UTC"
