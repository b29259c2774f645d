"""
### table_maintenance

Daily (03:30 UTC), one task per table of `include/pipeline.yaml`: row retention of the
bookkeeping tables, OPTIMIZE (compaction) of the partitions no writer still fills, VACUUM,
then log retention (`ingest_core.table_maintenance`; docs/maintenance.md).

VACUUM's retention is **computed per table**, never guessed: the largest of (a) what any
streaming query's committed offsets still read (the oldest `reservoirVersion` of a Delta
source), (b) what any kept checkpoint backup reads, (c) `maintenance.retention_floor`
(7 days). Each task logs files and bytes before and after, the retention and which
constraint set it.

A task never runs beside the table's writer: it holds the writers' checkpoint locks and
runs in their Airflow pool. A scheduled writer holding its lock is awaited
(`on_busy=wait`, up to `maintenance.lock_wait`) or the table is skipped (`on_busy=skip`);
an always-on writer is paused meanwhile (`always_on=pause`: stopped between micro-batches,
restarted by the next `streaming_supervisor` round) or its tables skipped.

Manual runs take parameters: `tables` (empty: all), `dry_run` (report only),
`retention_hours` (refused, with the numbers, when below what (a)-(c) need), `on_busy`,
`always_on`. A failed task is retried over about 25 minutes, 5 times (every step is idempotent).
"""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.sdk import DAG, Param, task

from ingest_core.catalog import get_catalog
from ingest_platform.maintenance import LAYER_POOLS
from ingest_platform.orchestration import SPREAD_RETRIES

TABLES = list(get_catalog().tables)  # from include/pipeline.yaml

with DAG(
    dag_id="table_maintenance",
    schedule="30 3 * * *",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    max_active_tasks=1,  # two cores: one table at a time
    # Every step is idempotent (compaction, VACUUM, retention find nothing left to do the
    # second time): a task failed by its surroundings is retried (soak run 5: the metadata
    # database killed while a finished task pushed its report failed the run), its retries
    # spread out (soak run 20: two, a minute apart, both lost to Airflow component kills).
    default_args={"owner": "data-platform", **SPREAD_RETRIES},
    tags=["delta", "maintenance", "operations"],
    doc_md=__doc__,
    params={
        "tables": Param(
            [], type="array", items={"enum": TABLES}, description="tables (empty: all)"
        ),
        "dry_run": Param(False, type="boolean", description="report only, change nothing"),
        "retention_hours": Param(
            None,
            type=["null", "number"],
            minimum=0,
            description="VACUUM retention asked for (empty: computed)",
        ),
        "on_busy": Param(None, type=["null", "string"], enum=[None, "wait", "skip"]),
        "always_on": Param(None, type=["null", "string"], enum=[None, "pause", "skip"]),
    },
) as dag:
    for table, spec in get_catalog().tables.items():

        @task(task_id=f"maintain_{table}", pool=LAYER_POOLS.get(spec.layer, "default_pool"))
        def maintain_table(table: str = table, params: dict | None = None) -> str:
            """Maintain one table (see the DAG's doc)."""
            from ingest_platform.maintenance import maintain

            return maintain(table, params or {})

        maintain_table()
