"""File locks (``flock``), and one running driver per checkpoint: a lock held by the driver
process.

:func:`file_lock` is the platform's one ``flock`` helper (exclusive or shared, blocking or
not); the checkpoint lock, the supervisor's per-job lock, the broker's up/down lock and the
replay's dimension-file lock all use it.

The lock is an exclusive ``flock`` on ``.<checkpoint name>.lock`` beside the checkpoint
folder (not inside it: the checkpoint's content is Spark's). The kernel releases it when the
process dies, however it dies, so a crashed driver never leaves a stale lock, and a second
driver (an Airflow retry while the first still runs, or a person at a terminal) is refused
instead of corrupting the checkpoint.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def file_lock(
    path: Path, *, blocking: bool = True, shared: bool = False, mode: str = "a+"
) -> Iterator[IO[str]]:
    """Hold an ``flock`` on ``path`` for the duration of the ``with`` block.

    The kernel releases it when the file closes (at the end of the block) or the process
    dies, however it dies: a crashed holder never leaves a stale lock.

    :param blocking: wait (without a time limit) while another process holds it; else fail
        at once.
    :param shared: a shared lock (several holders, no exclusive one) instead of exclusive.
    :param mode: how ``path`` is opened; the default ``a+`` creates it, ``r`` does not.
    :returns: the open file (to read or write what the holder records in it).
    :raises BlockingIOError: ``blocking`` is False and the lock is held (by another process
        or another open file of this one).
    :raises OSError: ``path`` cannot be opened (missing with ``mode="r"``).
    """
    operation = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
    with open(path, mode) as handle:
        fcntl.flock(handle, operation)
        yield handle  # closing the file releases the flock


class CheckpointBusyError(RuntimeError):
    """Another live process holds the checkpoint's lock; the message names its pid."""


def lock_path(checkpoint: Path) -> Path:
    """The lock file of ``checkpoint``: ``.<name>.lock`` beside it; holds the driver's pid."""
    checkpoint = Path(checkpoint)
    return checkpoint.parent / f".{checkpoint.name}.lock"


@contextmanager
def checkpoint_lock(checkpoint: Path) -> Iterator[Path]:
    """Hold the checkpoint's lock for the duration of the ``with`` block.

    :returns: the lock file's path.
    :raises CheckpointBusyError: the lock is held by another process (or another ``with``
        block of this one).
    """
    checkpoint = Path(checkpoint)
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    path = lock_path(checkpoint)
    with contextlib.ExitStack() as stack:
        try:
            handle = stack.enter_context(file_lock(path, blocking=False))
        except BlockingIOError:
            holder = _recorded_pid(path) or "unknown"
            raise CheckpointBusyError(
                f"checkpoint {checkpoint} is in use by another driver (pid {holder}); one "
                "query per checkpoint: wait for it to finish or stop it first"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        try:
            yield path
        finally:
            # No stale pid once released: a repair's or a finished driver's pid left behind
            # reads as "held by pid N" to anyone who trusts the file alone.
            handle.seek(0)
            handle.truncate()


def _recorded_pid(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def lock_holder(checkpoint: Path) -> int | None:
    """Pid of the process holding ``checkpoint``'s lock, or None when nobody holds it.

    The flock decides, not the file: the lock is probed with a shared non-blocking flock,
    which only fails while some process holds the exclusive one. The pid is then the one
    the holder wrote (0 when it has not written it yet).
    """
    path = lock_path(Path(checkpoint))
    try:
        with file_lock(path, blocking=False, shared=True, mode="r"):
            return None
    except BlockingIOError:
        text = _recorded_pid(path)
        return int(text) if text.isdigit() else 0
    except OSError:  # no lock file: nobody ever held it
        return None
