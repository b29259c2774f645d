"""Airflow on PostgreSQL, the embedded default: the platform's own standalone (scheduler with
LocalExecutor, DAG processor, API server, triggerer without its log server) on the embedded cluster
(:mod:`ingestctl.postgres_cluster`, started on demand), running a DAG; the run's success is
read back from PostgreSQL itself. Then the scheduler is killed: the launcher stops what it left
and starts it again, and its heartbeat, as ``ingestctl status`` reports it, is fresh again.
Last, the standalone itself is killed: ``down`` stops the components it left."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from ingest_core.catalog import get_catalog
from ingest_core.settings import get_settings
from ingest_core.waiting import wait_until
from ingestctl.airflow_runtime import (
    AirflowClient,
    Standalone,
    airflow_home,
    describe_health,
    metadata_database,
)
from ingestctl.cli import app
from ingestctl.postgres_cluster import EmbeddedPostgres
from tests.conftest import free_ports
from tests.e2e.postgres import embedded_postgres_folder

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DAG_ID = "checkpoint_maintenance"  # Python tasks only: the test is about Airflow, not Spark


def _first_run(client: AirflowClient, timeout_s: float = 180) -> str:
    what = f"the scheduler to create a {DAG_ID} run"
    return str(wait_until(lambda: client.latest_run(DAG_ID), timeout_s, 2, what=what))


def _scheduler(standalone: Standalone) -> psutil.Process | None:
    """The standalone's ``airflow scheduler`` child."""
    pid = standalone.pid()
    if pid is None:
        return None
    for child in psutil.Process(pid).children():
        with contextlib.suppress(psutil.Error):
            if "scheduler" in child.cmdline():
                return child
    return None


@pytest.fixture
def embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedPostgres]:
    with embedded_postgres_folder() as folder:
        monkeypatch.setenv("INGEST_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("INGEST_AIRFLOW__POSTGRES_DIR", str(folder))
        for suffix in ("", "_CMD", "_SECRET"):
            monkeypatch.delenv(f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN{suffix}", raising=False)
        monkeypatch.delenv("INGEST_AIRFLOW__DATABASE", raising=False)
        monkeypatch.delenv("AIRFLOW__CORE__UNIT_TEST_MODE", raising=False)
        get_settings.cache_clear()
        try:
            yield EmbeddedPostgres()
        finally:
            get_settings.cache_clear()


def test_dag_runs_on_the_embedded_postgres_and_a_dead_scheduler_comes_back(
    embedded: EmbeddedPostgres,
) -> None:
    assert metadata_database() == "postgres"
    assert not embedded.status().running  # Standalone.up starts it
    api_port, worker_log_port, trigger_log_port = free_ports(3)
    standalone = Standalone(port=api_port, log_ports=(worker_log_port, trigger_log_port))
    components: list[psutil.Process] = []
    try:
        standalone.up(timeout_s=300)
        assert embedded.status().running
        # The password reaches Airflow through the environment, never a command line.
        for process in psutil.Process(standalone.pid()).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                assert embedded.password() not in " ".join(process.cmdline())
        # The triggerer runs (Airflow's health shows it), without a log server of its own.
        commands = [" ".join(p.cmdline()) for p in psutil.Process(standalone.pid()).children()]
        (triggerer,) = [c for c in commands if "airflow triggerer" in c]
        assert "--skip-serve-logs" in triggerer
        client = standalone.client()  # the login is kept: a token for the admin user
        client.wait_for_dag(DAG_ID)
        # Unpaused, the scheduler creates the run of the latest hourly interval by itself.
        client.unpause(DAG_ID)
        run_id = _first_run(client)
        state = client.wait_for_run(DAG_ID, run_id, timeout_s=600)
        assert state == "success", standalone._tail(60)

        # A scheduler that dies (here: SIGKILL to it alone) is restarted, and what it left
        # (its log server on the worker log port, its executor's workers) is stopped first.
        killed = _scheduler(standalone)
        assert killed is not None
        left = killed.children(recursive=True)
        assert left, "the scheduler has its log server and executor workers"
        killed.kill()
        died_at = datetime.now(UTC)
        deadline = time.monotonic() + 240
        healthy, lines = False, []
        while time.monotonic() < deadline:
            again = _scheduler(standalone)
            health = standalone.health()
            healthy, lines = describe_health(health, datetime.now(UTC))
            beat = ((health or {}).get("scheduler") or {}).get("latest_scheduler_heartbeat")
            fresh = beat is not None and datetime.fromisoformat(beat) > died_at
            if again is not None and again.pid != killed.pid and healthy and fresh:
                break
            time.sleep(3)
        else:
            raise AssertionError(f"scheduler not back: {lines}\n{standalone._tail(40)}")
        assert "scheduler exited with code" in standalone.log_file.read_text(errors="replace")
        assert not [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        status = CliRunner().invoke(app, ["status", "--port", str(api_port)])
        assert status.exit_code == 0, status.output
        assert "scheduler: healthy, latest heartbeat" in status.output
        assert "triggerer: healthy, latest heartbeat" in status.output
        assert "postgres: running on socket" in status.output

        # SIGKILL to the standalone itself leaves its components running: down() finds them
        # in its session and stops them.
        components = psutil.Process(standalone.pid()).children(recursive=True)
        psutil.Process(standalone.pid()).kill()
        wait_until(lambda: standalone.pid() is None, 30, 0.5, what="the standalone to die")
        assert [p for p in components if p.is_running()], "its components outlive it"
        assert standalone.processes()
    finally:
        stopped = standalone.down()
    assert stopped
    assert standalone.processes() == []
    assert not [p for p in components if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    with embedded.connect() as conn, conn.cursor() as cursor:
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
    # One maintenance task per streaming job of the catalog.
    assert set(tasks) == {f"maintain_{job}" for job in get_catalog().jobs}, tasks
    assert set(tasks.values()) == {"success"}, tasks
    assert schedulers >= 2  # the first scheduler and the restarted one
    # The scheduler ran the tasks through LocalExecutor (the job table does not record it).
    log = standalone.log_file.read_text(errors="replace")
    assert "for executor: LocalExecutor" in log
    # Nothing fell back to SQLite.
    assert not (airflow_home() / "airflow.db").exists()
