"""Checkpoint health, checked before a job starts: damaged files and configuration changes.

A crash while Spark writes its checkpoint typically leaves an empty or truncated newest
``offsets/N`` or ``commits/N`` file, or a state store missing a delta file. Spark then fails
with an obscure error (or, worse, guesses). :func:`find_damage` names exactly which file is
damaged; ``ingestctl checkpoints recover`` (:mod:`ingest_core.recovery`) repairs it by
the least destructive safe means.

A job's *configuration fingerprint* (source, sink, job settings such as watermarks and
windows) is recorded beside its checkpoint the first time it starts; starting it with a
different configuration fails with what changed and the operator's options
(:class:`ConfigurationChangedError`).

Imports no pyspark: the Airflow side uses it too.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest_core.catalog import JobSpec, get_catalog
from ingest_core.contracts import Contracts, get_contracts
from ingest_core.schema_evolution import contract_changes, contract_shapes, incompatible_advice
from ingest_core.settings import PlatformSettings, get_settings

#: A state store file: ``<version>.delta`` or ``<version>.snapshot``.
STATE_FILE = re.compile(r"^(\d+)\.(delta|snapshot)$")

#: What Spark's atomic checkpoint write (``CheckpointFileManager.createAtomic``) leaves when
#: the process dies before its rename: ``.<name>.<uuid>.tmp``, and Hadoop's checksum of it
#: ``..<name>.<uuid>.tmp.crc``. Group ``name``: the file it was writing (``0``, ``metadata``).
UNFINISHED_WRITE = re.compile(
    r"^\.\.?(?P<name>.+)\.[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\.tmp(?:\.crc)?$"
)


@dataclass(frozen=True)
class Damage:
    """One damaged checkpoint file: ``kind`` is ``offsets``, ``commits``, ``state`` (a
    missing state file), ``stale_state`` (a state folder of a query with no offsets),
    ``metadata`` or ``unfinished`` (a crash's half-written temporary file); ``batch`` the
    batch id it belongs to (for state: the batch whose state is missing; -1 for metadata,
    stale state and unfinished writes)."""

    path: Path
    kind: str
    batch: int
    problem: str

    def describe(self) -> str:
        """``<path>: <problem>``."""
        return f"{self.path}: {self.problem}"


class DamagedCheckpointError(RuntimeError):
    """A checkpoint has damaged files; the message names each one and the remedy."""

    def __init__(self, job: str, damage: list[Damage]) -> None:
        self.damage = damage
        lines = "; ".join(d.describe() for d in damage)
        super().__init__(
            f"{job}'s checkpoint is damaged: {lines}. Nothing was started. Repair it with "
            f"`ingestctl checkpoints recover {job}` (never re-plans a batch a sink committed: "
            "its original offsets come from a backup or the sink, or it refuses with the "
            "numbers; never deletes: damaged files are moved aside)"
        )


class ConfigurationChangedError(RuntimeError):
    """The job's configuration no longer matches its checkpoint; the message says what
    changed and the operator's options."""


def query_dirs(checkpoint: Path) -> dict[str, Path]:
    """A job's checkpoint folders: ``{"": job folder}``, or one entry per query sub-folder."""
    if any((checkpoint / part).exists() for part in ("metadata", "offsets", "commits", "sources")):
        return {"": checkpoint}
    if not checkpoint.is_dir():
        return {}
    return {p.name: p for p in sorted(checkpoint.iterdir()) if p.is_dir()}


def query_sink(job: JobSpec, query_name: str) -> str | None:
    """The table a query of ``job`` writes: gold_aggregate's queries are named after their
    tables; every other query (the job's own, payment_alerts' queries) writes the job's
    sink; None for a job whose sink is a Kafka topic (``payment_alerts_rt``)."""
    return query_name if query_name in get_catalog().tables else job.sink_table


def batch_ids(folder: Path) -> list[int]:
    """Batch ids that have a file in ``folder`` (``offsets/`` or ``commits/``), ascending."""
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def log_file_problem(path: Path, kind: str) -> str | None:
    """What is wrong with one ``offsets`` or ``commits`` log file, or None if it parses.

    Spark writes them as ``v1`` then JSON lines: offsets have a metadata line and one line
    per source (``-`` for a source without offsets yet); commits have one metadata line.
    """
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        return f"unreadable ({error})"
    if not text:
        return "empty (0 bytes): a crash while it was written"
    lines = text.splitlines()
    if not lines[0].startswith("v"):
        return f"does not start with a version line: {lines[0][:40]!r}"
    body = lines[1:]
    if len(body) < (2 if kind == "offsets" else 1):
        return f"truncated: {len(text)} bytes, {len(lines)} lines"
    for line in body:
        if line.strip() == "-" and kind == "offsets":
            continue
        try:
            json.loads(line)
        except ValueError:
            return f"truncated or corrupt JSON line: {line[:60]!r}"
    return None


def _store_dirs(state: Path) -> list[Path]:
    return sorted(
        {p.parent for p in state.rglob("*.delta")} | {p.parent for p in state.rglob("*.snapshot")}
    )


def _state_problem(store: Path, version: int) -> tuple[Path, str] | None:
    """Whether the HDFS-backed state store in ``store`` can load ``version``: it needs the
    newest snapshot at or below it and every delta file after that snapshot."""
    versions: dict[int, set[str]] = {}
    for file in store.iterdir():
        match = STATE_FILE.match(file.name)
        if match:
            versions.setdefault(int(match.group(1)), set()).add(match.group(2))
    snapshots = [v for v, kinds in versions.items() if "snapshot" in kinds and v <= version]
    start = max(snapshots) + 1 if snapshots else 1
    for needed in range(start, version + 1):
        if "delta" not in versions.get(needed, set()):
            return (
                store / f"{needed}.delta",
                f"state file missing (needed to load version {version})",
            )
    return None


def _metadata_problem(folder: Path) -> str | None:
    """What is wrong with a query's ``metadata`` file (its query id), or None if it parses.

    Only asked of a query that has offsets or commits: a brand-new checkpoint has none yet.
    """
    path = folder / "metadata"
    if not path.exists():
        return "missing: the query id is lost (Spark would refuse to start)"
    try:
        query_id = json.loads(path.read_text()).get("id")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as error:
        return f"unreadable or truncated ({str(error)[:60]})"
    return None if isinstance(query_id, str) and query_id else "has no query id"


def unfinished_writes(checkpoint: Path) -> list[Path]:
    """Files anywhere in ``checkpoint`` that a crash left half-written (:data:`UNFINISHED_WRITE`).

    Spark never reads them, but they are not harmless: while a query's offsets log has no
    batch yet, Spark 4.1+ refuses to start it on an ``offsets``, ``commits`` or ``state``
    folder that holds any file (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``; SQL conf
    ``spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart``, default true), so a
    driver killed while it wrote ``offsets/0`` could never start again. A checksum whose
    temporary file is listed is left out: it moves with its file.

    :returns: their paths, sorted.
    """
    if not checkpoint.is_dir():
        return []
    found = {p for p in checkpoint.rglob(".*.tmp*") if UNFINISHED_WRITE.match(p.name)}
    return sorted(
        p
        for p in found
        if p.is_file() and not (p.name.endswith(".crc") and p.with_name(p.name[1:-4]) in found)
    )


def find_damage(checkpoint: Path) -> list[Damage]:
    """Every damaged file of a job's checkpoint (all its queries), oldest batch first.

    Checked, per query folder:

    * ``metadata`` exists and holds the query id, and no two query folders share one (kind
      ``metadata``, batch -1);
    * every ``offsets`` and ``commits`` file parses, and no ``.N.crc`` checksum is left
      without its file (Hadoop's rename of a rewritten ``N`` fails on it, and Spark reports
      that as "multiple streaming queries are concurrently using" the checkpoint);
    * every batch with a ``commits/N`` file has its ``offsets/N`` (Spark reads the committed
      batch's offsets on restart), and the offsets log has no hole between its oldest and
      newest file (Spark needs ``offsets/N-1`` to re-run batch N); older files that Spark's
      own retention purged leave no hole because they are below the oldest;
    * the state stores can load the version the next batch needs (last committed batch + 1),
      and a query with no offsets and no commits has an empty state folder (kind
      ``stale_state``, batch -1: Spark refuses to start a new query on state);
    * no file is left half-written by a crash (:func:`unfinished_writes`; kind
      ``unfinished``, batch -1). A starting driver moves these aside itself
      (:func:`ingest_core.recovery.set_aside_unfinished_writes`).
    """
    found: list[Damage] = [
        Damage(
            path,
            "unfinished",
            -1,
            "half-written by a crash before its rename: Spark never reads it, but refuses to "
            "start a query with no offsets yet while its offsets, commits or state folder "
            "holds any file",
        )
        for path in unfinished_writes(checkpoint)
    ]
    owners: dict[str, str] = {}  # query id -> the first query folder that has it
    for name, folder in query_dirs(checkpoint).items():
        offsets_ids = batch_ids(folder / "offsets")
        commit_ids = batch_ids(folder / "commits")
        if offsets_ids or commit_ids:
            problem = _metadata_problem(folder)
            if problem is None:
                query_id = json.loads((folder / "metadata").read_text())["id"]
                if query_id in owners:
                    problem = (
                        f"the same query id as query folder {owners[query_id]!r}: "
                        "copied from another query (its sink's batches would be "
                        "skipped)"
                    )
                owners.setdefault(query_id, name or ".")
            if problem:
                found.append(Damage(folder / "metadata", "metadata", -1, problem))
        for kind in ("offsets", "commits"):
            for batch in batch_ids(folder / kind):
                path = folder / kind / str(batch)
                problem = log_file_problem(path, kind)
                if problem:
                    found.append(Damage(path, kind, batch, problem))
        for kind in ("offsets", "commits"):
            for crc in sorted((folder / kind).glob(".*.crc")):
                batch_name = crc.name[1:].removesuffix(".crc")
                if batch_name.isdigit() and not (folder / kind / batch_name).exists():
                    found.append(
                        Damage(
                            crc,
                            kind,
                            int(batch_name),
                            f"checksum of a missing {kind}/{batch_name}: Spark "
                            "cannot write that batch again",
                        )
                    )
        present = set(offsets_ids)
        for batch in sorted(set(commit_ids) - present):
            found.append(
                Damage(
                    folder / "offsets" / str(batch),
                    "offsets",
                    batch,
                    f"missing, but commits/{batch} exists",
                )
            )
        if offsets_ids:
            newest = max(offsets_ids + commit_ids)
            for batch in range(min(offsets_ids), newest):
                if batch not in present and batch not in commit_ids:
                    found.append(
                        Damage(
                            folder / "offsets" / str(batch),
                            "offsets",
                            batch,
                            f"missing: a hole in the offsets log below batch {newest}",
                        )
                    )
        state = folder / "state"
        if not offsets_ids and not commit_ids and state.is_dir() and any(state.iterdir()):
            found.append(
                Damage(
                    state,
                    "stale_state",
                    -1,
                    "holds state but the query has no offsets yet: Spark starts it as a new "
                    "query and refuses a state folder that is not empty",
                )
            )
        commits = folder / "commits"
        good_commits = [
            b for b in commit_ids if log_file_problem(commits / str(b), "commits") is None
        ]
        if good_commits and state.is_dir():
            last = max(good_commits)
            for store in _store_dirs(state):
                missing = _state_problem(store, last + 1)
                if missing:
                    found.append(Damage(missing[0], "state", last, missing[1]))
    return sorted(found, key=lambda d: (d.batch, str(d.path)))


def fingerprint_config(job: JobSpec) -> dict[str, Any]:
    """What makes a checkpoint's content valid: source, sink, job settings (watermarks,
    gaps) and the declared windows the job streams (``queries``: Gold table -> its window;
    a query's state only fits the window, grouping and measures it was made with)."""
    sink = job.sink if isinstance(job.sink, str) else job.sink.model_dump()
    config: dict[str, Any] = {
        "source": job.source.model_dump(),
        "sink": sink,
        "settings": job.settings,
    }
    catalog = get_catalog()
    queries = {
        table: window.model_dump(mode="json", by_alias=True, exclude_none=True)
        for table, window in catalog.windowed_tables().items()
        if table in job.outputs
    }
    if queries:
        config["queries"] = queries
    # The contracts the job refines into Silver (silver_refine): a compatible change (a new
    # optional field...) is accepted at the next start, an incompatible one refused.
    shapes = contract_shapes(get_contracts(), job.outputs)
    if shapes:
        config["contracts"] = shapes
    return config


#: Fingerprint sections where an added key is compatible with an existing checkpoint: a new
#: setting, or a new declared window (its query starts a checkpoint of its own).
ADDITIVE_SECTIONS = ("settings", "queries")


def added_only(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The keys ``new`` adds to :data:`ADDITIVE_SECTIONS` of ``old`` (e.g.
    ``queries.gold_reviews_daily``) and its compatible contract changes
    (:func:`ingest_core.schema_evolution.contract_changes`, e.g. ``contracts: payments: new
    optional field voucher``) when those are the only differences between the two
    fingerprint configurations; ``[]`` when anything else differs (or nothing does)."""
    added, kept = [], dict(new)
    for section in ADDITIVE_SECTIONS:
        before, after = old.get(section) or {}, new.get(section) or {}
        added += [f"{section}.{k}" for k in after if k not in before]
        kept[section] = {k: v for k, v in after.items() if k in before}
    compatible, incompatible = contract_changes(
        old.get("contracts") or {}, new.get("contracts") or {}
    )
    if incompatible:
        return []
    added += [f"contracts: {change}" for change in compatible]
    kept["contracts"] = old.get("contracts")
    base = old | {section: old.get(section) or {} for section in ADDITIVE_SECTIONS}
    return [] if config_changes(base, kept) else added


def fingerprint(job: JobSpec) -> str:
    """SHA-256 of :func:`fingerprint_config`."""
    relevant = fingerprint_config(job)
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()


def fingerprint_file(job: JobSpec, settings: PlatformSettings | None = None) -> Path:
    """Where a job's checkpoint fingerprint is recorded: ``.<job>.fingerprint.json`` beside
    the checkpoint folder (the folder's content is Spark's)."""
    checkpoint = job.checkpoint(settings or get_settings())
    return checkpoint.parent / f".{checkpoint.name}.fingerprint.json"


def config_changes(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Human-readable differences between two fingerprint configurations."""
    changes = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changes += config_changes(a, b, f"{prefix}{key}.")
        elif a != b:
            changes.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return changes


def check_before_start(job_name: str, settings: PlatformSettings | None = None) -> None:
    """Refuse to start a job on a damaged checkpoint or a changed configuration; record the
    fingerprint on a job's first start.

    :raises DamagedCheckpointError: see :func:`find_damage`.
    :raises ConfigurationChangedError: the recorded fingerprint differs; the message lists
        what changed and the options.
    """
    settings = settings or get_settings()
    job = get_catalog().job(job_name)
    checkpoint = job.checkpoint(settings)
    damage = find_damage(checkpoint)
    if damage:
        raise DamagedCheckpointError(job_name, damage)
    record = fingerprint_file(job, settings)
    current = fingerprint_config(job)
    if record.exists():
        recorded = json.loads(record.read_text())
        changes = config_changes(recorded.get("config", {}), current)
        incompatible = _incompatible_contracts(recorded.get("config", {}), current)
        if changes and added_only(recorded.get("config", {}), current):
            # Only additions (a new setting, a newly declared Gold window): the existing
            # queries' state still fits; record the new configuration.
            _record_fingerprint(record, job, current)
        elif incompatible:
            raise ConfigurationChangedError(
                "an event contract changed incompatibly since the checkpoint was made: "
                f"{'; '.join(incompatible)}. {incompatible_advice()}"
            )
        elif changes:
            raise ConfigurationChangedError(
                f"{job_name}'s configuration changed since its checkpoint was made: "
                f"{'; '.join(changes)}. Options: (1) keep the checkpoint: revert the change "
                f"in include/pipeline.yaml; (2) start a new checkpoint: `ingestctl checkpoints "
                f"reset {job_name}` moves the old one aside (kept, never deleted), and the job "
                f"then starts from its starting offsets; (3) restore a backup taken with the "
                f"old configuration: `ingestctl checkpoints restore {job_name} <backup id>`"
            )
    elif query_dirs(checkpoint) or not checkpoint.exists():
        _record_fingerprint(record, job, current)


def contract_drift(
    contracts: Contracts, settings: PlatformSettings | None = None
) -> list[tuple[str, list[str], list[str]]]:
    """How ``contracts`` differ from what each job's checkpoint was made with (its recorded
    fingerprint's ``contracts``), for ``ingestctl catalog check``.

    :returns: ``(job, compatible, incompatible)`` for every job with a recorded fingerprint
        whose contracts differ; empty on a platform that has not run yet.
    """
    settings = settings or get_settings()
    drift = []
    for job in get_catalog().jobs.values():
        record = fingerprint_file(job, settings)
        if not record.exists():
            continue
        recorded = json.loads(record.read_text()).get("config", {}).get("contracts")
        shapes = contract_shapes(contracts, job.outputs)
        if recorded is None or not shapes:
            continue
        compatible, incompatible = contract_changes(recorded, shapes)
        if compatible or incompatible:
            drift.append((job.name, compatible, incompatible))
    return drift


def _incompatible_contracts(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return contract_changes(old.get("contracts") or {}, new.get("contracts") or {})[1]


def _record_fingerprint(record: Path, job: JobSpec, config: dict[str, Any]) -> None:
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(
        json.dumps({"fingerprint": fingerprint(job), "config": config}, indent=2, sort_keys=True)
        + "\n"
    )
