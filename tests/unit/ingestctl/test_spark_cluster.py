"""The embedded Spark standalone cluster's bookkeeping, without starting a JVM (the
integration test ``test_local_cluster`` starts it for real)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ingest_core.settings import PlatformSettings
from ingestctl.kafka_broker import PortInUseError, free_port_block
from ingestctl.spark_cluster import WORKER_CLASS, SparkClusterError, SparkStandalone
from tests.conftest import free_port

pytestmark = pytest.mark.unit


def _settings(tmp_path: Path, workers: int = 2) -> PlatformSettings:
    return PlatformSettings(
        spark={"master": "spark://127.0.0.1:17077"},
        spark_cluster={"workers": workers, "data_dir": tmp_path / "spark"},
    )


def test_a_profile_without_workers_has_no_cluster_to_start(tmp_path: Path) -> None:
    with pytest.raises(SparkClusterError, match=r"spark_cluster\.workers is 0"):
        SparkStandalone(_settings(tmp_path, workers=0)).up()
    assert SparkStandalone(_settings(tmp_path, workers=0)).down() is False  # still stoppable
    with pytest.raises(SparkClusterError, match=r"worker 2: .* \(workers 0\.\.1\)"):
        SparkStandalone(_settings(tmp_path), worker=2)


def test_one_worker_is_started_and_stopped_without_the_master(tmp_path: Path) -> None:
    assert SparkStandalone(_settings(tmp_path)).names == ("master", "worker-0", "worker-1")
    assert SparkStandalone(_settings(tmp_path), worker=1).names == ("worker-1",)


def test_a_pid_file_naming_another_program_is_not_a_running_daemon(tmp_path: Path) -> None:
    """A pid reused by an unrelated process after a crash: never reported, never stopped."""
    cluster = SparkStandalone(_settings(tmp_path))
    cluster.data_dir.mkdir(parents=True)
    (cluster.data_dir / "worker-0.pid").write_text(f"{os.getpid()}\n")  # this pytest
    status = cluster.status()
    assert status.pids == {}
    assert not status.running
    assert status.describe().startswith("spark: stopped (master would be spark://127.0.0.1:17077")
    assert cluster.down() is False
    assert not (cluster.data_dir / "worker-0.pid").exists()


def _fake_daemon(cwd: Path, *words: str) -> subprocess.Popen[bytes]:
    """A sleeping Python process with ``words`` on its command line, in a session of its own."""
    cwd.mkdir(parents=True, exist_ok=True)
    code = "import time; time.sleep(60)"
    return subprocess.Popen([sys.executable, "-c", code, *words], cwd=cwd, start_new_session=True)


def test_down_never_stops_a_process_that_only_works_in_the_clusters_folder(
    tmp_path: Path,
) -> None:
    """Stress test: a shell reading executor logs in a worker's folder, whose pid a crash
    left in a pid file, was stopped by ``down``. Only daemons and executors are ours."""
    cluster = SparkStandalone(_settings(tmp_path))
    bystander = _fake_daemon(cluster.data_dir / "worker-0")
    try:
        (cluster.data_dir / "worker-0.pid").write_text(f"{bystander.pid}\n")
        assert cluster.down(grace_s=2) is False
        assert bystander.poll() is None  # still running
    finally:
        bystander.kill()
        bystander.wait()


def test_down_stops_workers_of_an_earlier_larger_cluster(tmp_path: Path) -> None:
    """Stress test: with spark_cluster.workers lowered from 2 to 1, ``down`` left worker-1
    running. The whole cluster's down stops every daemon its folder has a pid file of."""
    settings = _settings(tmp_path, workers=1)
    cluster = SparkStandalone(settings)
    marker = f"-Dingest.spark.dir={cluster.data_dir}"
    stranded = _fake_daemon(cluster.data_dir, marker, WORKER_CLASS)
    try:
        (cluster.data_dir / "worker-1.pid").write_text(f"{stranded.pid}\n")
        assert cluster.down(grace_s=5) is True
        assert stranded.wait(timeout=10) is not None
        assert not (cluster.data_dir / "worker-1.pid").exists()
    finally:
        if stranded.poll() is None:
            stranded.kill()


def test_a_taken_port_is_refused_before_any_daemon_starts(tmp_path: Path) -> None:
    """Stress test: worker-1's UI port taken, ``up`` failed but left the master and worker-0
    running. Every port is checked before the first start."""
    settings = _settings(tmp_path)
    settings.spark.master = f"spark://127.0.0.1:{free_port()}"  # not a running cluster's
    settings.spark_cluster.master_ui_port = free_port()
    settings.spark_cluster.worker_ui_port = free_port_block(2)
    taken = settings.spark_cluster.worker_ui_port + 1
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        with pytest.raises(PortInUseError, match=f"port {taken}"):
            SparkStandalone(settings).up()
    assert list(SparkStandalone(settings).data_dir.glob("*.pid")) == []


def test_an_ended_applications_executor_is_stray_only_if_it_outlives_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make test`` at 5086444: the medallion cycle's executor was still alive when the test
    looked just after the cycle ended (the worker kills an ended application's executors and
    waits for their JVM to exit). An executor that exits within the grace is not stray; one
    that stays is, with why and its age."""
    from ingestctl.spark_cluster import EXECUTOR_CLASS

    cluster = SparkStandalone(_settings(tmp_path))
    monkeypatch.setattr(SparkStandalone, "state", lambda self: {"activeapps": []})
    words = (EXECUTOR_CLASS, "--app-id", "app-1")
    cwd = cluster.data_dir / "worker-0" / "app-1" / "0"
    cwd.mkdir(parents=True)
    exiting = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(1.5)", *words], cwd=cwd
    )
    try:
        assert cluster.stray_executors()  # at once: still there
        assert cluster.stray_executors(grace_s=20) == []  # gone within the grace
    finally:
        exiting.kill()
        exiting.wait()
    staying = _fake_daemon(cwd, *words)
    try:
        [line] = cluster.stray_executors(grace_s=2.5)
        assert line.startswith(f"executor pid {staying.pid} of app-1 (")
        assert "its application is not running" in line
        assert "no running worker owns it" in line
    finally:
        staying.kill()
        staying.wait()
