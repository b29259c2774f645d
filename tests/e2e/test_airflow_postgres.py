"""Airflow with PostgreSQL as its metadata database, as deployed (docker-compose, a
cluster): Debian's PostgreSQL started here, ``airflow db migrate`` on it, and the platform's
own ``airflow standalone`` (scheduler with LocalExecutor, DAG processor, API server,
triggerer) running a DAG; the run's success is read back from PostgreSQL itself."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_core.settings import get_settings
from ingestctl.airflow_runtime import AirflowClient, Standalone, airflow_home, run_cli
from tests.conftest import free_port, free_ports
from tests.e2e.postgres import PostgresServer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DAG_ID = "checkpoint_maintenance"  # Python tasks only: the test is about Airflow, not Spark


def _first_run(client: AirflowClient, timeout_s: float = 180) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run_id = client.latest_run(DAG_ID)
        if run_id is not None:
            return run_id
        time.sleep(2)
    raise AssertionError(f"the scheduler created no {DAG_ID} run within {timeout_s:.0f} s")


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer(port=free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()


def test_dag_runs_with_local_executor_on_postgres(
    postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INGEST_HOME", str(tmp_path / "home"))
    # The connection string (with its password) reaches Airflow through the environment only.
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", postgres.sqlalchemy_url)
    monkeypatch.delenv("AIRFLOW__CORE__UNIT_TEST_MODE", raising=False)
    get_settings.cache_clear()

    run_cli(["db", "migrate"])
    with postgres.connect() as conn, conn.cursor() as cursor:
        cursor.execute("SELECT version_num FROM alembic_version")
        assert cursor.fetchone() is not None  # Airflow's schema lives in PostgreSQL

    api_port, worker_log_port, trigger_log_port = free_ports(3)
    standalone = Standalone(port=api_port, log_ports=(worker_log_port, trigger_log_port))
    try:
        standalone.up(timeout_s=300)
        client = standalone.client()  # the login is kept: a token for the admin user
        client.wait_for_dag(DAG_ID)
        # Unpaused, the scheduler creates the run of the latest hourly interval by itself.
        client.unpause(DAG_ID)
        run_id = _first_run(client)
        state = client.wait_for_run(DAG_ID, run_id, timeout_s=600)
    finally:
        standalone.down()
        get_settings.cache_clear()

    assert state == "success", standalone._tail(60)
    with postgres.connect() as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", (DAG_ID, run_id)
        )
        assert cursor.fetchone() == ("success",)
        cursor.execute(
            "SELECT task_id, state FROM task_instance WHERE dag_id = %s AND run_id = %s",
            (DAG_ID, run_id),
        )
        tasks = dict(cursor.fetchall())
        cursor.execute("SELECT count(*) FROM job WHERE job_type = 'SchedulerJob'")
        (schedulers,) = cursor.fetchone()
    assert run_id.startswith("scheduled__")  # the scheduler's own run, not a test shortcut
    assert len(tasks) == 4, tasks
    assert set(tasks.values()) == {"success"}, tasks
    assert schedulers >= 1
    # The scheduler ran the tasks through LocalExecutor (the job table does not record it).
    log = standalone.log_file.read_text(errors="replace")
    assert "for executor: LocalExecutor" in log
    # Nothing fell back to SQLite.
    assert not (airflow_home() / "airflow.db").exists()
