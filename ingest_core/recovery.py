"""Restores, crash recovery and retention of checkpoint backups.

Rules that every action here keeps:

* **A live checkpoint is never deleted.** A restore moves it aside
  (``<checkpoint>.replaced-<UTC time>``); a recovery moves damaged files to
  ``.<job>.damaged-<UTC time>/`` beside the checkpoint.
* **A batch the sinks committed is never re-planned.** Delta sinks (and the
  ``txnAppId``/``txnVersion`` writes of ``foreachBatch``) skip a batch id they already
  committed for the query id, whatever its new offset range. So every batch id a sink
  committed (:func:`ingest_core.delta_tables.sink_committed_batch`) or whose ``commits/N`` is
  intact keeps its *original* ``offsets/N``: from the live or moved-aside checkpoint, from
  the newest verified backup of the same query id, or rebuilt from the sink's own rows where
  the sink keeps Kafka coordinates (bronze_ingest); if none has it, the action is refused
  with the numbers before anything is touched. A restore rolls forward: after copying the
  backup (batches up to K), it carries over from the moved-aside live checkpoint every later
  batch whose ``offsets`` and ``commits`` are intact (K+1..M) with their state files, then
  the original offsets of any later batch the sink committed. Spark resumes exactly where
  the sinks are; a batch it re-runs over its original offsets is skipped or completed
  idempotently.
* **Every action is written to the audit log** ``<INGEST_HOME>/checkpoint_backups/audit.jsonl``
  (one JSON object per line: time, user, action, job, details).
"""

from __future__ import annotations

import getpass
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ingest_core.catalog import KafkaSourceSpec, get_catalog
from ingest_core.checkpoint_health import (
    Damage,
    batch_ids,
    config_changes,
    find_damage,
    fingerprint,
    fingerprint_config,
    fingerprint_file,
    log_file_problem,
    query_dirs,
    query_sink,
    unfinished_writes,
)
from ingest_core.checkpoints import BackupError, backups_root, list_backups, verify
from ingest_core.delta_tables import (
    checkpoint_query_id,
    files_added_by,
    sink_committed_batch,
    streaming_commits,
    txn_app_ids,
)
from ingest_core.locks import CheckpointBusyError, checkpoint_lock
from ingest_core.settings import PlatformSettings, get_settings


class RestoreRefusedError(RuntimeError):
    """A restore or recovery was refused before anything was touched; the message names the
    problem and the way out."""


class KafkaUnavailableError(RestoreRefusedError):
    """Refused because Kafka did not answer: the same restore may succeed once it is back
    (the ``checkpoint_restore`` DAG retries it; every other refusal is final)."""


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did: the backup's batch per query, the batch each query resumes after
    (rolled forward from the live checkpoint), and where the live checkpoint was moved; None
    for a query that has no batch (backed up before its first commit: it starts at its
    first batch, from the starting offsets its ``sources/`` recorded)."""

    job: str
    backup_id: str
    restored_batch: dict[str, int | None]
    resumes_after: dict[str, int | None]
    moved_aside: Path | None


@dataclass(frozen=True)
class _Move:
    """Move ``path`` (and its ``.N.crc`` checksum) to ``to``."""

    path: Path
    to: Path


@dataclass(frozen=True)
class _Write:
    """Write ``text`` to ``path`` (an original offsets or metadata file), from ``origin``."""

    path: Path
    text: str
    origin: str


def audit_log() -> Path:
    """The audit log of every restore, recovery, reset and pruning."""
    return backups_root() / "audit.jsonl"


def audit(action: str, job: str, **details: Any) -> None:
    """Append one action to the audit log."""
    path = audit_log()
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {
        "at": datetime.now(UTC).isoformat(),
        "user": getpass.getuser(),
        "action": action,
        "job": job,
        **details,
    }
    with path.open("a") as handle:
        handle.write(json.dumps(entry, default=str, sort_keys=True) + "\n")


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def _intact_batches(folder: Path) -> int | None:
    """Newest batch N such that offsets and commits 0..N (those present) all parse."""
    newest = None
    commits = set(batch_ids(folder / "commits"))
    for batch in batch_ids(folder / "offsets"):
        if batch not in commits:
            break
        if log_file_problem(folder / "offsets" / str(batch), "offsets") or log_file_problem(
            folder / "commits" / str(batch), "commits"
        ):
            break
        newest = batch
    return newest


def _backed_up_batch(query: dict[str, Any]) -> int:
    """A manifest query's last committed batch, -1 for one backed up before its first."""
    batch = query["last_committed_batch"]
    return -1 if batch is None else int(batch)


