"""Process control on psutil (ingest_core.processes): real child processes, no Spark."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from ingest_core.processes import (
    command_line,
    group_members,
    is_alive,
    session_members,
    stop_group,
    stop_process,
    stop_processes,
    stop_tree,
)
from ingest_core.waiting import wait_until

pytestmark = pytest.mark.unit

#: A shell that ignores SIGTERM and has two children (which do not ignore it).
STUBBORN_TREE = "trap '' TERM; sleep 300 & sleep 300 & wait"


def _spawn(script: str, new_session: bool = False) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(["sh", "-c", script], start_new_session=new_session)
    # until the shell has forked its children
    for _ in range(100):
        if len(psutil.Process(process.pid).children()) >= 2 or "trap" not in script:
            break
        time.sleep(0.05)
    return process


def test_command_line_names_the_program_and_none_for_no_process() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # Right after the fork (before exec) the command line can still read empty.
        found = wait_until(lambda: command_line(process.pid), 10, 0.05, what="exec")
        assert "time.sleep(30)" in found
        assert is_alive(process.pid)
    finally:
        process.kill()
    process.wait()
    assert not is_alive(process.pid)
    assert command_line(process.pid) is None


def test_a_zombie_is_not_alive_and_has_an_empty_command_line() -> None:
    process = subprocess.Popen(["true"])  # exits at once; not reaped until process.wait()
    for _ in range(100):
        if psutil.Process(process.pid).status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.02)
    try:
        assert not is_alive(process.pid)
        assert command_line(process.pid) == ""
    finally:
        process.wait()


def test_stop_process_kills_what_ignores_sigterm_after_the_grace() -> None:
    process = _spawn("trap '' TERM; while :; do sleep 0.1; done")
    time.sleep(0.3)  # the trap is set
    started = time.monotonic()
    stop_process(process.pid, grace_s=1)  # reaps it (psutil waits on its own children)
    assert time.monotonic() - started >= 1  # SIGTERM was ignored for the whole grace
    assert not is_alive(process.pid)
    stop_process(process.pid, grace_s=1)  # already gone: not an error


def test_stop_tree_stops_the_children_too() -> None:
    process = _spawn(STUBBORN_TREE)
    children = psutil.Process(process.pid).children(recursive=True)
    assert len(children) == 2
    stop_tree(process.pid, grace_s=1)
    process.wait(timeout=5)
    assert not any(is_alive(child.pid) for child in children)
    stop_tree(process.pid, grace_s=1)  # already gone: not an error


def test_stop_group_signals_the_whole_group_and_kills_a_stubborn_leader() -> None:
    process = _spawn(STUBBORN_TREE, new_session=True)
    children = psutil.Process(process.pid).children(recursive=True)
    assert os.getpgid(process.pid) == process.pid

    def alive(pid: int) -> bool:
        return process.poll() is None  # reaps the leader, as its parent would

    stop_group(process.pid, process.pid, grace_s=1, alive=alive)
    assert process.poll() == -9
    # SIGTERM reached the children through the group
    _, alive_children = psutil.wait_procs(children, timeout=5)
    assert not alive_children


def test_orphans_stay_members_of_their_group_and_session_and_are_stopped() -> None:
    # The leader's children outlive it (SIGKILL): reparented, they keep group and session.
    process = _spawn(STUBBORN_TREE, new_session=True)
    children = psutil.Process(process.pid).children()
    assert len(children) == 2
    process.kill()
    process.wait()
    orphans = {child.pid for child in children}
    assert {p.pid for p in group_members(process.pid)} == orphans
    assert {p.pid for p in session_members(process.pid)} == orphans
    assert psutil.Process(os.getpid()) not in session_members(process.pid)
    stop_processes(session_members(process.pid), grace_s=5)
    assert not any(is_alive(pid) for pid in orphans)
    assert session_members(process.pid) == []


@pytest.mark.parametrize("number", [0, 1, -1])
def test_no_group_or_session_is_found_for_init_or_a_non_pid(number: int) -> None:
    """Session 0 holds init and the kernel threads: stopping its members stopped init."""
    assert group_members(number) == []
    assert session_members(number) == []
