"""The embedded Spark standalone cluster's bookkeeping, without starting a JVM (the
integration test ``test_local_cluster`` starts it for real)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ingest_core.settings import PlatformSettings
from ingestctl.spark_cluster import SparkClusterError, SparkStandalone

pytestmark = pytest.mark.unit


def _settings(tmp_path: Path, workers: int = 2) -> PlatformSettings:
    return PlatformSettings(
        spark={"master": "spark://127.0.0.1:17077"},
        spark_cluster={"workers": workers, "data_dir": tmp_path / "spark"},
    )


def test_a_profile_without_workers_has_no_cluster_to_start(tmp_path: Path) -> None:
    with pytest.raises(SparkClusterError, match="INGEST_PROFILE=local-cluster"):
        SparkStandalone(_settings(tmp_path, workers=0))
    with pytest.raises(SparkClusterError, match=r"worker 2: spark_cluster\.workers is 2"):
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
