"""``airflow standalone`` that restarts a component that died.

Airflow's own standalone starts the scheduler, DAG processor, API server and triggerer, each
watched by a thread that only forwards its output: a scheduler that exits (a database error,
an out-of-memory kill) stays dead while the API keeps answering, and no run moves again.
Here each component's thread starts it again after a pause (5 s, doubling up to 60 s; the
pause starts again at 5 s once a component ran for 10 minutes), until the standalone itself
is stopped. Started by :class:`ingestctl.airflow_runtime.Standalone` as
``python -m ingestctl.airflow_standalone``; SIGTERM stops every component (SIGTERM to each,
as Airflow's standalone does on Ctrl-C) and then the standalone. Airflow's own set-up
(``StandaloneCommand``'s configuration, forced settings, admin password and database) runs
first in a child process that exits (:func:`prepare`): the process that stays imports nothing
of Airflow (15 MB resident instead of ~180 MB).

The triggerer runs without its log server (``--skip-serve-logs``: no platform task defers, so
it has no trigger log to serve) and only with settings ``airflow.triggerer`` on (the default;
:class:`ingest_core.settings.AirflowSettings`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import IO, Any

from ingest_core.processes import group_members, stop_processes
from ingest_core.waiting import accepts_connections, wait_until

#: Pause before the first restart of a component, doubled for every further one.
RESTART_BACKOFF_S = 5.0
RESTART_BACKOFF_MAX_S = 60.0
#: A component that ran this long counts as healthy again: its next restart waits
#: :data:`RESTART_BACKOFF_S`.
STABLE_AFTER_S = 600.0
#: The scheduler starts once the API server accepts connections, or after this long anyway.
#: Its tasks report to the API server's execution API from their first second: a task the
#: scheduler ran at once (one left from an interrupted run) while the API server was still
#: starting got "Connection refused", was killed and failed its run.
API_WAIT_S = 120.0
#: What a component left behind when it exited gets this long after SIGTERM before SIGKILL.
LEFTOVER_GRACE_S = 10.0


def api_address() -> tuple[str, int]:
    """Where the API server listens (``[api] host`` and ``port``; a wildcard host is reached
    on loopback)."""
    from airflow.configuration import conf

    host = conf.get("api", "host", fallback="127.0.0.1")
    return ("127.0.0.1" if host in ("0.0.0.0", "::", "") else host, conf.getint("api", "port"))


class RestartingSubCommand(threading.Thread):
    """One Airflow component (``airflow <command>``), restarted whenever it exits until
    :meth:`stop` is called. Same interface as Airflow's ``SubCommand``.

    :param parent: the standalone (its ``output_queue`` gets ``(name, line)`` pairs).
    :param launcher: builds the process's argument list from ``command`` (tests replace it).
    :param wait_for: ``(host, port)`` to accept a TCP connection before the first start (at
        most :data:`API_WAIT_S`): the API server's address for the scheduler
        (:func:`component_factory`), none for the other components.
    """

    def __init__(
        self,
        parent: Any,
        name: str,
        command: list[str],
        env: dict[str, str],
        launcher: Callable[[list[str]], list[str]] | None = None,
        backoff_s: float = RESTART_BACKOFF_S,
        wait_for: tuple[str, int] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.parent = parent
        self.name = name
        self.command = command
        self.env = env
        self.launcher = launcher or (lambda command: ["airflow", *command])
        self.backoff_s = backoff_s
        self.wait_for = wait_for
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def _say(self, text: str) -> None:
        self.parent.output_queue.append(("standalone", text.encode()))

    def _await_address(self) -> None:
        if self.wait_for is None:
            return
        host, port = self.wait_for
        try:
            wait_until(
                lambda: self._stopping.is_set() or accepts_connections(host, port),
                API_WAIT_S,
                what=f"{host}:{port} to answer",
            )
        except TimeoutError as error:
            self._say(f"{self.name}: {error}; starting it anyway")

    def _start(self) -> subprocess.Popen[bytes] | None:
        # Under the lock: stop() either sees this process or prevents it.
        with self._lock:
            if self._stopping.is_set():
                return None
            self.process = subprocess.Popen(
                self.launcher(self.command),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self.env,
                # Its own process group: what it leaves behind when it dies can be found.
                process_group=0,
            )
            return self.process

    def _forward(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            self.parent.output_queue.append((self.name, line))

    def _clear_group(self, process: subprocess.Popen[bytes]) -> None:
        """Stop what the component left in its process group (a scheduler killed with
        SIGKILL leaves its log server and executor workers: they hold its log port and its
        output pipe)."""
        left = group_members(process.pid)
        if left:
            self._say(f"{self.name}: stopping {len(left)} process(es) it left behind")
            stop_processes(left, LEFTOVER_GRACE_S)

    def run(self) -> None:
        pause = self.backoff_s
        self._await_address()
        while True:
            started = time.monotonic()
            process = self._start()
            if process is None:
                return
            assert process.stdout is not None
            reader = threading.Thread(target=self._forward, args=(process.stdout,), daemon=True)
            reader.start()
            # The process's end, not its output's: orphans may hold the pipe open.
            code = process.wait()
            self._clear_group(process)
            reader.join(timeout=5)
            if self._stopping.is_set():
                return
            if time.monotonic() - started >= STABLE_AFTER_S:
                pause = self.backoff_s
            self._say(f"{self.name} exited with code {code}; restarting it in {pause:.0f} s")
            # Woken early by stop(): the standalone is shutting down, nothing to restart.
            if self._stopping.wait(pause):
                return
            self.restarts += 1
            self._say(f"{self.name}: restart {self.restarts}")
            pause = min(pause * 2, RESTART_BACKOFF_MAX_S)

    def stop(self) -> None:
        """Stop restarting and terminate the running process (SIGTERM; :meth:`run` then
        stops what it left in its process group)."""
        with self._lock:
            self._stopping.set()
            process = self.process
        if process is not None and process.poll() is None:
            process.terminate()


class SkippedComponent(threading.Thread):
    """A component the platform does not start: says so once in the standalone's log.
    Same interface as Airflow's ``SubCommand``.

    :param reason: why, for the log line ``<name>: not started (<reason>)``.
    """

    def __init__(self, parent: Any, name: str, reason: str) -> None:
        super().__init__(daemon=True)
        self.parent = parent
        self.name = name
        self.reason = reason

    def run(self) -> None:
        line = f"{self.name}: not started ({self.reason})"
        self.parent.output_queue.append(("standalone", line.encode()))

    def stop(self) -> None:
        """Nothing runs: nothing to stop."""


#: The triggerer's options: no log server (no platform task defers: nothing to serve).
TRIGGERER_OPTIONS = ("--skip-serve-logs",)


def component_factory(
    skip: Mapping[str, str], api: tuple[str, int] | None = None
) -> Callable[..., RestartingSubCommand | SkippedComponent]:
    """Builds each component as ``make(parent, name, command, env)``: a
    :class:`RestartingSubCommand` (the scheduler waiting for ``api``, the API server's
    address; the triggerer with :data:`TRIGGERER_OPTIONS`), or a :class:`SkippedComponent`
    for a name in ``skip`` (name -> reason)."""

    def component(
        parent: Any, name: str, command: list[str], env: dict[str, str]
    ) -> RestartingSubCommand | SkippedComponent:
        if name in skip:
            return SkippedComponent(parent, name, skip[name])
        if name == "triggerer":
            command = [*command, *TRIGGERER_OPTIONS]
        wait_for = api if name == "scheduler" else None
        return RestartingSubCommand(parent, name, command, env, wait_for=wait_for)

    return component


def skipped_components() -> dict[str, str]:
    """Components this platform's settings leave out (name -> reason): the triggerer unless
    ``airflow.triggerer`` is on."""
    from ingest_core.settings import get_settings

    if get_settings().airflow.triggerer:
        return {}
    return {"triggerer": "settings airflow.triggerer is off: no platform task defers"}


#: Airflow's standalone's components, in its order.
COMPONENTS = ("scheduler", "dag-processor", "api-server", "triggerer")
#: Where the standalone records the components it left out (JSON object, name -> reason) in
#: ``AIRFLOW_HOME``, for ``ingestctl status`` (:meth:`ingestctl.airflow_runtime.Standalone.
#: skipped_components`): the running Airflow's, whatever the caller's settings say.
SKIPPED_FILE = "standalone.skipped.json"
#: This module, as ``python -m`` runs it (and as :class:`ingestctl.airflow_runtime.Standalone`
#: recognises its process).
STANDALONE_MODULE = "ingestctl.airflow_standalone"
#: Starts the line on which :func:`prepare` hands its results to :func:`main`.
PREPARED = "ingestctl-standalone-prepared: "


def prepare() -> None:
    """Airflow's own standalone set-up, run by :func:`main` in a child process that exits
    after it, so that Airflow's imports (~160 MB) stay out of the long-lived standalone:
    Airflow's configuration file, the settings standalone forces
    (``StandaloneCommand.calculate_env``: LocalExecutor, SimpleAuthManager), the admin's
    generated password, the metadata database (``initialize_database``). Prints Airflow's
    lines, then one :data:`PREPARED` line of JSON: ``env`` (what changed), ``skip``
    (:func:`skipped_components`) and ``api`` (:func:`api_address`)."""
    from airflow.cli.commands.standalone_command import StandaloneCommand
    from airflow.configuration import write_default_airflow_configuration_if_needed

    write_default_airflow_configuration_if_needed()  # as the `airflow` command does first
    command = StandaloneCommand()
    env = command.calculate_env()
    command.find_user_info()
    command.initialize_database()
    changed = {key: value for key, value in env.items() if os.environ.get(key) != value}
    result = {"env": changed, "skip": skipped_components(), "api": list(api_address())}
    print(PREPARED + json.dumps(result), flush=True)


class ComponentSupervisor:
    """The long-lived standalone: starts :data:`COMPONENTS` (each restarted when it exits),
    prints their output as Airflow's standalone does (``<name> | <line>``) until SIGTERM or
    Ctrl-C, then stops them. Imports nothing of Airflow.

    :param prepared: :func:`prepare`'s result.
    """

    def __init__(self, prepared: Mapping[str, Any]) -> None:
        self.prepared = prepared
        self.output_queue: deque[tuple[str, bytes]] = deque()

    def _drain(self) -> None:
        while self.output_queue:
            name, line = self.output_queue.popleft()
            print(f"{name:10} | {line.decode(errors='replace').rstrip()}", flush=True)

    def run(self) -> None:
        env = {**os.environ, **self.prepared["env"]}
        if env.get("AIRFLOW_HOME"):
            Path(env["AIRFLOW_HOME"], SKIPPED_FILE).write_text(json.dumps(self.prepared["skip"]))
        make = component_factory(self.prepared["skip"], api=tuple(self.prepared["api"]))
        components = [make(self, name, [name], env) for name in COMPONENTS]
        for component in components:
            component.start()
        try:
            while True:
                self._drain()
                time.sleep(0.1)
        except KeyboardInterrupt:
            pass
        self.output_queue.append(("standalone", b"Shutting down components"))
        for component in components:
            component.stop()
        for component in components:
            component.join()
        self.output_queue.append(("standalone", b"Complete"))
        self._drain()


def _terminate(signum: int, frame: FrameType | None) -> None:
    # Components are shut down on KeyboardInterrupt, as in Airflow's standalone.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """``python -m ingestctl.airflow_standalone``: :func:`prepare` in a child, then
    :class:`ComponentSupervisor`. Exits with the child's status if the set-up failed."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["prepare"]:
        prepare()
        return
    signal.signal(signal.SIGTERM, _terminate)
    child = subprocess.Popen(
        [sys.executable, "-m", STANDALONE_MODULE, "prepare"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert child.stdout is not None
    prepared = None
    for line in child.stdout:
        if line.startswith(PREPARED):
            prepared = json.loads(line.removeprefix(PREPARED))
        else:
            print(line.rstrip(), flush=True)  # Airflow's own "standalone | ..." lines
    code = child.wait()
    if code != 0 or prepared is None:
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        print(f"{'standalone':10} | set-up failed ({how})", flush=True)
        sys.exit(code if code > 0 else 1)
    ComponentSupervisor(prepared).run()
    sys.exit(0)


if __name__ == "__main__":
    main()
