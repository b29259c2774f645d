"""Full refresh of a layer: rebuild it from the layer below with new checkpoints beside the
live tables, gate the rebuild, then swap it in. The ``layer_full_refresh`` DAG drives it.

* ``gold``: Gold is rebuilt from live Silver (``gold_aggregate`` AvailableNow from the start,
  then the late corrections).
* ``silver``: Silver is rebuilt from Bronze (``silver_refine``), and Gold from the rebuilt
  Silver: Gold's checkpoints follow Silver's tables (their Delta table ids and versions),
  so a new Silver needs a new Gold.

Layout of refresh ``<id>`` (:class:`RefreshLayout`): the rebuild writes to
``<data>/_refresh/<id>/staging/<layer>/<table>`` with checkpoints in
``.../staging/checkpoints`` and its gate bookkeeping in ``.../staging/ops`` (starting from a
copy of the live ``ops_gate_holds``, so rows an operator held back stay out of the rebuilt
Gold). Nothing live changes until ``swap``, which:

1. refuses unless every rebuilt gated table passed its gate (in the staging bookkeeping);
2. takes the checkpoint locks of the layers' jobs (refuses while any of them runs);
3. moves each live table and checkpoint (with its fingerprint) to
   ``.../previous/``, and the staged ones into their place (renames on one file system);
4. records a ``passed`` gate result for each swapped table in the live ``ops_gate_results``
   (the new table's history starts again at version 0).

The previous tables and checkpoints stay in ``_refresh/<id>/previous`` until an operator
deletes them. Run::

    python -m spark_jobs.layer_refresh swap --layer gold --refresh-id 20261129T101500
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ingest_core.catalog import get_catalog
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.local_frames import local_frame

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB_NAME = "layer_refresh"
#: Layer -> the layers a refresh of it rebuilds, in build order.
REBUILDS: dict[str, tuple[str, ...]] = {"silver": ("silver", "gold"), "gold": ("gold",)}
#: Layer -> the job that writes it (and whose checkpoint it owns).
LAYER_JOBS: dict[str, str] = {"silver": "silver_refine", "gold": "gold_aggregate"}
_REFRESH_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+:-]{0,99}$")


class RefreshError(RuntimeError):
    """A refresh step cannot go on; nothing live was changed (the message says why)."""


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
        if not _REFRESH_ID.match(self.refresh_id):
            raise ValueError(f"refresh id {self.refresh_id!r} must match {_REFRESH_ID.pattern}")

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
    from ingest_core.locks import CheckpointBusyError, checkpoint_lock

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

    :returns: the staging folder.
    :raises RefreshError: a job of the layer is running, or the refresh id was used.
    """
    settings = settings or get_settings()
    layout = RefreshLayout(refresh_id, settings)
    busy = busy_jobs(layer, settings)
    if busy:
        raise RefreshError(
            f"refusing to refresh {layer}: {', '.join(busy)} is running; wait "
            "for it to finish (or stop it) and trigger again"
        )
    if layout.root.exists():
        raise RefreshError(f"refresh {refresh_id} already has folders at {layout.root}")
    catalog = get_catalog()
    holds = catalog.table("ops_gate_holds")
    live_holds = holds.path(settings)
    layout.staging.mkdir(parents=True)
    if live_holds.exists():
        shutil.copytree(live_holds, holds.path(layout.staged_settings(layer)))
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


def _unvalidated(layer: str, layout: RefreshLayout) -> list[str]:
    """The staged tables whose newest data commit no passed gate covers (the gate judges data
    commits, :func:`ingest_core.quality.state.pending`; an empty batch after it is nothing to
    validate)."""
    from ingest_core.delta_tables import last_data_version
    from ingest_core.quality.rules import layer_rules
    from ingest_core.quality.state import gate_results, validated_through

    staged = layout.staged_settings(layer)
    results = gate_results(staged)
    problems = []
    for name in layers_of(layer):
        for rules in layer_rules(name):
            version = last_data_version(get_catalog().table(rules.table).path(staged))
            if version is not None and validated_through(results, rules.table) < version:
                problems.append(f"{rules.table} (version {version})")
    return problems


@contextmanager
def _locked(layer: str, settings: PlatformSettings) -> Iterator[None]:
    from ingest_core.locks import CheckpointBusyError, checkpoint_lock

    with ExitStack() as stack:
        for name in layers_of(layer):
            job = LAYER_JOBS[name]
            try:
                stack.enter_context(checkpoint_lock(get_catalog().job(job).checkpoint(settings)))
            except CheckpointBusyError as error:
                raise RefreshError(f"refusing to swap: {error}") from None
        yield


