"""A layer's full refresh, without Spark: which layers it rebuilds, the folders of one refresh
(:class:`RefreshLayout`), the checks before it starts (:func:`prepare`) and the renames of
its swap (:func:`moves`). The ``layer_full_refresh`` DAG and its operators read these; the
swap itself is :func:`spark_jobs.layer_refresh.swap` (see that module for the whole story).

Layout of refresh ``<id>``: the rebuild writes to ``<data>/_refresh/<id>/staging/<layer>/
<table>`` with checkpoints in ``.../staging/checkpoints`` and its gate bookkeeping in
``.../staging/ops`` (starting from a copy of the live ``ops_gate_holds``); ``swap`` moves the
live tables and checkpoints to ``.../previous/``.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest_core.catalog import get_catalog
from ingest_core.checkpoint_health import fingerprint_file
from ingest_core.delta_tables import delta_version, last_data_version
from ingest_core.locks import CheckpointBusyError, checkpoint_lock, fence, unfence
from ingest_core.quality.rules import layer_rules
from ingest_core.quality.state import gate_results, validated_through
from ingest_core.runtime_files import write_json
from ingest_core.settings import PlatformSettings, get_settings

#: Layer -> the layers a refresh of it rebuilds, in build order.
REBUILDS: dict[str, tuple[str, ...]] = {"silver": ("silver", "gold"), "gold": ("gold",)}
#: Layer -> the job that writes it (and whose checkpoint it owns).
LAYER_JOBS: dict[str, str] = {"silver": "silver_refine", "gold": "gold_aggregate"}
#: What a refresh id (the DAG run id) may be: it names folders.
REFRESH_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+:-]{0,99}$")


PREPARED_MARKER = "prepared"
"""Written last by :func:`prepare` in the refresh's root: the staging folders are complete."""
SWAP_JOURNAL = "swap.json"
"""The swap's journal in the refresh's root (``spark_jobs.layer_refresh.swap``)."""


class RefreshError(RuntimeError):
    """A refresh step cannot go on; nothing live was changed (the message says why)."""


class LayerBusyError(RefreshError):
    """A job of the layer a refresh rebuilds holds its checkpoint lock right now: try again
    once it finished (``layer_full_refresh``'s ``prepare`` does, for :data:`BUSY_WAIT_S`).

    :param busy: the jobs that hold their lock (:func:`busy_jobs`).
    """

    def __init__(self, message: str, busy: list[str] | None = None) -> None:
        super().__init__(message)
        self.busy = list(busy or [])


#: How long ``layer_full_refresh`` waits for the layer's running jobs before it refuses, in
#: seconds. Soak run 10: a refresh triggered while the 15-minute medallion run's
#: ``gold_aggregate`` (or a backfill's Gold) ran failed at once and needed a human to trigger
#: it again; an hour covers a backfill of several intervals.
BUSY_WAIT_S = 3600.0


def layers_of(layer: str) -> tuple[str, ...]:
    """The layers a full refresh of ``layer`` rebuilds.

    :raises ValueError: not ``silver`` or ``gold``.
    """
    try:
        return REBUILDS[layer]
    except KeyError:
        raise ValueError(
            f"layer {layer!r} cannot be refreshed; choose one of {sorted(REBUILDS)}"
        ) from None


@dataclass(frozen=True)
class RefreshLayout:
    """Folders of one refresh (see the module doc)."""

    refresh_id: str
    settings: PlatformSettings

    def __post_init__(self) -> None:
        if not REFRESH_ID.match(self.refresh_id):
            raise ValueError(f"refresh id {self.refresh_id!r} must match {REFRESH_ID.pattern}")

    @property
    def root(self) -> Path:
        """``<data>/_refresh/<id>`` (``:`` and ``+`` of Airflow run ids replaced)."""
        safe = re.sub(r"[:+]", "-", self.refresh_id)
        return self.settings.storage.data_path / "_refresh" / safe

    @property
    def staging(self) -> Path:
        """Root of the rebuilt layers and the staging gate bookkeeping."""
        return self.root / "staging"

    @property
    def previous(self) -> Path:
        """Where ``swap`` moves the live tables and checkpoints."""
        return self.root / "previous"

    def environment(self, layer: str) -> dict[str, str]:
        """Environment variables that point the platform's jobs at the staging folders for
        a refresh of ``layer`` (the rebuilt layers and ``ops``; the rest stays live)."""
        dirs = {name: str(self.staging) for name in (*layers_of(layer), "ops")}
        return {
            "INGEST_STORAGE__LAYER_DIRS": json.dumps(dirs),
            "INGEST_STORAGE__CHECKPOINT_DIR": str(self.staging / "checkpoints"),
        }

    def staged_settings(self, layer: str) -> PlatformSettings:
        """The settings a staging job sees (:meth:`environment` applied)."""
        storage = self.settings.storage.model_copy(
            update={
                "layer_dirs": {name: self.staging for name in (*layers_of(layer), "ops")},
                "checkpoint_dir": self.staging / "checkpoints",
            }
        )
        return self.settings.model_copy(update={"storage": storage})


