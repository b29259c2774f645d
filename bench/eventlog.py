"""Where a Spark job's time goes, read from Spark's own event log.

The benchmarks turn the event log on (uncompressed, one file per application) by Java system
properties in ``SPARK_SUBMIT_OPTS`` (:func:`submit_options`): spark-submit's JVM, the
driver in client mode, gets them, and a ``SparkConf`` reads every ``spark.*`` system property,
so the real jobs, launched unchanged by the bench or by Airflow's SparkSubmitOperator, each
leave one log. Not a ``SPARK_CONF_DIR`` with a ``spark-defaults.conf``, as until 2026-12-04:
spark-class puts that folder first on the driver's class path, and then no driver maps the
platform's class-data archive (:mod:`spark_jobs.class_data_archive`): the bench measured
drivers slower to start than the platform's. From the log:

* ``SparkListenerApplicationStart``: the SparkContext is up (end of *process start*);
* ``QueryStartedEvent`` / ``QueryProgressEvent`` (the same events a
  ``StreamingQueryListener`` receives): query start, each micro-batch with its
  ``durationMs`` (``latestOffset``, ``queryPlanning``, ``addBatch``, ``walCommit``...) and
  input rows;
* ``SQLExecutionStart/End``: the slowest SQL executions with the tables they touch (inside a
  ``foreachBatch``, what the batch spent its time on);
* ``SparkListenerApplicationEnd``.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

#: Spark's event-log settings, as ``SPARK_SUBMIT_OPTS`` carries them (see the module's doc).
EVENT_LOG_PROPERTIES = {
    "spark.eventLog.enabled": "true",
    "spark.eventLog.compress": "false",
    "spark.eventLog.rolling.enabled": "false",
}

_TABLE = re.compile(r"/((?:bronze|silver|gold|ops)_[a-z0-9_]+)")


def submit_options(log_dir: Path, existing: str = "") -> str:
    """The ``SPARK_SUBMIT_OPTS`` value that sends every Spark application's event log to
    ``log_dir`` (created): ``existing`` (the caller's own options, kept first), then
    ``-D<key>=<value>`` for :data:`EVENT_LOG_PROPERTIES` and ``spark.eventLog.dir``.

    The folder goes as a ``file:`` URI (``Path.as_uri``: a space is ``%20``), so no option
    needs quoting when spark-class splits the value at spaces.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    properties = {**EVENT_LOG_PROPERTIES, "spark.eventLog.dir": log_dir.resolve().as_uri()}
    ours = " ".join(f"-D{key}={value}" for key, value in properties.items())
    return f"{existing} {ours}".strip()


def iso_ms(text: str) -> float:
    """Epoch milliseconds of an ISO-8601 time such as ``2026-11-29T14:45:08.988Z``."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


@dataclass
class Query:
    """One streaming query of an application: its progress events in order."""

    id: str
    name: str
    started_ms: float
    progress: list[dict[str, Any]] = field(default_factory=list)

    @property
    def batches(self) -> list[tuple[float, float]]:
        """``(start_ms, end_ms)`` of every trigger (progress timestamp + batchDuration)."""
        return [
            (iso_ms(p["timestamp"]), iso_ms(p["timestamp"]) + p.get("batchDuration", 0))
            for p in self.progress
        ]

    @property
    def input_rows(self) -> int:
        return sum(int(s.get("numInputRows", 0)) for p in self.progress for s in p["sources"])

    @property
    def ended_ms(self) -> float:
        """End of the last trigger (the terminated event carries no time)."""
        return max((end for _, end in self.batches), default=self.started_ms)


@dataclass
class SparkApp:
    """What one event log says about one Spark application."""

    path: Path
    name: str
    start_ms: float
    end_ms: float | None
    queries: list[Query]
    sql: list[dict[str, Any]]
    jobs: list[tuple[float, float]] = field(default_factory=list)

    @property
    def first_query_ms(self) -> float | None:
        return min((q.started_ms for q in self.queries), default=None)

    @property
    def last_batch_end_ms(self) -> float | None:
        return max((q.ended_ms for q in self.queries), default=None)

    @property
    def input_rows(self) -> int:
        return sum(q.input_rows for q in self.queries)

    def batch_busy_ms(self) -> float:
        """Wall time during which at least one trigger of any query ran (queries of one job,
        e.g. gold_aggregate's five, run concurrently: their union, not their sum)."""
        return union_ms(b for q in self.queries for b in q.batches)

    def duration_totals(self) -> dict[str, float]:
        """``durationMs`` of every progress event, summed per phase over all queries."""
        totals: dict[str, float] = defaultdict(float)
        for q in self.queries:
            for p in q.progress:
                for key, value in (p.get("durationMs") or {}).items():
                    totals[key] += value
        return dict(sorted(totals.items(), key=lambda kv: -kv[1]))

    def jobs_busy_ms(self, start: float, end: float) -> float:
        """Wall time within ``[start, end]`` during which a Spark job ran (the rest of the
        interval is driver-side work: Python, planning, Delta log reads on the driver)."""
        return union_ms((max(a, start), min(b, end)) for a, b in self.jobs if b > start and a < end)

    def top_sql(self, count: int = 5) -> list[dict[str, Any]]:
        """The slowest SQL executions: ms, plan head, tables touched (nested executions
        overlap their parent: a foreachBatch's own execution spans its children)."""
        return sorted(self.sql, key=lambda s: -s["ms"])[:count]


def union_ms(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by ``(start, end)`` intervals (overlaps counted once)."""
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None and current_start is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None and current_start is not None:
        total += current_end - current_start
    return total


def _plan_label(plan: str) -> tuple[str, list[str]]:
    body = plan.split("== Physical Plan ==")[-1].strip().splitlines()
    head = " / ".join(re.sub(r"[\s+\-*:|]+", " ", line).strip() for line in body[:2])
    tables = sorted(set(_TABLE.findall(plan)))
    return head[:120], tables


def parse(path: Path) -> SparkApp:
    """Read one uncompressed event log."""
    name, start, end = "", 0.0, None
    queries: dict[str, Query] = {}
    sql_start: dict[int, tuple[float, str]] = {}
    sql: list[dict[str, Any]] = []
    job_start: dict[int, float] = {}
    spark_jobs: list[tuple[float, float]] = []
    with open(path) as handle:
        for line in handle:
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerApplicationStart":
                name, start = event["App Name"], float(event["Timestamp"])
            elif kind == "SparkListenerApplicationEnd":
                end = float(event["Timestamp"])
            elif kind.endswith("$QueryStartedEvent"):
                queries[event["runId"]] = Query(
                    event["id"], event.get("name") or event["id"], iso_ms(event["timestamp"])
                )
            elif kind.endswith("$QueryProgressEvent"):
                progress = event["progress"]
                query = queries.setdefault(
                    progress["runId"],
                    Query(
                        progress["id"], progress.get("name") or "", iso_ms(progress["timestamp"])
                    ),
                )
                query.progress.append(progress)
            elif kind == "SparkListenerJobStart":
                job_start[event["Job ID"]] = float(event["Submission Time"])
            elif kind == "SparkListenerJobEnd" and event["Job ID"] in job_start:
                spark_jobs.append((job_start.pop(event["Job ID"]), float(event["Completion Time"])))
            elif kind.endswith("SQLExecutionStart"):
                sql_start[event["executionId"]] = (
                    float(event["time"]),
                    event.get("physicalPlanDescription", ""),
                )
            elif kind.endswith("SQLExecutionEnd") and event["executionId"] in sql_start:
                began, plan = sql_start.pop(event["executionId"])
                head, tables = _plan_label(plan)
                sql.append(
                    {
                        "id": event["executionId"],
                        "ms": float(event["time"]) - began,
                        "plan": head,
                        "tables": tables,
                    }
                )
    return SparkApp(path, name, start, end, list(queries.values()), sql, spark_jobs)


def apps(log_dir: Path, *, name: str | None = None, since_ms: float = 0) -> list[SparkApp]:
    """Applications logged in ``log_dir`` (optionally one app name, started after
    ``since_ms``), oldest first. Logs still being written (``.inprogress``) are included."""
    found = []
    for path in sorted(log_dir.glob("*")):
        if not path.is_file() or path.name.startswith("."):
            continue
        try:
            app = parse(path)
        except (OSError, ValueError):
            continue
        if (name is None or app.name == name) and app.start_ms >= since_ms:
            found.append(app)
    return sorted(found, key=lambda a: a.start_ms)


def phases(app: SparkApp, spawned_ms: float, exited_ms: float) -> dict[str, float]:
    """Split one job's wall time (ms) into the issue's phases.

    * ``process_start``: spawn (spark-submit, or the Airflow task's start) -> SparkContext up;
    * ``query_start``: SparkContext up -> first query started (imports, checkpoint checks,
      table loads, query planning);
    * ``batches``: time during which a trigger ran (union over the job's queries);
    * ``rest``: everything else (between queries, after the last batch: reconciliation,
      shutdown, and for Airflow tasks the checkpoint backup).

    A job without streaming queries (``late_corrections``, the gate) has ``work`` instead
    of ``query_start``/``batches``: SparkContext up -> application end.
    """
    total = exited_ms - spawned_ms
    out = {"wall": total, "process_start": app.start_ms - spawned_ms}
    if app.queries:
        first = app.first_query_ms or app.start_ms
        out["query_start"] = first - app.start_ms
        out["batches"] = app.batch_busy_ms()
        out["rest"] = total - out["process_start"] - out["query_start"] - out["batches"]
    else:
        out["work"] = (app.end_ms or exited_ms) - app.start_ms
        out["rest"] = total - out["process_start"] - out["work"]
    out["spark_jobs_running"] = app.jobs_busy_ms(app.start_ms, app.end_ms or exited_ms)
    return out