def _carry_forward(live: Path, target: Path, after: int) -> int:
    """Copy intact batches > ``after`` from ``live`` into ``target`` (offsets, commits and the
    state files of their versions); :returns: the newest batch ``target`` now has.

    Batches Spark already purged from ``live`` (it keeps the newest
    ``spark.sql.streaming.minBatchesToRetain``, 100 by default) are left out: a restart
    reads only the newest offsets and commit, and ``live`` keeps the state files its newest
    version needs.
    """
    newest = _intact_batches(live)
    if newest is None or newest <= after:
        newest = after
    retained = set(batch_ids(live / "offsets")) & set(batch_ids(live / "commits"))
    for batch in sorted(b for b in retained if after < b <= newest):
        for kind in ("offsets", "commits"):
            (target / kind).mkdir(parents=True, exist_ok=True)
            shutil.copy2(live / kind / str(batch), target / kind / str(batch))
    in_flight = live / "offsets" / str(newest + 1)
    if in_flight.exists() and not log_file_problem(in_flight, "offsets"):
        # The batch that was running: Spark re-runs it over its original offsets (a sink
        # that committed it skips it), never over a new range.
        (target / "offsets").mkdir(parents=True, exist_ok=True)
        shutil.copy2(in_flight, target / "offsets" / str(newest + 1))
    state = live / "state"
    if state.is_dir():
        for file in state.rglob("*"):
            if not file.is_file():
                continue
            destination = target / file.relative_to(live)
            name = file.name.removesuffix(".crc").lstrip(".")
            version = name.split(".")[0]
            if not destination.exists() and (not version.isdigit() or int(version) <= newest + 1):
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, destination)
    return newest


def restore(
    job_name: str,
    backup_id: str,
    *,
    accept_data_loss: bool = False,
    settings: PlatformSettings | None = None,
) -> RestoreResult:
    """Restore ``backup_id`` into ``job_name``'s checkpoint (module docstring for the rules).

    Refuses, before touching anything, when: the backup does not verify or lacks a query's
    ``metadata``; the job is running (its lock is held); a sink moved past the backup while
    the live checkpoint has no intact later batch to carry over; a query id differs from the
    live checkpoint's (a new id silently disables the sinks' duplicate protection); the job's
    configuration changed since the backup in a way that affects its state; Kafka no longer
    holds the offsets the backup resumes from (unless ``accept_data_loss``, which records the
    accepted gaps in the audit log).

    :raises RestoreRefusedError: see above; the message names the problem.
    :raises KeyError: unknown job.
    """
    settings = settings or get_settings()
    job = get_catalog().job(job_name)
    checkpoint = job.checkpoint(settings)
    folder = backups_root(settings) / job_name / backup_id
    if not folder.is_dir():
        known = [b.backup_id for b in list_backups(job_name, settings)]
        raise RestoreRefusedError(f"no backup {backup_id!r} of {job_name}; backups: {known}")
    try:
        manifest = verify(folder)
    except BackupError as error:
        raise RestoreRefusedError(f"backup {backup_id} cannot be restored: {error}") from None
    if manifest["fingerprint"] != fingerprint(job):
        changes = config_changes(manifest.get("config", {}), fingerprint_config(job))
        raise RestoreRefusedError(
            f"{job_name}'s configuration changed since backup {backup_id} "
            f"({'; '.join(changes) or 'fingerprint differs'}): its state may not fit the job "
            "as now configured. Revert the change, or pick a backup taken since."
        )
    live_queries = query_dirs(checkpoint)
    for name, query in manifest["queries"].items():
        live = live_queries.get(name)
        live_id = _query_id(live) if live is not None else None
        # A lost or unreadable live id cannot disagree.
        if live_id is not None and live_id != query["query_id"]:
            raise RestoreRefusedError(
                f"query id differs: backup {backup_id} has {query['query_id']} for "
                f"{name or job_name}, the live checkpoint {live_id}. The sinks' duplicate "
                "protection is keyed by the query id: restoring would write batches again. "
                f"To discard the live checkpoint's newer start, `ingestctl checkpoints reset "
                f"{job_name}` first (it is moved aside), then restore."
            )
    fills = _plan_roll_forward(job_name, folder, manifest, live_queries, settings)
    gaps = _kafka_gaps(job_name, folder, manifest, settings)
    if gaps and not accept_data_loss:
        lines = "; ".join(
            f"{g['topic']}[{g['partition']}] from {g['first_missing_offset']}: {g['reason']}"
            for g in gaps
        )
        raise RestoreRefusedError(
            f"Kafka no longer holds offsets backup {backup_id} resumes from: {lines}. Pass "
            "--accept-data-loss to restore anyway (the gaps are recorded in the audit log)."
        )
    try:
        with checkpoint_lock(checkpoint):
            return _do_restore(job_name, backup_id, folder, manifest, checkpoint, gaps, fills)
    except CheckpointBusyError as error:
        hint = "stop it first (streaming_supervisor with action=stop, or wait for its run)"
        raise RestoreRefusedError(f"{job_name} is running: {error}; {hint}") from None


