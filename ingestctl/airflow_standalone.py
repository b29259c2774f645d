"""``airflow standalone`` that restarts a component that died.

Airflow's own standalone starts the scheduler, DAG processor, API server and triggerer, each
watched by a thread that only forwards its output: a scheduler that exits (a database error,
an out-of-memory kill) stays dead while the API keeps answering, and no run moves again.
Here each component's thread starts it again after a pause (5 s, doubling up to 60 s; the
pause starts again at 5 s once a component ran for 10 minutes), until the standalone itself
is stopped. Started by :class:`ingestctl.airflow_runtime.Standalone` as
``python -m ingestctl.airflow_standalone``; SIGTERM stops every component (SIGTERM to each,
as Airflow's standalone does on Ctrl-C) and then the standalone.

The triggerer starts only with settings ``airflow.triggerer`` on (off by default: no platform
task defers, and it holds about 470 MB; :class:`ingest_core.settings.AirflowSettings`).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

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
        most :data:`API_WAIT_S`); default: the API server's address for the scheduler, none
        for the other components.
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
        self.wait_for = wait_for or (api_address() if name == "scheduler" else None)
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stopping = threading.Event()

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

    def run(self) -> None:
        pause = self.backoff_s
        self._await_address()
        while not self._stopping.is_set():
            started = time.monotonic()
            self.process = subprocess.Popen(
                self.launcher(self.command),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.parent.output_queue.append((self.name, line))
            code = self.process.wait()
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
        """Stop restarting and terminate the running process."""
        self._stopping.set()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()


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


def component_factory(skip: Mapping[str, str]) -> Callable[..., threading.Thread]:
    """What Airflow's ``StandaloneCommand.run`` calls as ``SubCommand(parent, name=...,
    command=..., env=...)`` for each component: a :class:`RestartingSubCommand`, or a
    :class:`SkippedComponent` for a name in ``skip`` (component name -> reason)."""

    def component(parent: Any, name: str, command: list[str], env: dict[str, str]) -> Any:
        if name in skip:
            return SkippedComponent(parent, name, skip[name])
        return RestartingSubCommand(parent, name, command, env)

    return component


def skipped_components() -> dict[str, str]:
    """Components this platform's settings leave out (name -> reason): the triggerer unless
    ``airflow.triggerer`` is on."""
    from ingest_core.settings import get_settings

    if get_settings().airflow.triggerer:
        return {}
    return {"triggerer": "settings airflow.triggerer is off: no platform task defers"}


def _terminate(signum: int, frame: FrameType | None) -> None:
    # Airflow's standalone shuts its components down on KeyboardInterrupt.
    raise KeyboardInterrupt


def main() -> None:
    from airflow.cli.commands import standalone_command
    from airflow.configuration import write_default_airflow_configuration_if_needed

    write_default_airflow_configuration_if_needed()  # as the `airflow` command does first
    skip = skipped_components()
    # StandaloneCommand.run builds its components from this module-level name.
    standalone_command.SubCommand = component_factory(skip)  # type: ignore[misc,assignment]

    class Standalone(standalone_command.StandaloneCommand):
        def job_running(self, job_runner_class: Any) -> bool:
            # "Ready" (the banner) waits for each started component's heartbeat only.
            if job_runner_class.job_type.removesuffix("Job").lower() in skip:
                return True
            return bool(super().job_running(job_runner_class))

    signal.signal(signal.SIGTERM, _terminate)
    Standalone().run()
    sys.exit(0)


if __name__ == "__main__":
    main()
