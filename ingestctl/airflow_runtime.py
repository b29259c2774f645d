"""The embedded Airflow of ``make demo`` and of the end-to-end tests: its environment, an
``airflow standalone`` started and stopped like the broker (one that restarts a component
that died: :mod:`ingestctl.airflow_standalone`), and a small REST client.

Its metadata database (:func:`metadata_database`): a user-provided
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` (or ``_CMD``/``_SECRET``) wins; else
``INGEST_AIRFLOW__DATABASE=sqlite`` keeps SQLite in ``AIRFLOW_HOME``; else (the default) the
embedded PostgreSQL cluster of :mod:`ingestctl.postgres_cluster`, started on demand.

Everything Airflow needs comes from environment variables built here (one place): its home
(``<INGEST_HOME>/airflow``), the DAG folder, LocalExecutor with parallelism for 2 cores, no
example DAGs, and the ``spark_default`` connection (``local[*]``, or the embedded standalone
cluster's master in the ``local-cluster`` profile: :func:`ingest_core.settings.
spark_connection`) unless the caller's environment already defines
``AIRFLOW_CONN_SPARK_DEFAULT`` (a cluster). Airflow keeps its
login: ``airflow standalone`` writes the admin password to
``<AIRFLOW_HOME>/simple_auth_manager_passwords.json.generated``.

OpenLineage (:func:`lineage_environment`): every task run's events go to
``<INGEST_HOME>/lineage/events.jsonl`` (file transport) unless the caller's environment
configures a transport itself, e.g. ``OPENLINEAGE_URL`` of a Marquez server (docs/lineage.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import psutil

from ingest_core.locks import file_lock
from ingest_core.processes import is_alive, session_members, stop_processes
from ingest_core.settings import PROJECT_ROOT, get_settings, ingest_home, spark_connection
from ingest_core.waiting import port_is_taken, wait_until
from ingestctl.airflow_standalone import SKIPPED_FILE, STANDALONE_MODULE

T = TypeVar("T")

PASSWORD_FILE = "simple_auth_manager_passwords.json.generated"


class AirflowError(RuntimeError):
    """The embedded Airflow did not start, or a request to it failed."""


def airflow_home(cli: bool = False) -> Path:
    """``AIRFLOW_HOME`` of the embedded Airflow: ``<INGEST_HOME>/airflow``; with ``cli``,
    ``<INGEST_HOME>/airflow-cli``, the separate metadata database of ``ingestctl airflow``
    (``airflow tasks test`` creates temporary DAG runs that a running scheduler on the same
    database picks up, and the scheduler dies when the run is deleted under it)."""
    return ingest_home() / ("airflow-cli" if cli else "airflow")


def private_airflow_home(cli: bool = False) -> Path:
    """:func:`airflow_home`, created if missing and made private (mode 0700): it holds
    ``airflow.cfg`` (Fernet key, JWT secret), the admin password file and the metadata
    database, which Airflow writes readable by everyone (umask 022). Only the folder is
    restricted, not the process umask: the Spark jobs Airflow starts keep writing tables and
    checkpoints that other users (a cluster's workers) may need to read."""
    home = airflow_home(cli)
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)
    return home


#: ``sqlite3.connect`` arguments of the SQLite metadata database (``INGEST_AIRFLOW__DATABASE=
#: sqlite`` only), imported by Airflow through ``[database] sql_alchemy_connect_args``: wait
#: up to 60 s for another process's write lock (sqlite3's default is 5 s). SQLite still has one
#: writer at a time: the default embedded PostgreSQL has no such limit.
SQLITE_CONNECT_ARGS: dict[str, object] = {"timeout": 60}

#: Metadata database of the embedded Airflow (:func:`metadata_database`).
Database = Literal["user", "sqlite", "postgres"]