def _plan_roll_forward(
    job_name: str,
    folder: Path,
    manifest: dict[str, Any],
    live_queries: dict[str, Path],
    settings: PlatformSettings,
) -> dict[str, list[_Write]]:
    """Refuse a restore that would re-plan batch ids a sink has already committed, or plan
    the original offsets files that prevent it.

    After the copy, a query resumes after the backup's batch or, rolled forward, after the
    live checkpoint's newest intact batch. If a sink committed a later batch id, the batches
    in between must keep their original offsets (from the live checkpoint's intact offsets
    files, another verified backup, or rebuilt from the sink's own rows); a stateful query
    cannot skip their state, so it is refused, as is a batch whose offsets are nowhere.

    :returns: per query name, the offsets files to write after the copy.
    :raises RestoreRefusedError: the numbers and the way out.
    """
    fills: dict[str, list[_Write]] = {}
    for name, query in manifest["queries"].items():
        live = live_queries.get(name)
        restored = _backed_up_batch(query)
        newest = _intact_batches(live) if live is not None else None
        resumes = max(restored, newest if newest is not None else restored)
        sink = _sink_batch(job_name, query["query_id"], settings)
        in_flight = live / "offsets" / str(resumes + 1) if live is not None else None
        if (
            in_flight is not None
            and in_flight.exists()
            and not log_file_problem(in_flight, "offsets")
        ):
            resumes += 1  # carried over too (:func:`_carry_forward`): re-run, same offsets
        if sink is None or sink <= resumes:
            continue
        backed_up = folder / name if name else folder
        source = live if live is not None and resumes > restored else backed_up
        previous = (source / "offsets" / str(resumes)).read_text() if resumes >= 0 else None
        stateful = any(p.is_file() for p in (backed_up / "state").rglob("*"))
        writes: list[_Write] = []
        unresolved = list(range(resumes + 1, sink + 1)) if stateful else []
        for batch in [] if stateful else range(resumes + 1, sink + 1):
            own = live / "offsets" / str(batch) if live is not None else None
            found = None
            if own is not None and own.exists() and not log_file_problem(own, "offsets"):
                found = own.read_text(), "the live checkpoint"
            found = (
                found
                or _offsets_from_backups(job_name, name, query["query_id"], batch, settings)
                or _offsets_from_sink(job_name, query["query_id"], batch, previous, settings)
            )
            if found is None:
                unresolved.append(batch)
                continue
            previous = found[0]
            writes.append(_Write(Path(name) / "offsets" / str(batch), found[0], found[1]))
        if unresolved:
            why = (
                "a stateful query cannot skip them: their state is in no backup"
                if stateful
                else "their offsets are in no intact file, backup or sink commit"
            )
            raise RestoreRefusedError(
                f"{query['sink_table']} committed batch {sink} of {name or job_name}, but "
                f"after this restore it would resume after batch {resumes} and {why} "
                f"(batches {', '.join(map(str, unresolved))}): Spark would re-plan "
                "batch ids the sink already committed and skip their rows. Nothing was "
                f"changed. Restore a newer backup, or `ingestctl checkpoints reset {job_name}` "
                "and rebuild the sink."
            )
        fills[name] = writes
    return fills


def _kafka_gaps(
    job_name: str, folder: Path, manifest: dict[str, Any], settings: PlatformSettings
) -> list[dict[str, Any]]:
    job = get_catalog().job(job_name)
    if not isinstance(job.source, KafkaSourceSpec):
        return []
    from kafka.errors import KafkaError

    from ingest_core.kafka_offsets import find_gaps

    topics = [settings.kafka.topic(t) for t in job.source.topics]
    gaps: list[dict[str, Any]] = []
    for name in manifest["queries"]:
        try:
            gaps += find_gaps(
                folder / name, settings.kafka.bootstrap_servers, topics, settings.kafka
            )
        except KafkaError as error:
            # Nothing is touched yet: refusing is safe, and trying again once Kafka is back
            # is the remedy (soak run 4 met a raw KafkaTimeoutError here, broker stopped).
            raise KafkaUnavailableError(
                f"Kafka at {settings.kafka.bootstrap_servers} does not answer ({error}): the "
                f"restore checks that Kafka still holds the offsets backup resumes from; try "
                "again once the broker is back"
            ) from None
    return gaps


