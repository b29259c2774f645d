"""Run a real single-node Apache Kafka broker (KRaft, combined broker and controller).

The broker runs from the Maven-fetched jars in ``.ingest/jars/kafka`` (``make jars``), on
loopback, with its data, logs, rendered configuration and pid file in one folder
(:attr:`KafkaSettings.data_path`). It is the same broker in the demo, in the tests and in CI.

Rules this module keeps:

* ``up`` formats the storage on first start only, returns once the broker answers a metadata
  request, and is idempotent (a second ``up`` reports the running broker);
* it never uses a broker it did not start: a port held by anything else is an error that
  names the port;
* ``down`` stops only the process it started, identified by pid *and* command line (a pid
  can be reused by an unrelated process after a crash).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from string import Template

import psutil

from ingest_core.locks import file_lock
from ingest_core.processes import is_alive, stop_process
from ingest_core.settings import INCLUDE_DIR, KafkaSettings, jars_dir
from ingest_core.waiting import accepts_connections, wait_until

SERVER_PROPERTIES_TEMPLATE = INCLUDE_DIR / "kafka" / "server.properties"
LOG4J2_PROPERTIES = INCLUDE_DIR / "kafka" / "log4j2.properties"
#: The broker's main class inside kafka_2.13.
BROKER_MAIN_CLASS = "kafka.Kafka"
#: Kafka's storage formatter (``kafka-storage.sh format``).
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"


class BrokerError(RuntimeError):
    """Base class of every error this module raises."""


class PortInUseError(BrokerError):
    """A port the broker needs is held by a process this platform did not start."""


class PortMismatchError(BrokerError):
    """The running broker listens on another port than the settings name."""


class BrokerStartError(BrokerError):
    """The broker process exited or did not answer in time; the message has its log tail."""


@dataclass(frozen=True)
class BrokerStatus:
    """What ``ingestctl kafka status`` reports.

    :param running: the broker this platform started is alive.
    :param pid: its process id, when running.
    :param bootstrap_servers: ``host:port`` clients use.
    :param data_dir: folder with the broker's data, logs and configuration.
    :param already_running: ``up`` found the broker running and started nothing.
    """

    running: bool
    pid: int | None
    bootstrap_servers: str
    data_dir: Path
    already_running: bool = False

    def describe(self) -> str:
        """One line for people: state, address, pid and folder."""
        if not self.running:
            return (
                f"kafka: stopped (would listen on {self.bootstrap_servers}; data {self.data_dir})"
            )
        prefix = "already running" if self.already_running else "running"
        return f"kafka: {prefix} on {self.bootstrap_servers} (pid {self.pid}; data {self.data_dir})"


def kafka_jars_dir() -> Path:
    """Return the folder with the broker's jars (``kafka_2.13`` and its runtime closure)."""
    return jars_dir() / "kafka"


