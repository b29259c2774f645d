"""
### bronze_replay

Manual only. Re-reads a time range of Kafka topics in batch and writes into `bronze_events`
what Bronze lacks (parameters: `topics`, `from_ts`, `to_ts`, ISO 8601 with a UTC offset;
the range is Kafka time, when the records arrived, not event time).

* `check_range` (no Spark): validates the parameters and finds the offsets of the range on
  every partition (Kafka's offsets-by-timestamp lookup). It **refuses** a range Kafka no
  longer holds (retention deleted records it may have had), naming the partition and the
  earliest time still available, before anything is read or written.
* `replay` (`spark_jobs.bronze_replay`): reads those offsets with Spark's Kafka batch source
  and MERGEs on `(topic, partition, offset)`, inserting only rows Bronze lacks. Replaying a
  range Bronze already holds adds nothing; a lost range comes back exactly as Kafka has it.
  Records after `bronze_ingest`'s committed offsets are left to the always-on job.

Then let `medallion_incremental` pick the restored rows up (Silver deduplicates by
`event_id`), or run a backfill of the affected data intervals.
"""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.sdk import DAG, Param, task

from ingest_core.contracts import TOPICS
from ingest_platform.operators import SparkJobOperator
from ingest_platform.orchestration import SPREAD_RETRIES

ISO_8601 = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$"

with DAG(
    dag_id="bronze_replay",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    # Both tasks are safe to run again: check_range only reads, and replay's MERGE inserts
    # only the rows Bronze lacks. Retries spread out as every manual operation's (soak run 21).
    default_args={"owner": "data-platform", **SPREAD_RETRIES},
    tags=["bronze", "kafka", "backfill", "operations"],
    doc_md=__doc__,
    params={
        "topics": Param(
            list(TOPICS),
            type="array",
            items={"type": "string", "enum": list(TOPICS)},
            minItems=1,
            description="contract topics to replay",
        ),
        "from_ts": Param(
            "2026-01-01T00:00:00Z",
            type="string",
            pattern=ISO_8601,
            description="first Kafka time included (ISO 8601, with Z or +hh:mm)",
        ),
        "to_ts": Param(
            "2026-01-01T01:00:00Z",
            type="string",
            pattern=ISO_8601,
            description="first Kafka time excluded",
        ),
    },
) as dag:

    @task
    def check_range(params: dict | None = None) -> int:
        """Validate the parameters and plan the offsets; refuse a range Kafka lost.

        :returns: records to re-read.
        """
        from ingest_platform.orchestration import replay_plan

        return replay_plan(params or {})

    replay = SparkJobOperator(
        task_id="replay",
        job="bronze_replay",
        rebuild=True,
        job_args=[
            "--topics",
            "{{ params.topics | join(',') }}",
            "--from",
            "{{ params.from_ts }}",
            "--to",
            "{{ params.to_ts }}",
        ],
    )

    check_range() >> replay
