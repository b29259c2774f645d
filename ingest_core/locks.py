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
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ingest_core.runtime_files import write_json


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


class CheckpointFencedError(CheckpointBusyError):
    """An operation that spans processes holds the checkpoint although no process holds its
    lock right now: a layer refresh's swap killed part-way (:func:`fence`). The message says
    which and how it finishes."""


def lock_path(checkpoint: Path) -> Path:
    """The lock file of ``checkpoint``: ``.<name>.lock`` beside it; holds the driver's pid."""
    checkpoint = Path(checkpoint)
    return checkpoint.parent / f".{checkpoint.name}.lock"


def fence_path(checkpoint: Path) -> Path:
    """The fence file of ``checkpoint``: ``.<name>.fence`` beside it (see :func:`fence`)."""
    checkpoint = Path(checkpoint)
    return checkpoint.parent / f".{checkpoint.name}.fence"


def fence(checkpoint: Path, owner: str, reason: str) -> None:
    """Keep every other holder of ``checkpoint``'s lock out until :func:`unfence`, across
    process deaths: the lock alone dies with its process, and a layer refresh's swap killed
    between two renames left the live jobs free to run on half-swapped tables and
    checkpoints until its retry (a review of soak run 15's fix). Written atomically, while
    the caller holds the lock; :func:`checkpoint_lock` refuses with ``reason`` while it
    exists, except to ``owner``.

    :param owner: who may take the lock through the fence (e.g. ``refresh <id>``).
    :param reason: what holds the checkpoint and how it finishes (shown to whoever is
        refused).
    """
    write_json(fence_path(checkpoint), {"owner": owner, "reason": reason})


def fence_of(checkpoint: Path) -> tuple[str, str] | None:
    """``(owner, reason)`` of ``checkpoint``'s fence, or None when it is not fenced.

    :raises ValueError: the fence file is not JSON; :raises KeyError: it lacks ``owner`` or
        ``reason`` (either way it still fences: nothing takes the lock past a fence it cannot
        read).
    """
    try:
        fence = json.loads(fence_path(checkpoint).read_text())
    except FileNotFoundError:
        return None
    return fence["owner"], fence["reason"]


def unfence(checkpoint: Path) -> None:
    """Remove ``checkpoint``'s fence (none: nothing to do)."""
    fence_path(checkpoint).unlink(missing_ok=True)


@contextmanager
def checkpoint_lock(checkpoint: Path, *, fence_owner: str | None = None) -> Iterator[Path]:
    """Hold the checkpoint's lock for the duration of the ``with`` block.

    :param fence_owner: take it although the checkpoint is fenced (:func:`fence`) by this
        owner: only for the operation that set the fence.
    :returns: the lock file's path.
    :raises CheckpointBusyError: the lock is held by another process (or another ``with``
        block of this one).
    :raises CheckpointFencedError: the checkpoint is fenced (by another owner); the message
        gives the reason.
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
        fenced = fence_of(checkpoint)  # read under the lock: no race with fence()
        if fenced is not None and fenced[0] != fence_owner:
            raise CheckpointFencedError(f"checkpoint {checkpoint} is fenced: {fenced[1]}")
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
