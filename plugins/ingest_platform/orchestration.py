"""Orchestration facts shared by the DAGs and the platform's Airflow set-up: the pools that
serialise writers of a layer, and how a ``medallion_incremental`` run chooses between its
incremental (streaming) path and its backfill path.

Pools, not locks, because Airflow gives a backfill its own ``max_active_runs``: without a
pool, eight backfill runs and a scheduled run would all try to write Gold at once. A task
waiting for a slot is shown as *scheduled* in the UI instead of failing on a busy lock (the
jobs' checkpoint locks stay as the last line of defence for runs outside Airflow).
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from ingest_core.settings import INCLUDE_DIR

#: The pools, in the format of ``airflow pools import``; every Airflow the platform starts
#: imports it (``make demo``, ``ingestctl airflow``, the compose stack's init service).
POOLS_FILE: Path = INCLUDE_DIR / "airflow" / "pools.json"
#: Pool of the tasks that write Silver; of those that write or gate Gold.
SILVER_POOL, GOLD_POOL = "silver_layer", "gold_layer"
#: Absolute priority weights (``weight_rule="absolute"``) of the tasks that share those
#: pools. Airflow fills a free pool slot by weight, then by the oldest logical date, so at
#: equal weights every (older) backfill run went first: a scheduled run's gate_gold waited
#: 25 minutes behind four backfills (soak run 9), and a refresh's swap 10 minutes (soak run
#: 11). The live path first, then an operator's refresh, then backfills of history.
LIVE_PRIORITY, REFRESH_PRIORITY, BACKFILL_PRIORITY = 10, 5, 1
#: Retries of the operations DAGs' idempotent tasks (``layer_full_refresh``,
#: ``table_maintenance``, ``checkpoint_restore``, ``bronze_replay``), spread over about 25
#: minutes (1, 2, 4, 8, 10) as Airflow schedules them (exponential backoff, capped): a burst
#: of infrastructure faults takes the running tasks with each scheduler or API server kill
#: (soak run 18: a rebuild's three attempts a minute apart; run 20: ``table_maintenance``'s
#: two, killed with the API server and the scheduler a minute apart, and the daily
#: maintenance failed for good; run 21: a restore's four attempts two minutes apart, in a
#: burst of four faults).
SPREAD_RETRIES: dict[str, object] = {
    "retries": 5,
    "retry_delay": timedelta(minutes=1),
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": timedelta(minutes=10),
}

RunPath = Literal["incremental", "backfill"]


def medallion_path(
    run_type: object, data_interval_end: datetime | None, now: datetime, interval: timedelta
) -> RunPath:
    """Which path a ``medallion_incremental`` run takes.

    * ``backfill`` for a backfill run (``airflow backfill create``, the UI's backfill form),
      and for a manual run whose data interval ended more than one ``interval`` before
      ``now`` (a person re-running a past interval): the interval's Gold windows are
      recomputed from Silver; the streaming steps, which ignore the interval, are skipped.
    * ``incremental`` otherwise (scheduled runs, however late; manual runs of the current
      interval): the AvailableNow jobs process whatever arrived.

    :param run_type: ``DagRun.run_type`` (``scheduled``, ``manual``, ``backfill``, ...): the
        Task SDK's enum (whose ``str()`` is ``DagRunType.BACKFILL``) or its value.
    :param data_interval_end: the run's data interval end (timezone-aware), or None.

    Note: Airflow 3.3 gives a run triggered by hand (UI, ``airflow dags trigger``) the
    current interval whatever logical date is asked for; ``airflow dags test DAG <date>``
    and backfills carry the past interval.
    """
    run_type = str(getattr(run_type, "value", run_type))
    if run_type == "backfill":
        return "backfill"
    if run_type == "manual" and data_interval_end is not None:
        return "backfill" if data_interval_end <= now - interval else "incremental"
    return "incremental"


def replay_plan(params: dict[str, object]) -> int:
    """The ``bronze_replay`` DAG's ``check_range``: validate its parameters and plan the
    offsets, printing one line per partition.

    :returns: records the replay will re-read.
    :raises airflow.sdk.exceptions.AirflowFailException: a bad parameter, or a range Kafka no
        longer holds (no retry: retrying cannot fix either).
    """
    from airflow.sdk.exceptions import AirflowFailException

    from ingest_core.replay_plan import RangeNotInKafkaError, parse_topics, plan
    from ingest_core.time_range import TimeRange, TimeRangeError

    try:
        topics = parse_topics(params.get("topics") or [])  # type: ignore[arg-type]
        time_range = TimeRange.parse(str(params.get("from_ts")), str(params.get("to_ts")))
        plans = plan(topics, time_range)
    except (TimeRangeError, ValueError, RangeNotInKafkaError) as error:
        raise AirflowFailException(str(error)) from None
    for p in plans:
        print(
            f"{p.topic}[{p.partition}]: offsets {p.start}..{p.end} ({p.records} records; "
            f"{p.left_to_stream} after bronze_ingest's position, left to it)"
        )
    return sum(p.records for p in plans)


def pool_command() -> list[str]:
    """``airflow`` CLI arguments that create or update every pool of :data:`POOLS_FILE`."""
    return ["pools", "import", str(POOLS_FILE)]


def main() -> int:
    """``python -m ingest_platform.orchestration``: import the pools with the ``airflow`` on
    ``PATH`` (the compose stack's init service runs this after ``airflow db migrate``)."""
    import subprocess

    return subprocess.run(["airflow", *pool_command()], check=False).returncode


if __name__ == "__main__":  # python -m ingest_platform.orchestration (compose init service)
    sys.exit(main())
