"""Always-on jobs' queries in one driver: a measurement's application, not a job.

The platform runs ``bronze_ingest``, ``payment_alerts`` and ``payment_alerts_rt`` as three
spark-submit applications (three driver JVMs, three Python drivers). This application
starts the queries of some of them (``--jobs``), by the jobs' own ``start`` functions and
triggers, in one SparkSession, so that :mod:`bench.shared_driver` can measure what sharing
a driver would save (memory) and cost (freshness, alert latency). It keeps one heartbeat,
under the first job's name, and none of the supervisor's per-job controls.

Run by the bench as a spark-submit application::

    spark-submit ... bench/shared_always_on.py --master local[5] \\
        --jobs bronze_ingest,payment_alerts,payment_alerts_rt
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

#: The always-on jobs this application can start.
JOBS = ("bronze_ingest", "payment_alerts", "payment_alerts_rt")


def main(argv: Sequence[str] | None = None) -> int:
    """Start the ``--jobs``' queries in one session; run until stopped (SIGTERM or the first
    job's stop request); exit 2 on a bad argument."""
    from ingest_core.settings import get_settings
    from spark_jobs import bronze_ingest, payment_alerts, payment_alerts_rt
    from spark_jobs.session import build_spark_session
    from spark_jobs.streaming_runtime import run_supervised

    parser = argparse.ArgumentParser(prog="shared_always_on", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--master",
        required=True,
        help="local[N]: N task slots, the real-time query's partitions plus the others'",
    )
    parser.add_argument(
        "--jobs",
        type=lambda text: text.split(","),
        default=list(JOBS),
        help=f"comma list of {', '.join(JOBS)}",
    )
    parser.add_argument("--bronze-trigger", default="processing-time=1s")
    args = parser.parse_args(argv)
    if not args.jobs or set(args.jobs) - set(JOBS):
        parser.error(f"--jobs: a comma list of {', '.join(JOBS)}")

    settings = get_settings()
    partitions = payment_alerts_rt.topic_partitions(settings)
    spark = build_spark_session(args.jobs[0], master=args.master)
    bronze = bronze_ingest.parse_args(["--trigger", args.bronze_trigger]).trigger
    alerts = payment_alerts.parse_args([]).trigger  # the catalog's default triggers
    real_time = payment_alerts_rt.parse_args([]).trigger

    def start() -> list[StreamingQuery]:
        queries: list[StreamingQuery] = []
        if "bronze_ingest" in args.jobs:
            queries.append(bronze_ingest.start(spark, trigger=bronze))
        if "payment_alerts" in args.jobs:
            queries += payment_alerts.start(spark, trigger=alerts, settings=settings)
        if "payment_alerts_rt" in args.jobs:
            queries.append(
                payment_alerts_rt.start(
                    spark, trigger=real_time, settings=settings, partitions=partitions
                )
            )
        print(f"shared_always_on: started {[q.name for q in queries]}", file=sys.stderr)
        return queries

    return run_supervised(spark, args.jobs[0], start, between_batches=False)


if __name__ == "__main__":
    sys.exit(main())
