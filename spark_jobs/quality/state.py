"""The gates' bookkeeping, read without Spark (``deltalake``): which Delta versions of each
table were validated, and what is pending. Used by the gate job and by the Airflow gate
operator, which skips starting a Spark driver when nothing is pending.

A table's increment is the versions after the newest gate result whose status is
``passed``, ``accepted`` or ``empty`` (``ops_gate_results``), up to its current version. A
failed result does not move that mark: every later gate run validates the same increment
again (plus what was added since) until an operator resolves it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs.catalog import get_catalog
from spark_jobs.delta_io import delta_version, read_pandas, table_exists
from spark_jobs.quality.suites import layer_rules
from spark_jobs.settings import PlatformSettings, get_settings

if TYPE_CHECKING:
    import pandas as pd

#: Gate statuses that move a table's validated mark forward.
CLEARED = ("passed", "accepted", "empty")
RESULTS_TABLE = "ops_gate_results"
HOLDS_TABLE = "ops_gate_holds"


@dataclass(frozen=True)
class Increment:
    """Delta versions of one table awaiting validation: ``from_version..to_version``
    (inclusive; ``from_version`` is 0 for a table never validated)."""

    table: str
    from_version: int
    to_version: int


def gate_results(settings: PlatformSettings | None = None) -> pd.DataFrame:
    """All rows of ``ops_gate_results`` (empty frame with no columns when none exist yet)."""
    import pandas as pd

    path = get_catalog().table(RESULTS_TABLE).path(settings or get_settings())
    if not table_exists(path):
        return pd.DataFrame()
    return read_pandas(path)


def validated_through(results: pd.DataFrame, table: str) -> int:
    """Newest version of ``table`` a cleared gate covered; -1 if none."""
    if results.empty:
        return -1
    rows = results[(results["table"] == table) & results["status"].isin(CLEARED)]
    return int(rows["to_version"].max()) if not rows.empty else -1


def pending(layer: str, settings: PlatformSettings | None = None) -> list[Increment]:
    """The increments of ``layer``'s gated tables that no cleared gate has covered.

    :raises ValueError: ``layer`` has no gate.
    """
    settings = settings or get_settings()
    results = gate_results(settings)
    catalog = get_catalog()
    increments = []
    for rules in layer_rules(layer):
        current = delta_version(catalog.table(rules.table).path(settings))
        done = validated_through(results, rules.table)
        if current is not None and current > done:
            increments.append(Increment(rules.table, done + 1, current))
    return increments


def unresolved_failures(layer: str, settings: PlatformSettings | None = None) -> pd.DataFrame:
    """Failed gate results of ``layer`` newer than the table's validated mark: what an
    operator must resolve (accept or quarantine) before the increment can move on."""
    results = gate_results(settings)
    if results.empty:
        return results
    failed = results[(results["layer"] == layer) & (results["status"] == "failed")]
    keep = [
        index
        for index, row in failed.iterrows()
        if int(row["to_version"]) > validated_through(results, str(row["table"]))
    ]
    return failed.loc[keep].sort_values("validated_at")
