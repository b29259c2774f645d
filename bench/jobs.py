"""Run the platform's Spark jobs with their real entry points and time them.

A job is started with the ``spark-submit`` command Airflow would run
(:func:`submit_command`: what the Spark provider's hook runs on ``spark_default`` =
``local[*]``, with the platform's ``--conf``), in the bench's environment; its Spark
event log (see :mod:`bench.eventlog`) says where the time went.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench import eventlog
from bench.env import BIN, REPO, BenchEnv, BenchError, Finished

PASSTHROUGH = REPO / "bench" / "passthrough.py"


@dataclass
class JobRun:
    """One finished job: the process and what its event log says."""

    job: str
    process: Finished
    app: eventlog.SparkApp | None

    @property
    def phases_ms(self) -> dict[str, float]:
        if self.app is None:
            return {"wall": self.process.exited_ms - self.process.spawned_ms}
        return eventlog.phases(self.app, self.process.spawned_ms, self.process.exited_ms)

    @property
    def query_span_s(self) -> float | None:
        """First query start -> end of the last trigger: the streaming work, without the JVM
        and session start or the job's work after its queries."""
        if self.app is None or self.app.first_query_ms is None:
            return None
        end = self.app.last_batch_end_ms or self.app.first_query_ms
        return (end - self.app.first_query_ms) / 1000

    def profile(self, top_sql: int = 5) -> dict[str, Any]:
        """Phases (s), summed progress ``durationMs`` (s), batches, input rows, top SQL."""
        out: dict[str, Any] = {
            "phases_s": {k: round(v / 1000, 3) for k, v in self.phases_ms.items()},
            "log": str(self.process.log),
        }
        if self.app is not None:
            out["event_log"] = str(self.app.path)
            out["triggers"] = sum(len(q.progress) for q in self.app.queries)
            out["input_rows"] = self.app.input_rows
            out["progress_duration_s"] = {
                k: round(v / 1000, 3) for k, v in self.app.duration_totals().items()
            }
            out["top_sql"] = [
                {"s": round(s["ms"] / 1000, 3), "plan": s["plan"], "tables": s["tables"]}
                for s in self.app.top_sql(top_sql)
            ]
        return out


def submit_command(
    job: str,
    args: Sequence[str],
    master: str = "local[*]",
    conf_overrides: Mapping[str, str] | None = None,
) -> list[str]:
    """The spark-submit command of a platform job, or of the bench's passthrough
    (``job == "passthrough"``: bronze_ingest's, with the application and name swapped).

    The command Airflow's ``SparkSubmitHook`` runs on the embedded ``spark_default``
    connection: ``spark-submit --master local[*]``, the platform's ``--conf``
    (:func:`spark_jobs.session.spark_submit_conf`), ``--name``, the job's application and
    arguments. Written out here because the provider builds it only in a private method.
    ``master`` and ``conf_overrides`` change both for a cluster (:mod:`bench.cluster`).
    """
    from ingest_platform.operators import job_application
    from spark_jobs.session import spark_submit_conf

    name = "bench_passthrough" if job == "passthrough" else job
    conf = spark_submit_conf(name) | dict(conf_overrides or {})
    application = str(PASSTHROUGH) if job == "passthrough" else job_application(job)
    return [
        str(BIN / "spark-submit"),
        "--master",
        master,
        *[part for key, value in conf.items() for part in ("--conf", f"{key}={value}")],
        "--name",
        name,
        application,
        *map(str, args),
    ]


def run_job(
    env: BenchEnv,
    job: str,
    args: Sequence[str],
    label: str,
    timeout_s: float = 3600,
    master: str = "local[*]",
    conf_overrides: Mapping[str, str] | None = None,
) -> JobRun:
    """spark-submit ``job`` in the current home (:meth:`BenchEnv.use`) on ``master``, wait,
    parse its event log. :raises BenchError: the job failed (its log's tail in the message)."""
    from ingest_platform.hooks import job_environment

    command = submit_command(job, args, master, conf_overrides)
    done = env.run(command, f"{label}.log", env=job_environment(), timeout_s=timeout_s)
    app_name = "bench_passthrough" if job == "passthrough" else job
    found = eventlog.apps(env.event_log_dir, name=app_name, since_ms=done.spawned_ms)
    if not found:
        raise BenchError(f"{job}: no Spark event log in {env.event_log_dir} (log {done.log})")
    return JobRun(job, done, found[0])
