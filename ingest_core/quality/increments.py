"""What a gate validates without Spark: the rows a gated table gained in a range of Delta
versions (its *increment*) read through Delta's change data feed with delta-rs
(:func:`increment_without_spark`), and a layer's pending increments
(:func:`pending_increments`). The Spark read is :func:`spark_jobs.quality.increments.increment`;
both serve the gate job (:mod:`spark_jobs.quality.gate`) and the Airflow gate task's pandas
gate (:mod:`ingest_core.quality.pandas_gate`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ingest_core.catalog import get_catalog
from ingest_core.quality.rules import ALREADY_IN_TABLE, TableRules, layer_rules
from ingest_core.quality.state import HOLDS_TABLE, Increment, pending
from ingest_core.settings import PlatformSettings, get_settings

if TYPE_CHECKING:
    import pandas as pd

#: The change data feed's own columns.
CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
#: Change-feed rows that are a table's new rows (inserts, and updated rows' new images).
NEW_ROWS = ("insert", "update_postimage")


def increment_without_spark(
    rules: TableRules,
    inc: Increment,
    settings: PlatformSettings,
    max_rows: int,
    columns: Sequence[str] | None = None,
) -> pd.DataFrame | None:
    """The rows of :func:`spark_jobs.quality.increments.increment`, read with delta-rs
    (``DeltaTable.load_cdf``), as pandas.

    Same rows and columns as the Spark read, with Delta ``timestamp`` columns as naive UTC
    ``datetime64`` (as Spark shows them with its UTC session time zone), strings and
    decimals as object columns of ``str`` and ``decimal.Decimal``.

    :param max_rows: most change-feed rows to read (pre-images and deletes count too).
    :param columns: read only these of the table's columns (and its keys and ``event_id``,
        which the holds and the latest image need); None reads them all.
    :returns: the rows (``attrs["change_rows"]``: the change-feed rows read), or None when
        the increment has more than ``max_rows`` change rows (nothing more is read).
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from ingest_core.delta_tables import table_exists

    path = str(get_catalog().table(rules.table).path(settings))
    delta = DeltaTable(path)
    table_columns = None
    if columns is not None:
        wanted = {*columns, *rules.keys, "event_id"}
        table_columns = [f.name for f in delta.schema().fields if f.name in wanted]
        table_columns += list(CDF_COLUMNS)
    reader = delta.load_cdf(
        starting_version=inc.from_version, ending_version=inc.to_version, columns=table_columns
    )
    batches: list[pa.RecordBatch] = []
    read = 0
    for batch in reader:
        batches.append(pa.record_batch(batch))
        read += batches[-1].num_rows
        if read > max_rows:
            return None
    table = pa.Table.from_batches(batches, schema=pa.schema(reader.schema))
    rows = table.to_pandas()
    rows = rows[rows["_change_type"].isin(NEW_ROWS)]
    if rules.latest_image:
        rows = rows.sort_values("_commit_version", kind="stable")
        rows = rows.drop_duplicates(list(rules.keys), keep="last")
    rows = rows.drop(columns=list(CDF_COLUMNS))
    for column in rows.columns:  # Delta timestamps are UTC instants: naive UTC, like Spark
        if getattr(rows[column].dtype, "tz", None) is not None:
            rows[column] = rows[column].dt.tz_convert("UTC").dt.tz_localize(None)
    holds = get_catalog().table(HOLDS_TABLE).path(settings)
    if "event_id" in rows.columns and table_exists(holds):
        from ingest_core.delta_tables import read_pandas

        held = read_pandas(holds)
        if not held.empty:
            rows = rows[~rows.event_id.isin(held.event_id[held.table == rules.table])]
    if rules.unique_in_table:
        key = rules.keys[0]
        earlier: set[Any] = set()
        if inc.from_version > 0 and not rows.empty:
            before = DeltaTable(path, version=inc.from_version - 1).to_pyarrow_dataset()
            wanted = pc.field(key).isin(pa.array(rows[key].dropna().unique()))
            earlier = set(before.to_table(columns=[key], filter=wanted)[key].to_pylist())
        rows[ALREADY_IN_TABLE] = rows[key].isin(earlier)
    rows = rows.reset_index(drop=True)
    rows.attrs["change_rows"] = read
    return rows


def pending_increments(
    layer: str, settings: PlatformSettings | None, now: datetime | None
) -> tuple[PlatformSettings, datetime, list[Increment], dict[str, TableRules]]:
    """Settings (``settings`` or the platform's), validation time (``now`` or now, UTC),
    ``layer``'s pending increments (:func:`ingest_core.quality.state.pending`) and its rules
    by table.

    :raises ValueError: ``layer`` has no gate.
    """
    settings = settings or get_settings()
    rules_by_table = {rules.table: rules for rules in layer_rules(layer)}
    return settings, now or datetime.now(UTC), pending(layer, settings), rules_by_table
