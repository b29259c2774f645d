"""Hooks of the platform: what the operators and the streaming supervisor task do, over the
Spark provider's :class:`~airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook`
(its constructor and ``submit(application)``; an always-on job's launcher also its
``_build_spark_submit_command``, see :meth:`PlatformJobHook.launch`).

* :class:`PlatformJobHook`: one ``spark-submit`` of a platform job on a connection
  (``spark_default``: ``local[*]`` embedded, ``spark://host:7077`` on a cluster), with the
  platform's Spark configuration and driver environment, and the work around it: the
  "inputs unchanged" check, checkpoint recovery before the run, a verified checkpoint backup
  after it. :class:`~ingest_platform.operators.SparkJobOperator` delegates to it.
* :class:`StreamingJobHook`: an always-on job (start detached, heartbeat, running or not,
  stop), over :mod:`ingest_platform.supervisor`. A detached start runs
  ``python -m ingest_platform.hooks submit <job> ...`` in a session of its own: that
  launcher has :class:`PlatformJobHook` build the command ``SparkSubmitHook.submit`` would
  run, then becomes it (:meth:`PlatformJobHook.launch`, ``exec``), so that no Python process
  holding Airflow's imports (~140 MB) stays beside each always-on driver for its lifetime.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import psutil
from airflow.sdk import BaseHook

from ingest_core.catalog import job_application
from ingest_core.processes import stop_processes
from ingest_core.runtime_files import read_json, write_json

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from ingest_platform.supervisor import JobStatus

#: The module a detached start runs (``python -m``): see :func:`main`.
LAUNCHER_MODULE = "ingest_platform.hooks"


def job_environment() -> dict[str, str]:
    """Environment of a job's spark-submit and driver: the interpreter that has this project
    installed (for the driver and the Python workers), loopback for Spark, UTC, and ``PATH``
    with this interpreter's ``bin`` first.

    ``PATH``: the provider runs "spark-submit" by name, and it must be the one beside this
    interpreter (pyspark's, the jobs' version), not whatever else ``PATH`` offers. It is given
    to the one process (``subprocess`` and ``os.execvpe`` look the command up on the ``PATH`` of
    the environment they are given), never set on this process's own environment.
    """
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "TZ": "UTC",
        "PATH": bin_dir if not path else f"{bin_dir}{os.pathsep}{path}",
    }


#: The metadata database of the always-on launcher: none it uses (see
#: :meth:`StreamingJobHook.environment`).
LAUNCHER_DATABASE = "sqlite://"


def inputs_snapshot(
    job: str, inputs: Sequence[str], input_jobs: Sequence[str] = ()
) -> dict[str, Any]:
    """What a scheduled job's run depends on, cheaply read without Spark: the newest Delta
    version of each input table that changed its rows (:func:`ingest_core.delta_tables.
    last_data_commit`: maintenance's OPTIMIZE, VACUUM and property commits and empty batches
    give a job nothing to do), the newest committed batch of each of the job's checkpoint folders
    (a restore or reset changes it), and for ``silver_refine`` the landing files (name,
    size, modification time) it loads customers from.

    :param inputs: catalog table names the job reads.
    :param input_jobs: other jobs whose checkpoint progress the job depends on (the late
        corrections follow ``gold_aggregate``'s watermark).
    :returns: a JSON-serialisable dict; equal snapshots mean nothing new to process.
    """
    from ingest_core.catalog import get_catalog
    from ingest_core.checkpoint_health import query_dirs
    from ingest_core.delta_tables import last_committed_batch, last_data_version
    from ingest_core.settings import get_settings

    settings, catalog = get_settings(), get_catalog()
    snapshot: dict[str, Any] = {
        "tables": {t: last_data_version(catalog.table(t).path(settings)) for t in inputs}
    }
    if job in catalog.jobs:
        folders = query_dirs(catalog.job(job).checkpoint(settings))
        snapshot["batches"] = {name: last_committed_batch(f) for name, f in folders.items()}
    for other in input_jobs:
        folders = query_dirs(catalog.job(other).checkpoint(settings))
        snapshot[f"{other}.batches"] = {n: last_committed_batch(f) for n, f in folders.items()}
    if job == "silver_refine":
        landing = settings.storage.landing_path
        files = sorted(p for p in landing.rglob("*") if p.is_file()) if landing.is_dir() else []
        snapshot["landing"] = [
            [str(p.relative_to(landing)), p.stat().st_size, p.stat().st_mtime_ns] for p in files
        ]
    return snapshot


class PlatformJobHook(BaseHook):
    """``spark-submit`` one platform job through the Spark provider's ``SparkSubmitHook``.

    :param job: a platform job (``silver_refine``, ``bronze_ingest``...).
    :param job_args: the job's command-line arguments (``--trigger available-now``...).
    :param conn_id: the Spark connection (master, deploy mode, binary).
    :param conf: Spark properties over the platform's own (:func:`spark_jobs.session.
        spark_submit_conf`).
    :param env_vars: driver environment over :func:`job_environment`.
    :param inputs: catalog tables the job reads; when given, :meth:`run` skips Spark while
        :func:`inputs_snapshot` equals the one recorded at the last successful run's start.
    :param input_jobs: jobs whose checkpoint progress counts as input.
    :param manage_checkpoint: repair the job's checkpoint before the run and back it up
        after (off for jobs on staging checkpoints).
    :param submit_options: more ``SparkSubmitHook`` constructor arguments (``files``,
        ``executor_memory``, ``post_submit_commands``...).
    :raises ValueError: unknown ``job``.
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"
    hook_name = "Platform Spark job"

    def __init__(
        self,
        job: str,
        job_args: Sequence[Any] = (),
        *,
        conn_id: str = default_conn_name,
        conf: Mapping[str, Any] | None = None,
        env_vars: Mapping[str, Any] | None = None,
        name: str | None = None,
        inputs: Sequence[str] = (),
        input_jobs: Sequence[str] = (),
        manage_checkpoint: bool = True,
        submit_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.application = job_application(job)  # refuses an unknown job
        self.job = job
        self.job_args = [str(arg) for arg in job_args]
        self.conn_id = conn_id
        self.conf = dict(conf or {})
        self.env_vars = dict(env_vars or {})
        self.name = name or job
        self.inputs = list(inputs)
        self.input_jobs = list(input_jobs)
        self.manage_checkpoint = manage_checkpoint
        self.submit_options = dict(submit_options or {})
        #: The provider hook of the running (or last) spark-submit, for :meth:`on_kill`.
        self._submit_hook: SparkSubmitHook | None = None
        #: What the last successful :meth:`run` processed (its inputs' snapshot, see
        #: :func:`inputs_snapshot`); None before, after a skip, or without ``inputs``.
        self.processed: dict[str, Any] | None = None
        self._killed = False

    def get_conn(self) -> Any:
        """The Spark connection (:class:`airflow.sdk.Connection`).

        :raises airflow.exceptions.AirflowNotFoundException: it is not defined.
        """
        return self.get_connection(self.conn_id)

    def spark_submit_hook(self) -> SparkSubmitHook:
        """The provider's hook for this job: the platform's Spark configuration (jars,
        Delta, shuffle partitions) under ``conf``, the driver environment under
        ``env_vars``, the job's arguments; master and deploy mode from ``conn_id``.

        :raises airflow.exceptions.AirflowNotFoundException: the connection is not defined.
        :raises ingest_core.spark_config.MissingJarsError: the Maven jars are missing.
        """
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        from ingest_core.spark_config import spark_submit_conf

        return SparkSubmitHook(
            **self.submit_options,
            conf={**spark_submit_conf(self.job), **self.conf},
            conn_id=self.conn_id,
            name=self.name,
            application_args=list(self.job_args),
            env_vars={**job_environment(), **self.env_vars},
        )

    def submit(self) -> str | None:
        """Run ``spark-submit`` and wait for it (the output goes to this hook's log).

        :returns: the driver id the provider reports (None in client mode).
        :raises airflow.exceptions.AirflowException: spark-submit failed (the provider's
            message: the masked command, the exit code, the log's tail), or :meth:`on_kill`
            was called before it started.
        """
        from airflow.exceptions import AirflowException

        if self._killed:
            raise AirflowException(f"{self.job}: the task was killed; spark-submit not started")
        self._submit_hook = self.spark_submit_hook()
        return self._submit_hook.submit(self.application)

    def on_kill(self, grace_s: float = 10) -> None:
        """Stop this hook's spark-submit and everything it started, and start no other.

        The provider hook's ``on_kill`` kills spark-submit (in client mode, the driver JVM;
        on a cluster, also the driver it submitted) and its ``submit`` reaps it. The job's
        Python driver, a child of that JVM which holds the job's checkpoint lock, and its
        Python workers are not the provider's to know: they are found before the kill, as the
        descendants of this process's spark-submit child (its command line names the job's
        application file), then sent SIGTERM, and SIGKILL after ``grace_s`` seconds. The
        kernel frees the checkpoint lock with its holder. Airflow calls this through the
        operator's ``on_kill`` on SIGTERM to the task and past its ``execution_timeout``; a
        task marked failed is signalled as a process group, which reaches these processes too.
        """
        self._killed = True
        started = self._spark_submit_descendants()
        if self._submit_hook is not None:
            self._submit_hook.on_kill()
        if started:
            self.log.info(
                "%s: stopping what spark-submit started (pids %s)",
                self.job,
                [p.pid for p in started],
            )
            stop_processes(started, grace_s=grace_s)

    def _spark_submit_descendants(self) -> list[psutil.Process]:
        """The descendants of this process's spark-submit children that run this job's
        application (not the children themselves: the provider's ``submit`` waits for those,
        and a second waiter would take its exit status)."""
        found: list[psutil.Process] = []
        for child in psutil.Process().children():
            with contextlib.suppress(psutil.Error):
                if self.application in child.cmdline():
                    found += child.children(recursive=True)
        return found

    def launch(self) -> NoReturn:
        """Replace this process by the job's ``spark-submit`` (:func:`os.execvpe`): the command
        and environment ``SparkSubmitHook.submit`` would run (the provider's
        ``_build_spark_submit_command``, which sets its ``_env``), without the provider's
        ``Popen`` and log-reading loop around it. Same pid, process group and output
        descriptors; the exit status is spark-submit's.

        Why: an always-on job's launcher lived as long as its driver only to pipe its output,
        holding Airflow's and the provider's imports (138 MB resident per always-on job in
        the demo, ``python -m bench --only memory --demo``). A scheduled job's task keeps
        :meth:`submit`: its output belongs in the task's log.

        :raises airflow.exceptions.AirflowNotFoundException: the connection is not defined.
        :raises ingest_core.spark_config.MissingJarsError: the Maven jars are missing.
        :raises OSError: ``spark-submit`` cannot be executed (not found, not executable).
        """
        hook = self.spark_submit_hook()
        # The provider's only private API this platform uses: no public method builds the
        # command without running it (``submit`` does both). What to ask upstream
        # (apache/airflow, providers/apache/spark): a public ``build_command(application)``
        # returning the argument list and environment; not filed from this sandbox, which
        # has no access to GitHub. test_hooks.py::test_the_launcher_becomes_spark_submit
        # fails first if a provider release changes either name.
        command = hook._build_spark_submit_command(self.application)
        environment = {**os.environ, **(hook._env or {})}
        # The provider has logged the masked command ("Spark-Submit cmd: ...").
        sys.stdout.flush()
        sys.stderr.flush()
        os.execvpe(command[0], command, environment)

    def _inputs_file(self) -> Path:
        from ingest_core.runtime_files import runtime_files

        return runtime_files(self.job).folder / "inputs.json"

    def run(self) -> bool:
        """Repair a damaged checkpoint, spark-submit the job, then back up its checkpoint.

        For a job with a checkpoint (declared in ``include/pipeline.yaml``) and
        ``manage_checkpoint``: before the run, :func:`ingest_core.recovery.recover` repairs
        crash leftovers (logged, audited); after a successful run, a verified backup is taken
        and retention applied. With ``inputs``, Spark is not started when nothing changed
        since the last successful run ("inputs unchanged" is logged).

        :returns: False when skipped (inputs unchanged, or none of them exists yet), True
            when the job ran.
        :raises airflow.exceptions.AirflowException: spark-submit failed (no backup, no
            inputs record: the next run tries again).
        """
        from ingest_core.catalog import get_catalog

        snapshot = inputs_snapshot(self.job, self.inputs, self.input_jobs) if self.inputs else None
        if snapshot is not None and all(v is None for v in snapshot["tables"].values()):
            # A new platform: the layer below has not written yet. Nothing to process, and
            # the job would only fail with "no <table>: run <job> first".
            self.log.info(
                "%s: none of its input tables %s exists yet: nothing to process, Spark not started",
                self.job,
                sorted(snapshot["tables"]),
            )
            return False
        recorded = self._inputs_file()
        if snapshot is not None and read_json(recorded) == snapshot:
            self.log.info(
                "%s: inputs unchanged since its last successful run (%s): nothing to "
                "process, Spark not started",
                self.job,
                snapshot["tables"],
            )
            return False
        checkpointed = self.job in get_catalog().jobs and self.manage_checkpoint
        if checkpointed:
            from ingest_core.recovery import recover

            for action in recover(self.job):
                self.log.warning("checkpoint recovery: %s", action)
        self.submit()
        if checkpointed:
            self.backup()
        if snapshot is not None:
            # Input versions as of the run's start (what it surely processed), the job's own
            # checkpoint as the run left it.
            after = inputs_snapshot(self.job, [])
            if "batches" in after:
                snapshot["batches"] = after["batches"]
            write_json(recorded, snapshot)  # atomic: a kill mid-write leaves the old record
            self.processed = snapshot
        return True

    def backup(self) -> None:
        """Take a verified backup of the job's checkpoint and apply retention; a checkpoint
        with nothing committed yet is logged, not an error."""
        from ingest_core.checkpoints import BackupError, backup
        from ingest_core.recovery import prune

        try:
            info = backup(self.job)
        except BackupError as error:  # e.g. nothing committed yet: nothing to protect
            self.log.info("no checkpoint backup: %s", error)
            return
        self.log.info("checkpoint backup %s: %s", info.backup_id, info.describe())
        removed = prune(self.job)
        if removed:
            self.log.info("retention removed backups %s", removed)


class StreamingJobHook(BaseHook):
    """An always-on job (``mode: always_on``) kept running by the supervisor task.

    :param job: an always-on job (``bronze_ingest``, ``payment_alerts``,
        ``payment_alerts_rt``).
    :param job_args: the job's arguments; default ``--trigger <its default trigger>``.
    :param conn_id: the Spark connection its ``spark-submit`` uses.
    :raises ValueError: ``job`` is not an always-on job.
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"
    hook_name = "Platform always-on job"

    def __init__(
        self, job: str, job_args: Sequence[str] | None = None, *, conn_id: str = default_conn_name
    ) -> None:
        super().__init__()
        from ingest_core.catalog import get_catalog
        from ingest_platform.supervisor import always_on_jobs

        if job not in always_on_jobs():
            raise ValueError(f"{job!r} is not an always-on job; always-on jobs: {always_on_jobs()}")
        self.job = job
        if job_args is None:
            job_args = ["--trigger", get_catalog().job(job).default_trigger]
        self.job_args = list(job_args)
        self.conn_id = conn_id

    def get_conn(self) -> Any:
        """The Spark connection (:class:`airflow.sdk.Connection`).

        :raises airflow.exceptions.AirflowNotFoundException: it is not defined.
        """
        return self.get_connection(self.conn_id)

    def command(self) -> list[str]:
        """The detached launcher's command line: ``python -m ingest_platform.hooks submit``
        with the job, connection and arguments (see :func:`main`)."""
        return [
            sys.executable,
            "-m",
            LAUNCHER_MODULE,
            "submit",
            "--conn-id",
            self.conn_id,
            self.job,
            "--",
            *self.job_args,
        ]

    def environment(self) -> dict[str, str]:
        """The launcher's extra environment: :func:`job_environment` and the connection,
        resolved here (in the Airflow task) and passed as ``AIRFLOW_CONN_<ID>``: the
        detached process has no channel to Airflow's connection store.

        :raises airflow.exceptions.AirflowNotFoundException: the connection is not defined.
        :raises ingest_core.spark_config.MissingJarsError: the Maven jars are missing (said here,
            in the task, rather than in the detached launcher's log).
        """
        from ingest_core.spark_config import spark_submit_conf

        spark_submit_conf(self.job)
        return {
            **job_environment(),
            f"AIRFLOW_CONN_{self.conn_id.upper()}": self.get_conn().as_json(),
            # Airflow 3 hands its task processes an unusable metadata-database URL (tasks
            # may not reach the database), and `import airflow` in the launcher fails to
            # parse it. The launcher needs no database (its connection is the variable
            # above): an in-memory SQLite that nothing opens.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": LAUNCHER_DATABASE,
        }

    def supervise(self, echo: Callable[[str], None] = print) -> str:
        """One supervision round (:func:`ingest_platform.supervisor.supervise`): healthy,
        starting, restarted, backed off, or waiting for the Kafka cluster
        (:func:`ingest_core.topics.broker_problem`) before a restart.

        :returns: what was done, one line.
        :raises ingest_platform.supervisor.SupervisorError: the job keeps failing, or a
            start failed.
        """
        from ingest_core.topics import broker_problem
        from ingest_platform import supervisor

        return supervisor.supervise(
            self.job, self.command(), env=self.environment(), echo=echo, probe=broker_problem
        )

    def start(self, wait_s: float | None = None) -> int:
        """Start the job detached and wait (``wait_s`` seconds, see
        :func:`ingest_platform.supervisor.start`) until its driver holds its checkpoint lock.

        :returns: the driver's pid.
        :raises ingest_platform.supervisor.SupervisorError: it already runs, exited, or did
            not take the lock in time.
        """
        from ingest_platform import supervisor

        return supervisor.start(self.job, self.command(), env=self.environment(), wait_s=wait_s)

    def enable(self) -> None:
        """Re-enable the job after an operator's stop; forget its restart history."""
        from ingest_platform import supervisor

        supervisor.enable(self.job)

    def pause(self, by: str) -> tuple[Path, str]:
        """Stop the job until :meth:`resume` (:func:`ingest_platform.supervisor.pause`); an
        operator's stop meanwhile stays in force.

        :returns: the pause's token and the stop's outcome, one line.
        """
        from ingest_platform import supervisor

        return supervisor.pause(self.job, by)

    def resume(self, token: Path) -> None:
        """End a pause of :meth:`pause`: the next supervisor round starts the job, unless
        another pause or an operator's stop holds it."""
        from ingest_platform import supervisor

        supervisor.resume(self.job, token)

    def stop(self, disable: bool = True) -> str:
        """Stop the job between micro-batches (terminate it after
        ``supervisor.stop_timeout_s`` + 30 seconds) and, by default, disable it.

        :returns: what happened, one line.
        """
        from ingest_platform import supervisor

        return supervisor.stop(self.job, disable=disable)

    def status(self) -> JobStatus:
        """Running or not, its pid, disabled or not, its heartbeat and the heartbeat's age."""
        from ingest_platform import supervisor

        return supervisor.status(self.job)

    def is_running(self) -> bool:
        """Whether a live driver of the job holds its checkpoint lock."""
        from ingest_platform import supervisor

        return supervisor.driver_pid(self.job) is not None

    def heartbeat(self) -> dict[str, Any] | None:
        """The job's heartbeat JSON (None before its first), see
        :class:`spark_jobs.streaming_runtime.HeartbeatListener`."""
        return self.status().heartbeat


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ingest_platform.hooks submit [--conn-id ID] <job> -- <job args>``: the
    detached launcher of an always-on job. Becomes the job's spark-submit
    (:meth:`PlatformJobHook.launch`; checkpoint work is the supervisor's), whose output goes
    where the launcher's did and whose exit status is the process's.

    :returns: only when spark-submit could not be executed: 127, the message on stderr (as a
        shell says "command not found").
    """
    job, conn_id, job_args = parse_launcher_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    try:
        PlatformJobHook(job, job_args, conn_id=conn_id, manage_checkpoint=False).launch()
    except OSError as error:
        print(f"{job}: cannot execute spark-submit: {error}", file=sys.stderr)
    return 127


def parse_launcher_args(argv: Sequence[str] | None = None) -> tuple[str, str, list[str]]:
    """``submit [--conn-id ID] <job> [-- <job args>]`` -> (job, connection id, job args).

    Options come before the job: everything after it is the job's, even what looks like an
    option of the launcher (argparse's ``REMAINDER``).

    :raises SystemExit: unparsable arguments (argparse prints the usage).
    """
    parser = argparse.ArgumentParser(prog=f"python -m {LAUNCHER_MODULE}")
    commands = parser.add_subparsers(dest="command", required=True)
    submit = commands.add_parser("submit", help="spark-submit a job and wait for it")
    submit.add_argument("--conn-id", default=PlatformJobHook.default_conn_name)
    submit.add_argument("job")
    submit.add_argument("job_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    job_args = args.job_args[1:] if args.job_args[:1] == ["--"] else args.job_args
    return args.job, args.conn_id, list(job_args)


if __name__ == "__main__":
    sys.exit(main())
