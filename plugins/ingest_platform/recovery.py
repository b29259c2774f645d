"""Restores, crash recovery and retention of checkpoint backups.

Rules that every action here keeps:

* **A live checkpoint is never deleted.** A restore moves it aside
  (``<checkpoint>.replaced-<UTC time>``); a recovery moves damaged files to
  ``.<job>.damaged-<UTC time>/`` beside the checkpoint.
* **A batch the sinks may have committed is never re-planned.** Delta sinks (and the
  ``txnAppId``/``txnVersion`` writes of ``foreachBatch``) skip a batch id they already
  committed for the query id. If a restored checkpoint re-planned such a batch id over
  *different* offsets, the rows between the old and the new range would be skipped: lost. So a
  restore rolls forward: after copying the backup (batches up to K), it carries over from the
  moved-aside live checkpoint every later batch whose ``offsets`` and ``commits`` files are
  intact (K+1..M), with their state files. Spark resumes after M, exactly where the sinks are.
  For the same reason crash recovery moves only what is damaged: a truncated ``commits/N``
  with an intact ``offsets/N`` keeps ``offsets/N``, so batch N is re-run over the same offsets
  and the sinks skip or complete it idempotently.
* **Every action is written to the audit log** ``<INGEST_HOME>/checkpoint_backups/audit.jsonl``
  (one JSON object per line: time, user, action, job, details).
"""

from __future__ import annotations

import getpass
import json
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ingest_platform.checkpoints import BackupError, backups_root, list_backups, verify
from spark_jobs.catalog import KafkaSourceSpec, get_catalog
from spark_jobs.checkpoint_health import (
    batch_ids,
    config_changes,
    find_damage,
    fingerprint,
    fingerprint_config,
    fingerprint_file,
    log_file_problem,
    query_dirs,
)
from spark_jobs.delta_io import delta_version
from spark_jobs.locks import CheckpointBusyError, checkpoint_lock
from spark_jobs.settings import PlatformSettings, get_settings


