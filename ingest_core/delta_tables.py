"""Facts about Delta tables and streaming checkpoints, read without Spark (delta-rs and the
checkpoint's files): versions, committed batches and offsets, the idempotent-write
(``txnAppId``/``txnVersion``) state of a sink, and which commit a streaming batch made.

The Spark-side writers are in :mod:`spark_jobs.delta_io`. Imports neither pyspark nor Airflow.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def table_exists(path: Path | str) -> bool:
    """Whether a Delta table exists at ``path`` (its ``_delta_log`` has a commit)."""
    log = Path(path) / "_delta_log"
    return log.is_dir() and any(log.glob("*.json"))


def delta_version(path: Path | str) -> int | None:
    """Newest version of the Delta table at ``path``, from its log's file names (no Delta
    reader needed); None when there is no table."""
    log = Path(path) / "_delta_log"
    versions = [int(p.stem) for p in log.glob("*.json") if p.stem.isdigit()] if log.is_dir() else []
    return max(versions) if versions else None


#: Delta operations that change no row: compaction, vacuum, table properties and other
#: metadata (Delta's and delta-rs's ``commitInfo.operation`` names). Any other operation
#: counts as a data change unless its metrics say it touched no row.
MAINTENANCE_OPERATIONS = frozenset(
    {
        "OPTIMIZE",
        "VACUUM START",
        "VACUUM END",
        "SET TBLPROPERTIES",
        "UNSET TBLPROPERTIES",
        "REORG",
        "UPGRADE PROTOCOL",
        "ADD CONSTRAINT",
        "DROP CONSTRAINT",
    }
)
#: Row counts of a commit's ``operationMetrics`` (Spark's names, then delta-rs's).
ROW_METRICS = (
    "numOutputRows",
    "numDeletedRows",
    "numUpdatedRows",
    "numTargetRowsInserted",
    "numTargetRowsUpdated",
    "numTargetRowsDeleted",
    "num_added_rows",
    "num_deleted_rows",
    "num_updated_rows",
    "num_target_rows_inserted",
    "num_target_rows_updated",
    "num_target_rows_deleted",
)
#: Operations that may commit without touching a row (an empty micro-batch, a MERGE or
#: DELETE that matched nothing); a WRITE only in append mode (an empty overwrite truncates).
_MAY_TOUCH_NO_ROW = frozenset({"WRITE", "STREAMING UPDATE", "MERGE", "DELETE", "UPDATE"})


#: The ``commitInfo`` key (delta-rs ``CommitProperties(custom_metadata=...)``) that marks a
#: commit of table maintenance that deletes rows (row retention of bookkeeping tables): a
#: DELETE, yet no new data (the demo's ``silver_event_ids`` looked fresh after maintenance).
MAINTENANCE_COMMIT_KEY = "ingest.maintenance"


def changes_data(info: Mapping[str, Any]) -> bool:
    """Whether a Delta commit (its ``commitInfo``, as delta-rs's ``history()`` returns it)
    changed the table's rows: not a maintenance or metadata operation
    (:data:`MAINTENANCE_OPERATIONS`), and not a commit whose row metrics are all zero (an
    empty streaming batch, an append of nothing, a MERGE or DELETE that matched no row). An
    operation this does not know counts as a change (a needless run, never a missed one)."""
    operation = str(info.get("operation") or "").upper()
    if operation in MAINTENANCE_OPERATIONS or info.get(MAINTENANCE_COMMIT_KEY):
        return False
    metrics = info.get("operationMetrics") or {}
    rows = [int(metrics[key]) for key in ROW_METRICS if key in metrics]
    if operation in _MAY_TOUCH_NO_ROW and rows and not any(rows):
        mode = str((info.get("operationParameters") or {}).get("mode", "")).strip('"').lower()
        return operation == "WRITE" and mode not in ("append", "")
    return True


@dataclass(frozen=True)
class DataCommit:
    """The newest commit of a table that changed its rows (:func:`changes_data`).

    :param version: its Delta version; when log retention removed every data commit, the
        version before the oldest commit left (no data changed since).
    :param timestamp_ms: its commit time (epoch milliseconds); None when it was removed.
    :param operation: ``WRITE``, ``STREAMING UPDATE``, ``MERGE``...; None when removed.
    :param rows: rows it added (:data:`ROWS_ADDED_METRICS`), when recorded.
    """

    version: int
    timestamp_ms: int | None
    operation: str | None
    rows: int | None


#: Operation metrics that count a commit's new rows, first found wins: Spark's MERGE (its
#: ``numOutputRows`` also counts the unchanged rows it copied: 1,378 "added" for 5 updated),
#: Spark's writes and streaming appends, delta-rs writes (the gates' bookkeeping).
ROWS_ADDED_METRICS = ("numTargetRowsInserted", "numOutputRows", "num_added_rows")


def _data_commit(info: Mapping[str, Any]) -> DataCommit:
    metrics = info.get("operationMetrics") or {}
    added = next((metrics[k] for k in ROWS_ADDED_METRICS if k in metrics), None)
    return DataCommit(
        int(info["version"]),
        int(info["timestamp"]) if info.get("timestamp") is not None else None,
        str(info.get("operation")),
        int(added) if added is not None else None,
    )


@dataclass(frozen=True)
class TableActivity:
    """What the log says a Delta table's newest commits did (:func:`table_activity`).

    :param version: the newest version.
    :param data: the newest commit that changed rows (:func:`last_data_commit`).
    :param maintenance: the newest maintenance or metadata commit
        (:data:`MAINTENANCE_OPERATIONS`) newer than ``data``, as a :class:`DataCommit` of
        its operation and time (``rows`` None); None when the newest commits are data.
    :param data_versions_after: the versions after ``since`` (the argument) that changed
        rows, oldest first (empty when ``since`` was None).
    """

    version: int
    data: DataCommit
    maintenance: DataCommit | None
    data_versions_after: tuple[int, ...]


def table_activity(path: Path | str, since: int | None = None) -> TableActivity | None:
    """One read of the Delta log of the table at ``path`` (commit infos only, delta-rs):
    its newest version, its newest data commit, the maintenance since, and the data
    versions after ``since``; None when there is no table.

    Reads the newest 50 commits, and the whole log only when the data commit or ``since``
    is older. Maintenance (``table_maintenance``'s OPTIMIZE, VACUUM, table properties) and
    empty batches change no row (:func:`changes_data`): the scheduled jobs' input check, the
    gates' pending increments and the Streaming page all ask this, not the newest version.
    """
    from deltalake import DeltaTable

    if not table_exists(path):
        return None
    table = DeltaTable(str(path), without_files=True)
    for limit in (50, None):
        infos = table.history(limit) if limit else table.history()
        # (version, changed rows?, info), newest first; changes_data judged once per commit.
        history = sorted(
            ((int(i["version"]), changes_data(i), i) for i in infos if "version" in i),
            key=lambda entry: -entry[0],
        )
        data = next((info for _, is_data, info in history if is_data), None)
        oldest = history[-1][0] if history else 0
        complete = limit is None or len(history) < limit
        if complete or (data is not None and (since is None or oldest <= since + 1)):
            break
    newest = history[0][0] if history else table.version()
    found = _data_commit(data) if data is not None else DataCommit(oldest - 1, None, None, None)
    newer = [info for version, is_data, info in history if version > found.version]
    maintenance = replace(_data_commit(newer[0]), rows=None) if newer else None
    after = (
        ()
        if since is None
        else tuple(v for v, is_data, _ in reversed(history) if is_data and v > since)
    )
    return TableActivity(newest, found, maintenance, after)


def last_data_commit(path: Path | str) -> DataCommit | None:
    """The newest commit of the Delta table at ``path`` that changed its rows (see
    :func:`table_activity`); None when there is no table. When log retention removed every
    data commit, the version before the oldest commit left (no data changed since)."""
    activity = table_activity(path)
    return None if activity is None else activity.data


def last_data_version(path: Path | str) -> int | None:
    """:attr:`DataCommit.version` of :func:`last_data_commit`; None when there is no table."""
    commit = last_data_commit(path)
    return None if commit is None else commit.version


def read_pandas(path: Path | str) -> pd.DataFrame:
    """The current snapshot of the Delta table at ``path`` as a pandas DataFrame, without
    Spark: delta-rs lists the snapshot's data files, pyarrow reads them (an empty frame
    without columns when the table has no rows).

    Reading through delta-rs' own scanner sometimes aborts the process at interpreter exit
    ("terminate called without an active exception", exit 134; delta-io/delta-rs#2184), after
    the work is done, which an operator's script would see as a crash. Listing files does
    not. A partitioned table is read through the pyarrow dataset delta-rs describes (its
    files with their partition values; pyarrow reads them). Valid for tables without
    deletion vectors or column mapping (the platform's tables are created with Delta's
    defaults, which have neither).

    :raises deltalake.exceptions.TableNotFoundError: no table at ``path``.
    """
    import pandas as pd
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    table = DeltaTable(str(path))
    if table.metadata().partition_columns:
        return table.to_pyarrow_dataset().to_table().to_pandas()
    files = [uri.removeprefix("file://") for uri in table.file_uris()]
    del table
    return pq.read_table(files).to_pandas() if files else pd.DataFrame()


def checkpoint_query_id(checkpoint: Path | str) -> str:
    """The streaming query id recorded in ``<checkpoint>/metadata``.

    :raises FileNotFoundError: the checkpoint has no ``metadata`` file (no query ran yet).
    """
    return str(json.loads((Path(checkpoint) / "metadata").read_text())["id"])


def _latest(folder: Path) -> tuple[int, Path] | None:
    if not folder.is_dir():
        return None
    batches = [(int(p.name), p) for p in folder.iterdir() if p.name.isdigit()]
    return max(batches) if batches else None


def last_committed_batch(checkpoint: Path) -> int | None:
    """The id of the newest batch with a ``commits/`` entry, or None."""
    latest = _latest(Path(checkpoint) / "commits")
    return latest[0] if latest else None


def committed_offsets(checkpoint: Path) -> dict[str, Any] | None:
    """Offsets and metadata of the newest *committed* batch.

    An offsets file has a version line, a metadata JSON line (``batchWatermarkMs``,
    ``batchTimestampMs``, confs) and one JSON line per source (for Kafka:
    ``{"topic": {"partition": next offset}}``).

    :returns: ``{"batch_id", "metadata", "sources"}`` or None if nothing was committed.
    """
    batch = last_committed_batch(checkpoint)
    return None if batch is None else _offsets(Path(checkpoint), batch)


def _offsets(checkpoint: Path, batch: int) -> dict[str, Any]:
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    sources = [json.loads(line) if line.strip() not in ("", "-") else None for line in lines[2:]]
    return {"batch_id": batch, "metadata": json.loads(lines[1]), "sources": sources}


@dataclass(frozen=True)
class DeltaSourceBatch:
    """What one committed micro-batch of a query reading a Delta table read, and under
    which event-time watermark (see :func:`delta_source_batches`).

    :ivar batch_id: the micro-batch id.
    :ivar watermark_ms: ``batchWatermarkMs``, the watermark in force during the batch (epoch
        milliseconds; 0: none yet).
    :ivar timestamp_ms: ``batchTimestampMs``, when the batch was planned (epoch ms).
    :ivar first_version: the lowest table version the batch may have read rows of.
    :ivar last_version: the highest one (inclusive).
    :ivar snapshot: the batch read (part of) the table's snapshot at ``last_version`` (the
        query's first offsets), so its rows may come from any version up to it.
    """

    batch_id: int
    watermark_ms: int
    timestamp_ms: int
    first_version: int
    last_version: int
    snapshot: bool


def delta_source_batches(checkpoint: Path, source: int = 0) -> list[DeltaSourceBatch]:
    """The committed micro-batches of the query at ``checkpoint`` that read rows from its
    Delta source number ``source``, oldest first, each with the versions it read and its
    watermark; a superset: a batch ending inside a version counts the whole version.

    Delta's source offset (``{"reservoirVersion": v, "index": i, "isStartingVersion": b}``,
    delta-io ``DeltaSourceOffset``) says the query has read up to file ``i`` of version ``v``;
    a negative index (``BASE_INDEX`` -1 and the metadata-change markers) means before any
    file of ``v``. A batch reads from the previous batch's offset (exclusive) to its own. The
    oldest batch the checkpoint still keeps (Spark keeps ``minBatchesToRetain``, 100) has no
    known start and is left out, as are batches that read nothing.

    :returns: the batches, possibly none (no checkpoint, nothing committed).
    :raises ValueError: an offsets file that is not JSON.
    """
    checkpoint = Path(checkpoint)
    committed = last_committed_batch(checkpoint)
    offsets_dir = checkpoint / "offsets"
    if committed is None or not offsets_dir.is_dir():
        return []
    ids = sorted(int(p.name) for p in offsets_dir.iterdir() if p.name.isdigit())
    batches = []
    previous: dict[str, Any] | None = None
    for batch in (b for b in ids if b <= committed):
        offsets = _offsets(checkpoint, batch)
        sources = offsets["sources"]
        end = sources[source] if source < len(sources) else None
        start, previous = previous, end
        # No start: the query's first batch (no watermark yet), or the oldest batch kept.
        if start is None or end is None or start == end:
            continue
        snapshot = bool(start.get("isStartingVersion") or end.get("isStartingVersion"))
        last = int(end["reservoirVersion"])
        if not end.get("isStartingVersion") and int(end["index"]) < 0:
            last -= 1
        first = 0 if snapshot else int(start["reservoirVersion"])
        if last < first:
            continue
        metadata = offsets["metadata"]
        watermark, planned = (
            int(metadata.get(k, 0)) for k in ("batchWatermarkMs", "batchTimestampMs")
        )
        batches.append(DeltaSourceBatch(batch, watermark, planned, first, last, snapshot))
    return batches


def txn_app_ids(job_name: str, query_id: str) -> tuple[str, ...]:
    """Every Delta application id under which ``job_name``'s query ``query_id`` writes
    idempotently (Delta skips a write whose ``txnVersion`` it already committed for the id).

    * the query id itself: Spark's Delta streaming sink (``SetTransaction(queryId, batchId)``,
      bronze_ingest, gold_aggregate's append queries) and payment_alerts' ``foreachBatch``;
    * ``<job>-<query id>``: silver_refine's ``foreachBatch`` writes;
    * ``<job>-customer-metrics-<query id>``: gold_aggregate's metrics MERGE.
    """
    return (query_id, f"{job_name}-{query_id}", f"{job_name}-customer-metrics-{query_id}")


def sink_committed_batch(tables: Sequence[Path], app_ids: Sequence[str]) -> int | None:
    """The newest batch id (``txnVersion``) any of ``tables`` committed for any of
    ``app_ids``, read with delta-rs (Delta log checkpoints included); None when none did.

    A batch id at or below this number must never be re-planned over a different offset
    range: the sink would skip it as already written and its new rows would be lost.
    """
    from deltalake import DeltaTable

    newest: int | None = None
    for path in tables:
        if not table_exists(path):
            continue
        table = DeltaTable(str(path))
        for app_id in app_ids:
            version = table.transaction_version(app_id)
            if version is not None and (newest is None or version > newest):
                newest = int(version)
    return newest


def streaming_commits(path: Path | str) -> list[dict[str, Any]]:
    """Commits of Spark's Delta streaming sink in the table at ``path``, oldest first:
    ``{"version": int, "query_id": str, "batch_id": int, "timestamp_ms": int}``, from the
    commit infos (``operationParameters.queryId`` and ``epochId``) that delta-rs returns."""
    from deltalake import DeltaTable

    if not table_exists(path):
        return []
    found = []
    for info in DeltaTable(str(path)).history():
        parameters = info.get("operationParameters") or {}
        query_id, epoch = parameters.get("queryId"), parameters.get("epochId")
        if query_id is None or epoch is None or "version" not in info:
            continue
        found.append(
            {
                "version": int(info["version"]),
                "query_id": str(query_id),
                "batch_id": int(epoch),
                "timestamp_ms": int(info.get("timestamp") or 0),
            }
        )
    return sorted(found, key=lambda c: c["version"])


def files_added_by(path: Path | str, version: int) -> list[str]:
    """Absolute paths of the data files that Delta version ``version`` of the table at
    ``path`` added (its snapshot's files minus the previous version's), via delta-rs."""
    from deltalake import DeltaTable

    def uris(at: int) -> set[str]:
        if at < 0:
            return set()
        snapshot = DeltaTable(str(path), version=at)
        return {uri.removeprefix("file://") for uri in snapshot.file_uris()}

    return sorted(uris(version) - uris(version - 1))
