"""Cost of one ``medallion_incremental`` cycle, run as operators run it by hand:
``ingestctl airflow dags test medallion_incremental`` (the Airflow CLI with its own
metadata database; real tasks, real spark-submits).

The wall time is split with two sources:

* the ``dags test`` output (structured log lines with UTC times): each task's start and
  end, the moment its ``spark-submit`` was spawned (``Spark-Submit cmd:``), a gate's
  "nothing to validate";
* each Spark task's event log (:mod:`bench.eventlog`): SparkContext up, queries started,
  triggers, application end.

Per Spark task: ``pre_submit`` (operator work before spark-submit: checkpoint recovery
check, Spark configuration), ``process_start`` (spark-submit spawned -> SparkContext up: JVM,
Python, imports, checkpoint lock and checks, session), ``query_start`` (-> first query
started), ``batches`` (triggers running), ``after_queries`` (last trigger -> application end:
the job's own checks after its queries, e.g. Gold's reconciliation), ``exit_and_backup``
(application end -> task end: JVM exit and the checkpoint backup the operator takes).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from bench import eventlog
from bench.env import BIN, BenchEnv, Finished

_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z) \[\s*(\w+)\s*\] (.*)$")
GATE_TASKS = ("gate_silver", "gate_gold")


@dataclass
class TaskTiming:
    """One task of the run (epoch ms)."""

    task: str
    start_ms: float
    end_ms: float | None = None
    submit_ms: float | None = None
    skipped_spark: bool = False
    app: eventlog.SparkApp | None = None

    @property
    def wall_ms(self) -> float:
        return (self.end_ms or self.start_ms) - self.start_ms

    def phases_ms(self) -> dict[str, float]:
        """The split of the module docstring (only ``wall`` for a task without Spark)."""
        out = {"wall": self.wall_ms}
        if self.app is None or self.submit_ms is None or self.end_ms is None:
            return out
        app = self.app
        out["pre_submit"] = self.submit_ms - self.start_ms
        out["process_start"] = app.start_ms - self.submit_ms
        app_end = app.end_ms or self.end_ms
        if app.queries and any(q.progress for q in app.queries):
            first = app.first_query_ms or app.start_ms
            last = app.last_batch_end_ms or first
            out["query_start"] = first - app.start_ms
            out["batches"] = app.batch_busy_ms()
            # Gaps between a query's start and its first trigger count as query start.
            out["query_start"] += max(0.0, (last - first) - out["batches"])
            out["after_queries"] = app_end - last
        elif app.queries:
            # AvailableNow with nothing new: the query starts, finds no offsets, ends; no
            # progress event. Its whole run is query start.
            out["query_start"] = app_end - app.start_ms
        else:
            out["work"] = app_end - app.start_ms
        out["exit_and_backup"] = self.end_ms - app_end
        # Of the SparkContext's life, the time a Spark job ran (the rest is driver work).
        out["spark_jobs_running"] = app.jobs_busy_ms(app.start_ms, app_end)
        return out


@dataclass
class CycleRun:
    """One ``dags test`` run: its process, state and per-task timings."""

    process: Finished
    state: str
    tasks: list[TaskTiming] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return self.process.wall_s

    def split_s(self) -> dict[str, float]:
        """The issue's split over the whole cycle (seconds): process start, query start,
        batch and gate time, plus what remains (operator work around spark-submit, Airflow
        itself: the CLI's start, DAG parsing, run creation, between tasks)."""
        totals: dict[str, float] = defaultdict(float)
        for task in self.tasks:
            phases = task.phases_ms()
            if task.task in GATE_TASKS:
                totals["gate"] += phases["wall"]
                continue
            for key, value in phases.items():
                if key not in ("wall", "spark_jobs_running"):
                    totals[key] += value
            if len(phases) == 1:  # a task without Spark (publish_assets)
                totals["other_tasks"] += phases["wall"]
        totals["airflow"] = (
            self.process.exited_ms - self.process.spawned_ms - sum(t.wall_ms for t in self.tasks)
        )
        return {k: round(v / 1000, 3) for k, v in totals.items()}

    def profile(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "wall_s": round(self.wall_s, 3),
            "split_s": self.split_s(),
            "tasks": {
                t.task: {
                    **{k: round(v / 1000, 3) for k, v in t.phases_ms().items()},
                    "spark": t.app is not None,
                    "skipped_spark": t.skipped_spark,
                    **(
                        {
                            "progress_duration_s": {
                                k: round(v / 1000, 3) for k, v in t.app.duration_totals().items()
                            },
                            "triggers": sum(len(q.progress) for q in t.app.queries),
                            "input_rows": t.app.input_rows,
                        }
                        if t.app is not None
                        else {}
                    ),
                }
                for t in self.tasks
            },
            "log": str(self.process.log),
        }


def parse_output(text: str) -> tuple[str, list[TaskTiming]]:
    """Task timings and the run's final state from ``airflow dags test`` output."""
    tasks: dict[str, TaskTiming] = {}
    current: TaskTiming | None = None
    state = "unknown"
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match:
            if "DagRun Finished" in line:
                state = "success" if "state=success" in line else "failed"
            continue
        when = eventlog.iso_ms(match.group(1))
        message = match.group(3)
        if message.startswith("[DAG TEST] starting task_id="):
            name = message.split("task_id=", 1)[1].split()[0]
            current = tasks[name] = TaskTiming(name, when)
        elif message.startswith("[DAG TEST] end task task_id="):
            name = message.split("task_id=", 1)[1].split()[0]
            if name in tasks:
                tasks[name].end_ms = when
            current = None
        elif message.startswith("Spark-Submit cmd:") and current is not None:
            current.submit_ms = when
        elif "nothing to validate" in message and current is not None:
            current.skipped_spark = True
        if "DagRun Finished" in message:
            state = "success" if "state=success" in message else "failed"
    return state, list(tasks.values())


def run_cycle(env: BenchEnv, label: str, timeout_s: float = 1800) -> CycleRun:
    """``ingestctl airflow dags test medallion_incremental`` in the current home; match each
    Spark task to its event log."""
    done = env.run(
        [str(BIN / "ingestctl"), "airflow", "dags", "test", "medallion_incremental"],
        f"{label}.log",
        timeout_s=timeout_s,
        check=False,
    )
    state, tasks = parse_output(done.log.read_text(errors="replace"))
    if done.returncode != 0 and state == "unknown":
        state = f"exit {done.returncode}"
    for task in tasks:
        if task.submit_ms is None:
            continue
        found = [
            a
            for a in eventlog.apps(env.event_log_dir, since_ms=task.submit_ms)
            if task.end_ms is None or a.start_ms <= task.end_ms
        ]
        task.app = found[0] if found else None
    return CycleRun(done, state, tasks)


def prepare_cli(env: BenchEnv) -> Finished:
    """Migrate the CLI's metadata database once (``ingestctl airflow`` does it on first use;
    done here so that no cycle pays for it)."""
    return env.run(
        [str(BIN / "ingestctl"), "airflow", "dags", "list"], "airflow-cli-init.log", timeout_s=900
    )
