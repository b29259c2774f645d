"""
### checkpoint_maintenance

Hourly: a consistent, verified backup of each always-on job's checkpoint (`bronze_ingest`,
`payment_alerts`, `payment_alerts_rt`; safe while they run: only committed batches are
copied), then retention for every job's backups (keep the newest `checkpoints.keep_last`
and anything younger than `checkpoints.keep_days`). Scheduled jobs are backed up after
each successful run by their own task. Backups: `.ingest/checkpoint_backups/<job>/<id>/`;
every removal is in the audit log `.ingest/checkpoint_backups/audit.jsonl`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, task

from ingest_core.catalog import get_catalog
from ingest_platform.supervisor import always_on_jobs

with DAG(
    dag_id="checkpoint_maintenance",
    schedule=timedelta(hours=1),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "data-platform", "retries": 1, "retry_delay": timedelta(minutes=5)},
    tags=["checkpoints", "operations"],
    doc_md=__doc__,
) as dag:
    for job in get_catalog().jobs:

        @task(task_id=f"maintain_{job}")
        def maintain(job: str = job, always_on: bool = job in always_on_jobs()) -> str:
            """Back up (always-on jobs) and apply retention to one job's backups."""
            from ingest_core.checkpoints import BackupError, backup
            from ingest_core.recovery import prune

            lines = []
            if always_on:
                try:
                    lines.append(f"backup {backup(job).describe()}")
                except BackupError as error:
                    lines.append(f"no backup: {error}")
            lines.append(f"retention removed {prune(job)}")
            return "; ".join(lines)

        maintain()
