"""Airflow operators of the platform: thin layers over its hooks
(:mod:`ingest_platform.hooks`), which use the Spark provider's ``SparkSubmitHook``.

* :class:`SparkJobOperator`: ``spark-submit`` of one platform job module on the
  ``spark_default`` connection (``local[*]`` embedded; ``spark://host:7077`` on a cluster:
  only the connection changes), through :class:`~ingest_platform.hooks.PlatformJobHook`.
  The Spark configuration (jars, Delta, shuffle partitions) is computed in ``execute()``
  from the platform settings, never at DAG parse time.
* :class:`LayerGateOperator`: the quality gate of a layer; when no Delta version is pending
  it logs "nothing to validate" and passes without starting a Spark driver.

Each reports OpenLineage inputs and outputs derived from the catalog
(:mod:`ingest_core.lineage`; Kafka topics as ``kafka://`` datasets, Delta tables by their
path) through ``get_openlineage_facets_on_start`` / ``_on_complete``, which Airflow's
OpenLineage provider calls when the task starts and ends (docs/lineage.md). This module
imports the provider only inside those methods (the Spark provider's operator module loads
parts of it on its own). Nothing is injected into the Spark application (the platform ships
no OpenLineage Spark listener jar).

The streaming supervisor starts the always-on jobs detached through
:class:`~ingest_platform.hooks.StreamingJobHook`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ingest_core.catalog import get_catalog, job_application
from ingest_core.settings import PlatformSettings, get_settings
from ingest_platform.hooks import PlatformJobHook, inputs_snapshot, job_environment

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

    from ingest_core.lineage import JobLineage, LineageDataset, SchemaField

__all__ = [
    "JOB_MODULES",
    "LayerGateOperator",
    "SparkJobOperator",
    "StagedJobOperator",
    "inputs_snapshot",
    "job_application",
    "job_environment",
]

#: The job modules a SparkJobOperator may run (spark-submit entry points): every job of the
#: catalog (``include/pipeline.yaml``, streaming and batch), job name -> module.
JOB_MODULES: dict[str, str] = {n: j.module for n, j in get_catalog().applications.items()}


#: SparkSubmitOperator arguments that inject OpenLineage settings into the Spark application:
#: they need OpenLineage's Spark listener jar, which the platform does not ship.
_OPENLINEAGE_SPARK_INJECTION = (
    "openlineage_inject_parent_job_info",
    "openlineage_inject_transport_info",
)


def _schema_fields(fields: tuple[SchemaField, ...]) -> list[Any]:
    from airflow.providers.common.compat.openlineage.facet import SchemaDatasetFacetFields

    return [
        # A plain column has no nested "fields" in the event (None is left out).
        SchemaDatasetFacetFields(name=f.name, type=f.type, fields=_schema_fields(f.fields) or None)
        for f in fields
    ]


def _dataset(dataset: LineageDataset) -> Any:
    from airflow.providers.common.compat.openlineage.facet import Dataset, SchemaDatasetFacet

    facets: dict[str, Any] = {}
    if dataset.fields is not None:
        facets["schema"] = SchemaDatasetFacet(fields=_schema_fields(dataset.fields))
    return Dataset(namespace=dataset.namespace, name=dataset.name, facets=facets)


def operator_lineage(lineage: JobLineage) -> OperatorLineage:
    """``lineage`` as the OpenLineage provider's ``OperatorLineage`` (datasets with a schema
    facet where the catalog knows the columns)."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(
        inputs=[_dataset(d) for d in lineage.inputs],
        outputs=[_dataset(d) for d in lineage.outputs],
    )


def _current_context() -> Any:
    """The running task's context (set by the task runner while the OpenLineage provider
    extracts a task's start lineage), or None outside a task."""
    from airflow.sdk import get_current_context

    try:
        return get_current_context()
    except RuntimeError:
        return None


