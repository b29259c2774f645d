"""One driver per checkpoint: the lock refuses a second holder and dies with its process."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from spark_jobs.locks import CheckpointBusyError, checkpoint_lock

pytestmark = pytest.mark.unit


def test_second_holder_is_refused_naming_the_first(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoints" / "silver_refine"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from spark_jobs.locks import checkpoint_lock\n"
         f"with checkpoint_lock({str(checkpoint)!r}):\n"
         "    print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with (
            pytest.raises(CheckpointBusyError, match=f"pid {holder.pid}"),
            checkpoint_lock(checkpoint),
        ):
            pass
    finally:
        holder.kill()  # like kill -9: no clean-up code runs
        holder.wait()
    deadline = time.monotonic() + 5
    while True:  # the kernel released the lock with the process
        try:
            with checkpoint_lock(checkpoint):
                break
        except CheckpointBusyError:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_lock_lives_beside_the_checkpoint_not_inside(tmp_path) -> None:
    checkpoint = tmp_path / "cp"
    with checkpoint_lock(checkpoint) as lock:
        assert lock.parent == tmp_path
        assert not checkpoint.exists()
