"""Delta I/O of the Spark jobs: idempotent appends and reads (table and checkpoint facts
that need no Spark are in :mod:`ingest_core.delta_tables`).

Exactly-once in ``foreachBatch`` rests on Delta's idempotent writes: every write carries
``txnAppId`` (the streaming query's id) and ``txnVersion`` (the batch id), and Delta skips a
write whose version it has already committed for that application id. A replayed batch
(after a crash between the write and the checkpoint commit) therefore writes nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from ingest_core.delta_tables import table_exists


def append_idempotent(
    df: DataFrame,
    path: Path,
    *,
    app_id: str,
    version: int,
    partition_by: Sequence[str] = (),
) -> None:
    """Append ``df`` to the Delta table at ``path`` once per (``app_id``, ``version``).

    Creates the table (with ``partition_by``) on first write; new columns are merged into
    the schema (``mergeSchema``) so that adding a contract field does not stop the job.
    """
    writer = (
        df.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", str(version))
        .option("mergeSchema", "true")
    )
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(str(path))


def ensure_table_properties(
    spark: SparkSession,
    path: Path,
    properties: Mapping[str, str],
    *,
    schema: StructType,
    partition_by: Sequence[str] = (),
) -> dict[str, str]:
    """Give the Delta table at ``path`` table ``properties`` (``delta.checkpointInterval``).

    A table that does not exist yet is created empty with ``schema`` and ``partition_by``
    (what its writer would create) and the properties (the session's property defaults,
    such as the change data feed, apply as on any creation); an existing one is altered
    (``ALTER TABLE ... SET TBLPROPERTIES``, one commit) only where a value differs. For a
    table's writer, before it starts writing: another writer committing at the same time
    could conflict with the metadata change.

    :param properties: property name -> value, both strings; empty: nothing is done.
    :returns: the properties that were set (empty when the table already had them).
    """
    if not properties:
        return {}

    if not table_exists(path):
        builder = DeltaTable.createIfNotExists(spark).location(str(path)).addColumns(schema)
        if partition_by:
            builder = builder.partitionedBy(*partition_by)
        for name, value in properties.items():
            builder = builder.property(name, value)
        builder.execute()
        return dict(properties)
    have = DeltaTable.forPath(spark, str(path)).detail().select("properties").first()
    configured: Mapping[str, str] = (have[0] if have else None) or {}
    changed = {k: v for k, v in properties.items() if configured.get(k) != v}
    if changed:
        listed = ", ".join(f"'{k}' = '{v}'" for k, v in sorted(changed.items()))
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({listed})")
    return changed


def read_table(spark: SparkSession, path: Path | str) -> DataFrame | None:
    """The Delta table at ``path``, or None when it does not exist yet."""
    return spark.read.format("delta").load(str(path)) if table_exists(path) else None
