"""One driver per checkpoint: the lock refuses a second holder and dies with its process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ingest_core.locks import CheckpointBusyError, checkpoint_lock

pytestmark = pytest.mark.unit


def test_second_holder_is_refused_naming_the_first(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoints" / "silver_refine"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from ingest_core.locks import checkpoint_lock\n"
            f"with checkpoint_lock({str(checkpoint)!r}):\n"
            "    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
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


def test_a_released_lock_names_no_holder_and_keeps_no_pid(tmp_path) -> None:
    """Issue #15: a repair's own pid was left in the lock file after it released the lock,
    and the next supervisor run said the job 'already runs' while no driver ran."""
    from ingest_core.locks import lock_holder, lock_path

    checkpoint = tmp_path / "checkpoints" / "bronze_ingest"
    assert lock_holder(checkpoint) is None  # no lock file at all
    with checkpoint_lock(checkpoint):
        assert lock_holder(checkpoint) == os.getpid()
    assert lock_holder(checkpoint) is None
    assert lock_path(checkpoint).read_text() == ""
    # A pid written by hand into a lock nobody holds is not a holder either.
    lock_path(checkpoint).write_text(f"{os.getpid()}\n")
    assert lock_holder(checkpoint) is None


def test_file_lock_exclusive_shared_and_non_blocking(tmp_path) -> None:
    from ingest_core.locks import file_lock

    path = tmp_path / "some.lock"
    with file_lock(path, blocking=False) as handle:
        handle.write("mine\n")
        handle.flush()
        with pytest.raises(BlockingIOError), file_lock(path, blocking=False):
            pass  # another open file of this process is refused too
        with pytest.raises(BlockingIOError), file_lock(path, blocking=False, shared=True):
            pass
    with file_lock(path, shared=True), file_lock(path, blocking=False, shared=True):
        pass  # shared holders coexist
    with file_lock(path, blocking=False):
        pass  # released when the blocks ended
    with pytest.raises(FileNotFoundError), file_lock(tmp_path / "missing.lock", mode="r"):
        pass


def test_a_fence_refuses_the_lock_to_all_but_its_owner_until_removed(tmp_path) -> None:
    from ingest_core.locks import CheckpointFencedError, fence, fence_of, unfence

    checkpoint = tmp_path / "gold_aggregate"
    with checkpoint_lock(checkpoint):
        fence(checkpoint, "refresh r1", "a swap is under way: its retry finishes it")
    assert fence_of(checkpoint) == ("refresh r1", "a swap is under way: its retry finishes it")
    # No process holds the lock now: refused all the same, with the reason.
    with (
        pytest.raises(CheckpointFencedError, match="its retry finishes it"),
        checkpoint_lock(checkpoint),
    ):
        pass
    # Another owner too, and a busy check (it catches CheckpointBusyError) sees it.
    with (
        pytest.raises(CheckpointBusyError, match="fenced"),
        checkpoint_lock(checkpoint, fence_owner="refresh r2"),
    ):
        pass
    with checkpoint_lock(checkpoint, fence_owner="refresh r1"):
        unfence(checkpoint)
    with checkpoint_lock(checkpoint):
        pass
    assert fence_of(checkpoint) is None