def _do_restore(
    job_name: str,
    backup_id: str,
    folder: Path,
    manifest: dict[str, Any],
    checkpoint: Path,
    gaps: list[dict[str, Any]],
    fills: dict[str, list[_Write]],
) -> RestoreResult:
    aside = None
    if checkpoint.exists():
        aside = _unused(checkpoint.with_name(f"{checkpoint.name}.replaced-{_stamp()}"))
        checkpoint.rename(aside)
    restored, resumes = {}, {}
    for name, query in manifest["queries"].items():
        target = checkpoint / name if name else checkpoint
        shutil.copytree(
            folder / name if name else folder,
            target,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("manifest.json"),
        )
        batch = _backed_up_batch(query)
        restored[name] = batch if batch >= 0 else None
        live = (aside / name if name else aside) if aside else None
        after = _carry_forward(live, target, batch) if live and live.is_dir() else batch
        resumes[name] = after if after >= 0 else None
        writes = [_Write(checkpoint / w.path, w.text, w.origin) for w in fills.get(name, [])]
        filled = _apply(writes)
        if filled:
            # Batches the sink committed after the carried-over ones: their original
            # offsets; Spark re-runs only the newest of them and the sink skips it.
            resumes[name] = max(int(w.path.name) for w in writes)
    (checkpoint / "manifest.json").unlink(missing_ok=True)
    audit(
        "restore",
        job_name,
        backup_id=backup_id,
        restored_batch=restored,
        resumes_after=resumes,
        moved_aside=aside,
        accepted_gaps=gaps,
    )
    return RestoreResult(job_name, backup_id, restored, resumes, aside)


def _query_id(folder: Path) -> str | None:
    """The query id in ``folder/metadata``, or None when it is missing or unreadable."""
    try:
        return checkpoint_query_id(folder)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sink_batch(job_name: str, query_id: str, settings: PlatformSettings) -> int | None:
    """The newest batch id any platform table committed for ``job_name``'s query
    ``query_id`` (see :func:`ingest_core.delta_tables.sink_committed_batch`)."""
    tables = [table.path(settings) for table in get_catalog().tables.values()]
    return sink_committed_batch(tables, txn_app_ids(job_name, query_id))


def _offsets_from_backups(
    job_name: str, name: str, query_id: str, batch: int, settings: PlatformSettings
) -> tuple[str, str] | None:
    """Batch ``batch``'s original offsets file from the newest verified backup of the same
    query (same query id) that holds it intact: ``(text, origin)`` or None."""
    for info in list_backups(job_name, settings):
        query = info.manifest["queries"].get(name)
        candidate = info.path / name / "offsets" / str(batch)
        if not query or query["query_id"] != query_id or not candidate.exists():
            continue
        if log_file_problem(candidate, "offsets"):
            continue
        try:
            verify(info.path)
        except BackupError:
            continue
        return candidate.read_text(), f"backup {info.backup_id}"
    return None


def _offsets_from_sink(
    job_name: str, query_id: str, batch: int, previous: str | None, settings: PlatformSettings
) -> tuple[str, str] | None:
    """Rebuild batch ``batch``'s offsets file from what the sink committed for it.

    Possible for a Kafka-source job whose sink keeps each record's Kafka coordinates
    (bronze_ingest: ``bronze_events`` is keyed by topic, partition, offset) and wrote the
    batch through Spark's Delta streaming sink: the batch's end offset of a partition is one
    past the highest offset it wrote there, or, for a partition it wrote nothing to, the end
    offset of batch ``batch - 1`` (``previous``, whose metadata line is reused). Kafka
    offsets only grow within a partition, so the rebuilt range is exactly the one the sink
    committed.

    :returns: ``(text, origin)``, or None when the job's sink cannot answer.
    """
    import pyarrow.parquet as pq

    catalog = get_catalog()
    job = catalog.job(job_name)
    if job.sink_table is None or not isinstance(job.source, KafkaSourceSpec) or previous is None:
        return None
    table = catalog.table(job.sink_table)
    if not {"topic", "partition", "offset"} <= set(table.keys):
        return None
    path = table.path(settings)
    commits = [
        c for c in streaming_commits(path) if c["query_id"] == query_id and c["batch_id"] == batch
    ]
    if not commits:
        return None
    lines = previous.splitlines()
    metadata = json.loads(lines[1])
    ends: dict[str, dict[str, int]] = json.loads(lines[2]) if len(lines) > 2 else {}
    files = files_added_by(path, commits[-1]["version"])
    if files:
        rows = pq.read_table(
            files, columns=["topic", "partition", "offset"], partitioning=None
        ).to_pylist()
        for row in rows:
            partitions = ends.setdefault(row["topic"], {})
            key = str(row["partition"])
            partitions[key] = max(partitions.get(key, 0), int(row["offset"]) + 1)
    metadata["batchTimestampMs"] = commits[-1]["timestamp_ms"] or metadata.get("batchTimestampMs")
    text = "\n".join(
        ["v1", json.dumps(metadata, separators=(",", ":")), json.dumps(ends, separators=(",", ":"))]
    )
    return text, f"{table.name} Delta version {commits[-1]['version']} (the sink's own rows)"