class KafkaBroker:
    """Start, stop and inspect the platform's own Kafka broker.

    :param settings: where the broker listens and keeps its data.
    :param java: the ``java`` executable; ``$JAVA_HOME/bin/java`` or ``java`` on ``PATH``.

    Example::

        broker = KafkaBroker(get_settings().kafka)
        print(broker.up().describe())   # kafka: running on 127.0.0.1:9092 (pid ...)
        broker.down()
    """

    def __init__(self, settings: KafkaSettings, *, java: str | None = None) -> None:
        self.settings = settings
        self.data_dir = settings.data_path
        self.java = java or _find_java()
        # Log sizes when this object last started the broker: error reports read from there.
        self._log_offsets: dict[str, int] = {}

    # -- files -------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        """The rendered ``server.properties`` this broker runs with."""
        return self.data_dir / "server.properties"

    @property
    def log_dir(self) -> Path:
        """Folder of the broker's own logs (``server.log``, ``kafka.out``)."""
        return self.data_dir / "logs"

    @property
    def storage_dir(self) -> Path:
        """Kafka's ``log.dirs``: topic partitions and KRaft metadata."""
        return self.data_dir / "kraft-data"

    @property
    def pid_path(self) -> Path:
        """Pid of the broker process this platform started."""
        return self.data_dir / "broker.pid"

    # -- public API ----------------------------------------------------------------------
    def status(self) -> BrokerStatus:
        """Report whether the broker this platform started is alive (no network call).

        The address is the one the running broker was started with (its rendered
        ``server.properties``), which can differ from the current settings.
        """
        process = self._own_process()
        return BrokerStatus(
            running=process is not None,
            pid=process.pid if process else None,
            bootstrap_servers=(self._running_address() if process else None)
            or self.settings.bootstrap_servers,
            data_dir=self.data_dir,
        )

    def _running_address(self) -> str | None:
        """``host:port`` of the PLAINTEXT listener in the rendered config, if readable."""
        try:
            for line in self.config_path.read_text().splitlines():
                if line.startswith("advertised.listeners=PLAINTEXT://"):
                    return line.split("//", 1)[1].split(",")[0].strip()
        except OSError:
            return None
        return None

    def up(self) -> BrokerStatus:
        """Start the broker unless it already runs; return once it answers metadata requests.

        :raises PortInUseError: the client or controller port is held by another process.
        :raises BrokerStartError: Java or the jars are missing, formatting failed, or the
            broker exited or did not answer within ``start_timeout_s`` seconds (the message
            carries the last lines of its log; a half-started process is stopped).
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self._lock():
            current = self.status()
            if current.running and current.bootstrap_servers != self.settings.bootstrap_servers:
                raise PortMismatchError(
                    f"the broker in {self.data_dir} (pid {current.pid}) runs on "
                    f"{current.bootstrap_servers}, but the settings say "
                    f"{self.settings.bootstrap_servers}: stop it first (`ingestctl kafka down`) "
                    "or use the same port"
                )
            if current.running:
                self._wait_ready(current.pid)
                return BrokerStatus(
                    running=True,
                    pid=current.pid,
                    bootstrap_servers=current.bootstrap_servers,
                    data_dir=self.data_dir,
                    already_running=True,
                )
            if self.settings.port == self.settings.controller_port:
                raise BrokerStartError(
                    f"client and controller ports are both {self.settings.port}: choose two"
                )
            for port in (self.settings.port, self.settings.controller_port):
                ensure_port_free(self.settings.host, port)
            self._render_config()
            if not (self.storage_dir / "meta.properties").exists():
                self._format_storage()
            process = self._spawn()
            try:
                self._wait_ready(process.pid, exit_code=process.poll)
            except BrokerStartError:
                self._terminate(process.pid, timeout_s=10)
                raise
            return self.status()

    def down(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker this platform started (SIGTERM, then SIGKILL after ``timeout_s``).

        :returns: ``True`` if a broker was stopped, ``False`` if none was running.
        """
        with self._lock():
            process = self._own_process()
            if process is None:
                self.pid_path.unlink(missing_ok=True)
                return False
            self._terminate(process.pid, timeout_s=timeout_s)
            self.pid_path.unlink(missing_ok=True)
            return True

    def clean(self) -> bool:
        """Delete the broker's data folder: topics, records, KRaft metadata and logs (the
        next :meth:`up` formats new storage).

        :returns: ``True`` if there was a folder to delete, ``False`` if none.
        :raises BrokerError: the broker runs (its pid named): stop it first.
        """
        existed = self.data_dir.exists()
        with self._lock():
            process = self._own_process()
            if process is not None:
                raise BrokerError(
                    f"the Kafka broker in {self.data_dir} is running (pid {process.pid}): "
                    "stop it first (make demo-down or make kafka-down)"
                )
            shutil.rmtree(self.data_dir)
        return existed

    def log_tail(self, lines: int = 30) -> str:
        """Return the broker's errors and last ``lines`` log lines since the latest start.

        Error lines (``ERROR``/``FATAL`` with the line after, which holds the exception
        message) come first: a stack trace would otherwise push the cause out of the tail.
        """
        chunks = []
        for path in (self.log_dir / "kafka.out", self.log_dir / "server.log"):
            if not path.exists():
                continue
            with open(path, "rb") as handle:
                handle.seek(self._log_offsets.get(path.name, 0))
                text = handle.read().decode(errors="replace").splitlines()
            errors = [
                f"{line}\n{text[i + 1] if i + 1 < len(text) else ''}".rstrip()
                for i, line in enumerate(text)
                if " ERROR " in line or " FATAL " in line
            ]
            if errors:
                chunks.append(f"--- errors in {path}:\n" + "\n".join(errors[-5:]))
            if text:
                chunks.append(
                    f"--- {path} (last {len(text[-lines:])} lines)\n" + "\n".join(text[-lines:])
                )
        return "\n".join(chunks) or f"(no broker log in {self.log_dir})"

    # -- internals -----------------------------------------------------------------------
    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialize up/down across processes (two terminals, parallel test sessions)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.data_dir / ".lock"):
            yield

    def _own_process(self) -> psutil.Process | None:
        try:
            pid = int(self.pid_path.read_text().strip())
            process = psutil.Process(pid)
            cmdline = process.cmdline()
        except (FileNotFoundError, ValueError, psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        # The pid may have been reused: it is ours only if it runs our config.
        if BROKER_MAIN_CLASS in cmdline and str(self.config_path) in cmdline:
            return process
        return None

    def _classpath(self) -> str:
        jars = kafka_jars_dir()
        if not any(jars.glob("kafka_2.13-*.jar")):
            raise BrokerStartError(
                f"no kafka_2.13 jar in {jars}: run `make jars` "
                "(mvn -f include/maven/pom.xml package) once to fetch the broker"
            )
        return f"{jars}/*"

    def consumer_groups(
        self, *args: str, timeout_s: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run Kafka's ``ConsumerGroupCommand`` (what ``kafka-consumer-groups.sh`` runs)
        from the broker's jars against :attr:`KafkaSettings.bootstrap_servers`, e.g.
        ``consumer_groups("--describe", "--group", "bronze_ingest")``. Output captured as
        text; the caller reads ``returncode``.

        :raises BrokerStartError: the broker's jars are missing (``make jars``).
        """
        command = self._java_command(
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server",
            self.settings.bootstrap_servers,
            *args,
        )
        command[1] = "-Xmx256m"  # a client, not the broker's heap
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )

    def _render_config(self) -> None:
        template = Template(SERVER_PROPERTIES_TEMPLATE.read_text())
        self.config_path.write_text(
            template.substitute(
                host=self.settings.host,
                port=self.settings.port,
                controller_port=self.settings.controller_port,
                log_dirs=self.storage_dir,
            )
        )

    def _java_command(self, main_class: str, *args: str) -> list[str]:
        return [
            self.java,
            f"-Xmx{self.settings.heap}",
            # As the platform's Spark drivers on one machine (include/platform.yaml): the
            # serial GC from a small heap. G1 (kafka-run-class.sh's choice) kept ~390 MB
            # resident for a demo's few thousand events; its concurrent threads compete with
            # Spark's on 2 cores.
            "-Xms32m",
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={self.log_dir}",
            f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES}",
            "-cp",
            self._classpath(),
            main_class,
            *args,
        ]

    def _format_storage(self) -> None:
        # A KRaft cluster id is 16 random bytes, URL-safe base64 without padding
        # (what `kafka-storage.sh random-uuid` prints).
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        command = self._java_command(
            # `--cluster-id=ID`, not `-t ID`: about one id in 64 starts with "-", which the
            # tool's argument parser would take for an option.
            STORAGE_TOOL_CLASS,
            "format",
            f"--cluster-id={cluster_id}",
            "-c",
            str(self.config_path),
        )
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BrokerStartError(
                f"formatting the broker storage in {self.storage_dir} failed "
                f"(exit {result.returncode}):\n{result.stdout}{result.stderr}"
            )

    def _spawn(self) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log_offsets = {
            name: (self.log_dir / name).stat().st_size
            for name in ("kafka.out", "server.log")
            if (self.log_dir / name).exists()
        }
        command = self._java_command(BROKER_MAIN_CLASS, str(self.config_path))
        with open(self.log_dir / "kafka.out", "ab") as out:
            # A session of its own: the broker outlives `ingestctl kafka up` and a Ctrl-C in
            # the terminal that started it.
            process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_path.write_text(f"{process.pid}\n")
        return process

    def _wait_ready(
        self, pid: int | None, exit_code: Callable[[], int | None] | None = None
    ) -> None:
        """Return once the broker answers a metadata request.

        :param exit_code: for a broker this process started, its ``Popen.poll``: whether it
            exited is then its exit status (the kernel's answer to its parent), not a look
            at ``/proc`` (soak run 6 saw a broker judged "exited during start-up" that went
            on running for minutes).
        :raises BrokerStartError: it exited (with its exit status when known) or did not
            answer within ``start_timeout_s``.
        """
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaConfigurationError, KafkaError

        last_error: Exception | None = None

        def answers() -> bool:
            nonlocal last_error
            if exit_code is not None:
                status = exit_code()
                gone = status is not None
            else:
                status, gone = None, pid is None or not is_alive(pid)
            if gone:
                how = f" with status {status}" if status is not None else ""
                raise BrokerStartError(
                    f"the Kafka broker (pid {pid}) exited during start-up{how}.\n{self.log_tail()}"
                )
            if not accepts_connections(self.settings.host, self.settings.port):
                return False
            try:
                admin = KafkaAdminClient(
                    bootstrap_servers=self.settings.bootstrap_servers,
                    request_timeout_ms=5000,
                    client_id="ingestctl-readiness",
                )
                try:
                    admin.describe_cluster()  # a metadata request
                    return True
                finally:
                    admin.close()
            except KafkaConfigurationError:
                raise
            except (KafkaError, OSError) as error:  # not up yet: connection refused, timeout
                last_error = error
                return False

        try:
            wait_until(answers, self.settings.start_timeout_s, 0.3, what="the Kafka broker")
            return
        except TimeoutError:
            pass
        raise BrokerStartError(
            f"the Kafka broker (pid {pid}) did not answer a metadata request on "
            f"{self.settings.bootstrap_servers} within {self.settings.start_timeout_s:.0f} s "
            f"(last error: {last_error!r}).\n{self.log_tail()}"
        )

    @staticmethod
    def _terminate(pid: int, timeout_s: float) -> None:
        stop_process(pid, grace_s=timeout_s)


#: How ``ingestctl`` users choose other broker ports (the end of :class:`PortInUseError`).
INGESTCTL_PORT_HINT = (
    "ingestctl never uses a Kafka broker it did not start: stop that "
    "process, or choose other ports with --port/--controller-port "
    "(or INGEST_KAFKA__PORT / INGEST_KAFKA__CONTROLLER_PORT)."
)


def ensure_port_free(host: str, port: int, hint: str = INGESTCTL_PORT_HINT) -> None:
    """Raise :class:`PortInUseError` if ``host:port`` cannot be bound.

    :param hint: the message's last sentence: how the caller's user picks another port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR so that a port in TIME_WAIT from our own earlier broker counts as free,
        # exactly as the broker itself will see it.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise
            raise PortInUseError(
                f"port {port} on {host} is already in use by another process "
                f"({_port_owner(port)}). {hint}"
            ) from None


def _port_owner(port: int) -> str:
    try:
        for conn in psutil.net_connections(kind="tcp"):
            listening = conn.laddr and conn.laddr.port == port
            if listening and conn.status == psutil.CONN_LISTEN and conn.pid:
                return f"pid {conn.pid}, {psutil.Process(conn.pid).name()}"
    except (psutil.Error, OSError):
        pass
    return "owner unknown"


def _find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise BrokerStartError("java not found: install a Java 17 JDK (or set JAVA_HOME)")
    return found
