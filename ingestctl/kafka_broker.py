"""Run a real Apache Kafka broker (KRaft, combined broker and controller), or a KRaft cluster
of several such nodes on loopback (``kafka.brokers``: the ``local-cluster`` profile).

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
import random
import shutil
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
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
    :param pids: every running node's process id (one for a single broker).
    """

    running: bool
    pid: int | None
    bootstrap_servers: str
    data_dir: Path
    already_running: bool = False
    pids: tuple[int, ...] = ()

    def describe(self) -> str:
        """One line for people: state, address, pid and folder."""
        if not self.running:
            return (
                f"kafka: stopped (would listen on {self.bootstrap_servers}; data {self.data_dir})"
            )
        prefix = "already running" if self.already_running else "running"
        if len(self.pids) > 1:
            pids = ", ".join(map(str, self.pids))
            return (
                f"kafka: {prefix}, {len(self.pids)} brokers on {self.bootstrap_servers} "
                f"(pids {pids}; data {self.data_dir})"
            )
        return f"kafka: {prefix} on {self.bootstrap_servers} (pid {self.pid}; data {self.data_dir})"


def kafka_jars_dir() -> Path:
    """Return the folder with the broker's jars (``kafka_2.13`` and its runtime closure)."""
    return jars_dir() / "kafka"