def _moves(layer: str, layout: RefreshLayout) -> list[tuple[Path, Path]]:
    """Every rename of a swap, in order: per table and per checkpoint, live -> previous then
    staged -> live."""
    from ingest_core.checkpoint_health import fingerprint_file

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


def swap(
    spark: SparkSession, layer: str, refresh_id: str, settings: PlatformSettings | None = None
) -> list[str]:
    """Swap the rebuilt layers in (see the module doc). Resumable: the moves are listed in
    ``<refresh>/swap.json`` before the first one, each done move is recorded, and a swap
    interrupted (killed, a full disk) carries on from where it stopped when run again.

    :returns: the moves made, one line each.
    :raises RefreshError: a rebuilt table is missing from staging or has not passed its
        gate, or a job of the layer is running; nothing was moved.
    """
    from ingest_core.delta_tables import delta_version
    from ingest_core.quality.state import RESULTS_TABLE
    from spark_jobs.quality.results import RESULTS_SCHEMA
    from spark_jobs.quality.validation import docs_index

    settings = settings or get_settings()
    layout = RefreshLayout(refresh_id, settings)
    staged = layout.staged_settings(layer)
    journal_path = layout.root / "swap.json"
    catalog = get_catalog()
    if not layout.staging.is_dir():
        raise RefreshError(f"refresh {refresh_id} has no staging folder {layout.staging}")
    journal = json.loads(journal_path.read_text()) if journal_path.exists() else None
    if journal is None:
        missing = [
            t
            for t in rebuilt_tables(layer)
            if delta_version(catalog.table(t).path(staged)) is None
            and delta_version(catalog.table(t).path(settings)) is not None
        ]
        if missing:
            raise RefreshError(
                f"refusing to swap: the rebuild produced no {', '.join(missing)} "
                "(live has them); the live layer is unchanged"
            )
        problems = _unvalidated(layer, layout)
        if problems:
            raise RefreshError(
                f"refusing to swap: the rebuild has not passed its gate for "
                f"{', '.join(problems)}; the live layer is unchanged"
            )
    moved: list[str] = []
    with _locked(layer, settings):
        if journal is None:
            journal = {
                "layer": layer,
                "done": 0,
                "marks_recorded": False,
                "moves": [[str(a), str(b)] for a, b in _moves(layer, layout)],
            }
            journal_path.write_text(json.dumps(journal, indent=1))
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
            journal_path.write_text(json.dumps(journal, indent=1))
        if not journal["marks_recorded"]:
            now = datetime.now(UTC).replace(tzinfo=None)
            marks = []
            for name in rebuilt_tables(layer):
                version = delta_version(catalog.table(name).path(settings))
                if version is not None:
                    marks.append(
                        (
                            f"full_refresh__{refresh_id}",
                            catalog.table(name).layer,
                            name,
                            0,
                            version,
                            0,
                            "passed",
                            "[]",
                            docs_index(settings).as_uri(),
                            "layer_full_refresh",
                            f"rebuilt by full refresh {refresh_id}, validated in staging "
                            "and swapped in",
                            now,
                        )
                    )
            if marks:
                path = str(catalog.table(RESULTS_TABLE).path(settings))
                results = local_frame(spark, marks, RESULTS_SCHEMA)
                results.write.format("delta").mode("append").save(path)
            journal["marks_recorded"] = True
            journal_path.write_text(json.dumps(journal, indent=1))
    return moved


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``swap --layer silver|gold --refresh-id ID``; a bad value exits 2."""
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["swap"])
    parser.add_argument("--layer", required=True, choices=sorted(REBUILDS))
    parser.add_argument("--refresh-id", required=True)
    args = parser.parse_args(argv)
    if not _REFRESH_ID.match(args.refresh_id):
        parser.error(f"--refresh-id must match {_REFRESH_ID.pattern}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point (``swap``); a refusal exits 1 with its reason."""
    from spark_jobs.session import build_spark_session

    args = parse_args(argv)
    try:
        for line in swap(build_spark_session(JOB_NAME), args.layer, args.refresh_id):
            print(f"moved {line}")
    except RefreshError as error:
        print(f"layer_refresh: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
