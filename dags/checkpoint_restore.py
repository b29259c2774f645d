"""
### checkpoint_restore

Manual only. Restores a checkpoint backup of one job (parameters: `job`, `backup_id`, from
`ingestctl checkpoints list JOB` or the examples offered in the trigger form;
`accept_data_loss` to restore although Kafka no longer holds the backup's offsets, which is
recorded in the audit log).

Before touching anything it refuses, naming the problem, when the job is running (stop an
always-on job first: `streaming_supervisor` with `action=stop`), the backup does not verify
or lacks `metadata`, the query id differs from the live checkpoint's, the job's
configuration changed since the backup, or Kafka lost the offsets: these fail the task
without a retry. Anything else is retried over about 25 minutes (5 times, 1, 2, 4, 8 and 10
minutes apart): Kafka not answering (soak run 7's restore met a broker outage), and Airflow
itself failing the task (soak run 21: a scheduler kill, an API server kill, a broker outage
and a database kill, two minutes apart, took all four of the old attempts; the last one had
restored the checkpoint and failed on reporting it). A restore run again after it succeeded
restores the same backup again: the same result. The live checkpoint is
moved aside, never deleted, and later intact batches are carried over so that no batch the
sinks committed is re-planned (no duplicate, no loss). Then start the job again
(`streaming_supervisor` with `action=start`, or the next scheduled run).
"""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.sdk import DAG, Param, task

from ingest_core.catalog import get_catalog
from ingest_platform.orchestration import SPREAD_RETRIES

JOBS = sorted(get_catalog().jobs)

with DAG(
    dag_id="checkpoint_restore",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    # A refusal fails at once (AirflowFailException); Kafka not answering and Airflow's own
    # failures are retried, spread out (soak run 21).
    default_args={"owner": "data-platform", **SPREAD_RETRIES},
    tags=["checkpoints", "operations"],
    doc_md=__doc__,
    params={
        "job": Param(JOBS[0], enum=JOBS, description="the job whose checkpoint to restore"),
        "backup_id": Param(
            "",
            type="string",
            pattern=r"^\d{8}T\d{6}\d*Z$",
            description="backup id (ingestctl checkpoints list JOB)",
        ),
        "accept_data_loss": Param(
            False, type="boolean", description="restore although Kafka lost the offsets"
        ),
    },
) as dag:

    @task
    def restore_checkpoint(params: dict | None = None) -> str:
        """Restore the chosen backup (see the DAG's doc)."""
        from airflow.sdk.exceptions import AirflowFailException

        from ingest_core.checkpoint_health import (
            ConfigurationChangedError,
            DamagedCheckpointError,
        )
        from ingest_core.locks import CheckpointBusyError
        from ingest_core.recovery import KafkaUnavailableError, RestoreRefusedError, restore

        final = (
            RestoreRefusedError,
            CheckpointBusyError,
            DamagedCheckpointError,
            ConfigurationChangedError,
            ValueError,
            KeyError,
        )

        params = params or {}
        try:
            result = restore(
                str(params["job"]),
                str(params["backup_id"]),
                accept_data_loss=bool(params.get("accept_data_loss")),
            )
        except KafkaUnavailableError:
            raise  # retried: Kafka may be back by then
        except final as refused:
            raise AirflowFailException(str(refused)) from None
        return (
            f"restored {result.job} from {result.backup_id}: resumes after "
            f"{result.resumes_after}; previous checkpoint at {result.moved_aside}"
        )

    restore_checkpoint()
