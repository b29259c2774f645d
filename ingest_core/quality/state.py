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

from ingest_core.catalog import get_catalog
from ingest_core.delta_tables import last_data_version, read_pandas, table_exists
from ingest_core.quality.rules import layer_rules
from ingest_core.settings import PlatformSettings, get_settings

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


def _newest_cleared(results: pd.DataFrame, table: str) -> pd.Series | None:
    if results.empty:
        return None
    rows = results[(results["table"] == table) & results["status"].isin(CLEARED)]
    return None if rows.empty else rows.sort_values("validated_at").iloc[-1]


def validated_through(results: pd.DataFrame, table: str) -> int:
    """Version of ``table`` the newest cleared gate result covered up to; -1 if none.

    The newest result, not the largest version: after ``layer_full_refresh`` swaps in a
    rebuilt table (a new Delta history starting at version 0), the refresh records a
    cleared result for the new table, which must win over the old table's larger versions.
    """
    row = _newest_cleared(results, table)
    return -1 if row is None else int(row["to_version"])


def pending(layer: str, settings: PlatformSettings | None = None) -> list[Increment]:
    """The increments of ``layer``'s gated tables that no cleared gate has covered, up to
    each table's newest commit that changed rows: versions of maintenance alone (OPTIMIZE,
    VACUUM, table properties) or of empty batches are nothing to validate
    (:func:`ingest_core.delta_tables.last_data_commit`).

    :raises ValueError: ``layer`` has no gate.
    """
    settings = settings or get_settings()
    results = gate_results(settings)
    catalog = get_catalog()
    increments = []
    for rules in layer_rules(layer):
        current = last_data_version(catalog.table(rules.table).path(settings))
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
    keep = []
    for index, row in failed.iterrows():
        cleared = _newest_cleared(results, str(row["table"]))
        if cleared is None or row["validated_at"] > cleared["validated_at"]:
            keep.append(index)
    return failed.loc[keep].sort_values("validated_at")


def failed_in_run(layer: str, run_id: str, settings: PlatformSettings | None = None) -> bool:
    """Whether a gate of ``layer`` recorded a failed expectation in the DAG run ``run_id``:
    the gate ran to its verdict and the data failed (a data problem, not to be retried),
    as opposed to a gate that died before its verdict (killed, its driver lost: retried)."""
    results = gate_results(settings)
    if results.empty:
        return False
    failed = results[
        (results["layer"] == layer)
        & (results["run_id"] == run_id)
        & (results["status"] == "failed")
    ]
    return not failed.empty
