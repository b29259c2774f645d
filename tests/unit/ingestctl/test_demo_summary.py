"""The demo's closing summary and `demo-down`'s report (no services running)."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pytest

from ingest_core.settings import PlatformSettings
from ingestctl.demo import _summary, _utc_minute

pytestmark = pytest.mark.unit


def test_a_bookkeeping_table_says_that_maintenance_prunes_it(ingest_home) -> None:
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


def test_a_bookkeeping_table_that_keeps_its_newest_rows_says_which(ingest_home) -> None:
    lines: list[str] = []
    _summary(PlatformSettings(), {"silver_reconciliation": 4}, lines.append)
    assert lines[1].strip() == (
        "(bookkeeping: table_maintenance drops rows whose batch_time is more than 30 days "
        "before now; the newest 1 per job, query_id stay)"
    )


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


def test_demo_down_on_a_stopped_platform_says_not_running_for_each_service(
    ingest_home,
) -> None:
    # ingest_home: a fresh home, so that nothing of a real platform is stopped.
    from ingestctl.demo import stop_demo

    lines: list[str] = []
    stop_demo(lines.append)
    services = {line.split(":")[0]: line for line in lines if not line.startswith(" ")}
    for service in ("airflow standalone", "kafka", "postgres"):
        assert services[service].endswith("not running"), lines
