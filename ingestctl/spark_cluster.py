"""Run an embedded Spark standalone cluster on loopback: a master and ``spark_cluster.workers``
workers (the ``local-cluster`` profile, issue 54).

They are the Master and Worker classes a real standalone cluster runs, started from pyspark's
own ``bin/spark-class`` (no other download), each in a session of its own, with logs, pid
files and the workers' work dirs in :attr:`SparkClusterSettings.data_path`. The master listens
where ``spark.master`` says (``spark://127.0.0.1:<port>``, one fact); the embedded Airflow's
``spark_default`` connection points there (:func:`ingest_core.settings.spark_connection`), so
every spark-submit task and always-on driver runs its executors on the workers.

Rules this module keeps, as :mod:`ingestctl.kafka_broker` does for the brokers:

* ``up`` is idempotent, starts what does not run and returns once every worker it is about
  has registered with the master;
* it never uses a master or worker it did not start: a taken port is an error naming it;
* ``down`` stops only the processes it started, identified by pid *and* command line (the
  daemons carry ``-Dingest.spark.dir=<data_path>``), each with its session: a worker's
  executors are its children, stopped with it even when the worker itself was killed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ingest_core.locks import file_lock
from ingest_core.processes import session_members, stop_process_group, stop_processes
from ingest_core.settings import PlatformSettings, embedded_master_address
from ingest_core.spark_config import spark_home
from ingest_core.waiting import wait_until
from ingestctl.kafka_broker import ensure_port_free

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
#: How users choose other ports (the end of :class:`PortInUseError`'s message).
PORT_HINT = (
    "ingestctl never uses a Spark master or worker it did not start: stop that process, or "
    "choose other ports (INGEST_SPARK__MASTER=spark://127.0.0.1:<port>, "
    "INGEST_SPARK_CLUSTER__MASTER_UI_PORT, INGEST_SPARK_CLUSTER__WORKER_UI_PORT)."
)
#: Executors' work dirs (fetched jars, logs) of applications that ended more than an hour ago
#: are deleted by the workers every 10 minutes: a soak starts hundreds of applications.
WORKER_OPTS = (
    "-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.interval=600 "
    "-Dspark.worker.cleanup.appDataTtl=3600"
)


def _main_class(name: str) -> str:
    """The Java class daemon ``name`` (``master``, ``worker-<i>``) runs."""
    return MASTER_CLASS if name == "master" else WORKER_CLASS


def app_id_of(executor: psutil.Process) -> str | None:
    """The application an executor JVM serves (its ``--app-id`` argument), or None when the
    process is gone or has none."""
    with contextlib.suppress(psutil.Error, ValueError, IndexError):
        cmdline = executor.cmdline()
        return cmdline[cmdline.index("--app-id") + 1]
    return None


class SparkClusterError(RuntimeError):
    """The embedded Spark cluster cannot start or is not configured (the message says why,
    with the log's tail when a daemon exited)."""


@dataclass(frozen=True)
class SparkClusterStatus:
    """What ``ingestctl spark status`` reports.

    :param master_url: ``spark://127.0.0.1:<port>``.
    :param pids: the running daemons this object is about, by name (``master``,
        ``worker-0``...); a stopped one is absent.
    :param expected: the names this object is about.
    :param alive_workers: workers the master reports ALIVE (None: the master did not answer).
    :param data_dir: logs, pid files, work dirs.
    """

    master_url: str
    pids: dict[str, int]
    expected: tuple[str, ...]
    alive_workers: int | None
    data_dir: Path

    @property
    def running(self) -> bool:
        """Every daemon this object is about runs."""
        return set(self.expected) <= set(self.pids)

    def describe(self) -> str:
        """One line for people."""
        if not self.pids:
            if "master" in self.expected:
                return f"spark: stopped (master would be {self.master_url}; data {self.data_dir})"
            alive = "" if self.alive_workers is None else f"; {self.alive_workers} workers alive"
            return f"spark: {', '.join(self.expected)} stopped ({self.master_url}{alive})"
        daemons = ", ".join(f"{name} pid {pid}" for name, pid in sorted(self.pids.items()))
        missing = sorted(set(self.expected) - set(self.pids))
        gaps = f"; NOT running: {', '.join(missing)}" if missing else ""
        alive = "" if self.alive_workers is None else f", {self.alive_workers} workers alive"
        return f"spark: {self.master_url} ({daemons}{alive}{gaps}; data {self.data_dir})"


class SparkStandalone:
    """Start, stop and inspect the embedded standalone cluster of ``settings``.

    :param settings: ``spark.master`` (where the master listens) and ``spark_cluster``.
    :param worker: one worker (0-based), for faults on a single worker; None: the master and
        every worker. Worker ``i``'s UI is on ``spark_cluster.worker_ui_port + i``.
    :raises SparkClusterError: ``worker`` is not one of the settings' workers. (Settings
        without an embedded cluster are refused by :meth:`up`; :meth:`status` and
        :meth:`down` still read what the folder's pid files name.)

    Example::

        cluster = SparkStandalone(get_settings())   # INGEST_PROFILE=local-cluster
        print(cluster.up().describe())   # spark: spark://127.0.0.1:17077 (master pid ...)
        cluster.down()
    """

    def __init__(self, settings: PlatformSettings, *, worker: int | None = None) -> None:
        self.settings = settings
        self.cluster = settings.spark_cluster
        if worker is not None and not 0 <= worker < self.cluster.workers:
            last = f"0..{self.cluster.workers - 1}" if self.cluster.workers else "none"
            raise SparkClusterError(
                f"worker {worker}: spark_cluster.workers is {self.cluster.workers} (workers {last})"
            )
        self.data_dir = self.cluster.data_path
        workers = [worker] if worker is not None else list(range(self.cluster.workers))
        master = () if worker is not None else ("master",)
        #: The daemons this object starts and stops, by name.
        self.names: tuple[str, ...] = (*master, *(f"worker-{i}" for i in workers))
        self.whole = worker is None

    @property
    def master_url(self) -> str:
        """``spark://<host>:<port>``: ``spark.master`` as configured."""
        return self.settings.spark.master

    def _address(self) -> tuple[str, int]:
        """The master's host and port.

        :raises SparkClusterError: no embedded cluster in these settings (workers 0, or a
            master that is not ``spark://<loopback>:<port>``).
        """
        if not self.cluster.workers:
            raise SparkClusterError(
                "no embedded Spark cluster in these settings: spark_cluster.workers is 0 "
                "(INGEST_SPARK_CLUSTER__WORKERS or the profile; INGEST_PROFILE=local-cluster "
                "has two)"
            )
        try:
            return embedded_master_address(self.settings.spark.master)
        except ValueError as error:
            raise SparkClusterError(str(error)) from None

    @property
    def host(self) -> str:
        return self._address()[0]

    @property
    def port(self) -> int:
        return self._address()[1]

    # -- public API ----------------------------------------------------------------------
    def status(self) -> SparkClusterStatus:
        """Which daemons run (by pid file and command line), and how many workers the master
        reports alive (None when it does not answer)."""
        pids = {name: p.pid for name in self.names if (p := self._own_process(name)) is not None}
        alive = None
        with contextlib.suppress(OSError, ValueError, SparkClusterError):
            alive = sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")
        return SparkClusterStatus(self.master_url, pids, self.names, alive, self.data_dir)

    def up(self) -> SparkClusterStatus:
        """Start the daemons that do not run; return once each worker of this object is ALIVE
        in the master's view (a restarted worker registers anew).

        :raises PortInUseError: the master's or a UI port is taken by another process.
        :raises SparkClusterError: a daemon exited or a worker did not register within
            ``spark_cluster.start_timeout_s`` (the message has the logs' tails; daemons this
            call started are stopped).
        """
        self._address()  # refuse settings without an embedded cluster first
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.data_dir / ".lock"):
            missing = [name for name in self.names if self._own_process(name) is None]
            self._refuse_elsewhere(missing)
            for name in missing:  # every port before any start: no half-started cluster
                for port in self._ports(name):
                    ensure_port_free(self.host, port, PORT_HINT)
            started: dict[str, subprocess.Popen[bytes]] = {}
            try:
                for name in missing:
                    started[name] = self._start(name)
                self._wait_registered(started)
            except BaseException:
                # This call's own children: their process groups (the daemon and what it
                # started), known by the Popen, not by a command line that spark-class has
                # not yet exec'ed into the JVM's (stress test: a master left running).
                for name, process in started.items():
                    stop_process_group(process, grace_s=10)
                    self._pid_path(name).unlink(missing_ok=True)
                raise
        return self.status()

    def down(self, grace_s: float = 30) -> bool:
        """Stop this object's workers (with their executors) and then the master: SIGTERM,
        SIGKILL after ``grace_s`` seconds. The whole cluster's ``down`` stops every daemon
        its folder has a pid file of, whatever the settings say now (fewer workers, or none).

        :returns: ``True`` if anything was stopped.
        """
        stopped = False
        if not self.data_dir.exists():
            return False
        with file_lock(self.data_dir / ".lock"):
            names = set(self.names)
            if self.whole:  # also workers of an earlier, larger spark_cluster.workers
                names |= {p.stem for p in self.data_dir.glob("worker-*.pid")}
            for name in sorted(names, key=lambda n: (n == "master", n)):  # workers first
                pid = self._recorded_pid(name)
                if pid is not None and self._stop(name, pid, grace_s):
                    stopped = True
                self._pid_path(name).unlink(missing_ok=True)
        return stopped

    def state(self) -> dict[str, Any]:
        """The master's JSON status (``/json/`` of its UI): workers, cores, applications.

        :raises OSError: the master does not answer.
        """
        url = f"http://{self.host}:{self.cluster.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return dict(json.load(response))

    def applications(self) -> list[dict[str, Any]]:
        """Every application the master runs or ran (name, cores, state...)."""
        state = self.state()
        return [*state.get("activeapps", []), *state.get("completedapps", [])]

    def pid(self, name: str) -> int | None:
        """The pid of daemon ``name`` (``master``, ``worker-<i>``) when it runs."""
        process = self._own_process(name)
        return process.pid if process is not None else None

    def executors(self, worker: int) -> list[psutil.Process]:
        """The executor JVMs worker ``worker`` runs (its session's
        ``CoarseGrainedExecutorBackend`` processes)."""
        pid = self._recorded_pid(f"worker-{worker}")
        if pid is None:
            return []
        found = []
        for process in session_members(pid):
            with contextlib.suppress(psutil.Error):
                if EXECUTOR_CLASS in process.cmdline() and self._ours(process):
                    found.append(process)
        return found

    def stray_executors(self, grace_s: float = 0.0) -> list[str]:
        """Executors of this cluster's folder that serve no running application (an ended
        one, or one whose worker was killed and that did not exit with it), one line each,
        saying which and how old the process is.

        An executor outlives its application by a few seconds (the master tells its worker
        to kill it, which waits for the JVM's shutdown): with ``grace_s`` the check is asked
        again every 2 s until none is left or ``grace_s`` seconds have passed, and only what
        is still there then is returned. ``make test`` at 5086444 found the medallion cycle's
        executor alive when it looked just after the cycle ended.

        :raises OSError: the master does not answer.
        """
        stray: list[str] = []

        def none_left() -> bool:
            stray[:] = self._stray_now()
            return not stray

        with contextlib.suppress(TimeoutError):
            wait_until(none_left, grace_s, 2, what="stray executors to exit")
        return stray

    def _stray_now(self) -> list[str]:
        active = {app["id"] for app in self.state().get("activeapps", [])}
        live = set()
        for index in range(self.cluster.workers):
            pid = self.pid(f"worker-{index}")
            if pid is not None:
                live |= {p.pid for p in self.executors(index)}
        stray = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if EXECUTOR_CLASS not in process.cmdline() or not self._ours(process):
                    continue
                app_id = app_id_of(process)
                why = [
                    *(["its application is not running"] if app_id not in active else []),
                    *(["no running worker owns it"] if process.pid not in live else []),
                ]
                if why:
                    age = time.time() - process.create_time()
                    stray.append(
                        f"executor pid {process.pid} of {app_id} ({', '.join(why)}; "
                        f"started {age:.0f} s ago)"
                    )
        return stray

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The last ``lines`` lines of daemon ``name``'s log."""
        path = self.data_dir / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else f"(no log at {path})"
        return f"--- {path}\n" + "\n".join(text.splitlines()[-lines:])

    # -- internals -----------------------------------------------------------------------
    def _pid_path(self, name: str) -> Path:
        return self.data_dir / f"{name}.pid"

    def _recorded_pid(self, name: str) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int(self._pid_path(name).read_text().strip())
        return None

    def _marker(self) -> str:
        return f"-Dingest.spark.dir={self.data_dir}"

    def _daemon(self, name: str) -> tuple[psutil.Process, list[str]] | None:
        """The process (and its command line) of daemon ``name``'s pid file when it runs that
        daemon for this folder, whatever its ports; None else (the pid may have been reused)."""
        pid = self._recorded_pid(name)
        if pid is None:
            return None
        try:
            process = psutil.Process(pid)
            cmdline = process.cmdline()
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
        except psutil.Error:
            return None
        if _main_class(name) not in cmdline or self._marker() not in cmdline:
            return None
        return process, cmdline

    def _own_process(self, name: str) -> psutil.Process | None:
        """Daemon ``name`` when it runs on the ports and master these settings name."""
        found = self._daemon(name)
        if found is None or not self._same_arguments(name, found[1]):
            return None
        return found[0]

    def _same_arguments(self, name: str, cmdline: list[str]) -> bool:
        """Whether a daemon's command line has the ports (and master) of these settings."""
        wanted = {("--webui-port", str(self._ui_port(name)))}
        try:
            if name == "master":
                wanted.add(("--port", str(self.port)))
            elif self.master_url not in cmdline:
                return False
        except SparkClusterError:  # no embedded cluster in these settings
            return False
        return wanted <= set(itertools.pairwise(cmdline))

    def _refuse_elsewhere(self, missing: list[str]) -> None:
        """Refuse to start a daemon whose earlier self still runs from this folder with other
        settings (another master port or UI port): two masters, or a master nothing uses.

        :raises SparkClusterError: naming the pid, and how to stop it.
        """
        for name in missing:
            found = self._daemon(name)
            if found is not None:
                process, cmdline = found
                arguments = cmdline[cmdline.index(_main_class(name)) + 1 :]
                raise SparkClusterError(
                    f"spark {name} (pid {process.pid}) runs from {self.data_dir} with other "
                    f"settings ({' '.join(arguments)}), not those of {self.master_url}: "
                    "stop it first (`ingestctl spark down`) or use its settings"
                )

    def _ours(self, process: psutil.Process) -> bool:
        """A daemon of this cluster (its marker) or an executor working in its folder; not any
        other process, whatever its working directory."""
        try:
            cmdline = process.cmdline()
            if self._marker() in cmdline:
                return True
            # An executor: the worker starts it in <work dir>/<app>/<executor>. Nothing else
            # whose working directory is there (a shell reading executor logs) is ours.
            return EXECUTOR_CLASS in cmdline and Path(process.cwd()).is_relative_to(self.data_dir)
        except psutil.Error:
            return False

    def _ui_port(self, name: str) -> int:
        if name == "master":
            return self.cluster.master_ui_port
        return self.cluster.worker_ui_port + int(name.removeprefix("worker-"))

    def _arguments(self, name: str) -> list[str]:
        ui = ["--webui-port", str(self._ui_port(name))]
        if name == "master":
            return [_main_class(name), "--host", self.host, "--port", str(self.port), *ui]
        return [
            _main_class(name),
            "--host",
            self.host,
            "--cores",
            str(self.cluster.worker_cores),
            "--memory",
            self.cluster.worker_memory,
            *ui,
            "--work-dir",
            str(self.data_dir / name),
            self.master_url,
        ]

    def _ports(self, name: str) -> list[int]:
        return [self._ui_port(name)] + ([self.port] if name == "master" else [])

    def _start(self, name: str) -> subprocess.Popen[bytes]:
        home = spark_home()
        if home is None or not (home / "bin" / "spark-class").is_file():
            raise SparkClusterError(
                f"no Spark installation with bin/spark-class (SPARK_HOME or pyspark's folder: "
                f"{home}): run `make setup`"
            )
        env = os.environ | {
            "SPARK_HOME": str(home),
            "SPARK_LOG_DIR": str(self.data_dir / "logs"),
            "SPARK_LOCAL_IP": self.host,
            "SPARK_DAEMON_MEMORY": self.cluster.daemon_memory,
            # The marker tells our daemons from anyone else's (and a reused pid).
            "SPARK_DAEMON_JAVA_OPTS": f"{self._marker()} -XX:+UseSerialGC",
            # The REST submission server would take port 6066: the platform submits by RPC.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_WORKER_OPTS": WORKER_OPTS,
        }
        log = (self.data_dir / f"{name}.log").open("ab")
        with log:
            # A session of its own: the daemon outlives `ingestctl spark up`, and a worker's
            # executors (its children) share its session, which outlives a killed worker.
            process = subprocess.Popen(
                [str(home / "bin" / "spark-class"), *self._arguments(name)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._pid_path(name).write_text(f"{process.pid}\n")
        return process

    def _alive_worker_ports(self) -> set[int]:
        ports = set()
        for worker in self.state().get("workers", []):
            if worker.get("state") == "ALIVE":
                with contextlib.suppress(ValueError, AttributeError):
                    ports.add(int(str(worker.get("webuiaddress")).rsplit(":", 1)[1]))
        return ports

    def _wait_registered(self, started: dict[str, subprocess.Popen[bytes]]) -> None:
        wanted = {self._ui_port(name) for name in self.names if name != "master"}

        def registered() -> bool:
            for name, process in started.items():
                if process.poll() is not None:
                    raise SparkClusterError(
                        f"spark {name} exited with status {process.returncode} during "
                        f"start-up:\n{self.log_tail(name)}"
                    )
            with contextlib.suppress(OSError, ValueError):
                return wanted <= self._alive_worker_ports()
            return False

        try:
            wait_until(registered, self.cluster.start_timeout_s, 0.5, what="the Spark workers")
        except TimeoutError:
            tails = "\n".join(self.log_tail(name) for name in started)
            raise SparkClusterError(
                f"the Spark workers did not register with {self.master_url} within "
                f"{self.cluster.start_timeout_s:.0f} s:\n{tails}"
            ) from None

    def _stop(self, name: str, pid: int, grace_s: float) -> bool:
        """Stop daemon ``name`` (pid ``pid``) and whatever else runs in its session (a
        worker's executors, also after the worker itself was killed)."""
        # Only processes of ours: a session whose members all exited frees its number for
        # an unrelated process.
        members = [m for m in session_members(pid) if self._ours(m)]
        own = self._own_process(name)
        if own is not None and all(m.pid != own.pid for m in members):
            members.append(own)
        if not members:
            return False
        stop_processes(members, grace_s)
        return True
