"""
### layer_full_refresh

Manual only, guarded. Rebuilds a layer from the layer below with **new checkpoints**, beside
the live tables, and swaps it in only after the rebuild passed its gate (parameter `layer`):

* `gold`: Gold from live Silver (`gold_aggregate` from the start, then the late
  corrections), gated, swapped.
* `silver`: Silver from Bronze, then Gold from the rebuilt Silver (Gold's checkpoints follow
  Silver's tables, so a new Silver needs a new Gold), both gated, both swapped.

`prepare` **waits while the layer's jobs run** (their checkpoint locks are held: a scheduled
`medallion_incremental` run or a backfill; a sensor that gives its worker slot back between
checks every 15 s, for an hour at most, then fails naming them) and
creates `<data>/_refresh/<run id>/staging` (with a copy of the live `ops_gate_holds`, so
held rows stay out). The rebuild tasks run on the staging folders only; the live layer keeps
serving and `medallion_incremental` keeps running meanwhile. `swap` refuses unless every
rebuilt table passed its gate, takes the jobs' checkpoint locks (in the `gold_layer` pool),
moves the live tables and checkpoints to `<data>/_refresh/<run id>/previous` and the rebuilt
ones into place, and records the new tables' gate marks. The previous tables stay until you
delete them. If a gate fails, nothing live changed: inspect the staging tables and Data Docs,
fix, and trigger a new refresh.

Every task is retried twice (a minute apart) after a failure that is not a refusal: each is
safe to run again (`prepare` keeps a completed preparation, the rebuilds resume from their
staging checkpoints into exactly-once sinks, `swap` carries on from its journal).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from airflow.sdk import DAG, Param, PokeReturnValue, task

from ingest_core.refresh import BUSY_WAIT_S
from ingest_platform.operators import SparkJobOperator, StagedJobOperator
from ingest_platform.orchestration import GOLD_POOL, REFRESH_PRIORITY, SPREAD_RETRIES

AVAILABLE_NOW = ["--trigger", "available-now"]


def _gate(layer: str) -> list[str]:
    return ["validate", "--layer", layer, "--run-id", "{{ run_id }}"]


with DAG(
    dag_id="layer_full_refresh",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    # Every task is safe to run again (soak run 15: one killed with the API server failed the
    # run for good at retries 0): prepare returns a completed preparation as it is, the
    # rebuilds write staging tables through their own checkpoints and exactly-once sinks, the
    # gates record once, and swap resumes from its journal. Retries spaced out (1, 2, 4, 8, 10
    # minutes): soak run 18 killed one rebuild's three attempts within five minutes (two
    # scheduler kills and an API server kill: each takes the running tasks with it) and the
    # refresh failed for good; a rebuild resumes where it stopped, so waiting costs little.
    default_args={"owner": "data-platform", **SPREAD_RETRIES},
    tags=["medallion", "operations", "backfill"],
    doc_md=__doc__,
    params={
        "layer": Param(
            "gold",
            enum=["gold", "silver"],
            description="gold: rebuild Gold; silver: rebuild Silver, then Gold",
        ),
    },
) as dag:

    @task.sensor(poke_interval=15, timeout=BUSY_WAIT_S, mode="reschedule")
    def prepare(params: dict | None = None, run_id: str | None = None) -> PokeReturnValue:
        """Wait while the layer's jobs run; then create the staging folders (in the same
        check, so no run starts between the two)."""
        from airflow.sdk.exceptions import AirflowFailException

        from ingest_core.refresh import LayerBusyError, RefreshError, prepare

        try:
            staging = prepare(str((params or {})["layer"]), str(run_id))
        except LayerBusyError as error:
            logging.getLogger(__name__).info(
                "waiting while %s run(s): checked again in 15 s", ", ".join(error.busy)
            )
            return PokeReturnValue(is_done=False)
        except (RefreshError, ValueError) as error:
            raise AirflowFailException(str(error)) from None
        return PokeReturnValue(is_done=True, xcom_value=str(staging))

    rebuild_silver = StagedJobOperator(
        task_id="rebuild_silver", job="silver_refine", job_args=AVAILABLE_NOW, builds="silver"
    )
    gate_silver = StagedJobOperator(
        task_id="gate_silver", job="quality_gate", job_args=_gate("silver"), builds="silver"
    )
    rebuild_gold = StagedJobOperator(
        task_id="rebuild_gold",
        job="gold_aggregate",
        job_args=AVAILABLE_NOW,
        builds="gold",
        trigger_rule="none_failed",
    )
    correct_late = StagedJobOperator(task_id="correct_late", job="late_corrections", builds="gold")
    gate_gold = StagedJobOperator(
        task_id="gate_gold", job="quality_gate", job_args=_gate("gold"), builds="gold"
    )
    swap = SparkJobOperator(
        task_id="swap",
        job="layer_refresh",
        pool=GOLD_POOL,
        # Before backfills, after the live path, for a free gold_layer slot (soak run 11:
        # at the default weight it waited 10 minutes behind backfills of older dates).
        priority_weight=REFRESH_PRIORITY,
        weight_rule="absolute",
        job_args=["swap", "--layer", "{{ params.layer }}", "--refresh-id", "{{ run_id }}"],
    )

    prepare() >> rebuild_silver >> gate_silver >> rebuild_gold >> correct_late >> gate_gold >> swap
