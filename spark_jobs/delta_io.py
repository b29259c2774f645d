"""Delta I/O of the Spark jobs: idempotent appends and reads (table and checkpoint facts
that need no Spark are in :mod:`ingest_core.delta_tables`).

Exactly-once in ``foreachBatch`` rests on Delta's idempotent writes: every write carries
``txnAppId`` (the streaming query's id) and ``txnVersion`` (the batch id), and Delta skips a
write whose version it has already committed for that application id. A replayed batch
(after a crash between the write and the checkpoint commit) therefore writes nothing twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ingest_core.delta_tables import table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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


def read_table(spark: SparkSession, path: Path | str) -> DataFrame | None:
    """The Delta table at ``path``, or None when it does not exist yet."""
    return spark.read.format("delta").load(str(path)) if table_exists(path) else None
