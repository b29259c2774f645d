"""Checkpoint backups: consistent, verified snapshots of a job's streaming checkpoints.

A checkpoint is a streaming job's recovery contract (``metadata`` with the query id,
``offsets/N``, ``commits/N``, ``sources/``, ``state/``). A backup copies it so that the copy
is a state Spark itself could have left after a clean stop:

* the newest batch in the copy has both its ``offsets`` and its ``commits`` entry: trailing
  entries of a batch still running (offsets written, commit not yet) are left out;
* state files belong to committed batches only (a state store's version is its batch id + 1);
* ``metadata`` must be there: without it a restored query gets a new id and the Delta sink's
  duplicate protection silently disappears;
* a query that has not committed a batch yet (one of a job's queries idle since its start:
  soak run 9 met ``payment_alerts``' landing query so) is kept as Spark would leave it stopped
  before its first commit: ``metadata`` and ``sources/`` (where a Kafka source recorded the
  starting offsets it resolved, ``latest`` included), no ``offsets``; its manifest entry says
  ``last_committed_batch: null``. A job none of whose queries has committed is refused.

Each backup has a ``manifest.json``: job, time, per query the last committed batch, its Kafka
offsets and watermark, the sink table's Delta version, the job's configuration fingerprint,
and the SHA-256 of every file; the backup is verified against it right after it is written.

Layout: ``<INGEST_HOME>/checkpoint_backups/<job>/<backup id>/{manifest.json,<query dirs>}``.
Restores, crash recovery and retention are in :mod:`ingest_core.recovery`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingest_core.catalog import get_catalog
from ingest_core.checkpoint_health import (
    STATE_FILE,
    UNFINISHED_WRITE,
    fingerprint,
    fingerprint_config,
    query_dirs,
    query_sink,
)
from ingest_core.delta_tables import committed_offsets, delta_version, last_committed_batch
from ingest_core.settings import PlatformSettings, get_settings, ingest_home

MANIFEST = "manifest.json"


class BackupError(RuntimeError):
    """A checkpoint cannot be backed up, or a backup does not verify; the message says why."""


@dataclass(frozen=True)
class BackupInfo:
    """One backup, as listed: id, folder, creation time and its manifest."""

    backup_id: str
    path: Path
    created_at: datetime
    manifest: dict[str, Any]

    def describe(self) -> str:
        """One line: id, age, and per query its batch, Delta version and offsets."""
        age = datetime.now(UTC) - self.created_at
        parts = []
        for name, query in sorted(self.manifest["queries"].items()):
            batch = query["last_committed_batch"]
            parts.append(
                f"{name or '.'}: batch {'none yet' if batch is None else batch}, "
                f"delta v{query.get('sink_delta_version')}, offsets {query.get('offsets')}"
            )
        return f"{self.backup_id}  age {str(age).split('.')[0]}  " + "; ".join(parts)


def backups_root(settings: PlatformSettings | None = None) -> Path:
    """Folder holding every job's backups."""
    del settings  # backups follow INGEST_HOME, like tables and checkpoints
    return ingest_home() / "checkpoint_backups"