def metadata_database(environ: Mapping[str, str] | None = None) -> Database:
    """Which metadata database the embedded Airflow uses: ``user`` when the environment
    names one (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``, ``_CMD`` or ``_SECRET``: it wins
    over everything), else settings ``airflow.database`` (``INGEST_AIRFLOW__DATABASE``):
    ``sqlite`` or ``postgres`` (the embedded cluster, the default)."""
    env = os.environ if environ is None else environ
    if any(env.get(f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN{s}") for s in ("", "_CMD", "_SECRET")):
        return "user"
    return get_settings().airflow.database


def metadata_database_name(cli: bool = False) -> str:
    """The embedded cluster's database for the platform's Airflow, or ``ingestctl
    airflow``'s own (see :func:`airflow_home`)."""
    return "airflow_cli" if cli else "airflow"


def ensure_metadata_database() -> None:
    """Start the embedded PostgreSQL cluster when it is the metadata database and is not
    running (a no-op for SQLite or a user's database).

    :raises AirflowError: it did not start (the message says why).
    """
    if metadata_database() != "postgres":
        return
    from ingestctl.postgres_cluster import EmbeddedPostgres, PostgresError

    try:
        EmbeddedPostgres().up()
    except PostgresError as error:
        raise AirflowError(f"the embedded PostgreSQL did not start: {error}") from None


def default_parallelism(database: Database | None = None) -> int:
    """LocalExecutor task slots: one per core plus one (a supervisor or gate task waits
    most of the time), at most one per GiB of memory (a Spark task is a JVM of its own), at
    least 2; on SQLite 3 (one writer at a time: more slots only queue on its lock)."""
    if (database or metadata_database()) == "sqlite":
        return 3
    import psutil

    by_memory = psutil.virtual_memory().total // 2**30
    return max(2, min((os.cpu_count() or 1) + 1, by_memory))


#: Environment variables by which a user configures OpenLineage's transport (Airflow's
#: ``[openlineage]`` options and the OpenLineage client's own variables): when one is set,
#: the embedded default (a file under ``INGEST_HOME``) stays out of the way.
LINEAGE_TRANSPORT_SETTINGS: tuple[str, ...] = (
    "OPENLINEAGE_URL",
    "OPENLINEAGE_CONFIG",
    "AIRFLOW__OPENLINEAGE__TRANSPORT",
    "AIRFLOW__OPENLINEAGE__TRANSPORT_CMD",
    "AIRFLOW__OPENLINEAGE__TRANSPORT_SECRET",
    "AIRFLOW__OPENLINEAGE__CONFIG_PATH",
    "AIRFLOW__OPENLINEAGE__CONFIG_CONN_ID",
)


def lineage_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """OpenLineage settings of the embedded Airflow.

    OpenLineage stays on (``AIRFLOW__OPENLINEAGE__DISABLED=False`` unless the environment
    sets it: an explicit opt-out wins). Its transport: when the environment configures none
    (no variable of :data:`LINEAGE_TRANSPORT_SETTINGS` and no ``OPENLINEAGE__TRANSPORT*``),
    the file transport appending one JSON event per line to
    :func:`ingest_core.lineage.lineage_file` (its folder is created here); otherwise nothing
    is set, so ``OPENLINEAGE_URL=http://marquez:5000`` alone sends the events to Marquez.
    """
    from ingest_core.lineage import lineage_file

    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    if not env.get("AIRFLOW__OPENLINEAGE__DISABLED"):
        out["AIRFLOW__OPENLINEAGE__DISABLED"] = "False"
    configured = any(env.get(key) for key in LINEAGE_TRANSPORT_SETTINGS) or any(
        key.startswith("OPENLINEAGE__TRANSPORT") and value for key, value in env.items()
    )
    if not configured:
        path = lineage_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        transport = {"type": "file", "log_file_path": str(path), "append": True}
        out["AIRFLOW__OPENLINEAGE__TRANSPORT"] = json.dumps(transport)
    return out


#: How many heartbeats in a row a task's supervisor may fail before it kills the task
#: (``[workers] max_failed_heartbeats``; Airflow's default 3). A heartbeat is tried at most
#: every ``[workers] min_heartbeat_interval`` (5 s) and each try retries a failed request
#: for a few seconds more, so 24 failures take over two minutes: tasks ride through a
#: metadata-database outage of that length (Airflow's 3 killed a running ``table_maintenance``
#: 40 s into one, issue 50). Longer outages still end the task, and the scheduler marks a task
#: without a heartbeat for ``[scheduler] task_instance_heartbeat_timeout`` (300 s) failed, for
#: its retry.
MAX_FAILED_HEARTBEATS = 24

#: Airflow's default ports of the worker and triggerer log servers ([logging] section).
LOG_SERVER_PORTS: tuple[int, int] = (8793, 8794)


def airflow_environment(
    port: int = 8080,
    parallelism: int | None = None,
    *,
    cli: bool = False,
    log_ports: tuple[int, int] = LOG_SERVER_PORTS,
) -> dict[str, str]:
    """Environment variables for every Airflow process of the embedded platform.

    :param port: the API server's (UI's) port.
    :param log_ports: the worker's and the triggerer's log-server ports (two Airflows on one
        machine, such as parallel test workers, need different ones).
    :param cli: for command-line use beside a running platform: its own ``AIRFLOW_HOME``
        (see :func:`airflow_home`).
    :param parallelism: task slots of the LocalExecutor (default
        :func:`default_parallelism`: 3 on 2 cores, a Spark task, a gate and a supervisor task
        at once).
    """
    database = metadata_database()
    if parallelism is None:
        parallelism = default_parallelism(database)
    bin_dir = str(Path(sys.executable).parent)
    env = {
        "AIRFLOW_HOME": str(airflow_home(cli)),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(parallelism),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(max(1, parallelism - 1)),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__API__PORT": str(port),
        # The UI and API listen on loopback only (standalone's default is every interface).
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_ports[0]),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(log_ports[1]),
        "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "60",
        "AIRFLOW__WORKERS__MAX_FAILED_HEARTBEATS": str(MAX_FAILED_HEARTBEATS),
        "AIRFLOW_CONN_SPARK_DEFAULT": os.environ.get(
            "AIRFLOW_CONN_SPARK_DEFAULT", spark_connection(get_settings())
        ),
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "TZ": "UTC",
        **lineage_environment(),
    }
    if database == "postgres":
        # The embedded cluster's socket URL (with the password: environment only). Its
        # password file is created here if missing; the server starts in
        # ensure_metadata_database().
        from ingestctl.postgres_cluster import EmbeddedPostgres

        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = EmbeddedPostgres().sqlalchemy_url(
            metadata_database_name(cli)
        )
    elif database == "sqlite":
        # The SQLite busy timeout only for the platform's own SQLite database.
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"] = (
            "ingestctl.airflow_runtime.SQLITE_CONNECT_ARGS"
        )
    # Settings the user exported win over the embedded defaults (heartbeat failures, log-server
    # ports, connect args).
    for key in (
        "AIRFLOW__WORKERS__MAX_FAILED_HEARTBEATS",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT",
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS",
    ):
        if os.environ.get(key):
            env.pop(key, None)
    return env