def busy_jobs(layer: str, settings: PlatformSettings | None = None) -> list[str]:
    """The jobs of the layers a refresh of ``layer`` rebuilds that hold their checkpoint lock
    right now (a running driver, a backfill or late corrections for Gold)."""
    busy = []
    for name in layers_of(layer):
        job = LAYER_JOBS[name]
        try:
            with checkpoint_lock(get_catalog().job(job).checkpoint(settings or get_settings())):
                pass
        except CheckpointBusyError:
            busy.append(job)
    return busy


def prepare(layer: str, refresh_id: str, settings: PlatformSettings | None = None) -> Path:
    """Check nothing of the layer runs and create the staging folders (with a copy of the live
    ``ops_gate_holds``).

    Idempotent for one refresh id (the DAG run's id), so that the ``prepare`` task can be
    retried (soak run 15: a task of this DAG killed with the API server failed the run for
    good): a preparation that completed (its ``prepared`` marker written last) is returned
    as it is; one interrupted part-way (no marker: a partial copy) is removed and made again.

    :returns: the staging folder.
    :raises LayerBusyError: a job of the layer is running.
    :raises RefreshError: the refresh's swap has begun (``swap.json``): use a new refresh.
    """
    settings = settings or get_settings()
    layout = RefreshLayout(refresh_id, settings)
    busy = busy_jobs(layer, settings)
    if busy:
        raise LayerBusyError(
            f"refusing to refresh {layer}: {', '.join(busy)} is running; wait "
            "for it to finish (or stop it) and trigger again",
            busy,
        )
    marker = layout.root / PREPARED_MARKER
    if (layout.root / SWAP_JOURNAL).exists():
        raise RefreshError(
            f"refresh {refresh_id} has begun its swap ({layout.root / SWAP_JOURNAL}): "
            "trigger a new refresh"
        )
    if marker.exists():
        return layout.staging  # a retried prepare: the same refresh carries on
    if layout.root.exists():
        shutil.rmtree(layout.root)  # an interrupted preparation: start it again
    catalog = get_catalog()
    holds = catalog.table("ops_gate_holds")
    live_holds = holds.path(settings)
    layout.staging.mkdir(parents=True)
    if live_holds.exists():
        shutil.copytree(live_holds, holds.path(layout.staged_settings(layer)))
    marker.write_text(layer)
    return layout.staging


def rebuilt_tables(layer: str) -> list[str]:
    """The tables a refresh of ``layer`` rebuilds and swaps: every table of the rebuilt
    layers except the sinks of always-on jobs (``gold_payment_alerts`` belongs to
    ``payment_alerts``, which a refresh neither stops nor rebuilds)."""
    catalog = get_catalog()
    always_on = {t for job in catalog.jobs.values() if job.mode == "always_on" for t in job.outputs}
    return [
        name
        for name, table in catalog.tables.items()
        if table.layer in layers_of(layer) and name not in always_on
    ]


def unvalidated(layer: str, layout: RefreshLayout) -> list[str]:
    """The staged tables whose newest data commit no passed gate covers (the gate judges data
    commits, :func:`ingest_core.quality.state.pending`; an empty batch after it is nothing to
    validate)."""
    staged = layout.staged_settings(layer)
    results = gate_results(staged)
    problems = []
    for name in layers_of(layer):
        for rules in layer_rules(name):
            version = last_data_version(get_catalog().table(rules.table).path(staged))
            if version is not None and validated_through(results, rules.table) < version:
                problems.append(f"{rules.table} (version {version})")
    return problems


def _layer_checkpoints(layer: str, settings: PlatformSettings) -> list[Path]:
    """The live checkpoints of the jobs of every layer a refresh of ``layer`` rebuilds."""
    catalog = get_catalog()
    return [catalog.job(LAYER_JOBS[name]).checkpoint(settings) for name in layers_of(layer)]