def _keep(relative: Path, committed: int) -> bool:
    """Whether a checkpoint file belongs to a committed batch (see the module docstring;
    ``committed`` is -1 for a query with none yet); never a half-written temporary file (a
    crash's, or a running task's)."""
    if UNFINISHED_WRITE.match(relative.name):
        return False
    top = relative.parts[0]
    if top in ("offsets", "commits") and len(relative.parts) == 2:
        name = relative.name.lstrip(".").removesuffix(".crc")
        return not name.isdigit() or int(name) <= committed
    if top == "state":
        match = STATE_FILE.match(relative.name.lstrip(".").removesuffix(".crc"))
        return match is None or int(match.group(1)) <= committed + 1
    return True


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def backup(job_name: str, settings: PlatformSettings | None = None) -> BackupInfo:
    """Take a consistent, verified backup of ``job_name``'s checkpoint(s).

    Safe while the job runs: only committed batches are copied.

    :raises KeyError: unknown job.
    :raises BackupError: no checkpoint, a query without ``metadata``, no query with a
        committed batch, or a copied file whose checksum does not match.
    """
    settings = settings or get_settings()
    catalog = get_catalog()
    job = catalog.job(job_name)
    queries = query_dirs(job.checkpoint(settings))
    if not queries:
        raise BackupError(f"{job_name} has no checkpoint at {job.checkpoint(settings)} yet")
    created = datetime.now(UTC)
    backup_id = created.strftime("%Y%m%dT%H%M%S%fZ")
    target = backups_root(settings) / job_name / backup_id
    staging = target.with_name(f".{backup_id}.partial")
    manifest: dict[str, Any] = {
        "job": job_name,
        "backup_id": backup_id,
        "created_at": created.isoformat(),
        "fingerprint": fingerprint(job),
        "config": fingerprint_config(job),
        "queries": {},
        "files": {},
    }
    try:
        for name, source in queries.items():
            if not (source / "metadata").exists():
                raise BackupError(f"{source} has no metadata file: refusing to back it up")
            committed = last_committed_batch(source)
            offsets = committed_offsets(source) or {}
            sink_name = query_sink(job, name)
            sink = catalog.table(sink_name).path(settings) if sink_name else None
            manifest["queries"][name] = {
                "query_id": json.loads((source / "metadata").read_text())["id"],
                "last_committed_batch": committed,
                "offsets": (offsets.get("sources") or [None])[0],
                "watermark_ms": offsets.get("metadata", {}).get("batchWatermarkMs"),
                "sink_table": sink.name if sink else None,
                "sink_delta_version": delta_version(sink) if sink else None,
            }
            for file in sorted(p for p in source.rglob("*") if p.is_file()):
                relative = file.relative_to(source)
                if not _keep(relative, -1 if committed is None else committed):
                    continue
                destination = staging / name / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, destination)
                manifest["files"][str(Path(name) / relative)] = _sha256(destination)
        if all(q["last_committed_batch"] is None for q in manifest["queries"].values()):
            raise BackupError(
                f"{job_name}'s checkpoint has no committed batch yet: nothing to back up "
                "(a query starting from scratch needs no backup)"
            )
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        verify(staging)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BackupInfo(backup_id, target, created, manifest)


def verify(folder: Path) -> dict[str, Any]:
    """Check every file of a backup against its manifest.

    :returns: the manifest.
    :raises BackupError: no manifest, a missing file, a checksum mismatch, or a query
        without ``metadata``.
    """
    manifest_path = Path(folder) / MANIFEST
    if not manifest_path.exists():
        raise BackupError(f"{folder} has no {MANIFEST}")
    manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    for relative, expected in manifest["files"].items():
        path = Path(folder) / relative
        if not path.exists():
            raise BackupError(f"backup {folder.name}: {relative} is missing")
        if _sha256(path) != expected:
            raise BackupError(f"backup {folder.name}: {relative} does not match its checksum")
    for name in manifest["queries"]:
        if str(Path(name) / "metadata") not in manifest["files"]:
            raise BackupError(f"backup {folder.name}: query {name or '.'} has no metadata file")
    return manifest


def list_backups(job_name: str, settings: PlatformSettings | None = None) -> list[BackupInfo]:
    """A job's backups, newest first (partial, unfinished copies are not listed)."""
    get_catalog().job(job_name)  # unknown job: KeyError naming the known ones
    folder = backups_root(settings) / job_name
    found = []
    for path in sorted(folder.iterdir(), reverse=True) if folder.is_dir() else []:
        manifest_path = path / MANIFEST
        if path.name.startswith(".") or not manifest_path.exists():
            continue
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError) as error:
            # A backup whose manifest cannot be read cannot be verified: never used, and it
            # must not stop a recovery that other backups or the sink can serve.
            logging.getLogger(__name__).warning(
                "backup %s skipped: manifest unreadable (%s)", path, error
            )
            continue
        found.append(
            BackupInfo(path.name, path, datetime.fromisoformat(manifest["created_at"]), manifest)
        )
    return found
