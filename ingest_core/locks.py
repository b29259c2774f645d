"""One running driver per checkpoint: a lock held by the driver process.

The lock is an exclusive ``flock`` on ``.<checkpoint name>.lock`` beside the checkpoint
folder (not inside it: the checkpoint's content is Spark's). The kernel releases it when the
process dies, however it dies, so a crashed driver never leaves a stale lock, and a second
driver (an Airflow retry while the first still runs, or a person at a terminal) is refused
instead of corrupting the checkpoint.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
    handle = open(path, "a+")  # noqa: SIM115 - held open for the whole block
    held = False
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise CheckpointBusyError(
                f"checkpoint {checkpoint} is in use by another driver (pid {holder}); one "
                "query per checkpoint: wait for it to finish or stop it first"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        held = True
        yield path
    finally:
        if held:
            # No stale pid once released: a repair's or a finished driver's pid left behind
            # reads as "held by pid N" to anyone who trusts the file alone.
            handle.seek(0)
            handle.truncate()
        handle.close()  # closing releases the flock


def lock_holder(checkpoint: Path) -> int | None:
    """Pid of the process holding ``checkpoint``'s lock, or None when nobody holds it.

    The flock decides, not the file: the lock is probed with a shared non-blocking flock,
    which only fails while some process holds the exclusive one. The pid is then the one
    the holder wrote (0 when it has not written it yet).
    """
    path = lock_path(Path(checkpoint))
    try:
        handle = open(path)  # noqa: SIM115 - closed below
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = handle.read().strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None
