"""A real Spark standalone cluster for tests: one master and one worker on 127.0.0.1,
started from pyspark's own ``spark-class`` (the same Master and Worker classes a cluster
runs), on ports and folders of the test's own, stopped by pid (process group) afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest_core.processes import stop_process_group
from ingest_core.waiting import wait_until


class ClusterStartError(RuntimeError):
    """The master or the worker did not come up; the message has the log's tail."""


def spark_home() -> Path:
    """pyspark's installation, which ships ``bin/spark-class`` and every Spark jar."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


@dataclass
class StandaloneCluster:
    """Master on ``127.0.0.1:port``, one worker with ``cores`` and ``memory``.

    :param folder: logs and the worker's work dir (executor stdout/stderr, fetched jars).
    :param port: the master's RPC port (``spark://127.0.0.1:<port>``).
    :param master_ui_port: the master's web UI (its ``/json/`` tells workers and apps).
    :param worker_ui_port: the worker's web UI.
    """

    folder: Path
    port: int
    master_ui_port: int
    worker_ui_port: int
    cores: int = 2
    memory: str = "2g"
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def connection(self) -> str:
        """``AIRFLOW_CONN_SPARK_DEFAULT`` value pointing at this master."""
        return json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": self.port})

    def state(self) -> dict[str, Any]:
        """The master's JSON status: workers, cores, active and completed applications."""
        url = f"http://127.0.0.1:{self.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return dict(json.load(response))

    def _env(self) -> dict[str, str]:
        home = spark_home()
        return os.environ | {
            "SPARK_HOME": str(home),
            "SPARK_LOG_DIR": str(self.folder / "logs"),
            "SPARK_WORKER_DIR": str(self.folder / "work"),
            "SPARK_LOCAL_IP": "127.0.0.1",
            # The daemons are small; the REST submission server would take port 6066.
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }

    def _spawn(self, name: str, *args: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = (self.folder / f"{name}.log").open("ab")
        # A session of its own: the worker's executors are its children, stopped with it.
        self.processes[name] = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            env=self._env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def start(self, timeout_s: float = 120) -> None:
        """Start master and worker; wait until the worker is ALIVE with its cores.

        :raises ClusterStartError: a process exited or the worker did not register in time.
        """
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.master_ui_port),
        )
        self._spawn(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--webui-port",
            str(self.worker_ui_port),
            "--work-dir",
            str(self.folder / "work"),
            self.url,
        )

        def registered() -> bool:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise ClusterStartError(
                        f"spark {name} exited {process.returncode}:\n" + self.tail(name)
                    )
            with contextlib.suppress(OSError, ValueError):
                return bool(self.state().get("aliveworkers", 0) >= 1)
            return False

        with contextlib.suppress(TimeoutError):
            wait_until(registered, timeout_s, 1, what="a Spark worker")
            return
        raise ClusterStartError(
            f"no worker registered within {timeout_s:.0f} s:\n"
            + self.tail("master")
            + "\n"
            + self.tail("worker")
        )

    def applications(self) -> list[dict[str, Any]]:
        """Every application the master ran or runs (name, cores, state...)."""
        state = self.state()
        return [*state.get("activeapps", []), *state.get("completedapps", [])]

    def tail(self, name: str, lines: int = 30) -> str:
        path = self.folder / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 30) -> None:
        """Stop worker (and its executors), then master: SIGTERM to each process group this
        object started, SIGKILL what outlives ``timeout_s``."""
        for name in ("worker", "master"):
            process = self.processes.pop(name, None)
            if process is not None:
                stop_process_group(process, timeout_s)
