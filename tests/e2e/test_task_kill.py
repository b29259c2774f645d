"""A Spark task killed mid-run leaves no spark-submit or driver behind and frees its job's
checkpoint lock, and the next run holds every Kafka offset exactly once (issues 50, 52).

Each kill goes through Airflow's own task runner (``airflow tasks test``, which installs the
SIGTERM handler that calls ``on_kill`` and enforces ``execution_timeout``), on a probe DAG of
``SparkJobOperator`` tasks running the real ``bronze_ingest`` against the real broker:

* **SIGTERM to the task process** (what ``kill <pid>`` or a container stop does);
* **marked failed**: Airflow's supervisor, told by the API server that the task should stop
  (a 409 on its heartbeat), sends SIGTERM to the task's process group and SIGKILL 5 s later
  (``ActivitySubprocess.kill(SIGTERM, force=True)``); the test sends the same signals to the
  group the task runs in;
* **past ``execution_timeout``**: the task runner raises ``AirflowTaskTimeout`` in the task
  and calls ``on_kill``.

A processing-time trigger never ends by itself, so every kill lands mid-run, with the driver
holding the lock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from ingest_core.catalog import get_catalog
from ingest_core.locks import lock_holder
from ingest_core.processes import is_alive
from ingest_core.settings import get_settings
from ingest_core.waiting import wait_until
from ingestctl.airflow_runtime import PROJECT_ROOT, airflow_environment
from ingestctl.demo import kafka_backlog, wait_for_bronze
from ingestctl.producer import Message, produce
from tests.e2e.conftest import AirflowPlatform

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.faults]

DAG_ID = "kill_probe"
#: Long enough for the driver to start and take its lock on a loaded 2-core machine.
TIMEOUT_S = 90
PROBE_DAG = f'''
"""Probe DAG of tests/e2e/test_task_kill.py."""
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from ingest_platform.operators import SparkJobOperator

ALWAYS_ON = ["--trigger", "processing-time=2 seconds"]
with DAG(dag_id="{DAG_ID}", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
    SparkJobOperator(task_id="ingest", job="bronze_ingest", job_args=ALWAYS_ON)
    SparkJobOperator(
        task_id="ingest_with_timeout",
        job="bronze_ingest",
        job_args=ALWAYS_ON,
        execution_timeout=timedelta(seconds={TIMEOUT_S}),
    )
    SparkJobOperator(
        task_id="ingest_once", job="bronze_ingest", job_args=["--trigger", "available-now"]
    )
'''


@pytest.fixture(scope="module")
def probe_dags(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("probe_dags")
    (folder / f"{DAG_ID}.py").write_text(textwrap.dedent(PROBE_DAG))
    return folder


def _command(dags: Path, task_id: str) -> tuple[list[str], dict[str, str]]:
    """``airflow tasks test kill_probe <task_id>`` and its environment (the probe DAG's
    folder)."""
    env = {**os.environ, **airflow_environment(), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    airflow = str(Path(sys.executable).parent / "airflow")
    return [airflow, "tasks", "test", DAG_ID, task_id], env


def _task(dags: Path, task_id: str) -> subprocess.Popen[str]:
    """:func:`_command` in a process group of its own (as Airflow's supervisor starts a
    task), its output to a pipe."""
    command, env = _command(dags, task_id)
    return subprocess.Popen(
        command,
        env=env,
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _checkpoint() -> Path:
    return get_catalog().job("bronze_ingest").checkpoint(get_settings())


def _spark_processes() -> list[psutil.Process]:
    """Every process of this test's platform (its ``INGEST_HOME``) running the bronze job's
    application (spark-submit, driver); the other worker's tests run the job too."""
    application = str(PROJECT_ROOT / "spark_jobs" / "bronze_ingest.py")
    found = []
    for process in psutil.process_iter():
        try:
            if (
                application in process.cmdline()
                and process.status() != psutil.STATUS_ZOMBIE
                and process.environ().get("INGEST_HOME") == os.environ["INGEST_HOME"]
            ):
                found.append(process)
        except psutil.Error:
            continue
    return found


def _kill_mid_run(dags: Path, task_id: str, kill: Callable[[subprocess.Popen[str]], None]) -> str:
    """Start the task, wait until its driver holds the checkpoint lock, ``kill`` it, wait for
    the task to end; assert nothing of it is left and the lock is free. Returns its output."""
    task = _task(dags, task_id)
    try:
        driver = wait_until(
            lambda: lock_holder(_checkpoint()) or task.poll() is not None,
            240,
            0.5,
            what=f"{task_id}'s driver to hold the checkpoint lock",
        )
        assert task.poll() is None, task.communicate()[0][-3000:]
        assert isinstance(driver, int)
        assert driver > 0
        jvm = psutil.Process(driver).parent()
        kill(task)
        output, _ = task.communicate(timeout=120)
    finally:
        if task.poll() is None:
            os.killpg(task.pid, signal.SIGKILL)
            task.wait()
    wait_until(lambda: not is_alive(driver), 30, 0.5, what=f"driver {driver} to exit")
    assert not is_alive(jvm.pid), f"spark-submit {jvm.pid} left behind"
    assert _spark_processes() == [], output[-3000:]
    assert lock_holder(_checkpoint()) is None
    return output


def _mark_failed(task: subprocess.Popen[str]) -> None:
    """The signals Airflow's supervisor sends when the task is marked failed."""
    os.killpg(task.pid, signal.SIGTERM)
    try:
        task.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(task.pid, signal.SIGKILL)


def _send(platform: AirflowPlatform, first: int, count: int) -> None:
    messages = [
        Message(platform.prefix + "orders", f"o{n}", {"event_id": f"e{n}", "n": n})
        for n in range(first, first + count)
    ]
    produce(platform.bootstrap, messages)


@pytest.mark.timeout(1500)
def test_a_killed_spark_task_leaves_no_driver_and_the_next_run_is_exact(
    airflow_platform: AirflowPlatform, probe_dags: Path
) -> None:
    platform = airflow_platform
    _send(platform, 0, 500)

    output = _kill_mid_run(probe_dags, "ingest", lambda task: task.send_signal(signal.SIGTERM))
    assert "stopping what spark-submit started" in output, output[-3000:]

    _send(platform, 500, 500)
    _kill_mid_run(probe_dags, "ingest", _mark_failed)

    _send(platform, 1000, 500)
    started = time.monotonic()
    output = _kill_mid_run(probe_dags, "ingest_with_timeout", lambda task: None)
    assert "AirflowTaskTimeout" in output or "Timeout" in output, output[-3000:]
    assert time.monotonic() - started < TIMEOUT_S + 120

    # The next run resumes from the checkpoint the killed drivers left: every offset once.
    _send(platform, 1500, 500)
    command, env = _command(probe_dags, "ingest_once")
    done = subprocess.run(
        command,
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    settings = get_settings()
    total = kafka_backlog(settings)
    assert total >= 2000
    wait_for_bronze(settings, total, timeout_s=60)
    bronze = platform.read("bronze_events")
    coordinates = bronze[["topic", "partition", "offset"]]
    assert not coordinates.duplicated().any()
    assert len(coordinates) == total
    for _, group in coordinates.groupby(["topic", "partition"]):
        assert sorted(group.offset) == list(range(len(group)))  # no gap
