"""Full refresh of a layer: rebuild it from the layer below with new checkpoints beside the
live tables, gate the rebuild, then swap it in. The ``layer_full_refresh`` DAG drives it.

* ``gold``: Gold is rebuilt from live Silver (``gold_aggregate`` AvailableNow from the start,
  then the late corrections).
* ``silver``: Silver is rebuilt from Bronze (``silver_refine``), and Gold from the rebuilt
  Silver: Gold's checkpoints follow Silver's tables (their Delta table ids and versions),
  so a new Silver needs a new Gold.

Layout of refresh ``<id>`` (:class:`ingest_core.refresh.RefreshLayout`): the rebuild writes to
``<data>/_refresh/<id>/staging/<layer>/<table>`` with checkpoints in
``.../staging/checkpoints`` and its gate bookkeeping in ``.../staging/ops`` (starting from a
copy of the live ``ops_gate_holds``, so rows an operator held back stay out of the rebuilt
Gold). Nothing live changes until ``swap``, which:

1. refuses unless every rebuilt gated table passed its gate (in the staging bookkeeping);
2. takes the checkpoint locks of the layers' jobs (refuses while any of them runs) and
   fences them until step 4 is done (:func:`ingest_core.refresh.fenced`);
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
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from ingest_core.catalog import get_catalog
from ingest_core.delta_tables import delta_version
from ingest_core.refresh import (
    REBUILDS,
    REFRESH_ID,
    SWAP_JOURNAL,
    RefreshError,
    RefreshLayout,
    apply_moves,
    check_swappable,
    fenced,
    locked,
    moves,
    rebuilt_tables,
)
from ingest_core.runtime_files import write_json
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.delta_io import append_idempotent
from spark_jobs.job_cli import run_job
from spark_jobs.local_frames import local_frame

JOB_NAME = "layer_refresh"


def swap(
    session: Callable[[], SparkSession],
    layer: str,
    refresh_id: str,
    settings: PlatformSettings | None = None,
) -> list[str]:
    """Swap the rebuilt layers in (see the module doc). Resumable: the moves and the staged
    tables' versions are listed in ``<refresh>/swap.json`` before the first move, each done
    move is recorded, and a swap interrupted (killed, a full disk) carries on from where it
    stopped when run again. From before the first move until the gate marks are recorded the
    live checkpoints are fenced (:func:`ingest_core.refresh.fenced`): no live job runs on
    half-swapped tables meanwhile. A swap already finished returns at once.

    :param session: builds the Spark session the gate marks are written with (called only
        when they are: a finished swap starts no JVM).
    :returns: the moves made, one line each.
    :raises RefreshError: a rebuilt table is missing from staging or has not passed its
        gate, or a job of the layer is running; nothing was moved.
    """
    settings = settings or get_settings()
    layout = RefreshLayout(refresh_id, settings)
    journal_path = layout.root / SWAP_JOURNAL
    if not layout.staging.is_dir():
        raise RefreshError(f"refresh {refresh_id} has no staging folder {layout.staging}")
    journal = json.loads(journal_path.read_text()) if journal_path.exists() else None
    if journal is not None and _finished(journal):
        fenced(layer, layout, on=False)  # a retry after the last record: nothing left
        return []
    if journal is None:
        check_swappable(layer, layout)
    with locked(layer, settings, refresh_id):
        if journal is None:
            staged = layout.staged_settings(layer)
            journal = {
                "layer": layer,
                "done": 0,
                "marks_recorded": False,
                "moves": [[str(a), str(b)] for a, b in moves(layer, layout)],
                # What the gate passed in staging: the marks cover these versions only.
                "versions": {
                    name: delta_version(get_catalog().table(name).path(staged))
                    for name in rebuilt_tables(layer)
                },
            }
            write_json(journal_path, journal)
        fenced(layer, layout, on=True)
        moved = apply_moves(journal, journal_path)
        if not journal["marks_recorded"]:
            _record_passed(session(), layer, refresh_id, settings, journal.get("versions") or {})
            journal["marks_recorded"] = True
            write_json(journal_path, journal)
        fenced(layer, layout, on=False)
    return moved


def _finished(journal: dict) -> bool:
    return bool(journal["marks_recorded"]) and journal["done"] >= len(journal["moves"])


def _record_passed(
    spark: SparkSession,
    layer: str,
    refresh_id: str,
    settings: PlatformSettings,
    versions: dict[str, int | None],
) -> None:
    """One ``passed`` gate result per swapped table in the live ``ops_gate_results``, from
    version 0 (the new table's history starts again) to the version the gate passed in
    staging (``versions``, recorded in the journal before the first move; a table missing
    there: its current version); committed once per refresh, however often the swap runs."""
    from ingest_core.quality.state import RESULTS_TABLE
    from ingest_core.quality.validation import docs_index
    from spark_jobs.quality.results import RESULTS_SCHEMA

    catalog = get_catalog()
    now = datetime.now(UTC).replace(tzinfo=None)
    reason = f"rebuilt by full refresh {refresh_id}, validated in staging and swapped in"
    marks = []
    for name in rebuilt_tables(layer):
        path = catalog.table(name).path(settings)
        version = versions[name] if name in versions else delta_version(path)
        if version is None:
            continue
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
                reason,
                now,
            )
        )
    if marks:
        # Once per refresh (Delta's idempotent writes: one application id per refresh): a
        # swap killed between this commit and its journal's ``marks_recorded`` adds nothing
        # when run again.
        append_idempotent(
            local_frame(spark, marks, RESULTS_SCHEMA),
            catalog.table(RESULTS_TABLE).path(settings),
            app_id=f"{JOB_NAME}-marks-{refresh_id}",
            version=0,
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``swap --layer silver|gold --refresh-id ID``; a bad value exits 2."""
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["swap"])
    parser.add_argument("--layer", required=True, choices=sorted(REBUILDS))
    parser.add_argument("--refresh-id", required=True)
    args = parser.parse_args(argv)
    if not REFRESH_ID.match(args.refresh_id):
        parser.error(f"--refresh-id must match {REFRESH_ID.pattern}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point (``swap``); a refusal exits 1 with its reason. The swap
    takes the layer's writers' locks itself (:func:`swap`)."""
    args = parse_args(argv)

    def body(session: Callable[..., SparkSession]) -> None:
        for line in swap(session, args.layer, args.refresh_id):
            print(f"moved {line}")

    return run_job(JOB_NAME, body, lock=None, refusals=(RefreshError,))


if __name__ == "__main__":
    sys.exit(main())