def ensure_pools(cli: bool = False) -> None:
    """Create the platform's pools (:data:`ingest_platform.orchestration.POOLS`) in the
    embedded Airflow's database (or the command-line one with ``cli``).

    :raises AirflowError: the CLI failed.
    """
    from ingest_platform.orchestration import pool_command

    run_cli(pool_command(), cli=cli)


def run_cli(
    args: list[str], env: Mapping[str, str] | None = None, check: bool = True, cli: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``airflow <args>`` with the embedded environment; output captured as text.

    :param cli: use the command-line metadata database (see :func:`airflow_home`).
    :raises AirflowError: non-zero exit and ``check``; the message has the output's tail.
    """
    full = {**os.environ, **airflow_environment(cli=cli), **(env or {})}
    if "AIRFLOW_HOME" not in (env or {}):
        private_airflow_home(cli)
    ensure_metadata_database()
    airflow = str(Path(sys.executable).parent / "airflow")
    done = subprocess.run(
        [airflow, *args], env=full, capture_output=True, text=True, cwd=PROJECT_ROOT, check=False
    )
    if check and done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise AirflowError(f"airflow {' '.join(args)} exited {done.returncode}:\n{tail}")
    return done


def _in_this_home(process: psutil.Process) -> bool:
    """Whether ``process`` has the embedded Airflow's ``AIRFLOW_HOME`` in its environment.

    :raises psutil.Error: it is gone, or its environment may not be read.
    """
    return process.environ().get("AIRFLOW_HOME") == str(airflow_home())


def _is_port_number(port: int) -> bool:
    return 0 < port < 65536


#: What a standalone that died left running gets this long after SIGTERM before SIGKILL
#: (:meth:`Standalone.down`): a healthy standalone's whole shutdown takes 7-11 s.
ORPHANS_GRACE_S = 15.0


@dataclass
class Standalone:
    """``airflow standalone`` in the background (pid file and log in ``AIRFLOW_HOME``).

    :param port: the API server's (UI's) port.
    :param log_ports: the worker's and triggerer's log-server ports (Airflow's 8793, 8794).
    """

    port: int = 8080
    log_ports: tuple[int, int] = LOG_SERVER_PORTS

    def __post_init__(self) -> None:
        """:raises AirflowError: a port outside 1-65535."""
        for port in (self.port, *self.log_ports):
            if not _is_port_number(port):
                raise AirflowError(f"port {port} is not a port number (1-65535)")

    @property
    def pid_file(self) -> Path:
        return airflow_home() / "standalone.pid"

    @property
    def log_file(self) -> Path:
        return airflow_home() / "standalone.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def password_file(self) -> Path:
        return airflow_home() / PASSWORD_FILE

    @property
    def lock_file(self) -> Path:
        """Held by :meth:`up` and :meth:`down`: two at once started two standalones."""
        return airflow_home() / "standalone.lock"

    @property
    def skipped_file(self) -> Path:
        """Written by the running standalone: the components it left out (JSON object)."""
        return airflow_home() / SKIPPED_FILE

    def _recorded_pid(self) -> int | None:
        """The pid in the pid file; None when it is missing or not a process id above 1 (a
        0 or negative pid names a process group to ``kill``, and 1 is init)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid > 1 else None

    def _is_this_standalone(self, pid: int) -> bool:
        """Whether ``pid`` runs ``python -m ingestctl.airflow_standalone`` for this
        ``AIRFLOW_HOME`` (a pid reused by another program, or another platform's standalone,
        is not; a zombie is not running)."""
        try:
            process = psutil.Process(pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
            return process.cmdline()[1:3] == ["-m", STANDALONE_MODULE] and _in_this_home(process)
        except psutil.Error:
            return False

    def _another_program(self, pid: int) -> bool:
        """Whether a live process that is not this standalone runs at ``pid``. A process in
        the middle of exiting (after SIGKILL, its memory released, not yet a zombie) has an
        empty command line: it is not taken for another program, or the components a killed
        standalone left would be missed."""
        try:
            return is_alive(pid) and bool(psutil.Process(pid).cmdline())
        except psutil.Error:
            return False

    def pid(self) -> int | None:
        """Pid of the running standalone this platform started (this ``AIRFLOW_HOME``'s), or
        None."""
        pid = self._recorded_pid()
        return pid if pid is not None and self._is_this_standalone(pid) else None

    def processes(self) -> list[psutil.Process]:
        """Every process of the standalone's session: the standalone, the components it
        started and theirs, also when the standalone died and left them (it leads its own
        session, ``start_new_session=True``; always-on Spark jobs lead their own and are not
        here). Empty when the recorded pid now belongs to another program."""
        pid = self._recorded_pid()
        if pid is None:
            return []
        running = self.pid() is not None
        if not running and self._another_program(pid):
            return []  # the pid was given to another process: its session is not ours
        # Its processes carry its AIRFLOW_HOME: a stale pid file's dead pid can be another
        # program's session id (a daemon whose session leader exited).
        found = {process.pid: process for process in session_members(pid) if self._ours(process)}
        with contextlib.suppress(psutil.NoSuchProcess):  # and descendants in other sessions
            if running:
                for process in psutil.Process(pid).children(recursive=True):
                    found.setdefault(process.pid, process)
        return list(found.values())

    def _ours(self, process: psutil.Process) -> bool:
        """Whether a process of the recorded session is the standalone's: it has this
        ``AIRFLOW_HOME`` in its environment, or (its environment overwritten by the title it
        set, as Airflow's API server, log server and executor workers do) a title that starts
        with ``airflow``."""
        try:
            return _in_this_home(process) or " ".join(process.cmdline()).startswith("airflow ")
        except psutil.Error:
            return False

    def _stop(self, left: list[psutil.Process], grace_s: float) -> None:
        """Stop ``left`` (:meth:`processes`). A running standalone gets SIGTERM alone first
        and sends one to each component (a second one, in the middle of Airflow's handler,
        deadlocked its logging lock); then what is still running gets SIGTERM, SIGKILL after
        ``grace_s``. Without the standalone, the components' output pipe is gone and they
        did not finish on SIGTERM (none within 60 s, whatever the order): SIGKILL after at
        most :data:`ORPHANS_GRACE_S`."""
        standalone = self.pid()
        if standalone is None:
            stop_processes(left, min(grace_s, ORPHANS_GRACE_S))
            return
        stop_processes([p for p in left if p.pid == standalone], grace_s)
        stop_processes([p for p in left if p.pid != standalone], grace_s)

    def skipped_components(self) -> dict[str, str]:
        """Components the running standalone left out, with why (name -> reason), as it
        recorded them when it started; empty when none runs."""
        if self.pid() is None:
            return {}
        try:
            return dict(json.loads(self.skipped_file.read_text()))
        except (OSError, ValueError):
            return {}

    def healthy(self) -> bool:
        """Whether the API server answers its health endpoint."""
        import httpx

        try:
            return httpx.get(f"{self.url}/api/v2/monitor/health", timeout=3).status_code == 200
        except httpx.HTTPError:
            return False

    def health(self) -> dict[str, Any] | None:
        """Airflow's ``/api/v2/monitor/health`` (no login needed): status of the metadata
        database, and status and latest heartbeat of the scheduler, triggerer and DAG
        processor; None when the API does not answer."""
        import httpx

        try:
            response = httpx.get(f"{self.url}/api/v2/monitor/health", timeout=5)
            return dict(response.json()) if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def up(self, timeout_s: float = 240) -> None:
        """Start ``airflow standalone`` (if not running) and wait until the API answers and
        the admin password file exists.

        :raises AirflowError: it exited or did not answer within ``timeout_s``; the message
            has the log's tail.
        """
        private_airflow_home()
        with file_lock(self.lock_file):  # one up() or down() at a time: one standalone
            process = self._start()

        def answering() -> bool:
            # The standalone this call started is judged by its own process: until its exec
            # completes, its command line and environment are still this process's, so
            # pid() does not recognise it (a loaded machine failed a start that way).
            code = process.poll() if process is not None else None
            gone = code is not None if process is not None else self.pid() is None
            if gone:
                raise AirflowError(
                    f"airflow standalone exited (exit code {code}); "
                    f"{self.log_file}:\n{self._tail()}"
                )
            return self.healthy() and self.password_file.exists()

        try:
            wait_until(answering, timeout_s, 2, what=f"airflow standalone on {self.url}")
        except TimeoutError:
            raise AirflowError(
                f"airflow standalone did not answer on {self.url} within "
                f"{timeout_s:.0f} s; {self.log_file}:\n{self._tail()}"
            ) from None
        ensure_pools()  # before a DAG is unpaused: tasks need their pools

    def _start(self) -> subprocess.Popen[bytes] | None:
        """Start the standalone unless it runs; the process started, or None."""
        if self.pid() is not None:
            return None
        self._stop_leftovers()
        env = {**os.environ, **airflow_environment(self.port, log_ports=self.log_ports)}
        self._refuse_taken_ports(env)
        ensure_metadata_database()
        self.skipped_file.unlink(missing_ok=True)
        with self.log_file.open("ab") as log:
            process = subprocess.Popen(
                # Airflow's standalone, restarting a component that died.
                [sys.executable, "-m", STANDALONE_MODULE],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=PROJECT_ROOT,
            )
        self.pid_file.write_text(f"{process.pid}\n")
        return process

    def _stop_leftovers(self) -> None:
        """Stop what a standalone that died (SIGKILL, out of memory) left running: its
        components hold the ports and the database a new one needs."""
        left = self.processes()
        if not left:
            return
        with self.log_file.open("a") as log:
            log.write(
                f"{'standalone':10} | stopping {len(left)} process(es) left by a standalone "
                f"that died (pid {self._recorded_pid()})\n"
            )
        self._stop(left, ORPHANS_GRACE_S)

    def _refuse_taken_ports(self, env: Mapping[str, str]) -> None:
        """Refuse to start beside whatever already listens on the API server's port or a log
        server's (the worker's; the triggerer runs without one),
        on any local address (another Airflow on this machine, usually): the component
        would fail to bind and, for the API port, the other Airflow's health would be taken
        for this one's.

        :raises AirflowError: naming each port in use and the setting that moves it, or a
            log-server port setting that is not a port number.
        """
        ports = {self.port: "the API server and UI (make demo AIRFLOW_PORT=..., or --port)"}
        # The triggerer runs without its log server (airflow_standalone.TRIGGERER_OPTIONS).
        servers = {"WORKER": "the worker log server"}
        for server, what in servers.items():
            key = f"AIRFLOW__LOGGING__{server}_LOG_SERVER_PORT"
            try:
                port = int(env[key])
                if not _is_port_number(port):
                    raise ValueError(port)
            except ValueError:
                raise AirflowError(f"{key}={env[key]!r} is not a port number (1-65535)") from None
            if port in ports:
                raise AirflowError(
                    f"{key}={port} is also the port of {ports[port]}: each server needs its own"
                )
            ports[port] = f"{what} ({key})"
        taken = [f"port {port}, {what}" for port, what in ports.items() if port_is_taken(port)]
        if taken:
            raise AirflowError(
                "cannot start airflow standalone: something already uses "
                + "; ".join(taken)
                + ". Another Airflow on this machine? Stop it or choose free ports."
            )

    def down(self, timeout_s: float = 60) -> bool:
        """Stop the standalone this platform started and every process of its session
        (scheduler, API server, DAG processor, triggerer if on, task runners), also those a
        standalone that died left running, in the order of :meth:`_stop`: SIGTERM to the
        standalone alone, which sends one to each component (SIGKILL after ``timeout_s``),
        then to what is still running (SIGKILL after ``timeout_s`` more); what a dead
        standalone left gets SIGKILL after at most :data:`ORPHANS_GRACE_S`.

        :returns: whether anything of it was running.
        """
        if not self.pid_file.exists():
            return False  # never started here (or stopped): nothing recorded, nothing to stop
        with file_lock(self.lock_file):
            left = self.processes()
            self._stop(left, timeout_s)
            self.pid_file.unlink(missing_ok=True)
            self.skipped_file.unlink(missing_ok=True)
        return bool(left)

    def _tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def client(self) -> AirflowClient:
        """A REST client logged in as the standalone's admin."""
        credentials = json.loads(self.password_file.read_text())
        user, password = next(iter(credentials.items()))
        return AirflowClient(self.url, user, password)


#: Components of Airflow's health report, with the key of their latest heartbeat.
HEALTH_COMPONENTS: dict[str, str] = {
    "scheduler": "latest_scheduler_heartbeat",
    "triggerer": "latest_triggerer_heartbeat",
    "dag_processor": "latest_dag_processor_heartbeat",
}


def describe_health(
    health: Mapping[str, Any] | None, now: datetime, not_started: Mapping[str, str] | None = None
) -> tuple[bool, list[str]]:
    """Lines for people from Airflow's health report (:meth:`Standalone.health`), and
    whether the metadata database and the scheduler are healthy. A scheduler is healthy
    when its latest heartbeat is recent (Airflow's ``[scheduler]
    scheduler_health_check_threshold``, 30 s): a dead scheduler shows as unhealthy with the
    age of its last heartbeat, while the API keeps answering.

    :param not_started: components the platform leaves out, with why
        (:func:`ingestctl.airflow_standalone.skipped_components`): shown as not started
        rather than as a missing heartbeat.
    """
    if health is None:
        return False, ["airflow api: not answering"]
    lines = [f"metadatabase: {(health.get('metadatabase') or {}).get('status', 'unknown')}"]
    for name, key in HEALTH_COMPONENTS.items():
        if name in (not_started or {}):
            lines.append(f"{name}: not started ({(not_started or {})[name]})")
            continue
        part = health.get(name) or {}
        beat = part.get(key)
        if beat:
            age = (now - datetime.fromisoformat(beat)).total_seconds()
            when = f"latest heartbeat {beat} ({age:.0f} s ago)"
        else:
            when = "no heartbeat yet"
        lines.append(f"{name}: {part.get('status') or 'unknown'}, {when}")
    ok = all(
        (health.get(name) or {}).get("status") == "healthy"
        for name in ("metadatabase", "scheduler")
    )
    return ok, lines


class AirflowClient:
    """Airflow 3 REST API (``/api/v2``) with a token from ``POST /auth/token``."""

    def __init__(self, url: str, user: str, password: str) -> None:
        import httpx

        token = httpx.post(
            f"{url}/auth/token", json={"username": user, "password": password}, timeout=30
        )
        if token.status_code not in (200, 201):
            raise AirflowError(f"login to {url} failed: {token.status_code} {token.text[:200]}")
        self.http = httpx.Client(
            base_url=f"{url}/api/v2",
            timeout=30,
            headers={"Authorization": f"Bearer {token.json()['access_token']}"},
        )

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise AirflowError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json() if response.content else None

    def _poll(self, ask: Callable[[], T]) -> T | None:
        """``ask()``, or None when the API server did not answer it (a timeout, a reset
        connection): for a polling loop that is "not yet", and its deadline bounds the wait.
        On a loaded machine one GET of a run's state took longer than the client's 30 s
        while the scheduler restarted, and failed a run that then succeeded."""
        import httpx

        try:
            return ask()
        except httpx.TransportError:
            return None

    def wait_for_dag(self, dag_id: str, timeout_s: float = 180) -> None:
        """Wait until the DAG processor has parsed ``dag_id``."""
        try:
            wait_until(
                lambda: self._poll(lambda: self.http.get(f"/dags/{dag_id}").status_code == 200),
                timeout_s,
                2,
                what=f"DAG {dag_id} to be parsed",
            )
        except TimeoutError:
            raise AirflowError(f"DAG {dag_id} did not appear within {timeout_s:.0f} s") from None

    def unpause(self, dag_id: str) -> None:
        """Unpause ``dag_id``."""
        self._call("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def pause(self, dag_id: str) -> None:
        """Pause ``dag_id`` (no new scheduled runs; a running one goes on)."""
        self._call("PATCH", f"/dags/{dag_id}", json={"is_paused": True})

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """Trigger a manual run now; :returns: its run id."""
        body = {"logical_date": None, "conf": dict(conf or {})}
        return str(self._call("POST", f"/dags/{dag_id}/dagRuns", json=body)["dag_run_id"])

    def latest_run(self, dag_id: str) -> str | None:
        """Id of the DAG's newest run, or None when it has none."""
        found = self._call(
            "GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "-run_after", "limit": 1}
        )
        runs = found.get("dag_runs") or []
        return str(runs[0]["dag_run_id"]) if runs else None

    def run_state(self, dag_id: str, run_id: str) -> str:
        """State of a DAG run (queued, running, success, failed)."""
        return str(self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Every run of ``dag_id`` (``dag_run_id``, ``run_type``, ``state``, data interval)."""
        found = self._call("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100})
        return list(found.get("dag_runs") or [])

    def backfill_running(self, dag_id: str) -> bool:
        """Whether a backfill of ``dag_id`` is not completed yet (Airflow runs one per DAG
        at a time and refuses another with ``AlreadyRunningBackfill``)."""
        found = self._call("GET", "/backfills", params={"dag_id": dag_id, "limit": 100})
        return any(b.get("completed_at") is None for b in found.get("backfills") or [])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Task instances of a run (``task_id``, ``state``, ``pool``, ``start_date``,
        ``end_date``, ...)."""
        found = self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return list(found["task_instances"])

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        """``{task_id: state}`` of a run."""
        found = self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: str(ti["state"]) for ti in found["task_instances"]}

    def wait_for_run(
        self, dag_id: str, run_id: str, timeout_s: float = 1800, on_change: Any = None
    ) -> str:
        """Wait for a run to finish; :returns: its final state (success or failed).

        :param on_change: called with ``{task_id: state}`` whenever a task's state changes.
        :raises AirflowError: still running after ``timeout_s``.
        """
        seen: dict[str, str] = {}

        def finished() -> str | None:
            nonlocal seen
            state = self._poll(lambda: self.run_state(dag_id, run_id))
            if on_change is not None:
                tasks = self._poll(lambda: self.task_states(dag_id, run_id))
                if tasks is not None and tasks != seen:
                    on_change(tasks)
                    seen = tasks
            return state if state in ("success", "failed") else None

        try:
            final = wait_until(finished, timeout_s, 3, what=f"{dag_id} run {run_id}")
        except TimeoutError:
            raise AirflowError(
                f"{dag_id} run {run_id} still running after {timeout_s:.0f} s"
            ) from None
        assert final is not None  # wait_until returns a truthy value
        return final
