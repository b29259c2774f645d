"""Every file in dags/ imports cleanly in Airflow's DagBag, and every DAG is documented."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit

DAGS = Path(__file__).resolve().parents[3] / "dags"


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_no_import_errors(dagbag) -> None:
    assert dagbag.import_errors == {}


def test_every_dag_has_doc_tags_and_owner(dagbag) -> None:
    for dag_id, dag in dagbag.dags.items():
        assert dag.doc_md, f"{dag_id} has no doc_md"
        assert dag.tags, f"{dag_id} has no tags"
        assert dag.owner not in ("", "airflow"), f"{dag_id} has no owner"


def test_dag_id_is_file_name(dagbag) -> None:
    for dag_id, dag in dagbag.dags.items():
        assert Path(dag.fileloc).stem == dag_id


def test_the_check_bites_on_a_broken_dag_file(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "broken.py").write_text("from airflow.sdk import DAG\nimport no_such_module\n")
    assert "no_such_module" in str(DagBag(dag_folder=str(tmp_path)).import_errors)


def test_parsing_the_dag_files_loads_no_pyspark() -> None:
    """The DAG processor parses these files every few seconds: nothing they import may load
    Spark (two files did, through supervisor -> streaming_runtime, 91 pyspark modules). A
    child interpreter parses every DAG file and reports which pyspark modules it loaded."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(DAGS)!r})\n"
        "print(sorted(bag.import_errors.items()))\n"
        "print(len(bag.dags))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark')[:5])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    errors, count, pyspark_modules = result.stdout.strip().splitlines()[-3:]
    assert errors == "[]"
    assert int(count) == len(list(DAGS.glob("*.py")))
    assert pyspark_modules == "[]"


def _may_defer(task: object) -> str | None:
    """Why ``task`` could defer to a triggerer, or None: a ``deferrable`` flag, a start from
    a trigger, or ``defer(`` / ``TaskDeferred`` in the source of a class of its own or a
    provider's (Airflow's base classes define ``defer`` and are left out)."""
    import inspect

    if getattr(task, "deferrable", False):
        return "deferrable=True"
    if getattr(task, "start_from_trigger", False):
        return "start_from_trigger=True"
    for cls in type(task).__mro__:
        if cls.__module__.startswith(("airflow.sdk.", "airflow.models.", "builtins", "abc")):
            continue
        source = inspect.getsource(cls)
        if ".defer(" in source or "TaskDeferred" in source:
            return f"{cls.__module__}.{cls.__qualname__} calls defer"
    return None


def test_no_task_defers(dagbag) -> None:
    """The embedded Airflow's triggerer runs without its log server (settings
    ``airflow.triggerer``; ``--skip-serve-logs``, 85 MB PSS less) and can be left out: no
    task may defer. A DAG that adds one must give the triggerer its log server back
    (ingestctl/airflow_standalone.TRIGGERER_OPTIONS), and this test off."""
    deferring = {
        f"{dag_id}.{task.task_id}": why
        for dag_id, dag in dagbag.dags.items()
        for task in dag.tasks
        if (why := _may_defer(task))
    }
    assert deferring == {}
    assert sum(len(dag.tasks) for dag in dagbag.dags.values()) > 10


def test_the_deferral_check_bites() -> None:
    from airflow.providers.standard.sensors.date_time import DateTimeSensorAsync
    from airflow.providers.standard.sensors.time_delta import TimeDeltaSensor

    async_sensor = DateTimeSensorAsync(task_id="a", target_time="2026-01-01T00:00:00+00:00")
    assert _may_defer(async_sensor) is not None
    assert _may_defer(TimeDeltaSensor(task_id="b", delta=timedelta(1), deferrable=True))


def test_every_spark_task_has_a_time_budget(dagbag) -> None:
    """A hung driver cannot hold its job's lock and the DAG's one run for ever (issue 50):
    every task that runs a Spark job has an ``execution_timeout``, the incremental ones
    ``tasks.spark_timeout_s`` and the rebuilds ``tasks.rebuild_timeout_s``."""
    from ingest_core.settings import get_settings
    from ingest_platform.operators import SparkJobOperator

    tasks = get_settings().tasks
    budgets = {
        f"{dag_id}.{task.task_id}": task.execution_timeout
        for dag_id, dag in dagbag.dags.items()
        for task in dag.tasks
        if isinstance(task, SparkJobOperator)
    }
    incremental = timedelta(seconds=tasks.spark_timeout_s)
    rebuild = timedelta(seconds=tasks.rebuild_timeout_s)
    assert budgets["medallion_incremental.refine_silver"] == incremental
    assert budgets["medallion_incremental.gate_silver"] == incremental
    assert budgets["medallion_incremental.correct_late"] == incremental
    assert budgets["layer_full_refresh.rebuild_silver"] == rebuild
    assert budgets["layer_full_refresh.swap"] == incremental
    assert budgets["bronze_replay.replay"] == rebuild
    assert None not in budgets.values()


def test_a_spark_tasks_budget_comes_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest_core.settings import get_settings
    from ingest_platform.operators import SparkJobOperator

    monkeypatch.setenv("INGEST_TASKS__SPARK_TIMEOUT_S", "600")
    get_settings.cache_clear()
    try:
        task = SparkJobOperator(task_id="t", job="silver_refine")
        given = SparkJobOperator(
            task_id="u", job="silver_refine", execution_timeout=timedelta(minutes=3)
        )
    finally:
        get_settings.cache_clear()
    assert task.execution_timeout == timedelta(seconds=600)
    assert given.execution_timeout == timedelta(minutes=3)