def _metadata_from_backups(
    job_name: str, name: str, folder: Path, settings: PlatformSettings
) -> tuple[str, str] | None:
    """The query's ``metadata`` from the newest verified backup of this very checkpoint:
    one whose newest offsets file is byte-identical to the live file of the same batch."""
    for info in list_backups(job_name, settings):
        query = info.manifest["queries"].get(name)
        if not query:
            continue
        batch = str(query["last_committed_batch"])
        theirs, ours = info.path / name / "offsets" / batch, folder / "offsets" / batch
        if not (theirs.exists() and ours.exists()) or theirs.read_bytes() != ours.read_bytes():
            continue
        try:
            verify(info.path)
        except BackupError:
            continue
        return (info.path / name / "metadata").read_text(), f"backup {info.backup_id}"
    return None


def _metadata_from_sink(
    job_name: str, name: str, folder: Path, settings: PlatformSettings
) -> tuple[str, str] | None:
    """The query id from the query's own sink table (:func:`query_sink`): the one query whose
    streaming commits there include every batch this checkpoint has an intact commit for
    (Delta streaming sinks record ``queryId`` and ``epochId`` in each commit), and that no
    other query folder of the job already has."""
    commits_dir = folder / "commits"
    mine = {
        b for b in batch_ids(commits_dir) if not log_file_problem(commits_dir / str(b), "commits")
    }
    if not mine:
        return None
    catalog = get_catalog()
    sink_name = query_sink(catalog.job(job_name), name)
    if sink_name is None:  # a Kafka sink keeps no commit log to read the query id from
        return None
    sink = catalog.table(sink_name).path(settings)
    batches: dict[str, set[int]] = {}
    for commit in streaming_commits(sink):
        batches.setdefault(commit["query_id"], set()).add(commit["batch_id"])
    taken = {
        _query_id(other)
        for other in query_dirs(folder.parent if name else folder).values()
        if other != folder
    }
    candidates = [
        query_id for query_id, seen in batches.items() if mine <= seen and query_id not in taken
    ]
    if len(candidates) != 1:
        return None
    origin = f"the query id of {sink.name}'s streaming commits of batches {min(mine)}..{max(mine)}"
    return json.dumps({"id": candidates[0]}) + "\n", origin