@contextmanager
def locked(layer: str, settings: PlatformSettings, refresh_id: str | None = None) -> Iterator[None]:
    """Hold the checkpoint locks of the jobs of every layer a refresh of ``layer`` rebuilds
    (through the fence of refresh ``refresh_id``'s own swap, :func:`fenced`).

    :raises RefreshError: one of them runs (holds its lock), or another refresh's
        unfinished swap fences it.
    """
    owner = None if refresh_id is None else f"refresh {refresh_id}"
    with ExitStack() as stack:
        for checkpoint in _layer_checkpoints(layer, settings):
            try:
                stack.enter_context(checkpoint_lock(checkpoint, fence_owner=owner))
            except CheckpointBusyError as error:
                raise RefreshError(f"refusing to swap: {error}") from None
        yield


def fenced(layer: str, layout: RefreshLayout, on: bool) -> None:
    """Fence (``on``) or unfence the live checkpoints of the layer's jobs for a swap
    (:func:`ingest_core.locks.fence`): from before the first rename until the gate marks are
    recorded, the live jobs, gates' writers, restores and maintenance refuse to take them,
    so a swap killed part-way is finished by its retry before anything runs on
    half-swapped tables. Call with the locks held (:func:`locked`)."""
    reason = (
        f"full refresh {layout.refresh_id} of {layer} is swapping its rebuilt tables in and "
        f"has not finished (journal {layout.root / SWAP_JOURNAL}): its layer_full_refresh "
        "run's swap task finishes it (clear the task if its retries are spent)"
    )
    for checkpoint in _layer_checkpoints(layer, layout.settings):
        if on:
            fence(checkpoint, f"refresh {layout.refresh_id}", reason)
        else:
            unfence(checkpoint)


def moves(layer: str, layout: RefreshLayout) -> list[tuple[Path, Path]]:
    """Every rename of a swap, in order: per table and per checkpoint, live -> previous then
    staged -> live."""
    settings, staged = layout.settings, layout.staged_settings(layer)
    catalog = get_catalog()
    moves = []
    for name in rebuilt_tables(layer):
        table = catalog.table(name)
        live = table.path(settings)
        moves += [(live, layout.previous / table.layer / name), (table.path(staged), live)]
    for name in layers_of(layer):
        job = catalog.job(LAYER_JOBS[name])
        pairs = [
            (job.checkpoint(settings), job.checkpoint(staged)),
            (fingerprint_file(job, settings), fingerprint_file(job, staged)),
        ]
        for live, new in pairs:
            moves += [(live, layout.previous / "checkpoints" / live.name), (new, live)]
    return moves


def check_swappable(layer: str, layout: RefreshLayout) -> None:
    """Refuse a swap that would lose data or bypass a gate.

    :raises RefreshError: the rebuild produced no table that live has, or a staged table's
        newest data commit has not passed its gate; the message names them.
    """
    catalog = get_catalog()
    staged = layout.staged_settings(layer)
    missing = [
        t
        for t in rebuilt_tables(layer)
        if delta_version(catalog.table(t).path(staged)) is None
        and delta_version(catalog.table(t).path(layout.settings)) is not None
    ]
    if missing:
        raise RefreshError(
            f"refusing to swap: the rebuild produced no {', '.join(missing)} "
            "(live has them); the live layer is unchanged"
        )
    problems = unvalidated(layer, layout)
    if problems:
        raise RefreshError(
            f"refusing to swap: the rebuild has not passed its gate for "
            f"{', '.join(problems)}; the live layer is unchanged"
        )


def apply_moves(journal: dict[str, Any], journal_path: Path) -> list[str]:
    """Make the journal's moves from its ``done`` count on, recording each in
    ``journal_path`` as it is made (a move whose source is gone was made before a crash).

    :param journal: ``{"moves": [[source, target], ...], "done": n, ...}``, updated in place.
    :returns: the moves made now, ``"source -> target"`` each.
    :raises RefreshError: a target exists already (nothing is overwritten).
    """
    moved: list[str] = []
    for index, (source, target) in enumerate(journal["moves"]):
        if index < journal["done"]:
            continue
        source_path, target_path = Path(source), Path(target)
        if source_path.exists():  # else: renamed before a crash, or never existed
            if target_path.exists():
                raise RefreshError(
                    f"cannot move {source} to {target}: the target exists (see {journal_path})"
                )
            target_path.parent.mkdir(parents=True, exist_ok=True)
            source_path.rename(target_path)
            moved.append(f"{source} -> {target}")
        journal["done"] = index + 1
        write_json(journal_path, journal)
    return moved