def _context_of(task_instance: Any) -> Any:
    """The template context of the task instance the provider passes on completion, or None."""
    get = getattr(task_instance, "get_template_context", None)
    return get() if callable(get) else None


#: The ``SparkSubmitHook`` arguments a :class:`SparkJobOperator` passes on from its own
#: keyword arguments (the provider's ``SparkSubmitOperator`` passes the same ones to its
#: hook). The job's application, arguments, Spark configuration, name, connection and
#: environment are set by :class:`~ingest_platform.hooks.PlatformJobHook` itself.
#: tests/unit/ingest_platform/test_operators.py checks that each is an argument of the
#: installed provider's hook.
SUBMIT_OPTIONS = frozenset(
    {
        "archives",
        "deploy_mode",
        "driver_class_path",
        "driver_memory",
        "exclude_packages",
        "executor_cores",
        "executor_memory",
        "files",
        "jars",
        "java_class",
        "keytab",
        "num_executors",
        "packages",
        "post_submit_commands",
        "principal",
        "properties_file",
        "proxy_user",
        "py_files",
        "repositories",
        "spark_binary",
        "status_poll_interval",
        "total_executor_cores",
        "track_driver_via_k8s_api",
        "use_krb5ccache",
        "verbose",
        "yarn_queue",
        "yarn_rm_auth",
        "yarn_track_via_rm_api",
    }
)


