"""LayerGateOperator without a JVM: a small increment is validated in the task's own
process (GX's pandas engine on a delta-rs read), a large one goes to spark-submit.

The Silver table is written with delta-rs (change data feed on, like the platform's own
tables); no Spark, no broker."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from ingest_core.catalog import get_catalog
from ingest_core.settings import get_settings

pytestmark = pytest.mark.unit

_PAYMENTS = pa.schema(
    [
        ("event_id", pa.string()),
        ("event_type", pa.string()),
        ("event_time", pa.timestamp("us", "UTC")),
        ("payment_id", pa.string()),
        ("order_id", pa.string()),
        ("customer_id", pa.string()),
        ("method", pa.string()),
        ("amount", pa.decimal128(18, 2)),
        ("currency", pa.string()),
        ("status", pa.string()),
    ]
)


def _payments(ids: list[str], amount: str = "10.00") -> pa.Table:
    when = datetime(2026, 1, 1, 10, tzinfo=UTC)
    rows = [
        {
            "event_id": i,
            "event_type": "payment",
            "event_time": when,
            "payment_id": f"p-{i}",
            "order_id": f"o-{i}",
            "customer_id": "c1",
            "method": "credit_card",
            "amount": Decimal(amount),
            "currency": "BRL",
            "status": "authorized",
        }
        for i in ids
    ]
    return pa.Table.from_pylist(rows, _PAYMENTS)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def _append(table: pa.Table) -> None:
    path = get_catalog().table("silver_payments").path(get_settings())
    cdf = {"delta.enableChangeDataFeed": "true"}
    write_deltalake(str(path), table, mode="append", configuration=cdf)


def _gate(monkeypatch: pytest.MonkeyPatch) -> tuple[object, list[str]]:
    from ingest_platform.operators import LayerGateOperator, SparkJobOperator

    submitted: list[str] = []
    monkeypatch.setattr(SparkJobOperator, "execute", lambda self, context: submitted.append("x"))
    return LayerGateOperator(task_id="gate_silver", layer="silver"), submitted


def test_a_small_increment_is_validated_in_the_task_without_spark(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from ingest_core.quality import state

    operator, submitted = _gate(monkeypatch)
    _append(_payments(["a", "b", "c"]))
    operator.execute({"run_id": "r1"})
    results = state.gate_results()
    assert list(zip(results.run_id, results.status, results.rows, strict=True)) == [
        ("r1", "passed", 3)
    ]
    assert state.pending("silver") == []
    # A bad increment fails the task with the remedy, without a retry (a data problem); the
    # mark stays, so it fails again.
    _append(_payments(["d", "e"], amount="9000000.00"))
    for run_id in ("r2", "r3"):
        with pytest.raises(AirflowFailException, match=r"gate silver FAILED.*quarantine\|accept"):
            operator.execute({"run_id": run_id})
    failed = state.unresolved_failures("silver")
    assert list(failed.run_id) == ["r2", "r3"]
    assert '"unexpected_count": 2' in failed.failed_expectations.iloc[0]
    assert submitted == []  # never spark-submit
    version = DeltaTable(str(get_catalog().table("ops_gate_results").path(get_settings())))
    assert version.version() == 2  # one append per gate run


def test_an_increment_above_the_row_limit_goes_to_spark_submit(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest_core.quality import state

    monkeypatch.setenv("INGEST_QUALITY__PANDAS_MAX_ROWS", "2")
    get_settings.cache_clear()
    operator, submitted = _gate(monkeypatch)
    _append(_payments(["a", "b", "c"]))
    operator.execute({"run_id": "r1"})
    assert submitted == ["x"]
    assert state.gate_results().empty  # nothing recorded by the in-task path
    assert operator.job_args[-2:] == ["--engine", "spark"]


def test_a_spark_gate_that_died_is_retried_one_that_failed_on_data_is_not(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Soak run 7: the gates had ``retries=0`` ("a failed gate is a data problem"), so a gate
    killed with its scheduler failed the run. Now only a recorded failed expectation fails
    without a retry (AirflowFailException); a gate job that died before its verdict raises a
    plain AirflowException, which Airflow retries."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from ingest_platform.operators import LayerGateOperator, SparkJobOperator

    operator = LayerGateOperator(task_id="gate_silver", layer="silver")
    _append(_payments(["a", "b"], amount="9000000.00"))
    with pytest.raises(AirflowFailException):  # in the task: the verdict recorded for r1
        operator.execute({"run_id": "r1"})
    monkeypatch.setenv("INGEST_QUALITY__PANDAS_MAX_ROWS", "1")  # now spark-submit's turn
    get_settings.cache_clear()

    def died(self: object, context: object) -> None:
        raise AirflowException("Cannot execute: spark-submit ... Error code is: -9.")

    monkeypatch.setattr(SparkJobOperator, "execute", died)
    with pytest.raises(AirflowException) as killed:
        operator.execute({"run_id": "r2"})
    assert not isinstance(killed.value, AirflowFailException)
    with pytest.raises(AirflowFailException, match="gate silver FAILED"):
        operator.execute({"run_id": "r1"})  # the Spark gate recorded its failed verdict


def test_the_options_passed_on_to_spark_submit_are_the_providers_hook_arguments() -> None:
    """SparkJobOperator passes a declared list of SparkSubmitHook arguments on (no runtime
    introspection): each must be one the installed provider's hook takes, and none of those
    PlatformJobHook sets itself."""
    import inspect

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from ingest_platform.operators import SUBMIT_OPTIONS, SparkJobOperator

    accepted = set(inspect.signature(SparkSubmitHook.__init__).parameters)
    assert accepted >= SUBMIT_OPTIONS, SUBMIT_OPTIONS - accepted
    assert not SUBMIT_OPTIONS & {"conf", "conn_id", "name", "application_args", "env_vars"}
    task = SparkJobOperator(
        task_id="t", job="silver_refine", executor_memory="2g", files="a.txt", verbose=True
    )
    hook = task.get_hook()
    assert hook.submit_options == {"executor_memory": "2g", "files": "a.txt", "verbose": True}


@pytest.mark.parametrize("failed_expectation", [True, False])
def test_a_staging_gate_that_failed_its_data_is_not_retried(
    home: Path, monkeypatch: pytest.MonkeyPatch, failed_expectation: bool
) -> None:
    """A review of soak run 15's fix: with retries on layer_full_refresh, a rebuilt layer
    that failed its staging gate was validated twice more (a data problem, which a retry
    cannot fix). A gate that recorded a failure in the refresh's staging bookkeeping fails
    without a retry; one that died before its verdict is retried."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from ingest_core.quality import state
    from ingest_core.refresh import RefreshLayout
    from ingest_platform.operators import SparkJobOperator, StagedJobOperator

    def died(self: object, context: object) -> None:
        raise AirflowException("spark-submit exited 1")

    asked: list[tuple[str, str, Path]] = []

    def failed_in_run(layer: str, run_id: str, settings: object) -> bool:
        asked.append((layer, run_id, settings.storage.layer_path("ops")))  # type: ignore[attr-defined]
        return failed_expectation

    monkeypatch.setattr(SparkJobOperator, "execute", died)
    monkeypatch.setattr(state, "failed_in_run", failed_in_run)
    gate = StagedJobOperator(task_id="gate_gold", job="quality_gate", builds="gold")
    expected = AirflowFailException if failed_expectation else AirflowException
    with pytest.raises(expected) as raised:
        gate.execute({"run_id": "r1", "params": {"layer": "gold"}})
    assert isinstance(raised.value, AirflowFailException) is failed_expectation
    staging = RefreshLayout("r1", get_settings()).staging
    assert asked == [("gold", "r1", staging)]  # the staging bookkeeping, not live
    if failed_expectation:
        assert "nothing live changed" in str(raised.value)
