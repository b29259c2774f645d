"""Gates started at once share one file-backed GX project safely (issue 50).

A backfill of several intervals beside a scheduled run starts several gate tasks together.
Each rewrites the project's suites and validation definitions (``add_or_update``) and builds
its Data Docs; unguarded, three of four concurrent gates crashed (``ExpectationSuite()
argument after ** must be a mapping, not NoneType``, a ``ValidationDefinition`` validation
error, ``ExpectationSuite 'silver_payments' not found``). Here four processes validate the
same tables of one project at once, with the pandas engine on small frames (no Spark).
"""

from __future__ import annotations

import multiprocessing
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ingest_core.settings import get_settings

pytestmark = pytest.mark.unit

GATES = 4


def _frame(columns: list[str]) -> Any:
    import pandas as pd

    return pd.DataFrame({column: ["x", None] for column in columns})


def _gate(home: str, tables: list[str], results: Any) -> None:
    """One gate process: validate each table's (tiny) increment; put its outcome or error."""
    import os

    os.environ["INGEST_HOME"] = home
    get_settings.cache_clear()
    try:
        from ingest_core.quality.rules import layer_rules, validated_columns
        from ingest_core.quality.state import Increment
        from ingest_core.quality.validation import validate_increments

        rules = {r.table: r for r in layer_rules("silver") if r.table in tables}

        def load(inc: Any) -> tuple[Any, int, Any]:
            return _frame(validated_columns(rules[inc.table])), 2, lambda: None

        outcomes = validate_increments(
            rules,
            [Increment(t, 0, 0) for t in tables],
            load,
            "pandas",
            get_settings(),
            datetime.now(UTC),
        )
        results.put(sorted((o.increment.table, o.status) for o in outcomes))
    except BaseException:
        results.put(traceback.format_exc())


def test_gates_started_at_once_all_validate(ingest_home: Path) -> None:
    from ingest_core.quality.rules import layer_rules

    tables = [r.table for r in layer_rules("silver")][:2]
    fork = multiprocessing.get_context("fork")
    results = fork.Queue()
    gates = [
        fork.Process(target=_gate, args=(str(ingest_home), tables, results)) for _ in range(GATES)
    ]
    for process in gates:
        process.start()
    outcomes = [results.get(timeout=300) for _ in gates]
    for process in gates:
        process.join(timeout=60)
    crashed = [o for o in outcomes if isinstance(o, str)]
    assert crashed == [], crashed[0] if crashed else ""
    # Every gate judged every table (the same frames: the same verdict).
    assert all(o == outcomes[0] for o in outcomes)
    assert [table for table, _ in outcomes[0]] == sorted(tables)
    assert {status for _, status in outcomes[0]} <= {"passed", "failed"}
