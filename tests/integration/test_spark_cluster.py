"""The medallion jobs on a real Spark standalone cluster, run through the DAG's tasks.

A master and a worker (2 cores, 2 GB) start from pyspark's own ``spark-class`` on
127.0.0.1; ``spark_default`` points at ``spark://127.0.0.1:<port>`` (the only change, as in
production); ``airflow tasks test medallion_incremental refine_silver`` and
``aggregate_gold`` spark-submit the jobs there. The tables must equal those computed in local
mode from the same Bronze input.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from deltalake import DeltaTable

from ingest_core.catalog import get_catalog
from ingest_core.delta_tables import table_exists
from ingest_core.settings import PlatformSettings, get_settings, spark_connection
from ingestctl.airflow_runtime import run_cli
from ingestctl.replay import runner
from ingestctl.replay.faults import FaultConfig
from ingestctl.replay.generator import generate_events
from ingestctl.spark_cluster import SparkStandalone
from spark_jobs import bronze_ingest, silver_refine
from spark_jobs.gold import gold_aggregate
from spark_jobs.triggers import TriggerSpec
from tests.conftest import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AVAILABLE_NOW = TriggerSpec("available-now")
#: Columns that name the run rather than the data: the query id comes from each checkpoint.
RUN_COLUMNS = {"query_id"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    """The platform's own embedded standalone cluster (``ingestctl spark up``), one worker."""
    settings = PlatformSettings(
        spark={"master": f"spark://127.0.0.1:{free_port()}"},
        spark_cluster={
            "workers": 1,
            "worker_cores": 2,
            "worker_memory": "2g",
            "master_ui_port": free_port(),
            "worker_ui_port": free_port(),
            "data_dir": tmp_path_factory.mktemp("spark-standalone"),
        },
    )
    spark_cluster = SparkStandalone(settings)
    try:
        spark_cluster.up()
        yield spark_cluster
    finally:
        spark_cluster.down()


def _use_home(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.setenv("INGEST_HOME", str(home))
    get_settings.cache_clear()


def _layer_tables() -> list[str]:
    return [
        name for name, table in get_catalog().tables.items() if table.layer in ("silver", "gold")
    ]


def _snapshot(home: Path) -> dict[str, pd.DataFrame]:
    """Every Silver and Gold table under ``home`` as a sorted frame (delta-rs reader)."""
    frames = {}
    for name in _layer_tables():
        path = home / "data" / get_catalog().table(name).layer / name
        if not table_exists(path):
            continue
        frame = DeltaTable(str(path)).to_pandas()
        frame = frame.drop(columns=[c for c in frame.columns if c in RUN_COLUMNS])
        # Bytes, arrays and structs are compared by their repr (sortable, exact).
        for column in frame.columns:
            if frame[column].dtype == object:
                frame[column] = frame[column].map(repr)
        frames[name] = frame.sort_values(list(frame.columns)).reset_index(drop=True)
    return frames


def _task(task_id: str, env: dict[str, str]) -> str:
    """``airflow tasks test medallion_incremental <task_id>`` in ``env``; its output.

    ``tasks test`` exits 0 even when the task fails, so the final state is read from the
    output (and the exit code checked too)."""
    done = run_cli(["tasks", "test", "medallion_incremental", task_id], env=env, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "new_state=success" in output or "Marking task as SUCCESS" in output, output[-4000:]
    return output


def _on_cluster(cluster: SparkStandalone, home: Path) -> list[str]:
    """Run the DAG's Silver and Gold tasks on ``cluster`` with ``home`` as INGEST_HOME; the
    only Spark-side change from local mode is the spark_default connection."""
    env = {
        "INGEST_HOME": str(home),
        "AIRFLOW_HOME": str(home / "airflow-cli"),
        "AIRFLOW_CONN_SPARK_DEFAULT": spark_connection(cluster.settings),
    }
    run_cli(["db", "migrate"], env=env)
    return [_task("refine_silver", env), _task("aggregate_gold", env)]


def test_medallion_tasks_on_a_standalone_cluster_equal_local_mode(
    cluster: SparkStandalone,
    spark,
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host, port = kafka_bootstrap.rsplit(":", 1)
    prefix = f"c{tmp_path.name[-6:]}."
    monkeypatch.setenv("INGEST_KAFKA__HOST", host)
    monkeypatch.setenv("INGEST_KAFKA__PORT", port)
    monkeypatch.setenv("INGEST_KAFKA__TOPIC_PREFIX", prefix)
    monkeypatch.delenv("AIRFLOW__CORE__UNIT_TEST_MODE", raising=False)
    # `airflow tasks test` on a throw-away SQLite database per home (no scheduler beside it):
    # the test is about Spark on a cluster, not about the metadata database.
    monkeypatch.setenv("INGEST_AIRFLOW__DATABASE", "sqlite")
    local_home, cluster_home = tmp_path / "local", tmp_path / "cluster"

    # One Bronze input: ~40 minutes of event time (Gold windows finalise), a few duplicates
    # and malformed records (Silver's quarantine and dedup paths run on the cluster too).
    _use_home(monkeypatch, local_home)
    events = list(generate_events(300, seed=11, start=datetime(2026, 3, 1, tzinfo=UTC), rate=0.12))
    faults = FaultConfig(duplicate_rate=0.03, malformed_rate=0.03, seed=3)
    sent = runner.run(
        "generator",
        events,
        bootstrap_servers=kafka_bootstrap,
        faults=faults,
        pace=runner.Pace(None),
        topic_prefix=prefix,
        progress=False,
    )
    assert sent.produce.failed == 0
    bronze_ingest.start(spark, trigger=AVAILABLE_NOW).awaitTermination()
    bronze = get_catalog().table("bronze_events").path(get_settings())
    assert DeltaTable(str(bronze)).to_pandas().shape[0] == sent.produce.acknowledged
    shutil.copytree(bronze, cluster_home / bronze.relative_to(local_home))

    # The cluster (the DAG's own tasks, in Airflow processes) and local mode (the suite's
    # local SparkSession, here) at the same time: independent homes, and the machine waits
    # less on JVM starts.
    with ThreadPoolExecutor(max_workers=1) as pool:
        cluster_run = pool.submit(_on_cluster, cluster, cluster_home)
        silver_refine.run(spark, trigger=AVAILABLE_NOW)
        gold_aggregate.run(spark, trigger=AVAILABLE_NOW)
        local = _snapshot(local_home)
        outputs = cluster_run.result(timeout=900)
    assert f"--master {cluster.master_url}" in outputs[0]
    apps = {app["name"]: app for app in cluster.applications()}
    assert {"silver_refine", "gold_aggregate"} <= set(apps), apps.keys()
    # Executors really ran on the worker (cores granted by the master).
    assert all(apps[name]["cores"] >= 1 for name in ("silver_refine", "gold_aggregate"))
    on_cluster = _snapshot(cluster_home)

    assert set(on_cluster) == set(local)
    assert local["silver_payments"].shape[0] > 10
    assert local["gold_payment_totals_5m"].shape[0] > 0
    assert local["silver_quarantine"].shape[0] > 0
    for name, expected in local.items():
        pd.testing.assert_frame_equal(on_cluster[name], expected, check_dtype=False, obj=name)
