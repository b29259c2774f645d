"""
### streaming_supervisor

Keeps the always-on Spark jobs (`bronze_ingest`, `payment_alerts`, `payment_alerts_rt`;
`mode: always_on` in `include/pipeline.yaml`) running. Every 2 minutes, one task per job:

* starts a job that is not running (detached `spark-submit` on `spark_default`; exactly one
  driver per checkpoint: the driver holds a lock on it);
* restarts a job whose process died or whose heartbeat (written by its
  `StreamingQueryListener`) is older than `supervisor.heartbeat_timeout_s`, with
  exponential back-off capped at `supervisor.max_backoff_s`; it never gives up, but from
  `supervisor.crash_loop_restarts` starts in `supervisor.failure_window_s` (a crash loop)
  every round that finds the job down **fails its task**: an operator should look (the task
  log has the driver log's tail);
* waits, saying what for, while the Kafka cluster does not answer (no start, no budget
  spent).

Trigger it manually with parameters to act on jobs:

* `action=stop`: graceful stop between micro-batches, and the job stays stopped;
* `action=start`: re-enable a stopped job (forgetting its restart history) and start it;
* `jobs`: which jobs (default: all always-on jobs).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Param, task

from ingest_platform.supervisor import ACTIONS, always_on_jobs

ALWAYS_ON = always_on_jobs()  # from include/pipeline.yaml

with DAG(
    dag_id="streaming_supervisor",
    schedule=timedelta(minutes=2),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    # One retry: every action is idempotent (supervise, a stop of a stopped job, a start of
    # a running one), and an operator's stop or start must ride through an API server or
    # metadata database restart (soak run 6: a manual stop whose task could not reach the
    # execution API during an API server restart failed, and with it the restore after).
    default_args={"owner": "data-platform", "retries": 1, "retry_delay": timedelta(seconds=30)},
    tags=["streaming", "spark", "operations"],
    doc_md=__doc__,
    params={
        "action": Param("supervise", enum=list(ACTIONS), description="what to do"),
        "jobs": Param(
            ALWAYS_ON,
            type="array",
            items={"enum": ALWAYS_ON},
            description="always-on jobs to act on",
        ),
    },
) as dag:
    for job in ALWAYS_ON:

        @task(task_id=f"supervise_{job}")
        def supervise_job(job: str = job, params: dict | None = None) -> str:
            """Supervise, start or stop one always-on job (see the DAG's doc)."""
            from ingest_platform.streaming_control import act

            return act(job, params or {})

        supervise_job()
