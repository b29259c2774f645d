"""Delta table maintenance that never breaks a stream or a restore.

Per table, with every writer's checkpoint lock held (:func:`writer_locks`): row retention of
the bookkeeping tables (``keep_rows`` in ``include/pipeline.yaml``), OPTIMIZE (bin-packing,
or Z-order where the catalog names columns) of the partitions no writer still fills, VACUUM
with a *computed* retention (full mode, like Delta Spark's: files the log no longer
records, such as ``_change_data`` files and leftovers of failed writes, go by their age
too), then log retention. delta-rs (``deltalake``) does the work: no
Spark, no Airflow (the DAG is ``dags/table_maintenance.py``).

**The retention** (hours) is the largest of three constraints, plus one hour of margin for
the time between computing it and VACUUM reading its own clock:

(a) ``stream``: every streaming query that reads the table (a Delta source offset in its
    checkpoint whose ``reservoirId`` is the table's id) may still read every file added from
    the oldest ``reservoirVersion`` of its offsets files on (committed ones, and the newest
    uncommitted one, which Spark re-runs with the offsets it wrote), including files a
    later commit removed (compaction, MERGE, overwrite). VACUUM removes a file once its
    removal (``deletionTimestamp``) is older than the retention, and such a removal is at or
    after that version's commit, so the retention must reach back to that commit's time.
    This is the trap of delta-io/delta#1347-style reports: a stream paused longer than the
    retention fails with a missing file.
(b) ``backup``: the same over every kept checkpoint backup (a restore rolls the query back
    to the backup's offsets).
(c) ``floor``: ``maintenance.retention_floor`` (7 days by default, Delta's own default of
    ``delta.deletedFileRetentionDuration``);
(d) ``gate``: versions another reader pins (``pinned``; the Airflow task passes the quality
    gate's: the snapshot at a gated table's validated version and its change feed after).

The log keeps ``maintenance.log_retention`` *beyond* the oldest version a reader needs:
``delta.logRetentionDuration`` and ``delta.deletedFileRetentionDuration`` are set to
``max(log_retention, retention, oldest reader + log_retention)`` before delta-rs removes
the expired log entries. The writers clean their logs by that property between two
maintenance runs, so it must not expire with the reader's next hour; and a Delta checkpoint
keeps a removed file's record (which VACUUM needs to find the file) only for
``deletedFileRetentionDuration``. A requested retention below the computed one is refused
with the numbers (:class:`RetentionRefusedError`).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ingest_core.catalog import MaintenanceSpec, RowRetentionSpec, get_catalog
from ingest_core.checkpoint_health import query_dirs
from ingest_core.checkpoints import list_backups
from ingest_core.delta_tables import MAINTENANCE_COMMIT_KEY, read_pandas, table_exists
from ingest_core.intervals import parse_interval
from ingest_core.locks import CheckpointBusyError, checkpoint_lock, lock_holder
from ingest_core.settings import PlatformSettings, get_settings

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Added to the computed retention (hours): VACUUM reads its own clock a little later.
MARGIN_HOURS = 1.0
#: Table property recording how far the id history was pruned (a reset is refused after it).
PRUNED_BEFORE = "ingest.pruned_before"
LOG_RETENTION = "delta.logRetentionDuration"
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
#: The longest retention a run accepts (10 years, in hours): delta-rs panics far above it.
MAX_RETENTION_HOURS = 10 * 365 * 24
#: A Delta version another reader pins: ``(kind, who, version)``, e.g. ``("gate", ...)``.
Pin = tuple[str, str, int]
_LETTERS = {"stream": "(a) ", "backup": "(b) ", "floor": "(c) ", "gate": "(d) "}


class RetentionRefusedError(ValueError):
    """A requested retention is below what a stream, a backup or the floor needs; the
    message gives both numbers and the constraint."""


class TableBusyError(RuntimeError):
    """A writer holds the table's checkpoint lock (and the policy says skip, or the wait
    ran out); the message names the writer and its pid."""


@dataclass(frozen=True)
class Constraint:
    """One reason to keep files: ``kind`` is ``stream`` (a), ``backup`` (b), ``floor`` (c),
    ``gate`` (d) or ``request`` (a run's ``retention_hours``); ``hours`` is the retention it
    needs; ``version`` the Delta version it reads from."""

    kind: str
    source: str
    hours: float
    version: int | None = None

    def describe(self) -> str:
        """One line: which constraint, what it reads, how many hours it needs."""
        at = f" reads from version {self.version}" if self.version is not None else ""
        return f"{_LETTERS.get(self.kind, '')}{self.kind} {self.source}{at}: {self.hours:.1f} h"


@dataclass(frozen=True)
class FileStats:
    """A table's size: ``files``/``bytes`` of its current snapshot, ``stored_files``/
    ``stored_bytes`` of every data file on disk (removed ones VACUUM has not deleted yet),
    ``log_entries``: JSON commits in ``_delta_log``."""

    files: int
    bytes: int
    stored_files: int
    stored_bytes: int
    log_entries: int

    def describe(self) -> str:
        """``N files (B bytes) in the snapshot, M on disk (C bytes), L log entries``."""
        return (
            f"{self.files} files ({self.bytes:,} bytes) in the snapshot, {self.stored_files} "
            f"on disk ({self.stored_bytes:,} bytes), {self.log_entries} log entries"
        )


@dataclass
class TableReport:
    """What maintenance did to one table (``status``: ``maintained``, ``dry run``,
    ``skipped``, ``missing``); :meth:`lines` is what the task logs."""

    table: str
    status: str = "maintained"
    reason: str = ""
    before: FileStats | None = None
    after: FileStats | None = None
    retention_hours: float | None = None
    retention_set_by: Constraint | None = None
    constraints: list[Constraint] = field(default_factory=list)
    compaction: dict[str, Any] = field(default_factory=dict)
    vacuumed_files: int = 0
    vacuumed_bytes: int = 0
    log_retention: str | None = None
    rows_removed: int = 0
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The report, one fact per line."""
        head = f"{self.table}: {self.status}" + (f" ({self.reason})" if self.reason else "")
        out = [head]
        if self.before:
            out.append(f"  before: {self.before.describe()}")
        if self.retention_hours is not None and self.retention_set_by is not None:
            out.append(
                f"  retention {self.retention_hours:.0f} h, set by "
                f"{self.retention_set_by.describe()}"
            )
            out += [f"    constraint {c.describe()}" for c in self.constraints]
        if self.compaction:
            removed = self.compaction.get("numFilesRemoved", 0)
            added = self.compaction.get("numFilesAdded", 0)
            out.append(f"  optimize: {removed} files compacted into {added}")
        if self.rows_removed:
            out.append(f"  row retention: {self.rows_removed} rows removed")
        if self.retention_hours is not None:
            verb = "would remove" if self.status == "dry run" else "removed"
            out.append(
                f"  vacuum {verb} {self.vacuumed_files} files ({self.vacuumed_bytes:,} bytes)"
            )
        if self.log_retention:
            out.append(f"  log retention {self.log_retention}")
        out += [f"  {note}" for note in self.notes]
        if self.after:
            out.append(f"  after: {self.after.describe()}")
        return out


def file_stats(path: Path) -> FileStats:
    """Measure the Delta table at ``path`` (see :class:`FileStats`).

    :raises deltalake.exceptions.TableNotFoundError: no table there.
    """
    import pyarrow as pa
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    stored = [
        p
        for p in path.rglob("*.parquet")
        if p.is_file()
        and not any(part.startswith(("_", ".")) for part in p.relative_to(path).parts)
    ]
    return FileStats(
        files=actions.num_rows,
        bytes=int(pa.compute.sum(actions.column("size_bytes")).as_py() or 0),
        stored_files=len(stored),
        stored_bytes=sum(p.stat().st_size for p in stored),
        log_entries=len(list((path / "_delta_log").glob("*.json"))),
    )


def delta_offsets(query: Path) -> list[tuple[int, str | None, int | None]]:
    """Delta source offsets of every batch of one streaming query folder.

    An offsets file (``offsets/<batch>``) has a version line, a metadata line, then one JSON
    line per source; a Delta source's is ``{"reservoirId", "reservoirVersion", "index",
    "isStartingVersion", ...}``. Every batch counts, committed or not: Spark re-runs the
    newest uncommitted batch over the offsets it wrote (a first batch over the snapshot of
    its ``reservoirVersion``). Kafka sources' lines and ``-`` (no source data) are skipped.

    :returns: ``(batch id, reservoirId, reservoirVersion)`` per Delta source per batch;
        ``(batch, None, None)`` for an offsets file that cannot be read (logged): the caller
        must then assume the query may need any version.
    """
    found: list[tuple[int, str | None, int | None]] = []
    for offsets in sorted((query / "offsets").glob("[0-9]*")):
        if not offsets.name.isdigit():
            continue
        batch = int(offsets.name)
        try:
            lines = offsets.read_text().splitlines()[2:]
            for line in lines:
                source = json.loads(line) if line.strip() not in ("", "-") else None
                if isinstance(source, dict) and "reservoirId" in source:
                    found.append(
                        (batch, str(source["reservoirId"]), int(source["reservoirVersion"]))
                    )
        except (OSError, ValueError, TypeError, KeyError) as error:
            log.warning(
                "unreadable offsets file %s (%s): assuming it needs any version", offsets, error
            )
            found.append((batch, None, None))
    return found


def _commit_times(table: DeltaTable) -> dict[int, datetime]:
    return {
        int(c["version"]): datetime.fromtimestamp(c["timestamp"] / 1000, UTC)
        for c in table.history()
        if "version" in c and "timestamp" in c
    }


def _age_of(version: int, times: dict[int, datetime], now: datetime) -> float:
    """Hours since ``version``'s commit: 0 for a version not committed yet (the reader is
    caught up); from the oldest commit still logged for one whose log entry is gone."""
    if version > max(times, default=-1):
        return 0.0
    since = times.get(version, min(times.values()) if times else now)
    return max(0.0, (now - since).total_seconds() / 3600)


def reader_constraints(
    table: DeltaTable, settings: PlatformSettings, now: datetime, pinned: Sequence[Pin] = ()
) -> list[Constraint]:
    """Constraints (a), (b) and (d) on ``table``: the oldest version each streaming query's
    offsets (a), each kept backup of it (b) and each pinning reader (d) reads from, with the
    hours since that version's commit (see :func:`_age_of`).

    Queries reading another table, or an earlier table at this path (a different
    ``reservoirId``), do not count; an unreadable offsets file counts as needing the oldest
    version still logged (safe, and named in the report).
    """
    table_id = table.metadata().id
    times = _commit_times(table)
    oldest_version = min(times, default=0)
    constraints = []

    def consider(kind: str, source: str, folder: Path) -> None:
        offsets = delta_offsets(folder)
        versions = [v for _, rid, v in offsets if rid == table_id and v is not None]
        unreadable = [b for b, rid, _ in offsets if rid is None]
        unreadable += [b for b, rid, v in offsets if rid == table_id and v is None]
        if unreadable:
            source += f" (offsets {min(unreadable)} unreadable: every version kept)"
            versions.append(oldest_version)
        if versions:
            version = min(versions)
            constraints.append(Constraint(kind, source, _age_of(version, times, now), version))

    for job in get_catalog().jobs.values():
        for name, folder in query_dirs(job.checkpoint(settings)).items():
            where = f"checkpoint of {job.name}" + (f" query {name}" if name else "")
            consider("stream", where, folder)
        for info in list_backups(job.name, settings):
            for name in info.manifest.get("queries", {}):
                where = f"backup {info.backup_id} of {job.name}" + (
                    f" query {name}" if name else ""
                )
                consider("backup", where, info.path / name)
    for kind, source, version in pinned:
        constraints.append(Constraint(kind, source, _age_of(version, times, now), version))
    return constraints


def required_retention(
    table: DeltaTable,
    policy: MaintenanceSpec,
    settings: PlatformSettings,
    now: datetime,
    pinned: Sequence[Pin] = (),
) -> tuple[float, Constraint, list[Constraint]]:
    """The smallest VACUUM retention that keeps what (a) to (d) need.

    :returns: ``(hours, the constraint that set it, every constraint)``; hours include
        :data:`MARGIN_HOURS` and are rounded up to whole hours (delta-rs takes an integer).
    """
    floor = Constraint(
        "floor",
        f"maintenance.retention_floor = {policy.retention_floor}",
        parse_interval(policy.retention_floor).total_seconds() / 3600,
    )
    constraints = [floor, *reader_constraints(table, settings, now, pinned)]
    binding = max(constraints, key=lambda c: c.hours)
    hours = float(math.ceil(binding.hours + (MARGIN_HOURS if binding.kind != "floor" else 0)))
    return hours, binding, constraints


@contextmanager
def writer_locks(
    table: str, policy: MaintenanceSpec, settings: PlatformSettings
) -> Iterator[list[str]]:
    """Hold the checkpoint lock of every streaming job that writes ``table`` (the catalog's
    ``outputs``) for the ``with`` block, so no writer runs beside the maintenance (the
    batch jobs that change a streaming job's tables take that job's lock too).

    With ``policy.on_busy == "wait"`` a lock held by a scheduled job is awaited up to
    ``policy.lock_wait``; a running always-on job is not awaited (it never finishes: the
    Airflow task pauses it first when ``policy.always_on == "pause"``).

    :returns: the writers locked.
    :raises TableBusyError: a writer holds its lock and the policy says skip, the writer is
        always-on, or the wait ran out.
    """
    catalog = get_catalog()
    writers = [job for job in catalog.jobs.values() if table in job.outputs]
    deadline = time.monotonic() + (
        parse_interval(policy.lock_wait).total_seconds() if policy.on_busy == "wait" else 0
    )
    with ExitStack() as stack:
        for job in writers:
            checkpoint = job.checkpoint(settings)
            while True:
                try:
                    stack.enter_context(checkpoint_lock(checkpoint))
                    break
                except CheckpointBusyError:
                    pid = lock_holder(checkpoint)
                    if job.mode == "always_on":
                        raise TableBusyError(
                            f"{table}: its always-on writer {job.name} is running (pid {pid}) "
                            f"and always_on={policy.always_on}"
                            + (
                                ": with pause, the Airflow task pauses it for the table"
                                if policy.always_on == "skip"
                                else ""
                            )
                        ) from None
                    if time.monotonic() >= deadline:
                        raise TableBusyError(
                            f"{table}: its writer {job.name} holds its checkpoint lock (pid "
                            f"{pid}); on_busy={policy.on_busy}, lock_wait={policy.lock_wait}"
                        ) from None
                    time.sleep(5)
        yield [job.name for job in writers]


def _closed_partition_filter(
    table: DeltaTable, policy: MaintenanceSpec, now: datetime
) -> list[tuple[str, str, str]] | None:
    """Partition filter of the partitions no writer still fills: date partitions (columns
    named ``*_date``) older than ``closed_partition_age``; None: the whole table."""
    types = {f.name: str(getattr(f.type, "type", f.type)) for f in table.schema().fields}
    dates = [
        c
        for c in table.metadata().partition_columns
        if c.endswith("_date") and types.get(c) in ("date", "string")
    ]
    if not dates:
        return None
    cutoff: date = (now - parse_interval(policy.closed_partition_age)).date()
    return [(column, "<", cutoff.isoformat()) for column in dates]


def _sql_literal(value: Any) -> str:
    if isinstance(value, datetime | date):
        text = value.isoformat() if not isinstance(value, datetime) else _utc(value).isoformat()
        return "'" + text + "'"
    return "'" + str(value).replace("'", "''") + "'"


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def silver_watermark(settings: PlatformSettings) -> datetime | None:
    """silver_refine's newest combined watermark (``silver_reconciliation.watermark`` of
    its newest batch, UTC); None before its first batch."""
    path = get_catalog().table("silver_reconciliation").path(settings)
    if not table_exists(path):
        return None
    recon = read_pandas(path)
    if recon.empty or "watermark" not in recon.columns:
        return None
    recon = recon[recon["job"] == "silver_refine"].dropna(subset=["watermark", "batch_time"])
    if recon.empty:
        return None
    newest = recon.sort_values("batch_time").iloc[-1]["watermark"]
    return _utc(newest.to_pydatetime())


def rows_to_remove(
    path: Path, spec: RowRetentionSpec, settings: PlatformSettings, now: datetime
) -> tuple[str | None, str]:
    """The delete predicate of a bookkeeping table's row retention (see
    :class:`ingest_core.catalog.RowRetentionSpec`).

    :returns: ``(predicate or None when nothing may go, what the cutoff is)``.
    """
    if spec.measured_from == "silver_watermark":
        mark = silver_watermark(settings)
        if mark is None:
            return None, "none: no silver_refine watermark yet"
        cutoff, basis = mark - spec.keep_delta, f"silver_refine watermark {mark:%Y-%m-%d %H:%M}"
    else:
        cutoff, basis = now - spec.keep_delta, "now"
    what = f"older than {spec.keep} before {basis} ({cutoff:%Y-%m-%d %H:%M} UTC)"
    column = spec.time_column
    if not spec.keep_newest:
        return f"{column} < {_sql_literal(cutoff)}", what
    frame = read_pandas(path)
    if frame.empty:
        return None, what
    clauses = []
    groups = frame.groupby(spec.newest_per) if spec.newest_per else [((), frame)]
    for key, rows in groups:
        times = rows[column].dropna().sort_values()
        if len(times) <= spec.keep_newest:
            continue
        limit = min(_utc(times.iloc[-spec.keep_newest].to_pydatetime()), cutoff)
        values = key if isinstance(key, tuple) else (key,)
        match = [f"{c} = {_sql_literal(v)}" for c, v in zip(spec.newest_per, values, strict=True)]
        clauses.append("(" + " AND ".join([*match, f"{column} < {_sql_literal(limit)}"]) + ")")
    return (" OR ".join(clauses) or None), what + f", keeping the newest {spec.keep_newest}"


def _committed(action: Callable[[], _T]) -> _T:
    """Run a delta-rs commit, again (up to 3 times, 2 s apart) when a concurrent writer's
    commit conflicts with it (``CommitFailedError``; the gates append to the ops tables
    without a lock). Each attempt reloads the table inside ``action``."""
    from deltalake.exceptions import CommitFailedError
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

    retrying = Retrying(
        retry=retry_if_exception_type(CommitFailedError),
        stop=stop_after_attempt(3),
        wait=wait_fixed(2),
        reraise=True,
    )
    return retrying(action)


def _interval_text(hours: float) -> str:
    """Delta's interval form of ``hours``, rounded up to whole days (``interval N days``):
    the property then stays put while readers lag by less than a day, instead of changing
    (a metadata commit) on every run."""
    return f"interval {math.ceil(hours / 24)} days"


def check_requested_retention(retention_hours: float | None) -> None:
    """:raises ValueError: ``retention_hours`` is not a number of hours from 0 to
    :data:`MAX_RETENTION_HOURS` (infinite, NaN and negative values included)."""
    if retention_hours is None:
        return
    if not (math.isfinite(retention_hours) and 0 <= retention_hours <= MAX_RETENTION_HOURS):
        raise ValueError(
            f"retention_hours must be a number of hours from 0 to {MAX_RETENTION_HOURS}, "
            f"not {retention_hours!r}"
        )


def maintain_table(
    name: str,
    *,
    dry_run: bool = False,
    retention_hours: float | None = None,
    pinned: Sequence[Pin] = (),
    policy: MaintenanceSpec | None = None,
    settings: PlatformSettings | None = None,
    now: datetime | None = None,
) -> TableReport:
    """Maintain one declared table (see the module docstring for the order and the rules).

    :param dry_run: measure and report what would be removed; change nothing.
    :param retention_hours: a retention asked for (hours); None: the computed one.
    :param pinned: versions other readers need, constraint (d) (the quality gate's).
    :param policy: maintenance settings; None: the catalog's ``maintenance`` section.
    :returns: the report (``status`` ``missing`` for a table not created yet).
    :raises KeyError: an undeclared table.
    :raises ValueError: ``retention_hours`` is out of range (see
        :func:`check_requested_retention`); nothing has changed.
    :raises RetentionRefusedError: ``retention_hours`` is below the computed retention;
        nothing has changed.
    :raises TableBusyError: a writer holds its lock (see :func:`writer_locks`).
    """
    from deltalake import CommitProperties, DeltaTable

    check_requested_retention(retention_hours)
    catalog = get_catalog()
    spec = catalog.table(name)
    settings = settings or get_settings()
    policy = policy or catalog.maintenance
    now = now or datetime.now(UTC)
    path = spec.path(settings)
    report = TableReport(name, status="dry run" if dry_run else "maintained")
    if not table_exists(path):
        report.status, report.reason = "missing", f"no Delta table at {path} yet"
        return report

    def retention() -> tuple[float, Constraint, list[Constraint]]:
        return required_retention(DeltaTable(str(path)), policy, settings, now, pinned)

    needed, binding, constraints = retention()
    if retention_hours is not None and retention_hours < needed:
        raise RetentionRefusedError(
            f"{name}: a retention of {retention_hours:g} h is refused: {needed:.0f} h are "
            f"needed, set by {binding.describe()} (constraints: "
            + "; ".join(c.describe() for c in constraints)
            + ")"
        )
    with writer_locks(name, policy, settings) as writers:
        if writers:
            report.notes.append(f"writers locked meanwhile: {', '.join(writers)}")
        report.before = file_stats(path)
        keep_rows = spec.maintenance.keep_rows
        if keep_rows is not None:
            predicate, what = rows_to_remove(path, keep_rows, settings, now)
            report.notes.append(f"row retention: rows {what}")
            if predicate and not dry_run:
                if keep_rows.measured_from != "now":
                    # Marked before the delete: a run killed between the two commits must
                    # not leave pruned ids without the reset guard.
                    _committed(
                        lambda: DeltaTable(str(path)).alter.set_table_properties(
                            {PRUNED_BEFORE: now.isoformat()}, raise_if_not_exists=False
                        )
                    )
                # Marked as maintenance: the rows it removes are no new data (freshness, the
                # gates and the scheduled jobs' input check ignore this commit).
                marked = CommitProperties(custom_metadata={MAINTENANCE_COMMIT_KEY: "row retention"})
                metrics = _committed(
                    lambda: DeltaTable(str(path)).delete(predicate, commit_properties=marked)
                )
                report.rows_removed = int(metrics.get("num_deleted_rows", 0))
        if not dry_run:
            columns = spec.maintenance.zorder_by

            def optimize() -> dict[str, Any]:
                table = DeltaTable(str(path))
                filters = _closed_partition_filter(table, policy, now)
                if columns:
                    return table.optimize.z_order(columns, partition_filters=filters)
                return table.optimize.compact(partition_filters=filters)

            report.compaction = _committed(optimize)
        # Computed again after the commits above: they are newer than every reader.
        hours, binding, constraints = retention()
        if retention_hours is not None and retention_hours > hours:
            hours = float(math.ceil(retention_hours))
            binding = Constraint("request", "retention_hours of this run", hours)
        report.retention_hours, report.retention_set_by = hours, binding
        report.constraints = constraints
        table = DeltaTable(str(path))
        doomed = table.vacuum(
            retention_hours=int(hours), dry_run=True, enforce_retention_duration=False, full=True
        )
        report.vacuumed_files = len(doomed)
        report.vacuumed_bytes = sum(
            (path / f).stat().st_size for f in doomed if (path / f).is_file()
        )
        readers = max((c.hours for c in constraints if c.kind != "floor"), default=0.0)
        keep_log = parse_interval(policy.log_retention).total_seconds() / 3600
        report.log_retention = _interval_text(max(keep_log, hours, readers + keep_log))
        if not dry_run:
            table.vacuum(
                retention_hours=int(hours),
                dry_run=False,
                enforce_retention_duration=False,
                full=True,
            )
            wanted = {
                LOG_RETENTION: report.log_retention,
                DELETED_FILE_RETENTION: report.log_retention,
            }
            configured = DeltaTable(str(path)).metadata().configuration
            if any(configured.get(k) != v for k, v in wanted.items()):
                _committed(
                    lambda: DeltaTable(str(path)).alter.set_table_properties(
                        wanted, raise_if_not_exists=False
                    )
                )
            DeltaTable(str(path)).cleanup_metadata()
        report.after = file_stats(path)
    return report


def refuse_reset_after_pruning(job_name: str, settings: PlatformSettings | None = None) -> None:
    """Refuse to reset a job's checkpoint when its id history was pruned: a new query reads
    its source from the start without a watermark, and the pruned ids would let old events
    into Silver a second time.

    :raises ValueError: an output of ``job_name`` carries :data:`PRUNED_BEFORE`.
    """
    from deltalake import DeltaTable

    settings = settings or get_settings()
    catalog = get_catalog()
    for table in catalog.job(job_name).outputs:
        path = catalog.table(table).path(settings)
        if not table_exists(path):
            continue
        pruned = DeltaTable(str(path)).metadata().configuration.get(PRUNED_BEFORE)
        if pruned:
            raise ValueError(
                f"{table} was pruned by table maintenance ({PRUNED_BEFORE} = {pruned}): a "
                f"new {job_name} query would read every event again without the ids that "
                "were dropped. Rebuild the layer with layer_full_refresh instead."
            )