def _plan_query_repair(
    job_name: str,
    name: str,
    folder: Path,
    damage: list[Damage],
    quarantine: Path,
    settings: PlatformSettings,
) -> list[_Move | _Write]:
    """What repairs one query folder without losing or repeating a record.

    Every batch up to ``keep`` (the newest batch the sink committed, or that has an intact
    commit) keeps its original offsets: a damaged or missing one is taken from a verified
    backup, or rebuilt from the sink (:func:`_offsets_from_sink`). The batch after ``keep``
    is re-run over its offsets if they are intact; damaged files past ``keep`` and every
    later batch are moved aside (no sink has them: Spark plans them again). Damaged commits
    are moved aside: their batch re-runs over its original offsets and the sinks skip it.

    :raises RestoreRefusedError: a batch the sink committed has no intact offsets anywhere;
        the message has the numbers.
    """
    bad = {(d.kind, d.batch) for d in damage}
    plan: list[_Move | _Write] = []

    def aside(kind: str, batch: int) -> None:
        path = folder / kind / str(batch)
        crc = path.with_name(f".{batch}.crc")
        if path.exists():
            plan.append(_Move(path, quarantine / name / kind / str(batch)))
        elif crc.exists():  # a checksum left without its file
            plan.append(_Move(crc, quarantine / name / kind / crc.name))

    if ("metadata", -1) in bad:
        found = _metadata_from_backups(job_name, name, folder, settings) or _metadata_from_sink(
            job_name, name, folder, settings
        )
        if found is None:
            raise RestoreRefusedError(
                f"{folder / 'metadata'} is missing or damaged and neither a backup of this "
                f"checkpoint nor the sink's commits name its query id: the sinks' duplicate "
                f"protection is keyed by it. Restore a backup "
                f"(`ingestctl checkpoints restore {job_name} <id>`), or reset the checkpoint "
                "and rebuild the sink."
            )
        if (folder / "metadata").exists():
            plan.append(_Move(folder / "metadata", quarantine / name / "metadata"))
        plan.append(_Write(folder / "metadata", found[0], found[1]))
        query_id = json.loads(found[0])["id"]
    else:
        query_id = checkpoint_query_id(folder)
    offsets = batch_ids(folder / "offsets")
    commits = batch_ids(folder / "commits")
    intact_offsets = [b for b in offsets if ("offsets", b) not in bad]
    intact_commits = [b for b in commits if ("commits", b) not in bad]
    sink = _sink_batch(job_name, query_id, settings)
    keep = max([b for b in (sink, max(intact_commits, default=None)) if b is not None], default=-1)
    lowest = min(offsets + commits + [d.batch for d in damage if d.batch >= 0], default=0)
    previous: str | None = None
    unresolved: list[int] = []
    for batch in range(lowest, keep + 1):
        if batch in intact_offsets:
            previous = (folder / "offsets" / str(batch)).read_text()
            continue
        found = _offsets_from_backups(
            job_name, name, query_id, batch, settings
        ) or _offsets_from_sink(job_name, query_id, batch, previous, settings)
        if found is None:
            unresolved.append(batch)
            previous = None
            continue
        aside("offsets", batch)
        plan.append(_Write(folder / "offsets" / str(batch), found[0], found[1]))
        previous = found[0]
    if unresolved and max(unresolved) < keep - 1:
        # Only old batches are lost and Spark needs none of them: it restarts from the two
        # newest offsets files and the newest commit. Move everything up to the newest lost
        # batch aside, the shape Spark's own log retention leaves.
        prefix = max(unresolved)
        batches = [(step, _batch_of(step)) for step in plan]
        plan = [step for step, batch in batches if batch is None or batch > prefix]
        for kind in ("offsets", "commits"):
            damaged = {d.batch for d in damage if d.kind == kind}
            for batch in sorted(set(batch_ids(folder / kind)) | damaged):
                if batch <= prefix:
                    aside(kind, batch)
        unresolved = []
    if unresolved:
        committed = f"the sink committed batch {sink}" if sink is not None else "commits exist"
        raise RestoreRefusedError(
            f"{job_name}{'/' + name if name else ''}: {committed} (query {query_id}), but "
            f"the offsets of batch{'es' if len(unresolved) > 1 else ''} "
            f"{', '.join(map(str, unresolved))} are damaged or missing, no verified backup "
            "holds them and the sink cannot rebuild them: re-planning those batch ids over new "
            "offsets would make the sink skip their rows. Nothing was changed. Restore a "
            f"backup taken after batch {max(unresolved)} "
            f"(`ingestctl checkpoints restore {job_name} <id>`), or reset the checkpoint and "
            "rebuild the sinks."
        )
    for batch in sorted(set(commits) | {b for kind, b in bad if kind == "commits"}):
        if ("commits", batch) in bad or batch > keep + 1:
            aside("commits", batch)
    for batch in sorted(set(offsets) | {b for kind, b in bad if kind == "offsets"}):
        if batch > keep and (("offsets", batch) in bad or batch > keep + 1):
            aside("offsets", batch)
    offsets_steps = [step for step in plan if step.path.parent == folder / "offsets"]
    moved = {_batch_of(step) for step in offsets_steps if isinstance(step, _Move)}
    written = {_batch_of(step) for step in offsets_steps if isinstance(step, _Write)}
    if (folder / "state").is_dir() and not (set(intact_offsets) - moved) | written:
        # Spark plans batch 0 of a new query over this folder, and refuses to while its
        # state folder holds anything (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY): the state
        # of batches no sink committed goes aside with their offsets.
        plan.append(_Move(folder / "state", quarantine / name / "state"))
    return plan


def _batch_of(step: _Move | _Write) -> int | None:
    """The batch id an ``offsets``/``commits`` step is about (its file or its ``.N.crc``)."""
    if step.path.parent.name not in ("offsets", "commits"):
        return None
    name = step.path.name.lstrip(".").removesuffix(".crc")
    return int(name) if name.isdigit() else None


