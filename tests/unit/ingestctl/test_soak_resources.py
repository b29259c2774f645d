"""The soak's CPU accounting: which component a command line is, and that a busy process
of the soak's home is charged to it (a real process burning a second of CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest_core.waiting import wait_until
from ingestctl.soak.resources import CpuAccount, CpuSampler, component

pytestmark = pytest.mark.unit

SPARK_JVM = [
    "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
    "-cp",
    "/x/jars/*",
    "org.apache.spark.deploy.SparkSubmit",
    "--name",
    "silver_refine",
    "/repo/spark_jobs/silver_refine.py",
    "--trigger",
    "available-now",
]


EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        (SPARK_JVM, "spark: silver_refine"),
        (["/repo/.venv/bin/python", "/repo/spark_jobs/bronze_ingest.py"], "spark: bronze_ingest"),
        (["python3", "-m", "pyspark.daemon"], "spark: python workers"),
        (
            ["/venv/bin/python", "/repo/spark_jobs/gold/gold_backfill.py", "--start", "x"],
            "spark: gold_backfill",
        ),
        (
            ["/venv/bin/python", "-m", "ingest_platform.hooks", "submit", "bronze_ingest"],
            "spark-submit launchers",
        ),
        (["java", "-Xmx1G", "-cp", "k.jar", "kafka.Kafka", "server.properties"], "kafka broker"),
        (
            ["java", "-cp", "/s/jars/*", "-Xmx512m", EXECUTOR, "--app-id", "app-1", "--cores", "1"],
            "spark: executors",
        ),
        (
            ["java", "-Xmx256m", "org.apache.spark.deploy.worker.Worker"],
            "spark: master and workers",
        ),
        (
            ["java", "org.apache.spark.deploy.master.Master", "--port", "1"],
            "spark: master and workers",
        ),
        (["postgres: ingest airflow 127.0.0.1(5432) idle"], "postgresql"),
        (["/x/bin/postgres", "-D", "/tmp/pg"], "postgresql"),
        (["airflow scheduler"], "airflow: scheduler"),
        (["/venv/bin/python", "/venv/bin/airflow", "api-server"], "airflow: api-server"),
        (["airflow", "dag-processor"], "airflow: dag-processor"),
        (["airflow", "standalone"], "airflow: standalone"),
        (["airflow worker -- 0193c0de-1111-7000-8000-000000000000"], "airflow: task processes"),
        (["/repo/.venv/bin/python", "/repo/.venv/bin/ingestctl", "soak"], "soak"),
        (["/venv/bin/python", "-m", "spark_jobs.quality.gate", "validate"], "gate"),
        (["python3", "-m", "ingestctl.checkpoints", "backup"], "python -m ingestctl.checkpoints"),
        (["/venv/bin/python", "/tmp/tool.py", "x"], "python tool.py"),
        (
            ["/venv/bin/python", "/venv/bin/ingestctl", "checkpoints", "backup"],
            "ingestctl checkpoints",
        ),
        (["/usr/bin/du", "-s"], "other: du"),
        ([], "other: ?"),
    ],
)
def test_a_command_line_is_charged_to_its_component(cmdline: list[str], expected: str) -> None:
    assert component(cmdline) == expected


def test_the_table_lists_components_largest_first_and_the_machine_rest() -> None:
    account = CpuAccount({"kafka broker": 30.0, "spark: silver_refine": 90.0}, 200.0, 100.0)
    assert account.table() == [
        ("spark: silver_refine", 90.0, 0.9),
        ("kafka broker", 30.0, 0.3),
        ("unattributed (machine total minus the above)", 80.0, 0.8),
    ]
    assert account.top(1) == "spark: silver_refine 0.90"


def test_a_busy_process_of_the_soaks_home_is_charged_and_a_strangers_is_not(
    tmp_path: Path,
) -> None:
    """Ours: started in its own session (as always-on drivers are) with the soak's home.
    The stranger: another home, and orphaned by its shell, so not a descendant either."""
    script = tmp_path / "burn.py"
    script.write_text(
        "import sys, time\n"
        "end = time.process_time() + 1.0\n"
        "while time.process_time() < end:\n"
        "    pass\n"
        "open(sys.argv[2], 'w').close()\n"
    )
    home = tmp_path / "home"
    sampler = CpuSampler(home, every_s=0.2)
    sampler.start()
    ours = subprocess.Popen(
        [sys.executable, str(script), "spark_jobs/gold_aggregate.py", str(tmp_path / "a")],
        env={**os.environ, "INGEST_HOME": str(home)},
        start_new_session=True,
    )
    subprocess.run(
        f"{sys.executable} {script} spark_jobs/late_corrections.py {tmp_path / 'b'} &",
        shell=True,
        check=True,
        env={**os.environ, "INGEST_HOME": str(tmp_path / "another")},
    )
    ours.wait()
    wait_until(lambda: (tmp_path / "b").exists(), 30, 0.1, what="the stranger's second")
    account = sampler.stop()
    # Sampled every 0.2 s, so up to one period of its second may be missed.
    assert account.seconds.get("spark: gold_aggregate", 0) >= 0.7
    assert "spark: late_corrections" not in account.seconds
    assert account.machine_s >= 1.4


def test_a_launcher_that_execs_its_driver_charges_the_driver_after_the_exec(
    tmp_path: Path,
) -> None:
    """Soak run 10: an always-on job's launcher (``python -m ingest_platform.hooks submit``)
    execs spark-submit and then the driver in the same process (same pid, same start
    time); the sampler named it once, so the drivers' CPU went to the launchers."""
    package = tmp_path / "path" / "ingest_platform"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    burn = tmp_path / "burn.py"
    burn.write_text(
        "import sys, time\n"
        "end = time.process_time() + 1.0\n"
        "while time.process_time() < end:\n"
        "    pass\n"
    )
    (package / "hooks.py").write_text(  # a launcher: idle, then becomes the driver
        "import os, sys, time\n"
        "time.sleep(0.8)\n"
        "os.execv(sys.executable,"
        f" [sys.executable, {str(burn)!r}, 'spark_jobs/bronze_ingest.py'])\n"
    )
    home = tmp_path / "home"
    sampler = CpuSampler(home, every_s=0.2)
    sampler.start()
    launcher = subprocess.Popen(
        [sys.executable, "-m", "ingest_platform.hooks", "submit", "bronze_ingest"],
        env={**os.environ, "INGEST_HOME": str(home), "PYTHONPATH": str(tmp_path / "path")},
        start_new_session=True,
    )
    launcher.wait(60)
    account = sampler.stop()
    assert account.seconds.get("spark: bronze_ingest", 0) >= 0.7
    assert account.seconds.get("spark-submit launchers", 0) < 0.5  # its start-up only


def test_a_server_started_as_another_user_in_the_soaks_home_is_charged_with_its_children(
    tmp_path: Path,
) -> None:
    """Soak run 10 charged PostgreSQL nothing: its server runs as another user with a clean
    environment and leaves the soak's process tree (``pg_ctl`` daemonises it); its backends
    are its children. It is ours by the data folder in its command line."""
    script = tmp_path / "server.py"
    script.write_text(  # a "server" that forks a busy "backend"
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.execv(sys.executable, [sys.executable, '-c', 'import time\\n"
        "end = time.process_time() + 1.0\\nwhile time.process_time() < end: pass'])\n"
        "os.wait()\n"
        "open(sys.argv[2], 'w').close()\n"
    )
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k != "INGEST_HOME"}
    sampler = CpuSampler(home, every_s=0.2)
    sampler.start()
    subprocess.run(
        f"{sys.executable} {script} {home}/postgres/data {tmp_path / 'done'} &",
        shell=True,
        check=True,
        env=env,
    )
    wait_until(lambda: (tmp_path / "done").exists(), 30, 0.1, what="the server to finish")
    account = sampler.stop()
    assert account.seconds.get("python -c", 0) >= 0.7, account.seconds