class SparkJobOperator(SparkSubmitOperator):
    """Run one platform job with ``spark-submit`` on ``conn_id`` (default ``spark_default``).

    :param job: a key of :data:`JOB_MODULES` (``silver_refine``, ``gold_aggregate``...).
    :param job_args: the job's command-line arguments (templated), e.g.
        ``["--trigger", "available-now"]``.
    :param inputs: catalog tables the job reads. When given, the task does not start Spark
        if :func:`inputs_snapshot` equals the one taken at the start of the job's last
        successful run (no data was committed since: an AvailableNow run would find
        nothing), and ends *skipped* ("inputs unchanged"). The empty 15-minute cycle then
        costs no JVM. Downstream tasks that must still run use a trigger rule that accepts a
        skipped upstream (``medallion_incremental``).
        Never list a table the job writes itself: its own commit would count as new input.
    :param input_jobs: jobs whose checkpoint progress counts as input (see
        :func:`inputs_snapshot`).
    :param rebuild: the task rebuilds from the whole history: its ``execution_timeout``
        defaults to ``tasks.rebuild_timeout_s`` instead of ``tasks.spark_timeout_s``
        (:class:`ingest_core.settings.TaskSettings`). An ``execution_timeout`` given here or
        in the DAG's ``default_args`` wins.
    :param kwargs: passed to :class:`SparkSubmitOperator` (``conn_id``, ``pool``, ...).
    :raises ValueError: unknown ``job`` (at DAG parse time); an OpenLineage injection into
        Spark asked for (``openlineage_inject_parent_job_info`` or
        ``openlineage_inject_transport_info`` true: the platform has no OpenLineage Spark
        listener; the task's own lineage comes from :meth:`lineage`).
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
        rebuild: bool = False,
        **kwargs: Any,
    ) -> None:
        if job not in JOB_MODULES:
            raise ValueError(f"unknown job {job!r}; known: {sorted(JOB_MODULES)}")
        from ingest_core.catalog import get_catalog

        unknown = [t for t in inputs if t not in get_catalog().tables]
        if unknown:
            raise ValueError(f"unknown input tables {unknown}")
        asked = [key for key in _OPENLINEAGE_SPARK_INJECTION if kwargs.get(key)]
        if asked:
            raise ValueError(
                f"{', '.join(asked)}: the platform has no OpenLineage Spark listener jar; "
                "the task reports its lineage from the catalog"
            )
        # Explicitly off, whatever [openlineage] spark_inject_* says.
        kwargs.update(dict.fromkeys(_OPENLINEAGE_SPARK_INJECTION, False))
        kwargs.setdefault("name", job)
        if kwargs.get("execution_timeout") is None:
            tasks = get_settings().tasks
            budget = tasks.rebuild_timeout_s if rebuild else tasks.spark_timeout_s
            kwargs["execution_timeout"] = timedelta(seconds=budget)
        # SparkSubmitHook arguments given here that are not templated fields (those are read
        # back at execute time, rendered): PlatformJobHook passes them on.
        self._submit_options = {
            key: value
            for key, value in kwargs.items()
            if key in SUBMIT_OPTIONS and key not in SparkSubmitOperator.template_fields
        }
        self.spark_conn_id = str(kwargs.get("conn_id", PlatformJobHook.default_conn_name))
        super().__init__(application="", **kwargs)
        self.job = job
        self.job_args = list(job_args)
        self.inputs = list(inputs)
        self.input_jobs = list(input_jobs)
        #: The hook of the running execute(), for :meth:`on_kill`.
        self._job_hook: PlatformJobHook | None = None

    def get_hook(self) -> PlatformJobHook:
        """The job's :class:`~ingest_platform.hooks.PlatformJobHook`, from this task's
        (rendered) fields: ``job_args``, ``conf`` and ``env_vars`` over the platform's own,
        and the other ``SparkSubmitHook`` arguments given to the operator (``files``,
        ``jars``, ``executor_memory``...)."""
        options = dict(self._submit_options)
        for field in self.template_fields:
            if field in SUBMIT_OPTIONS:
                value = getattr(self, field, None)
                if value is not None:
                    options[field] = value
        return PlatformJobHook(
            self.job,
            self.job_args,
            conn_id=self.spark_conn_id,
            conf=self.conf,
            env_vars=self.env_vars,
            name=self.name,
            inputs=self.inputs,
            input_jobs=self.input_jobs,
            manage_checkpoint=self.manage_checkpoint,
            submit_options=options,
        )

    def lineage(self, context: Any = None) -> JobLineage:
        """What this task reads and writes: the catalog's lineage of its job
        (:func:`ingest_core.lineage.job_lineage`).

        :param context: the task's context (None outside a task run; unused here).
        """
        from ingest_core.lineage import job_lineage

        return job_lineage(self.job, get_settings())

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """OpenLineage inputs and outputs when the task starts (:meth:`lineage`)."""
        return operator_lineage(self.lineage(_current_context()))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """OpenLineage inputs and outputs when the task ends (the provider uses them on
        failure too): the same as on start."""
        return operator_lineage(self.lineage(_context_of(task_instance)))

    def execute(self, context: Any) -> Any:
        """Repair a damaged checkpoint, spark-submit the job, then back up its checkpoint
        (:meth:`ingest_platform.hooks.PlatformJobHook.run`).

        For a job with a checkpoint (declared in ``include/pipeline.yaml``): before the run,
        :func:`ingest_core.recovery.recover` repairs crash leftovers (logged, audited);
        after a successful run, a verified backup is taken and retention applied.

        :returns: with ``inputs``, what the run processed (the Delta version of each input
            table as of its start, the job's committed batch per query: :func:`ingest_platform.
            hooks.inputs_snapshot`), which Airflow keeps as the task's XCom ``return_value``
            (the UI's XCom tab); None without ``inputs``.
        :raises airflow.sdk.exceptions.AirflowSkipException: its inputs are unchanged since
            its last successful run (``inputs``): the task shows as skipped, Spark not started.
        :raises airflow.sdk.exceptions.AirflowException: spark-submit failed, or the task
            was killed (:meth:`on_kill`).
        """
        from airflow.sdk.exceptions import AirflowSkipException

        self._job_hook = self.get_hook()
        if not self._job_hook.run():
            raise AirflowSkipException(
                f"{self.job}: no new data in {self.inputs} since its last successful run (or "
                "none of them exists yet): skipped, Spark not started"
            )
        return self._job_hook.processed

    def on_kill(self) -> None:
        """Stop the running spark-submit and its driver, which frees the job's checkpoint
        lock (:meth:`ingest_platform.hooks.PlatformJobHook.on_kill`). Airflow calls it on
        SIGTERM to the task and past the task's ``execution_timeout``. Replaces the provider
        operator's ``on_kill``, which reaches only a hook of its own ``execute`` (not run
        here)."""
        # The task's log is often the only place a user looks: say what can end a task
        # this way (Airflow's supervisor logs a lost metadata database only in its own log).
        self.log.warning(
            "%s: Airflow is stopping this task (SIGTERM or execution_timeout): it was marked "
            "failed or cleared, ran past its execution_timeout, its worker is stopping, or its "
            "supervisor failed [workers] max_failed_heartbeats heartbeats in a row (metadata "
            "database or API server unreachable; see the scheduler's log)",
            self.task_id,
        )
        if self._job_hook is not None:
            self._job_hook.on_kill()


@contextmanager
def gate_failure_not_retried(
    layer: str, run_id: str, settings: PlatformSettings, message: str
) -> Iterator[None]:
    """Around a gate job's spark-submit: when it fails after recording a failed expectation
    for ``run_id`` in ``settings``' gate bookkeeping (a data problem, which a retry cannot
    fix), raise ``AirflowFailException(message)``; any other failure (the gate killed before
    its verdict) stays an ``AirflowException`` and is retried (soak run 7).

    :raises airflow.sdk.exceptions.AirflowFailException: see above.
    """
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from ingest_core.quality.state import failed_in_run

    try:
        yield
    except AirflowException:
        if failed_in_run(layer, run_id, settings):
            raise AirflowFailException(message) from None
        raise


class LayerGateOperator(SparkJobOperator):
    """Validate ``layer``'s increment with Great Expectations (``spark_jobs.quality.gate``).

    No Delta version pending: the task passes at once. Pending increments of at most
    ``quality.pandas_max_rows`` change rows in all are validated in the task's own process
    with GX's pandas engine (no JVM); larger ones by the gate job under spark-submit.

    Fails when an expectation fails: downstream tasks do not run, and every later run fails
    on the same increment until an operator resolves it.

    :param layer: ``silver`` or ``gold``.
    """

    template_fields = SparkJobOperator.template_fields

    def __init__(self, *, layer: str, **kwargs: Any) -> None:
        from ingest_core.quality.rules import layer_rules

        layer_rules(layer)  # refuses an ungated layer at parse time
        args = ["validate", "--layer", layer, "--run-id", "{{ run_id }}", "--engine", "spark"]
        super().__init__(job="quality_gate", job_args=args, **kwargs)
        self.layer = layer

    def lineage(self, context: Any = None) -> JobLineage:
        """The layer's gated tables (and the gate's bookkeeping) in, the gate's ``ops``
        tables out (:func:`ingest_core.lineage.gate_lineage`)."""
        from ingest_core.lineage import gate_lineage

        return gate_lineage(self.layer, get_settings())

    def execute(self, context: Any) -> Any:
        """Nothing pending: pass. A small increment: validate it here without Spark. Else
        run the gate job with spark-submit.

        :raises airflow.sdk.exceptions.AirflowFailException: an expectation failed (the log
            names each one and the remedy): a data problem, failed without a retry.
        :raises airflow.sdk.exceptions.AirflowException: the gate died before its verdict
            (its process or driver killed, the metadata database away): retried like any
            task (``retries``). Soak run 7: a scheduler killed twice within two minutes
            took two attempts of a gate with it, and with ``retries=0`` on every gate the
            run failed although its data was fine.
        """
        from airflow.sdk.exceptions import AirflowFailException

        from ingest_core.quality.pandas_gate import validate_layer_without_spark
        from ingest_core.quality.results import failure_message, report
        from ingest_core.quality.state import pending

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
        settings = get_settings()
        outcomes = validate_layer_without_spark(
            self.layer, run_id=str(context["run_id"]), settings=settings
        )
        if outcomes is None:
            self.log.info(
                "gate %s: more than quality.pandas_max_rows=%d change rows: Spark validates",
                self.layer,
                settings.quality.pandas_max_rows,
            )
            message = failure_message(self.layer)
            with gate_failure_not_retried(self.layer, str(context["run_id"]), settings, message):
                return super().execute(context)
        self.log.info("%s", report(self.layer, outcomes, settings))
        if any(o.status == "failed" for o in outcomes):
            raise AirflowFailException(failure_message(self.layer))
        return None


class StagedJobOperator(SparkJobOperator):
    """Run a job of a ``layer_full_refresh`` on the refresh's staging folders
    (:class:`ingest_core.refresh.RefreshLayout`, keyed by the DAG run id): the rebuilt
    layers, new checkpoints and the staging gate bookkeeping; everything else stays live.

    Skipped when the refresh does not rebuild ``builds`` (a Gold refresh skips the Silver
    steps). No checkpoint repair or backup: the staging checkpoints are new. A rebuild: its
    ``execution_timeout`` is ``tasks.rebuild_timeout_s`` unless given.

    :param builds: the layer this task rebuilds or gates (``silver`` or ``gold``).
    """

    manage_checkpoint = False

    def __init__(self, *, builds: str, **kwargs: Any) -> None:
        kwargs.setdefault("rebuild", True)
        super().__init__(**kwargs)
        self.builds = builds

    def lineage(self, context: Any = None) -> JobLineage:
        """The job's catalog lineage on the refresh's staging folders (the rebuilt layers and
        ``ops`` there, the rest live); a ``quality_gate`` job: the gate of ``builds``
        (:func:`ingest_core.lineage.gate_lineage`). Nothing when the refresh skips the task,
        or without a context (outside a task run the staging folders are unknown).

        :param context: the task's context (``run_id``, ``params.layer``).
        """
        from ingest_core.lineage import GATE_JOB, JobLineage, gate_lineage, job_lineage
        from ingest_core.refresh import RefreshLayout, layers_of

        if context is None:
            return JobLineage((), ())
        layer = str(context["params"]["layer"])
        if self.builds not in layers_of(layer):
            return JobLineage((), ())
        staged = RefreshLayout(str(context["run_id"]), get_settings()).staged_settings(layer)
        if self.job == GATE_JOB:
            return gate_lineage(self.builds, staged)
        return job_lineage(self.job, staged)

    def execute(self, context: Any) -> Any:
        """Skip or run the job with the staging environment (see the class doc).

        :raises airflow.sdk.exceptions.AirflowFailException: the staging gate recorded a
            failed expectation: a data problem, failed without a retry (a retry validated
            the whole rebuild again and recorded the failure twice more).
        :raises airflow.sdk.exceptions.AirflowException: the job failed otherwise (killed,
            refused): retried like any task.
        """
        from airflow.sdk.exceptions import AirflowSkipException

        from ingest_core.lineage import GATE_JOB
        from ingest_core.refresh import RefreshLayout, layers_of

        layer = str(context["params"]["layer"])
        if self.builds not in layers_of(layer):
            raise AirflowSkipException(f"a {layer} refresh does not rebuild {self.builds}")
        run_id = str(context["run_id"])
        layout = RefreshLayout(run_id, get_settings())
        self.env_vars = {**(self.env_vars or {}), **layout.environment(layer)}
        self.log.info("staging: %s", layout.staging)
        if self.job != GATE_JOB:
            return super().execute(context)
        message = (
            f"the rebuilt {self.builds} failed its gate: nothing live changed. Inspect the "
            f"staging tables under {layout.staging} and Data Docs, fix, and trigger a new refresh"
        )
        with gate_failure_not_retried(self.builds, run_id, layout.staged_settings(layer), message):
            return super().execute(context)