class KafkaBroker:
    """Start, stop and inspect the platform's own Kafka broker, or its embedded KRaft cluster
    (``settings.brokers`` combined broker-and-controller nodes, the ``local-cluster`` profile).

    :param settings: where the brokers listen and keep their data.
    :param java: the ``java`` executable; ``$JAVA_HOME/bin/java`` or ``java`` on ``PATH``.
    :param node: one node (0-based) of the cluster, for faults on a single broker; None: all
        ``settings.brokers`` of them. Node ``i`` listens on ``port + i`` (clients) and
        ``controller_port + i`` (the quorum), keeps its data in ``<data_dir>/node-<i>`` (in
        ``<data_dir>`` itself when there is one broker) and has KRaft ``node.id`` ``i + 1``.

    Example::

        broker = KafkaBroker(get_settings().kafka)
        print(broker.up().describe())   # kafka: running on 127.0.0.1:9092 (pid ...)
        broker.down()
    """

    def __init__(
        self, settings: KafkaSettings, *, java: str | None = None, node: int | None = None
    ) -> None:
        if node is not None and not 0 <= node < settings.brokers:
            raise ValueError(f"node {node}: kafka.brokers is {settings.brokers} (nodes 0..)")
        self.settings = settings
        self.data_dir = settings.data_path
        self.java = java or _find_java()
        #: The nodes this object starts and stops.
        self.nodes = [node] if node is not None else list(range(settings.brokers))
        # Log sizes when this object last started a node: error reports read from there.
        self._log_offsets: dict[Path, int] = {}

    # -- files -------------------------------------------------------------------------
    def node_dir(self, node: int) -> Path:
        """Folder of one node's data, logs, rendered configuration and pid file."""
        return self.data_dir if self.settings.brokers == 1 else self.data_dir / f"node-{node}"

    @property
    def config_path(self) -> Path:
        """The rendered ``server.properties`` the (first) node runs with."""
        return self._config(self.nodes[0])

    @property
    def log_dir(self) -> Path:
        """Folder of the (first) node's own logs (``server.log``, ``kafka.out``)."""
        return self.node_dir(self.nodes[0]) / "logs"

    @property
    def storage_dir(self) -> Path:
        """Kafka's ``log.dirs`` of the (first) node: topic partitions and KRaft metadata."""
        return self.node_dir(self.nodes[0]) / "kraft-data"

    @property
    def pid_path(self) -> Path:
        """Pid of the (first) node's process this platform started."""
        return self.node_dir(self.nodes[0]) / "broker.pid"

    def _config(self, node: int) -> Path:
        return self.node_dir(node) / "server.properties"

    # -- public API ----------------------------------------------------------------------
    def status(self) -> BrokerStatus:
        """Report whether the brokers this platform started are alive (no network call):
        running when every node of this object runs.

        The address is the one a running single broker was started with (its rendered
        ``server.properties``), which can differ from the current settings.
        """
        processes = [self._own_process(node) for node in self.nodes]
        running = all(p is not None for p in processes)
        pids = tuple(p.pid for p in processes if p is not None)
        address = self._running_address() if running and self.settings.brokers == 1 else None
        return BrokerStatus(
            running=running,
            pid=pids[0] if running else None,
            bootstrap_servers=address or self._addresses(),
            data_dir=self.data_dir,
            pids=pids,
        )

    def _addresses(self) -> str:
        return ",".join(self.settings.node_address(node) for node in self.nodes)

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
        """Start the nodes that do not run; return once every node answers metadata requests
        (a node of a cluster answers once the quorum has elected a controller).

        :raises PortInUseError: a client or controller port is held by another process.
        :raises BrokerStartError: Java or the jars are missing, formatting failed, or a node
            exited or did not answer within ``start_timeout_s`` seconds (the message carries
            the last lines of its log; half-started processes are stopped).
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self._lock():
            current = self.status()
            if current.running and current.bootstrap_servers != self._addresses():
                raise PortMismatchError(
                    f"the broker in {self.data_dir} (pid {current.pid}) runs on "
                    f"{current.bootstrap_servers}, but the settings say "
                    f"{self._addresses()}: stop it first (`ingestctl kafka down`) "
                    "or use the same port"
                )
            if current.running:
                for node in self.nodes:
                    self._wait_ready(node, self._pid(node))
                return replace(current, already_running=True)
            if self.settings.port == self.settings.controller_port:
                raise BrokerStartError(
                    f"client and controller ports are both {self.settings.port}: choose two"
                )
            started: dict[int, subprocess.Popen[bytes]] = {}
            try:
                for node in self.nodes:
                    if self._own_process(node) is None:
                        started[node] = self._start_node(node)
                for node in self.nodes:
                    process = started.get(node)
                    if process is not None:
                        self._wait_ready(node, process.pid, exit_code=process.poll)
                    else:
                        self._wait_ready(node, self._pid(node))
            except BrokerStartError:
                for process in started.values():
                    self._terminate(process.pid, timeout_s=10)
                raise
            return self.status()

    def _start_node(self, node: int) -> subprocess.Popen[bytes]:
        for port in (self.settings.port + node, self.settings.controller_port + node):
            ensure_port_free(self.settings.host, port)
        self._render_config(node)
        if not (self.node_dir(node) / "kraft-data" / "meta.properties").exists():
            self._format_storage(node)
        return self._spawn(node)

    def down(self, timeout_s: float = 30.0) -> bool:
        """Stop the nodes this platform started (SIGTERM, then SIGKILL after ``timeout_s``).

        :returns: ``True`` if a node was stopped, ``False`` if none was running.
        """
        stopped = False
        with self._lock():
            for node in self.nodes:
                process = self._own_process(node)
                if process is not None:
                    self._terminate(process.pid, timeout_s=timeout_s)
                    stopped = True
                (self.node_dir(node) / "broker.pid").unlink(missing_ok=True)
        return stopped

    def clean(self) -> bool:
        """Delete the brokers' data folder: topics, records, KRaft metadata and logs (the
        next :meth:`up` formats new storage).

        :returns: ``True`` if there was a folder to delete, ``False`` if none.
        :raises BrokerError: a broker runs (its pid named): stop it first.
        """
        existed = self.data_dir.exists()
        with self._lock():
            for node in range(self.settings.brokers):
                process = self._own_process(node)
                if process is not None:
                    raise BrokerError(
                        f"the Kafka broker in {self.node_dir(node)} is running (pid "
                        f"{process.pid}): stop it first (make demo-down or make kafka-down)"
                    )
            shutil.rmtree(self.data_dir)
        return existed

    def log_tail(self, lines: int = 30) -> str:
        """Return the nodes' errors and last ``lines`` log lines since their latest start.

        Error lines (``ERROR``/``FATAL`` with the line after, which holds the exception
        message) come first: a stack trace would otherwise push the cause out of the tail.
        """
        chunks = []
        for node in self.nodes:
            logs = self.node_dir(node) / "logs"
            for path in (logs / "kafka.out", logs / "server.log"):
                if not path.exists():
                    continue
                with open(path, "rb") as handle:
                    handle.seek(self._log_offsets.get(path, 0))
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

    def _pid(self, node: int) -> int | None:
        process = self._own_process(node)
        return process.pid if process else None

    def _own_process(self, node: int) -> psutil.Process | None:
        try:
            pid = int((self.node_dir(node) / "broker.pid").read_text().strip())
            process = psutil.Process(pid)
            cmdline = process.cmdline()
        except (FileNotFoundError, ValueError, psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        # The pid may have been reused: it is ours only if it runs our config.
        if BROKER_MAIN_CLASS in cmdline and str(self._config(node)) in cmdline:
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
        return self._run_tool(
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server",
            self.settings.bootstrap_servers,
            *args,
            heap="256m",
            timeout_s=timeout_s,
        )

    def _run_tool(
        self, main_class: str, *args: str, heap: str, timeout_s: float
    ) -> subprocess.CompletedProcess[str]:
        """Run one of Kafka's command-line tools from the broker's jars with a client's
        ``heap`` (not the broker's), output captured as text.

        :raises subprocess.TimeoutExpired: it ran past ``timeout_s`` seconds.
        """
        command = self._java_command(main_class, *args)
        command[1] = f"-Xmx{heap}"
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )

    def quorum_leader(self, timeout_s: float = 60) -> int | None:
        """The node (0-based) that is the KRaft quorum's active controller now, from Kafka's
        ``MetadataQuorumCommand`` (what ``kafka-metadata-quorum.sh describe --status`` runs)
        asked through the controllers' listeners; None when it does not answer.

        (Clients' metadata names a random broker as "controller" under KRaft, not this one.)
        """
        voters = ",".join(map(self.settings.controller_address, range(self.settings.brokers)))
        try:
            done = self._run_tool(
                "org.apache.kafka.tools.MetadataQuorumCommand",
                "--bootstrap-controller",
                voters,
                "describe",
                "--status",
                heap="128m",
                timeout_s=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return None
        for line in done.stdout.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "LeaderId" and value.strip().isdigit():
                return int(value.strip()) - 1  # node.id is node + 1
        return None

    def _render_config(self, node: int) -> None:
        settings = self.settings
        voters = ",".join(
            f"{n + 1}@{settings.controller_address(n)}" for n in range(settings.brokers)
        )
        template = Template(SERVER_PROPERTIES_TEMPLATE.read_text())
        self.node_dir(node).mkdir(parents=True, exist_ok=True)
        self._config(node).write_text(
            template.substitute(
                node_id=node + 1,
                voters=voters,
                host=settings.host,
                port=settings.port + node,
                controller_port=settings.controller_port + node,
                log_dirs=self.node_dir(node) / "kraft-data",
                replication_factor=min(settings.replication_factor, settings.brokers),
                min_insync_replicas=min(settings.min_insync_replicas, settings.brokers),
            )
        )

    def _java_command(self, main_class: str, *args: str, node: int | None = None) -> list[str]:
        logs = self.node_dir(self.nodes[0] if node is None else node) / "logs"
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
            f"-Dkafka.logs.dir={logs}",
            f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES}",
            "-cp",
            self._classpath(),
            main_class,
            *args,
        ]

    def _cluster_id(self) -> str:
        """The cluster id a node is formatted with: the one another node of this cluster was
        formatted with (a KRaft quorum shares one), else a new one."""
        for other in range(self.settings.brokers):
            meta = self.node_dir(other) / "kraft-data" / "meta.properties"
            with contextlib.suppress(OSError):
                for line in meta.read_text().splitlines():
                    if line.startswith("cluster.id="):
                        return line.split("=", 1)[1].strip()
        # 16 random bytes, URL-safe base64 without padding (`kafka-storage.sh random-uuid`).
        return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

    def _format_storage(self, node: int) -> None:
        (self.node_dir(node) / "logs").mkdir(parents=True, exist_ok=True)
        command = self._java_command(
            # `--cluster-id=ID`, not `-t ID`: about one id in 64 starts with "-", which the
            # tool's argument parser would take for an option.
            STORAGE_TOOL_CLASS,
            "format",
            f"--cluster-id={self._cluster_id()}",
            "-c",
            str(self._config(node)),
            node=node,
        )
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BrokerStartError(
                f"formatting the broker storage in {self.node_dir(node) / 'kraft-data'} failed "
                f"(exit {result.returncode}):\n{result.stdout}{result.stderr}"
            )

    def _spawn(self, node: int) -> subprocess.Popen[bytes]:
        logs = self.node_dir(node) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for name in ("kafka.out", "server.log"):
            if (logs / name).exists():
                self._log_offsets[logs / name] = (logs / name).stat().st_size
        command = self._java_command(BROKER_MAIN_CLASS, str(self._config(node)), node=node)
        with open(logs / "kafka.out", "ab") as out:
            # A session of its own: the broker outlives `ingestctl kafka up` and a Ctrl-C in
            # the terminal that started it.
            process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        (self.node_dir(node) / "broker.pid").write_text(f"{process.pid}\n")
        return process

    def _wait_ready(
        self, node: int, pid: int | None, exit_code: Callable[[], int | None] | None = None
    ) -> None:
        """Return once node ``node`` answers a metadata request on its own address.

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
            if not accepts_connections(self.settings.host, self.settings.port + node):
                return False
            try:
                admin = KafkaAdminClient(
                    bootstrap_servers=self.settings.node_address(node),
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
            f"{self.settings.node_address(node)} within {self.settings.start_timeout_s:.0f} s "
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


def free_port_block(count: int) -> int:
    """The first of ``count`` consecutive TCP ports nothing listens on now (an embedded
    cluster's node ``i`` listens on ``port + i``).

    :raises RuntimeError: none found in 200 tries.
    """
    for _ in range(200):
        base = random.randint(20000, 60000 - count)
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    probe = stack.enter_context(socket.socket())
                    probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise RuntimeError(f"no {count} consecutive free TCP ports found")


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