def _apply(plan: Sequence[_Move | _Write]) -> list[str]:
    """Carry out a repair plan; :returns: one line per step."""
    actions = []
    for step in plan:
        if isinstance(step, _Move):
            step.to.parent.mkdir(parents=True, exist_ok=True)
            step.path.rename(step.to)
            # Its checksum too: a stale .N.crc makes Spark's rewrite of N fail as if another
            # query were writing the same checkpoint.
            crc = step.path.with_name(f".{step.path.name}.crc")
            if not step.path.name.endswith(".crc") and crc.exists():
                crc.rename(step.to.with_name(crc.name))
            actions.append(f"moved {step.path} to {step.to}")
        else:
            step.path.parent.mkdir(parents=True, exist_ok=True)
            step.path.write_text(step.text)
            actions.append(f"wrote {step.path} (original, from {step.origin})")
    return actions


#: Damage kinds that are not about a query's logs, which the query-by-query repair leaves
#: alone: a missing state file (copied back from a backup), and what goes aside whole
#: (:func:`_whole_aside`).
_NOT_LOG_DAMAGE = ("state", "stale_state", "unfinished")


def _whole_aside(checkpoint: Path, damage: Sequence[Damage], quarantine: Path) -> list[_Move]:
    """Moves of the stale state folders and half-written files in ``damage`` into
    ``quarantine``, each at its path relative to ``checkpoint``."""
    return [
        _Move(d.path, quarantine / d.path.relative_to(checkpoint))
        for d in damage
        if d.kind in ("stale_state", "unfinished")
    ]


def _outermost(plan: Sequence[_Move | _Write]) -> list[_Move | _Write]:
    """``plan`` without the moves of files inside a folder the plan moves (a half-written
    file in a state folder that goes aside whole), and without repeated moves."""
    folders = {step.path for step in plan if isinstance(step, _Move)}
    kept: list[_Move | _Write] = []
    for step in plan:
        if isinstance(step, _Move) and (step in kept or folders & set(step.path.parents)):
            continue
        kept.append(step)
    return kept


def _quarantine(checkpoint: Path) -> Path:
    """A folder beside ``checkpoint`` that no earlier repair used, for what this one moves
    aside: ``.<name>.damaged-<UTC time>``, then ``-1``, ``-2``... within the same second (a
    rename onto an earlier repair's file would replace it)."""
    return _unused(checkpoint.parent / f".{checkpoint.name}.damaged-{_stamp()}")


def _unused(base: Path) -> Path:
    """``base``, or ``base-1``, ``base-2``... the first that does not exist (names stamped to
    the second: a second restore or repair in the same second must not collide)."""
    candidate, number = base, 0
    while candidate.exists():
        number += 1
        candidate = base.with_name(f"{base.name}-{number}")
    return candidate


def set_aside_unfinished_writes(
    job_name: str, settings: PlatformSettings | None = None
) -> list[str]:
    """Move the files a crash left half-written in ``job_name``'s checkpoint
    (:func:`ingest_core.checkpoint_health.unfinished_writes`) to
    ``.<checkpoint>.damaged-<UTC time>/``, and audit it. A starting driver calls it while it
    holds the checkpoint lock: without it, a driver killed while Spark wrote ``offsets/0``
    could never start again. Nothing a batch needs moves: Spark never reads these files.

    The caller holds the checkpoint lock (:func:`ingest_core.locks.checkpoint_lock`).

    :returns: one line per moved file ([] when there was none).
    """
    settings = settings or get_settings()
    checkpoint = get_catalog().job(job_name).checkpoint(settings)
    leftovers = unfinished_writes(checkpoint)
    if not leftovers:
        return []
    quarantine = _quarantine(checkpoint)
    actions = _apply([_Move(p, quarantine / p.relative_to(checkpoint)) for p in leftovers])
    audit("set-aside-unfinished-writes", job_name, actions=actions)
    return actions


