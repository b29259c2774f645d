"""Airflow operators of the platform: thin layers over the Spark provider.

* :class:`SparkJobOperator`: ``spark-submit`` of one platform job module on the
  ``spark_default`` connection (``local[*]`` embedded; ``spark://host:7077`` on a cluster:
  only the connection changes). The Spark configuration (jars, Delta, shuffle partitions)
  is computed in ``execute()`` from the platform settings, never at DAG parse time.
* :class:`LayerGateOperator`: the quality gate of a layer; when no Delta version is pending
  it logs "nothing to validate" and passes without starting a Spark driver.

:func:`spark_submit_command` builds the same ``spark-submit`` command line for the streaming
supervisor, which starts the always-on jobs detached.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ingest_core.catalog import get_catalog

#: The job modules a SparkJobOperator may run (spark-submit entry points): every job of the
#: catalog (``include/pipeline.yaml``, streaming and batch), job name -> module.
JOB_MODULES: dict[str, str] = {n: j.module for n, j in get_catalog().applications.items()}


def job_application(job: str) -> str:
    """Path of the ``.py`` file spark-submit runs for ``job``.

    :raises ValueError: unknown job; the message lists the known ones.
    """
    try:
        module = JOB_MODULES[job]
    except KeyError:
        raise ValueError(f"unknown job {job!r}; known: {sorted(JOB_MODULES)}") from None
    spec = importlib.util.find_spec(module)
    assert spec is not None
    assert spec.origin is not None
    return spec.origin


def job_environment() -> dict[str, str]:
    """Environment of a job's driver: the interpreter that has this project installed (for
    the driver and the Python workers), loopback for Spark, UTC."""
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "TZ": "UTC",
    }


def _use_project_spark_submit() -> None:
    # The provider runs "spark-submit" from PATH: make it the one beside this interpreter
    # (pyspark's, same version as the jobs), not whatever else PATH offers.
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if not path.startswith(bin_dir + os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + path


def spark_submit_command(
    job: str, args: Sequence[str], conn_id: str = "spark_default"
) -> list[str]:
    """The ``spark-submit`` command line of ``job`` with ``args``, on connection ``conn_id``.

    Built by the Spark provider's hook (master, deploy mode and binary from the connection)
    with the platform's Spark configuration.

    :raises airflow.exceptions.AirflowNotFoundException: the connection is not defined.
    :raises spark_jobs.session.MissingJarsError: the Maven jars are missing.
    """
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from spark_jobs.session import spark_submit_conf

    _use_project_spark_submit()
    hook = SparkSubmitHook(
        conf=spark_submit_conf(job), conn_id=conn_id, name=job, application_args=list(args)
    )
    # The provider's own builder: the command matches what SparkSubmitOperator would run.
    return hook._build_spark_submit_command(job_application(job))


def inputs_snapshot(
    job: str, inputs: Sequence[str], input_jobs: Sequence[str] = ()
) -> dict[str, Any]:
    """What a scheduled job's run depends on, cheaply read without Spark: the Delta version
    of each input table, the newest committed batch of each of the job's checkpoint folders
    (a restore or reset changes it), and for ``silver_refine`` the landing files (name,
    size, modification time) it loads customers from.

    :param inputs: catalog table names the job reads.
    :param input_jobs: other jobs whose checkpoint progress the job depends on (the late
        corrections follow ``gold_aggregate``'s watermark).
    :returns: a JSON-serialisable dict; equal snapshots mean nothing new to process.
    """
    from ingest_core.catalog import get_catalog
    from ingest_core.checkpoint_health import query_dirs
    from ingest_core.delta_tables import delta_version, last_committed_batch
    from ingest_core.settings import get_settings

    settings, catalog = get_settings(), get_catalog()
    snapshot: dict[str, Any] = {
        "tables": {t: delta_version(catalog.table(t).path(settings)) for t in inputs}
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


class SparkJobOperator(SparkSubmitOperator):
    """Run one platform job with ``spark-submit`` on ``conn_id`` (default ``spark_default``).

    :param job: a key of :data:`JOB_MODULES` (``silver_refine``, ``gold_aggregate``...).
    :param job_args: the job's command-line arguments (templated), e.g.
        ``["--trigger", "available-now"]``.
    :param inputs: catalog tables the job reads. When given, the task does not start Spark
        if :func:`inputs_snapshot` equals the one taken at the start of the job's last
        successful run (nothing was committed since: an AvailableNow run would find
        nothing), and logs "inputs unchanged". The empty 15-minute cycle then costs no JVM.
        Never list a table the job writes itself: its own commit would count as new input.
    :param input_jobs: jobs whose checkpoint progress counts as input (see
        :func:`inputs_snapshot`).
    :param kwargs: passed to :class:`SparkSubmitOperator` (``conn_id``, ``pool``, ...).
    :raises ValueError: unknown ``job`` (at DAG parse time).
    """

    template_fields = (*SparkSubmitOperator.template_fields, "job_args")
    #: Repair before and back up after the run (off for jobs on staging checkpoints).
    manage_checkpoint = True

    def __init__(
        self,
        *,
        job: str,
        job_args: Sequence[str] = (),
        inputs: Sequence[str] = (),
        input_jobs: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        if job not in JOB_MODULES:
            raise ValueError(f"unknown job {job!r}; known: {sorted(JOB_MODULES)}")
        from ingest_core.catalog import get_catalog

        unknown = [t for t in inputs if t not in get_catalog().tables]
        if unknown:
            raise ValueError(f"unknown input tables {unknown}")
        kwargs.setdefault("name", job)
        super().__init__(application="", **kwargs)
        self.job = job
        self.job_args = list(job_args)
        self.inputs = list(inputs)
        self.input_jobs = list(input_jobs)

    def _inputs_file(self) -> Path:
        from ingest_core.runtime_files import runtime_files

        return runtime_files(self.job).folder / "inputs.json"

    def execute(self, context: Any) -> Any:
        """Repair a damaged checkpoint, spark-submit the job, then back up its checkpoint.

        For a job with a checkpoint (declared in ``include/pipeline.yaml``): before the run,
        :func:`ingest_core.recovery.recover` repairs crash leftovers (logged, audited);
        after a successful run, a verified backup is taken and retention applied.
        """
        import json

        from ingest_core.catalog import get_catalog
        from spark_jobs.session import spark_submit_conf

        snapshot = inputs_snapshot(self.job, self.inputs, self.input_jobs) if self.inputs else None
        recorded = self._inputs_file()
        if (
            snapshot is not None
            and recorded.exists()
            and json.loads(recorded.read_text()) == snapshot
        ):
            self.log.info(
                "%s: inputs unchanged since its last successful run (%s): nothing to "
                "process, Spark not started",
                self.job,
                snapshot["tables"],
            )
            return None
        checkpointed = self.job in get_catalog().jobs and self.manage_checkpoint
        if checkpointed:
            from ingest_core.recovery import recover

            for action in recover(self.job):
                self.log.warning("checkpoint recovery: %s", action)
        _use_project_spark_submit()
        self.application = job_application(self.job)
        self.application_args = [str(arg) for arg in self.job_args]
        self.conf = {**spark_submit_conf(self.job), **(self.conf or {})}
        self.env_vars = {**job_environment(), **(self.env_vars or {})}
        self._hook = None  # built from the fields above
        result = super().execute(context)
        if checkpointed:
            self._backup()
        if snapshot is not None:
            # Input versions as of the run's start (what it surely processed), the job's own
            # checkpoint as the run left it.
            after = inputs_snapshot(self.job, [])
            if "batches" in after:
                snapshot["batches"] = after["batches"]
            recorded.write_text(json.dumps(snapshot))
        return result

    def _backup(self) -> None:
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


class LayerGateOperator(SparkJobOperator):
    """Validate ``layer``'s increment with Great Expectations (``spark_jobs.quality.gate``).

    Fails (non-zero exit of the gate job) when an expectation fails: downstream tasks do not
    run, and every later run fails on the same increment until an operator resolves it.

    :param layer: ``silver`` or ``gold``.
    """

    template_fields = SparkJobOperator.template_fields

    def __init__(self, *, layer: str, **kwargs: Any) -> None:
        from spark_jobs.quality.suites import layer_rules

        layer_rules(layer)  # refuses an ungated layer at parse time
        args = ["validate", "--layer", layer, "--run-id", "{{ run_id }}"]
        super().__init__(job="quality_gate", job_args=args, **kwargs)
        self.layer = layer

    def execute(self, context: Any) -> Any:
        """Skip Spark when no Delta version is pending; else run the gate job."""
        from spark_jobs.quality.state import pending

        increments = pending(self.layer)
        if not increments:
            self.log.info("gate %s: nothing to validate (no new Delta versions)", self.layer)
            return None
        for inc in increments:
            self.log.info(
                "gate %s: %s versions %d..%d pending",
                self.layer,
                inc.table,
                inc.from_version,
                inc.to_version,
            )
        return super().execute(context)


class StagedJobOperator(SparkJobOperator):
    """Run a job of a ``layer_full_refresh`` on the refresh's staging folders
    (:class:`spark_jobs.layer_refresh.RefreshLayout`, keyed by the DAG run id): the rebuilt
    layers, new checkpoints and the staging gate bookkeeping; everything else stays live.

    Skipped when the refresh does not rebuild ``builds`` (a Gold refresh skips the Silver
    steps). No checkpoint repair or backup: the staging checkpoints are new.

    :param builds: the layer this task rebuilds or gates (``silver`` or ``gold``).
    """

    manage_checkpoint = False

    def __init__(self, *, builds: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.builds = builds

    def execute(self, context: Any) -> Any:
        """Skip or run the job with the staging environment (see the class doc)."""
        from airflow.sdk.exceptions import AirflowSkipException

        from ingest_core.settings import get_settings
        from spark_jobs.layer_refresh import RefreshLayout, layers_of

        layer = str(context["params"]["layer"])
        if self.builds not in layers_of(layer):
            raise AirflowSkipException(f"a {layer} refresh does not rebuild {self.builds}")
        layout = RefreshLayout(str(context["run_id"]), get_settings())
        self.env_vars = {**(self.env_vars or {}), **layout.environment(layer)}
        self.log.info("staging: %s", layout.staging)
        return super().execute(context)
