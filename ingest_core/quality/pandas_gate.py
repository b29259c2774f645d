"""A layer's gate without Spark: the Airflow gate task validates a small increment in its own
process with delta-rs and GX's pandas engine (:func:`validate_layer_without_spark`), and
submits the Spark gate job (:mod:`spark_jobs.quality.gate`) only for a larger one. Same
suites, outcomes and recorded rows as the Spark gate."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ingest_core.quality.increments import increment_without_spark, pending_increments
from ingest_core.quality.results import record_without_spark
from ingest_core.quality.rules import validated_columns
from ingest_core.quality.state import Increment
from ingest_core.quality.validation import TableOutcome, validate_increments
from ingest_core.settings import PlatformSettings


def validate_layer_without_spark(
    layer: str,
    *,
    run_id: str,
    settings: PlatformSettings | None = None,
    now: datetime | None = None,
) -> list[TableOutcome] | None:
    """:func:`spark_jobs.quality.gate.validate_layer` with no JVM: delta-rs reads, GX's
    pandas engine, delta-rs appends to ``ops_gate_results``. Same suites, outcomes and
    recorded rows.

    :returns: one outcome per table with pending versions ([] when nothing is pending); None
        when the pending increments have more than ``quality.pandas_max_rows`` change rows
        in all (nothing validated, nothing recorded: run the Spark gate).
    :raises ValueError: ``layer`` has no gate.
    """
    settings, now, increments, rules_by_table = pending_increments(layer, settings, now)
    if not increments:
        return []
    budget = settings.quality.pandas_max_rows
    frames = {}
    for inc in increments:
        rules = rules_by_table[inc.table]
        rows = increment_without_spark(rules, inc, settings, budget, validated_columns(rules))
        if rows is None:
            return None
        budget -= rows.attrs["change_rows"]
        frames[inc] = rows

    def pandas_rows(inc: Increment) -> tuple[Any, int, Callable[[], object]]:
        rows = frames.pop(inc)
        return rows, len(rows), lambda: None

    outcomes = validate_increments(rules_by_table, increments, pandas_rows, "pandas", settings, now)
    record_without_spark(layer, run_id, outcomes, settings, now)
    return outcomes