def recover(job_name: str, settings: PlatformSettings | None = None) -> list[str]:
    """Repair a damaged checkpoint without losing or repeating a record (module docstring).

    A batch id the sinks committed (:func:`ingest_core.delta_tables.sink_committed_batch`) or
    whose ``commits/N`` is intact is never re-planned: its damaged or missing ``offsets/N``
    is restored from a verified backup or rebuilt from the sink's own rows, or the recovery
    is refused with the numbers. A lost ``metadata`` (query id) comes back the same way.
    Damaged files of batches no sink has are moved aside and Spark plans them again; a
    missing state file is copied from the newest verified backup that has it (state files
    are immutable once written). Files a crash left half-written are moved aside; a query
    left with no offsets at all loses its ``state`` folder too (moved aside): Spark starts
    it as a new query and refuses a state folder that is not empty.

    Every step is planned before anything is touched: a refusal changes nothing.

    :returns: one line per action ([] when nothing was damaged).
    :raises RestoreRefusedError: the job is running; a committed batch's offsets, the query
        id or a state file cannot be found anywhere (the message says what and the options).
    """
    settings = settings or get_settings()
    job = get_catalog().job(job_name)
    checkpoint = job.checkpoint(settings)
    if not find_damage(checkpoint):
        return []
    try:
        with checkpoint_lock(checkpoint):
            # Again under the lock: a driver that ran meanwhile may have changed the files.
            damage = find_damage(checkpoint)
            quarantine = _quarantine(checkpoint)
            plan: list[_Move | _Write] = [*_whole_aside(checkpoint, damage, quarantine)]
            for name, folder in query_dirs(checkpoint).items():
                mine = [
                    d for d in damage if d.kind not in _NOT_LOG_DAMAGE and folder in d.path.parents
                ]
                if mine:
                    plan += _plan_query_repair(job_name, name, folder, mine, quarantine, settings)
            states = [
                _state_file_source(job_name, checkpoint, d.path, settings)
                for d in damage
                if d.kind == "state"
            ]
            actions = _apply(_outermost(plan))
            for source, missing in states:
                shutil.copy2(source[0], missing)
                actions.append(f"copied {missing.relative_to(checkpoint)} from {source[1]}")
            audit("recover", job_name, damage=[d.describe() for d in damage], actions=actions)
    except CheckpointBusyError as error:
        raise RestoreRefusedError(f"{job_name} is running: {error}") from None
    return actions


def _state_file_source(
    job_name: str, checkpoint: Path, missing: Path, settings: PlatformSettings
) -> tuple[tuple[Path, str], Path]:
    """Where a missing state file can be copied from: ``((file, origin), missing)``.

    :raises RestoreRefusedError: no verified backup has it.
    """
    relative = missing.relative_to(checkpoint)
    for info in list_backups(job_name, settings):
        candidate = info.path / relative
        if candidate.exists():
            try:
                verify(info.path)
            except BackupError:
                continue
            return (candidate, f"backup {info.backup_id}"), missing
    raise RestoreRefusedError(
        f"{missing} is missing and no backup of {job_name} has it: the state of that batch "
        "cannot be rebuilt without replaying. Restore an older backup explicitly "
        f"(`ingestctl checkpoints restore {job_name} <id>`), or reset the checkpoint."
    )


def reset(job_name: str, settings: PlatformSettings | None = None) -> Path:
    """Move ``job_name``'s checkpoint (and its recorded fingerprint) aside so that the job
    starts a new one from its starting offsets. Nothing is deleted.

    :returns: where the old checkpoint now is.
    :raises RestoreRefusedError: the job is running, it has no checkpoint, or table
        maintenance pruned its deduplication id history (a new query would let old events
        in again: :func:`ingest_core.table_maintenance.refuse_reset_after_pruning`).
    """
    from ingest_core.table_maintenance import refuse_reset_after_pruning

    settings = settings or get_settings()
    job = get_catalog().job(job_name)
    checkpoint = job.checkpoint(settings)
    if not checkpoint.exists():
        raise RestoreRefusedError(f"{job_name} has no checkpoint at {checkpoint}")
    try:
        refuse_reset_after_pruning(job_name, settings)
    except ValueError as error:
        raise RestoreRefusedError(f"{job_name} cannot be reset: {error}") from None
    try:
        with checkpoint_lock(checkpoint):
            aside = _unused(checkpoint.with_name(f"{checkpoint.name}.replaced-{_stamp()}"))
            checkpoint.rename(aside)
            record = fingerprint_file(job, settings)
            if record.exists():
                record.rename(aside.with_name(f".{aside.name}.fingerprint.json"))
            audit("reset", job_name, moved_aside=aside)
            return aside
    except CheckpointBusyError as error:
        raise RestoreRefusedError(f"{job_name} is running: {error}") from None


def prune(
    job_name: str, settings: PlatformSettings | None = None, now: datetime | None = None
) -> list[str]:
    """Apply retention to ``job_name``'s backups: keep the newest ``checkpoints.keep_last``
    and every backup younger than ``checkpoints.keep_days``; remove the rest.

    :returns: the removed backup ids.
    """
    settings = settings or get_settings()
    policy = settings.checkpoints
    now = now or datetime.now(UTC)
    backups = list_backups(job_name, settings)  # newest first
    removed = []
    for index, info in enumerate(backups):
        if index < policy.keep_last or now - info.created_at < timedelta(days=policy.keep_days):
            continue
        shutil.rmtree(info.path)
        removed.append(info.backup_id)
    if removed:
        audit(
            "prune",
            job_name,
            removed=removed,
            keep_last=policy.keep_last,
            keep_days=policy.keep_days,
        )
    return removed
