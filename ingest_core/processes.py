"""Stopping child processes that were started in a process group of their own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float = 20) -> None:
    """SIGTERM the process group led by ``process`` (started with ``start_new_session=True``);
    SIGKILL the group if ``process`` outlives ``grace_s`` seconds. Returns at once when it has
    already exited. A group that vanished in between is not an error.

    :raises subprocess.TimeoutExpired: it survived SIGKILL for 10 s (a process stuck in the
        kernel, such as uninterruptible I/O).
    """
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
