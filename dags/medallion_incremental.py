"""
### medallion_incremental

Every 15 minutes (a real 15-minute data interval), refine what Bronze received into Silver
and Silver into Gold with **AvailableNow** Spark jobs, with a **Great Expectations gate**
after each layer. `choose_path` sends each run down one of two paths:

* **incremental** (scheduled runs; manual runs of the current interval): `incremental_path` →
  `refine_silver` → `gate_silver` → `aggregate_gold` → `correct_late` → `gate_gold` →
  `publish_assets` (Gold's gate validates the late corrections too, before Gold is
  published). The AvailableNow jobs process whatever arrived, whatever the interval.
* **backfill** (`airflow backfill create`, the UI's backfill form, and manual runs of an
  interval that ended more than 15 minutes ago): `recompute_gold` → `gate_backfill` →
  `publish_assets`. The streaming steps are skipped; the Gold windows and sessions that
  start in the run's data interval are recomputed from Silver plus late events and
  replaced (`spark_jobs.gold.gold_backfill`). Running it twice changes nothing.

Every task that writes or gates Gold runs in the `gold_layer` pool (one slot), so backfill
runs (which have their own `max_active_runs`) and scheduled runs never write Gold at once;
`refine_silver` runs in the `silver_layer` pool. The live path goes first: its tasks weigh
`LIVE_PRIORITY`, the backfill path's `BACKFILL_PRIORITY` (absolute weights). Airflow fills a
pool's free slot by weight and then by the oldest logical date, so at equal weights every
backfill run, being older, went before the live run: in soak run 9 a scheduled run's
`gate_gold` waited behind four backfills for over 25 minutes.

* A Spark task whose input tables have no new data since its last successful run does not
  start Spark and shows as **skipped** ("inputs unchanged"; maintenance commits are not new
  data), and a gate with nothing pending passes without Spark: a cycle with no new data
  costs no JVM. The steps after it still run (they depend on `incremental_path` too, with
  the trigger rule `none_failed_min_one_success`): each decides from its own inputs.
* Spark tasks run `spark-submit` on the `spark_default` connection (`local[*]` embedded;
  point it at `spark://host:7077` to run on a cluster).
* A gate validates only the Delta versions its layer produced since the last gate that
  passed. A failed gate stops the run there, and every later run fails at the same gate
  until an operator resolves it (`python -m spark_jobs.quality.gate quarantine|accept
  --layer silver ...`, see the README's *Quality gates*).
* `gate_silver` publishes the Silver Assets, `publish_assets` the Gold ones.
* One scheduled run at a time; no catch-up. Backfills may reach back to 2016 (the Olist
  history): the DAG's start date.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, DeltaDataIntervalTimetable, task

from ingest_core.catalog import get_catalog
from ingest_platform.operators import LayerGateOperator, SparkJobOperator
from ingest_platform.orchestration import (
    BACKFILL_PRIORITY,
    GOLD_POOL,
    LIVE_PRIORITY,
    SILVER_POOL,
)

AVAILABLE_NOW = ["--trigger", "available-now"]
#: Trigger rule of the incremental steps after the first (see ``incremental_path``).
AFTER_A_STEP = "none_failed_min_one_success"
INTERVAL = timedelta(minutes=15)
#: The run's data interval, as the gold_backfill job reads it (ISO 8601 with offset).
DATA_INTERVAL = [
    "--start",
    "{{ data_interval_start | ts }}",
    "--end",
    "{{ data_interval_end | ts }}",
]


def _new_data(job: str) -> list[str]:
    """The tables whose new versions give ``job`` something to do (``include/pipeline.yaml``:
    ``work_from``, else its inputs that it does not write itself)."""
    return get_catalog().application(job).new_data_inputs


def _assets(layer: str) -> list[Asset]:
    catalog = get_catalog()
    return [
        Asset(uri=t.asset_uri(), name=t.name) for t in catalog.tables.values() if t.layer == layer
    ]


with DAG(
    dag_id="medallion_incremental",
    schedule=DeltaDataIntervalTimetable(INTERVAL),
    start_date=datetime(2016, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=60),
    # Two retries: every task is idempotent (exactly-once sinks, gates that record once), and
    # a scheduler killed twice in a few minutes takes a running task's attempts with it (soak
    # run 7: a backfill's recompute_gold lost both of its attempts so, and the run failed).
    default_args={
        "owner": "data-platform",
        "retries": 2,
        "retry_delay": timedelta(minutes=1),
        "priority_weight": LIVE_PRIORITY,
        "weight_rule": "absolute",
    },
    tags=["medallion", "spark", "great-expectations", "backfill"],
    doc_md=__doc__,
) as dag:

    @task.branch(task_id="choose_path")
    def choose_path(**context: Any) -> str:
        """``recompute_gold`` for backfills and past manual runs, else ``refine_silver``."""
        from ingest_platform.orchestration import medallion_path

        run = context["dag_run"]
        path = medallion_path(
            run.run_type, context.get("data_interval_end"), datetime.now(UTC), INTERVAL
        )
        print(
            f"run {run.run_id} ({run.run_type}), data interval "
            f"{context.get('data_interval_start')} .. {context.get('data_interval_end')}: "
            f"{path} path"
        )
        return "recompute_gold" if path == "backfill" else "incremental_path"

    # The branch's marker for the incremental steps: a step runs when its predecessor
    # succeeded or was skipped for unchanged inputs, and never on the backfill path (where
    # this marker is skipped too); a failure upstream still stops it.
    incremental_path = EmptyOperator(task_id="incremental_path")

    refine_silver = SparkJobOperator(
        task_id="refine_silver",
        job="silver_refine",
        job_args=AVAILABLE_NOW,
        pool=SILVER_POOL,
        inputs=_new_data("silver_refine"),
    )
    # A gate whose expectations fail is not retried (AirflowFailException: a data problem);
    # a gate that died before its verdict (killed, the scheduler lost) is, like any task.
    gate_silver = LayerGateOperator(
        task_id="gate_silver",
        layer="silver",
        outlets=_assets("silver"),
        trigger_rule=AFTER_A_STEP,
    )
    aggregate_gold = SparkJobOperator(
        task_id="aggregate_gold",
        job="gold_aggregate",
        job_args=AVAILABLE_NOW,
        pool=GOLD_POOL,
        inputs=_new_data("gold_aggregate"),
        trigger_rule=AFTER_A_STEP,
    )
    gate_gold = LayerGateOperator(
        task_id="gate_gold", layer="gold", pool=GOLD_POOL, trigger_rule=AFTER_A_STEP
    )
    correct_late = SparkJobOperator(
        task_id="correct_late",
        job="late_corrections",
        pool=GOLD_POOL,
        # Gold's watermark moves with gold_aggregate's batches; Gold itself is its output.
        inputs=_new_data("late_corrections"),
        input_jobs=["gold_aggregate"],
        trigger_rule=AFTER_A_STEP,
    )
    recompute_gold = SparkJobOperator(
        task_id="recompute_gold",
        job="gold_backfill",
        job_args=DATA_INTERVAL,
        pool=GOLD_POOL,
        priority_weight=BACKFILL_PRIORITY,
    )
    gate_backfill = LayerGateOperator(
        task_id="gate_backfill", layer="gold", pool=GOLD_POOL, priority_weight=BACKFILL_PRIORITY
    )
    publish_assets = EmptyOperator(
        task_id="publish_assets",
        outlets=_assets("gold"),
        trigger_rule="none_failed_min_one_success",
    )

    route = choose_path()
    # The late corrections before Gold's gate: what publish_assets announces is validated
    # (they ran after it, and their MERGEs were published a run before any gate saw them).
    route >> incremental_path >> refine_silver >> gate_silver >> aggregate_gold >> correct_late
    correct_late >> gate_gold
    incremental_path >> [gate_silver, aggregate_gold, gate_gold, correct_late, publish_assets]
    route >> recompute_gold >> gate_backfill
    [gate_gold, gate_backfill] >> publish_assets
