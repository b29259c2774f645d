"""An isolated platform for one benchmark run: its own folders, ports and processes.

Everything lives under ``<workdir>/<run id>/`` (default ``/tmp/bench``): the broker's data
(``kafka/``), one ``INGEST_HOME`` per scenario (``homes/<name>/``), Spark event logs
(``eventlog/``), turned on by ``SPARK_SUBMIT_OPTS`` (:func:`bench.eventlog.submit_options`).
The broker listens on ``--kafka-port``/``--kafka-controller-port`` (39092/39093 by default,
never the platform's 9092). Every process the bench starts is recorded by pid and process
group and stopped on exit, on an error and on Ctrl-C; the broker is stopped by the
project's own ``down`` (pid + command line), Airflow by ``ingestctl demo-down``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.eventlog import submit_options
from ingest_core.processes import stop_process_group

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@dataclass
class Finished:
    """A process the bench ran to completion: command, exit code, epoch ms of spawn and exit,
    and its log file."""

    cmd: list[str]
    returncode: int
    spawned_ms: float
    exited_ms: float
    log: Path

    @property
    def wall_s(self) -> float:
        return (self.exited_ms - self.spawned_ms) / 1000

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class BenchError(RuntimeError):
    """A step of a benchmark failed; the message names the step and its log."""


@dataclass
class BenchEnv:
    """Folders, ports and processes of one run."""

    root: Path
    kafka_port: int = 39092
    controller_port: int = 39093
    airflow_port: int = 8096
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _home: Path | None = None
    _prefix: str = ""
    #: The caller's own ``SPARK_SUBMIT_OPTS`` when the run started (kept before the event log's).
    user_submit_options: str = field(
        default_factory=lambda: os.environ.get("SPARK_SUBMIT_OPTS", "")
    )

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.event_log_dir.mkdir(exist_ok=True)

    # -- folders ---------------------------------------------------------------------
    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def event_log_dir(self) -> Path:
        return self.root / "eventlog"

    @property
    def kafka_dir(self) -> Path:
        return self.root / "kafka"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def home(self, name: str) -> Path:
        path = self.root / "homes" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- environment -----------------------------------------------------------------
    def variables(self, home: Path | None = None, prefix: str | None = None) -> dict[str, str]:
        """The platform's environment for ``home`` (INGEST_*, the event log's
        ``SPARK_SUBMIT_OPTS``, Airflow)."""
        home = home or self._home or self.home("main")
        env = {
            "INGEST_HOME": str(home),
            "INGEST_KAFKA__PORT": str(self.kafka_port),
            "INGEST_KAFKA__CONTROLLER_PORT": str(self.controller_port),
            "INGEST_KAFKA__DATA_DIR": str(self.kafka_dir),
            "INGEST_KAFKA__TOPIC_PREFIX": self._prefix if prefix is None else prefix,
            "INGEST_JARS_DIR": str(REPO / ".ingest" / "jars"),
            "SPARK_SUBMIT_OPTS": submit_options(self.event_log_dir, self.user_submit_options),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "TZ": "UTC",
        }
        return env

    @contextlib.contextmanager
    def use(self, home: Path, prefix: str = "") -> Iterator[None]:
        """Make ``home`` (and topic prefix) the platform's, in this process and for children."""
        from ingest_core.settings import get_settings
        from ingestctl.airflow_runtime import airflow_environment

        saved = dict(os.environ)
        previous = (self._home, self._prefix)
        self._home, self._prefix = home, prefix
        os.environ.update(self.variables(home, prefix))
        # The Airflow CLI (cycles) needs the spark_default connection (local[*]) and an
        # AIRFLOW_HOME; the CLI's own home keeps any demo's metadata database untouched.
        # Not the database URL: exported, it reads as a user's own database, and
        # `ingestctl airflow` would then not start the embedded PostgreSQL it points to.
        airflow = airflow_environment(self.airflow_port, cli=True)
        airflow.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)
        os.environ.update(airflow)
        get_settings.cache_clear()
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)
            self._home, self._prefix = previous
            get_settings.cache_clear()

    # -- processes -------------------------------------------------------------------
    def spawn(
        self,
        cmd: Sequence[str],
        log_name: str,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``cmd`` in a process group of its own (stopped by :meth:`cleanup`)."""
        log = self.logs / log_name
        with open(log, "ab") as out:
            process = subprocess.Popen(
                list(cmd),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        self._procs.append(process)
        return process

    def run(
        self,
        cmd: Sequence[str],
        log_name: str,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 3600,
        check: bool = True,
    ) -> Finished:
        """Run ``cmd`` to completion; :raises BenchError: non-zero exit with ``check``."""
        spawned = time.time() * 1000
        process = self.spawn(cmd, log_name, env)
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.stop(process)
            code = -9
        done = Finished(list(cmd), code, spawned, time.time() * 1000, self.logs / log_name)
        self._procs.remove(process)
        if check and code != 0:
            raise BenchError(
                f"{' '.join(cmd[:3])}... exited {code}; log {done.log}:\n{done.tail()}"
            )
        return done

    def stop(self, process: subprocess.Popen[bytes], grace_s: float = 20) -> None:
        """SIGTERM the process group of a process the bench started; SIGKILL after
        ``grace_s``."""
        stop_process_group(process, grace_s)

    def cleanup(self) -> None:
        """Stop every process the bench started and still runs, then the broker and the
        embedded PostgreSQL servers of its homes."""
        for process in reversed(self._procs):
            self.stop(process, grace_s=10)
        self._procs.clear()
        self.broker_down()
        self.postgres_down()

    def postgres_down(self) -> None:
        """Stop the embedded PostgreSQL of each of the bench's homes: the cycles' Airflow CLI
        (``ingestctl airflow``) starts one in its home and leaves it running, as it does for
        a user; a bench run left one behind, its folder deleted under it."""
        from ingestctl.postgres_cluster import EmbeddedPostgres

        for folder in sorted((self.root / "homes").glob("*/postgres")):
            try:
                EmbeddedPostgres(folder, start_timeout_s=60).down()
            except Exception as error:  # cleanup goes on; the user is told what is left
                print(f"[bench] PostgreSQL in {folder} may still run: {error}", flush=True)

    # -- the broker --------------------------------------------------------------------
    def _kafka_settings(self) -> Any:
        from ingest_core.settings import KafkaSettings

        return KafkaSettings(
            port=self.kafka_port,
            controller_port=self.controller_port,
            data_dir=self.kafka_dir,
            heap="512m",
        )

    def broker_up(self) -> str:
        """Start the bench's broker with the project's :class:`KafkaBroker`."""
        from ingestctl.kafka_broker import KafkaBroker

        return KafkaBroker(self._kafka_settings()).up().describe()

    def broker_down(self) -> None:
        from ingestctl.kafka_broker import KafkaBroker

        with contextlib.suppress(Exception):
            KafkaBroker(self._kafka_settings()).down()

    def broker_pid(self) -> int | None:
        from ingestctl.kafka_broker import KafkaBroker

        return KafkaBroker(self._kafka_settings()).status().pid


@contextlib.contextmanager
def signals_deferred(message: str) -> Iterator[None]:
    """While cleaning up: Ctrl-C, SIGTERM and SIGHUP print ``message`` instead of interrupting,
    so that a second signal cannot leave the broker or the work folder behind (SIGKILL still
    ends the bench)."""

    def handler(signum: int, frame: Any) -> None:
        print(message, file=sys.stderr, flush=True)

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