class RestoreRefusedError(RuntimeError):
    """A restore or recovery was refused before anything was touched; the message names the
    problem and the way out."""


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did: the backup's batch per query, the batch each query resumes after
    (rolled forward from the live checkpoint), and where the live checkpoint was moved."""

    job: str
    backup_id: str
    restored_batch: dict[str, int]
    resumes_after: dict[str, int]
    moved_aside: Path | None


def audit_log() -> Path:
    """The audit log of every restore, recovery, reset and pruning."""
    return backups_root() / "audit.jsonl"


def audit(action: str, job: str, **details: Any) -> None:
    """Append one action to the audit log."""
    path = audit_log()
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {"at": datetime.now(UTC).isoformat(), "user": getpass.getuser(), "action": action,
             "job": job, **details}  # fmt: skip
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


def _carry_forward(live: Path, target: Path, after: int) -> int:
    """Copy intact batches > ``after`` from ``live`` into ``target`` (offsets, commits and the
    state files of their versions); :returns: the newest batch ``target`` now has."""
    newest = _intact_batches(live)
    if newest is None or newest <= after:
        return after
    for batch in range(after + 1, newest + 1):
        for kind in ("offsets", "commits"):
            (target / kind).mkdir(parents=True, exist_ok=True)
            shutil.copy2(live / kind / str(batch), target / kind / str(batch))
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
        if live is not None and (live / "metadata").exists():
            live_id = json.loads((live / "metadata").read_text())["id"]
            if live_id != query["query_id"]:
                raise RestoreRefusedError(
                    f"query id differs: backup {backup_id} has {query['query_id']} for "
                    f"{name or job_name}, the live checkpoint {live_id}. The sinks' duplicate "
                    "protection is keyed by the query id: restoring would write batches again."
                )
    _refuse_replanning(job_name, manifest, live_queries, settings)
    gaps = _kafka_gaps(job_name, folder, manifest, settings)
    if gaps and not accept_data_loss:
        lines = "; ".join(f"{g['topic']}[{g['partition']}] from {g['first_missing_offset']}: "
                          f"{g['reason']}" for g in gaps)  # fmt: skip
        raise RestoreRefusedError(
            f"Kafka no longer holds offsets backup {backup_id} resumes from: {lines}. Pass "
            "--accept-data-loss to restore anyway (the gaps are recorded in the audit log)."
        )
    try:
        with checkpoint_lock(checkpoint):
            return _do_restore(job_name, backup_id, folder, manifest, checkpoint, gaps)
    except CheckpointBusyError as error:
        hint = "stop it first (streaming_supervisor with action=stop, or wait for its run)"
        raise RestoreRefusedError(f"{job_name} is running: {error}; {hint}") from None


def _refuse_replanning(job_name: str, manifest: dict[str, Any], live_queries: dict[str, Path],
                       settings: PlatformSettings) -> None:  # fmt: skip
    """Refuse a restore that would re-plan batch ids a sink has already committed: the sink
    moved on since the backup and the live checkpoint has no intact later batch to carry
    over (it is gone or damaged right after the backup's batch)."""
    catalog = get_catalog()
    for name, query in manifest["queries"].items():
        live = live_queries.get(name)
        newest = _intact_batches(live) if live is not None else None
        if newest is not None and newest > int(query["last_committed_batch"]):
            continue
        sink = catalog.table(query["sink_table"]).path(settings)
        now, then = delta_version(sink), query.get("sink_delta_version")
        if now is not None and then is not None and now > then:
            raise RestoreRefusedError(
                f"{query['sink_table']} is at Delta version {now}, past the backup's {then}, "
                f"and the live checkpoint of {name or job_name} has no intact batch after "
                f"{query['last_committed_batch']} to carry over: Spark would re-plan batch ids "
                "the sink already committed and skip their rows. Restore a newer backup, or "
                f"`ingestctl checkpoints reset {job_name}` and rebuild the sink."
            )


def _kafka_gaps(job_name: str, folder: Path, manifest: dict[str, Any],
                settings: PlatformSettings) -> list[dict[str, Any]]:  # fmt: skip
    job = get_catalog().job(job_name)
    if not isinstance(job.source, KafkaSourceSpec):
        return []
    from spark_jobs.bronze_ingest import find_gaps

    topics = [settings.kafka.topic(t) for t in job.source.topics]
    gaps: list[dict[str, Any]] = []
    for name in manifest["queries"]:
        gaps += find_gaps(folder / name, settings.kafka.bootstrap_servers, topics,
                          settings.kafka)  # fmt: skip
    return gaps


def _do_restore(job_name: str, backup_id: str, folder: Path, manifest: dict[str, Any],
                checkpoint: Path, gaps: list[dict[str, Any]]) -> RestoreResult:  # fmt: skip
    aside = None
    if checkpoint.exists():
        aside = checkpoint.with_name(f"{checkpoint.name}.replaced-{_stamp()}")
        checkpoint.rename(aside)
    restored, resumes = {}, {}
    for name, query in manifest["queries"].items():
        target = checkpoint / name if name else checkpoint
        shutil.copytree(folder / name if name else folder, target, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("manifest.json"))  # fmt: skip
        batch = int(query["last_committed_batch"])
        restored[name] = batch
        live = (aside / name if name else aside) if aside else None
        resumes[name] = _carry_forward(live, target, batch) if live and live.is_dir() else batch
    (checkpoint / "manifest.json").unlink(missing_ok=True)
    audit("restore", job_name, backup_id=backup_id, restored_batch=restored,
          resumes_after=resumes, moved_aside=aside, accepted_gaps=gaps)  # fmt: skip
    return RestoreResult(job_name, backup_id, restored, resumes, aside)


def recover(job_name: str, settings: PlatformSettings | None = None) -> list[str]:
    """Repair a damaged checkpoint by the least destructive safe means (module docstring).

    * damaged ``offsets/N``: batch N never ran (offsets are written before a batch starts);
      ``offsets/N..`` and ``commits/N..`` are moved aside and Spark resumes after N-1;
    * damaged ``commits/N`` with an intact ``offsets/N``: only ``commits/N..`` (and later
      offsets) are moved aside; batch N is re-run over the same offsets;
    * a missing state file: copied from the newest verified backup that has it (state files
      are immutable once written); if no backup has it, refused.

    :returns: one line per action ([] when nothing was damaged).
    :raises RestoreRefusedError: the job is running, or a missing state file is in no backup.
    """
    settings = settings or get_settings()
    job = get_catalog().job(job_name)
    checkpoint = job.checkpoint(settings)
    damage = find_damage(checkpoint)
    if not damage:
        return []
    actions: list[str] = []
    try:
        with checkpoint_lock(checkpoint):
            quarantine = checkpoint.parent / f".{checkpoint.name}.damaged-{_stamp()}"
            for item in damage:
                if item.kind == "state":
                    actions.append(_restore_state_file(job_name, checkpoint, item.path, settings))
            for name, folder in query_dirs(checkpoint).items():
                mine = [d for d in damage if d.kind != "state" and folder in d.path.parents]
                if not mine:
                    continue
                first = min(d.batch for d in mine)
                offsets_bad = any(d.kind == "offsets" and d.batch == first for d in mine)
                for kind in ("offsets", "commits"):
                    start = first + (1 if kind == "offsets" and not offsets_bad else 0)
                    for batch in batch_ids(folder / kind):
                        if batch >= start:
                            moved = quarantine / name / kind / str(batch)
                            moved.parent.mkdir(parents=True, exist_ok=True)
                            (folder / kind / str(batch)).rename(moved)
                            actions.append(f"moved {folder / kind / str(batch)} to {moved}")
                            # Its checksum too: a stale .N.crc makes Spark's rewrite of N
                            # fail as if another query were writing the same checkpoint.
                            crc = folder / kind / f".{batch}.crc"
                            if crc.exists():
                                crc.rename(moved.with_name(crc.name))
            audit("recover", job_name, damage=[d.describe() for d in damage], actions=actions)
    except CheckpointBusyError as error:
        raise RestoreRefusedError(f"{job_name} is running: {error}") from None
    return actions


def _restore_state_file(job_name: str, checkpoint: Path, missing: Path,
                        settings: PlatformSettings) -> str:  # fmt: skip
    relative = missing.relative_to(checkpoint)
    for info in list_backups(job_name, settings):
        candidate = info.path / relative
        if candidate.exists():
            verify(info.path)
            shutil.copy2(candidate, missing)
            return f"copied {relative} from backup {info.backup_id}"
    raise RestoreRefusedError(
        f"{missing} is missing and no backup of {job_name} has it: the state of that batch "
        "cannot be rebuilt without replaying. Restore an older backup explicitly "
        f"(`ingestctl checkpoints restore {job_name} <id>`), or reset the checkpoint."
    )


def reset(job_name: str, settings: PlatformSettings | None = None) -> Path:
    """Move ``job_name``'s checkpoint (and its recorded fingerprint) aside so that the job
    starts a new one from its starting offsets. Nothing is deleted.

    :returns: where the old checkpoint now is.
    :raises RestoreRefusedError: the job is running, or it has no checkpoint.
    """
    settings = settings or get_settings()
    job = get_catalog().job(job_name)
    checkpoint = job.checkpoint(settings)
    if not checkpoint.exists():
        raise RestoreRefusedError(f"{job_name} has no checkpoint at {checkpoint}")
    try:
        with checkpoint_lock(checkpoint):
            aside = checkpoint.with_name(f"{checkpoint.name}.replaced-{_stamp()}")
            checkpoint.rename(aside)
            record = fingerprint_file(job, settings)
            if record.exists():
                record.rename(aside.with_name(f".{aside.name}.fingerprint.json"))
            audit("reset", job_name, moved_aside=aside)
            return aside
    except CheckpointBusyError as error:
        raise RestoreRefusedError(f"{job_name} is running: {error}") from None


def prune(job_name: str, settings: PlatformSettings | None = None,
          now: datetime | None = None) -> list[str]:  # fmt: skip
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
        audit("prune", job_name, removed=removed, keep_last=policy.keep_last,
              keep_days=policy.keep_days)  # fmt: skip
    return removed