def test_every_task_is_retried(dagbag) -> None:
    """Every task rides through an infrastructure fault (its worker killed with the API
    server, the scheduler or the metadata database): soak run 6 (the supervisor's actions)
    and run 15 (``layer_full_refresh``'s ``correct_late`` killed with the API server failed
    the refresh for good at ``retries=0``). A refusal that retrying cannot fix raises
    ``AirflowFailException`` instead, which Airflow does not retry."""
    not_retried = sorted(
        f"{dag_id}.{task.task_id}"
        for dag_id, dag in dagbag.dags.items()
        for task in dag.tasks
        if task.retries < 1
    )
    assert dagbag.dags["layer_full_refresh"].tasks
    assert not_retried == []


#: The operations DAGs whose tasks retry across a burst of faults: every manual one, and the
#: daily maintenance.
SPREAD_OUT = ["bronze_replay", "checkpoint_restore", "layer_full_refresh", "table_maintenance"]


def test_every_manual_operations_dag_spreads_its_retries(dagbag) -> None:
    manual = {
        dag_id
        for dag_id, dag in dagbag.dags.items()
        if "operations" in dag.tags and dag.schedule is None
    }
    assert "checkpoint_restore" in manual
    assert manual <= set(SPREAD_OUT)


@pytest.mark.parametrize("dag_id", SPREAD_OUT)
def test_an_operations_dags_tasks_retry_across_a_quarter_hour_of_faults(
    dagbag, dag_id: str
) -> None:
    """Soak run 18: two scheduler kills and an API server kill within five minutes (each
    takes the running tasks with it) used up ``rebuild_gold``'s three attempts one minute
    apart, and the refresh failed for good; run 20: ``table_maintenance``'s two attempts,
    a minute apart, and the daily maintenance failed; run 21: ``restore_checkpoint``'s
    four, two minutes apart, met a database outage, an API server kill, a broker outage and
    a database kill (the last had restored and failed reporting it). Their tasks are
    idempotent, so their retries are spread over at least 15 minutes, as Airflow itself
    schedules them (``TaskInstance.next_retry_datetime``: exponential backoff, capped)."""
    import uuid
    from datetime import UTC, datetime

    from airflow.models.taskinstance import TaskInstance

    spans = {}
    for task in dagbag.dags[dag_id].tasks:
        ti = TaskInstance(task=task, run_id="r", dag_version_id=uuid.uuid4())
        ti.end_date = datetime(2026, 1, 1, tzinfo=UTC)
        waited = 0.0
        for ti.try_number in range(1, task.retries + 1):
            waited += (ti.next_retry_datetime() - ti.end_date).total_seconds()
        spans[task.task_id] = waited
    assert spans
    assert {t: s for t, s in spans.items() if s < 15 * 60} == {}


@pytest.mark.parametrize(
    ("refusal", "retried"),
    [
        ("kafka", True),  # Kafka away: the same restore may work once it is back
        ("refused", False),  # a bad backup, a changed configuration...: final
        ("busy", False),  # the job runs: an operator must stop it first
    ],
)
def test_a_restore_is_retried_only_while_kafka_does_not_answer(
    dagbag, monkeypatch: pytest.MonkeyPatch, refusal: str, retried: bool
) -> None:
    """Soak run 7: a restore met a broker outage and failed for good (no retries)."""
    from airflow.sdk.exceptions import AirflowFailException

    from ingest_core import recovery
    from ingest_core.locks import CheckpointBusyError

    errors = {
        "kafka": recovery.KafkaUnavailableError("Kafka at x does not answer"),
        "refused": recovery.RestoreRefusedError("backup does not verify"),
        "busy": CheckpointBusyError("bronze_ingest runs"),
    }

    def refuse(*args: object, **kwargs: object) -> None:
        raise errors[refusal]

    monkeypatch.setattr(recovery, "restore", refuse)
    task = dagbag.dags["checkpoint_restore"].get_task("restore_checkpoint")
    assert task.retries >= 1
    with pytest.raises(type(errors[refusal]) if retried else AirflowFailException) as raised:
        task.python_callable(params={"job": "bronze_ingest", "backup_id": "20260101T000000Z"})
    assert isinstance(raised.value, AirflowFailException) is not retried


def test_the_live_path_takes_a_pool_slot_before_any_backfill(dagbag) -> None:
    """Airflow queues a pool's waiting tasks by priority weight, then by the oldest logical
    date: at equal weights every (older) backfill run went first, and a scheduled run's
    gate_gold waited behind four backfills (soak run 9). Every live-path task in a shared
    pool must outweigh every backfill-path task, whatever their downstream tasks."""
    from types import SimpleNamespace

    from airflow.task.priority_strategy import validate_and_load_priority_weight_strategy

    def weight(task: Any) -> int:  # as the scheduler computes a task instance's weight
        rule = validate_and_load_priority_weight_strategy(task.weight_rule)
        return int(rule.get_weight(SimpleNamespace(task=task)))

    dag = dagbag.dags["medallion_incremental"]
    backfill_path = {"recompute_gold", "gate_backfill"}
    pooled = [t for t in dag.tasks if t.pool != "default_pool"]
    live = [weight(t) for t in pooled if t.task_id not in backfill_path]
    backfill = [weight(t) for t in pooled if t.task_id in backfill_path]
    assert {t.task_id for t in pooled} >= backfill_path | {"aggregate_gold", "gate_gold"}
    assert min(live) > max(backfill)
    # An operator's refresh swaps before any backfill's task, after the live path's.
    swap = dagbag.dags["layer_full_refresh"].get_task("swap")
    assert swap.pool == "gold_layer"
    assert max(backfill) < weight(swap) < min(live)
