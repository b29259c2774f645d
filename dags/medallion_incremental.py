"""
### medallion_incremental

Every 15 minutes (a real 15-minute data interval), refine what Bronze received into Silver
and Silver into Gold with **AvailableNow** Spark jobs, with a **Great Expectations gate**
after each layer:

`refine_silver` → `gate_silver` → `aggregate_gold` → `gate_gold` → `correct_late` →
`publish_assets`

* Spark tasks run `spark-submit` on the `spark_default` connection (`local[*]` embedded;
  point it at `spark://host:7077` to run on a cluster).
* A gate validates only the Delta versions its layer produced since the last gate that
  passed. A failed gate stops the run there: the increment does not reach the next layer,
  and every later run fails at the same gate until an operator resolves it
  (`python -m spark_jobs.quality.gate quarantine|accept --layer silver ...`, see the
  README's *Quality gates*). Nothing is lost: Silver keeps refining meanwhile.
* `gate_silver` publishes the Silver Assets, `publish_assets` the Gold ones.
* One run at a time; no catch-up. The jobs' checkpoint locks refuse a second driver.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, DeltaDataIntervalTimetable

from ingest_platform.operators import LayerGateOperator, SparkJobOperator
from spark_jobs.catalog import get_catalog

AVAILABLE_NOW = ["--trigger", "available-now"]


def _assets(layer: str) -> list[Asset]:
    catalog = get_catalog()
    return [Asset(uri=t.asset_uri(), name=t.name) for t in catalog.tables.values()
            if t.layer == layer]  # fmt: skip


with DAG(
    dag_id="medallion_incremental",
    schedule=DeltaDataIntervalTimetable(timedelta(minutes=15)),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=60),
    default_args={
        "owner": "data-platform",
        "retries": 1,
        "retry_delay": timedelta(minutes=1),
    },
    tags=["medallion", "spark", "great-expectations"],
    doc_md=__doc__,
) as dag:
    refine_silver = SparkJobOperator(
        task_id="refine_silver", job="silver_refine", job_args=AVAILABLE_NOW
    )
    # A failed gate is a data problem, not a flaky task: no retry.
    gate_silver = LayerGateOperator(
        task_id="gate_silver", layer="silver", retries=0, outlets=_assets("silver")
    )
    aggregate_gold = SparkJobOperator(
        task_id="aggregate_gold", job="gold_aggregate", job_args=AVAILABLE_NOW
    )
    gate_gold = LayerGateOperator(task_id="gate_gold", layer="gold", retries=0)
    correct_late = SparkJobOperator(task_id="correct_late", job="late_corrections")
    publish_assets = EmptyOperator(task_id="publish_assets", outlets=_assets("gold"))

    refine_silver >> gate_silver >> aggregate_gold >> gate_gold >> correct_late >> publish_assets
