"""What a small job's driver costs to start, with and without the class-data archive.

Every Airflow task that runs Spark starts a driver JVM (``spark-submit``), and on small
increments most of its time is the start: the JVM loading Spark's and Delta's classes, the
session, the first queries' code. This part runs the same small Delta job (write 7 rows,
read them back) under ``spark-submit --master local[*]`` with the platform's ``--conf``,
alternately with the drivers' class-data archive (:mod:`spark_jobs.class_data_archive`) and
without it, and reports the medians: wall time (s) and CPU time (s, the driver JVM and its
Python process). Without the bench's event log (``SPARK_SUBMIT_OPTS``), as the platform runs;
the bench's other parts measure drivers that map the archive too (since 2026-12-04; before,
the event log's ``SPARK_CONF_DIR`` kept every driver from mapping it).
"""

from __future__ import annotations

import resource
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from bench import report
from bench.env import BIN, BenchError
from bench.report import Measurement

if TYPE_CHECKING:
    from bench.run import Bench

SCRIPT = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
spark.range(7).write.format("delta").save(sys.argv[1])
assert spark.read.format("delta").load(sys.argv[1]).count() == 7
"""


def _command(script: Path, table: Path, archive: bool) -> list[str]:
    from spark_jobs.session import driver_java_options, java_options_string, spark_submit_conf

    conf = spark_submit_conf("bench_driver_start")
    conf["spark.driver.extraJavaOptions"] = java_options_string(
        driver_java_options("bench_driver_start", class_data=archive)
    )
    return [
        str(BIN / "spark-submit"),
        "--master",
        "local[*]",
        *[part for key, value in conf.items() for part in ("--conf", f"{key}={value}")],
        str(script),
        str(table),
    ]


def driver_start(bench: Bench, pairs: int = 5) -> None:
    """Run the small job ``pairs`` times with the archive and ``pairs`` times without,
    interleaved (the order flips every pair, so a machine that slows down weighs on both),
    and add ``driver_start_small_job`` (median wall s with the archive; baseline: without)
    and ``driver_start_small_job_cpu`` (median CPU s) to ``bench``.

    :raises BenchError: the archive was not built (``make setup``) or a run failed.
    """
    from spark_jobs.class_data_archive import archive_java_options, class_data_archive

    if not archive_java_options():
        raise BenchError(
            f"no complete class-data archive at {class_data_archive()}: run `make setup`"
        )
    _interleaved_runs(bench, pairs)


def _interleaved_runs(bench: Bench, pairs: int) -> None:
    from ingest_platform.hooks import job_environment

    env = bench.env
    script = env.root / "driver_start.py"
    script.write_text(SCRIPT)
    walls: dict[bool, list[float]] = {True: [], False: []}
    cpus: dict[bool, list[float]] = {True: [], False: []}
    loads = {"start": report.load_avg()}
    for pair in range(pairs):
        for archive in (True, False) if pair % 2 == 0 else (False, True):
            label = f"driver_start_{'archive' if archive else 'plain'}_{pair}"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            done = env.run(
                _command(script, env.root / label, archive),
                f"{label}.log",
                # No event log, as the platform runs: the caller's own options only.
                env={**job_environment(), "SPARK_SUBMIT_OPTS": env.user_submit_options},
                timeout_s=600,
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                raise BenchError(f"{label} failed (log {done.log}):\n{done.tail()}")
            walls[archive].append(done.wall_s)
            cpus[archive].append(
                after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            )
            print(f"[bench] {label}: {done.wall_s:.1f} s", flush=True)
    loads["end"] = report.load_avg()
    for name, values, unit in (
        ("driver_start_small_job", walls, "s"),
        ("driver_start_small_job_cpu", cpus, "s"),
    ):
        bench.add(
            Measurement(
                name,
                statistics.median(values[True]),
                unit,
                baseline=statistics.median(values[False]),
                baseline_name="no class-data archive",
                n=pairs,
                spread=report.spread(values[True]),
                load_avg=loads,
                params={
                    "job": "spark-submit --master local[*]: 7 rows into Delta and back",
                    "with_archive": [round(v, 2) for v in values[True]],
                    "without_archive": [round(v, 2) for v in values[False]],
                },
            )
        )
