"""Finding, watching and stopping processes (on psutil): the one place of the platform that
signals processes.

* :func:`command_line`, :func:`is_alive`: what a pid runs, whether it still runs (a zombie
  does not).
* :func:`stop_process`: SIGTERM one process, SIGKILL it after a grace period.
* :func:`stop_group`: SIGTERM a process group (and a pid in it), SIGKILL what outlives the
  grace period.
* :func:`stop_process_group`: the same for a ``subprocess.Popen`` started with
  ``start_new_session=True``.
* :func:`group_members`, :func:`session_members`: the processes of a process group or
  session, including those whose parent died (orphans keep both ids).
* :func:`stop_processes`, :func:`stop_tree`: SIGTERM a set of processes (or a process and its
  descendants), SIGKILL what outlives the grace period.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psutil

from ingest_core.waiting import wait_until


def command_line(pid: int) -> str | None:
    """The command line of ``pid``, arguments joined by spaces; ``""`` for a zombie (it has
    none), None when there is no such process or it may not be read."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return ""
        return " ".join(process.cmdline())
    except psutil.ZombieProcess:
        return ""
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def is_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, dead but not reaped, is not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_process(pid: int, grace_s: float = 20) -> None:
    """SIGTERM ``pid``; SIGKILL it if it outlives ``grace_s`` seconds. A process that is
    already gone is not an error.

    :raises psutil.TimeoutExpired: it survived SIGKILL for 10 s.
    """
    try:
        process = psutil.Process(pid)
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except psutil.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    except psutil.NoSuchProcess:
        return


def stop_group(
    process_group: int | None,
    pid: int | None = None,
    grace_s: float = 20,
    alive: Callable[[int], bool] = is_alive,
) -> None:
    """SIGTERM the process group ``process_group`` and ``pid`` (its main process, possibly
    in another group); if ``pid`` is still ``alive`` after ``grace_s`` seconds, SIGKILL
    both and wait ``grace_s`` seconds more. Without ``pid``, only SIGTERM is sent.

    :param alive: whether ``pid`` is still the process meant (a caller may also check its
        command line: a reused pid is not signalled).
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process_group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process_group, sig)
        if pid and alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if not pid:
            return
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: not alive(pid), grace_s, 0.5, what=f"pid {pid} to exit")
        if not alive(pid):
            return


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


def _members(id_of: Callable[[int], int], wanted: int) -> list[psutil.Process]:
    if wanted <= 1:  # 0: every process outside this pid namespace's sessions; 1: init's
        return []
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(ProcessLookupError, PermissionError, psutil.Error):
            # A zombie has ended: nothing to stop, and only its parent can reap it.
            if id_of(process.pid) == wanted and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def group_members(process_group: int) -> list[psutil.Process]:
    """The running processes (zombies left out) whose process group is ``process_group``
    (``os.getpgid``), whatever their parent: children a group's leader left behind when it
    died keep its group."""
    return _members(os.getpgid, process_group)


def session_members(session: int) -> list[psutil.Process]:
    """The running processes (zombies left out) of the session ``session`` (``os.getsid``; a
    process started with ``start_new_session=True`` leads the session numbered by its pid),
    whatever their parent: a session outlives its leader while any member lives, and Linux
    does not give its number to a new process until none does."""
    return _members(os.getsid, session)


def stop_processes(processes: list[psutil.Process], grace_s: float = 60) -> None:
    """SIGTERM every process of ``processes``; SIGKILL what outlives ``grace_s`` seconds, then
    wait up to 10 s for it. Processes already gone are not an error."""
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=10)


def stop_tree(pid: int, grace_s: float = 60) -> None:
    """SIGTERM ``pid`` and all its descendants (whatever their process group); SIGKILL what
    outlives ``grace_s`` seconds, then wait up to 10 s for it. Processes already gone are
    not an error."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    stop_processes(processes, grace_s)


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt`` like Ctrl-C while the block runs (in
    the main thread; elsewhere nothing changes), so that ``finally`` blocks stop what a
    long command started (the soak left its broker, PostgreSQL, Airflow and drivers running
    when killed, 2026-12-06; the bench uses it too). The previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
