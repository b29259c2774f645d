"""Where a soak's CPU goes: CPU seconds per platform component, sampled from ``/proc``.

The load average says *that* the machine is busy (soak run 8: 7-18 on two cores); this says
*who*: the always-on drivers, the scheduled Spark jobs, Airflow's scheduler, API server,
DAG processor and task processes, the broker, PostgreSQL, the soak itself. The report's
table is the first thing to read when a soak starves (docs/soak.md).

A process counts as the platform's when ``INGEST_HOME`` in its environment is the soak's
home, or it descends from the soak's process (the standalone, the broker, PostgreSQL);
other programs on the machine are counted only in the machine's total. CPU is attributed
by sampling (``psutil``: user + system time of each process, the difference since it was
last seen), so a process that lives less than one sampling period is missed: the figures
are a lower bound, the "unattributed" row of the machine's total says by how much.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

#: A Spark application's script on a command line: ``spark_jobs/<job>.py``.
_JOB_SCRIPT = re.compile(r"spark_jobs/(?:\w+/)*(\w+)\.py$")
#: Airflow's components as their command line or process title names them.
#: The machine's CPU no platform process was charged with.
UNATTRIBUTED = "unattributed (machine total minus the above)"
_AIRFLOW_COMPONENTS = ("scheduler", "api-server", "api_server", "dag-processor", "triggerer")


def component(cmdline: list[str]) -> str:
    """The platform component a command line belongs to.

    :param cmdline: the process's arguments (``psutil.Process.cmdline()``; a process title
        set by ``setproctitle`` arrives as one element).
    :returns: ``spark: <job>`` for a Spark driver (spark-submit's JVM or the Python driver
        under it), ``spark: python workers`` for PySpark's workers, ``airflow: <component>``,
        ``airflow: task processes`` (LocalExecutor's workers and the tasks they supervise),
        ``spark: executors`` and ``spark: master and workers`` (an embedded standalone
        cluster's JVMs),
        ``kafka broker``, ``postgresql``, ``gate`` (``python -m spark_jobs.quality.gate``),
        ``spark-submit launchers`` (``python -m ingest_platform.hooks submit``: the
        always-on jobs' launcher waiting on spark-submit),
        ``ingestctl <command>``, ``python -m <module>`` or ``python <script>`` for other
        Python programs, else
        ``other: <program>``.
    """
    words = " ".join(cmdline).split()
    if not words:
        return "other: ?"
    for word in words:
        match = _JOB_SCRIPT.search(word)
        if match:
            return f"spark: {match.group(1)}"
    if any(w.startswith("pyspark.") for w in words):
        return "spark: python workers"
    if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in words:
        return "spark: executors"
    if {"org.apache.spark.deploy.master.Master", "org.apache.spark.deploy.worker.Worker"} & set(
        words
    ):
        return "spark: master and workers"
    if "kafka.Kafka" in words or any("kafka.server" in w for w in words):
        return "kafka broker"
    if os.path.basename(words[0]).startswith("postgres"):
        return "postgresql"
    if any(os.path.basename(w) == "airflow" or w.startswith("airflow") for w in words[:3]):
        for name in _AIRFLOW_COMPONENTS:
            if name in words[:4]:
                return f"airflow: {name.replace('_', '-')}"
        if "standalone" in words[:4]:
            return "airflow: standalone"
        return "airflow: task processes"
    for position, word in enumerate(words[:3]):
        if word.endswith("ingestctl"):  # the soak itself, or a command it or a fault runs
            command = words[position + 1] if position + 1 < len(words) else ""
            return "soak" if command == "soak" else f"ingestctl {command}".strip()
    if "-m" in words[:3]:  # python -m <module>: the gates, ingestctl's commands, commit_race
        module = words[words.index("-m") + 1] if words.index("-m") + 1 < len(words) else "?"
        named = {
            "spark_jobs.quality.gate": "gate",
            "ingest_platform.hooks": "spark-submit launchers",
        }
        return named.get(module, f"python -m {module}")
    program = os.path.basename(words[0])
    if program.startswith("python") and len(words) > 1:
        return f"python {os.path.basename(words[1])[:40]}"
    return f"other: {program[:40]}"


@dataclass
class CpuAccount:
    """CPU seconds by component, accumulated over a soak.

    :param seconds: component -> CPU seconds (user + system) of its processes.
    :param machine_s: CPU seconds the whole machine spent (every core, every program).
    :param wall_s: how long it was sampled, in seconds.
    """

    seconds: dict[str, float] = field(default_factory=dict)
    machine_s: float = 0.0
    wall_s: float = 0.0

    def top(self, n: int = 3) -> str:
        """The ``n`` busiest components so far, as mean cores, for a progress line."""
        wall = max(self.wall_s, 1e-9)
        rows = sorted(self.seconds.items(), key=lambda item: -item[1])[:n]
        return ", ".join(f"{name} {s / wall:.2f}" for name, s in rows)

    def table(self) -> list[tuple[str, float, float]]:
        """``(component, CPU seconds, mean cores)`` rows, largest first, then the machine's
        unattributed rest (other programs, and processes shorter than a sample)."""
        rows = sorted(self.seconds.items(), key=lambda item: -item[1])
        wall = max(self.wall_s, 1e-9)
        out = [(name, round(s, 1), round(s / wall, 2)) for name, s in rows]
        rest = self.machine_s - sum(self.seconds.values())
        out.append((UNATTRIBUTED, round(rest, 1), round(rest / wall, 2)))
        return out


class CpuSampler:
    """Samples the platform's processes every ``every_s`` seconds into a :class:`CpuAccount`
    until :meth:`stop`.

    :param home: the soak's ``INGEST_HOME``.
    :param every_s: sampling period, in seconds (shorter catches shorter processes).
    """

    def __init__(self, home: Path, every_s: float = 5.0) -> None:
        self.home = str(home)
        self.every_s = every_s
        self.account = CpuAccount()
        #: (pid, start time) -> (component, CPU seconds at its last sample, the command line
        #: it was named from); None: not ours.
        self._seen: dict[tuple[int, float], tuple[str, float, list[str] | None] | None] = {}
        #: Pids of processes found ours (a pid reused by a stranger's process is rare
        #: within one soak and only matters for its children).
        self._ours_pids: set[int] = set()
        self._machine0 = 0.0
        self._wall0 = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-sampler")
        self._me = os.getpid()

    def start(self) -> None:
        """Start sampling in a daemon thread."""
        self._machine0 = _machine_cpu()
        self._wall0 = time.monotonic()
        self._thread.start()

    def stop(self) -> CpuAccount:
        """Stop sampling (after one last sample) and return the account."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        return self.account

    def _run(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # a sample never takes the soak down
                self.sample()
            if self._stop.wait(self.every_s):
                with contextlib.suppress(Exception):
                    self.sample()
                return

    def _ours(self, process: psutil.Process, descendants: set[int]) -> bool:
        """The soak's descendants, processes with its ``INGEST_HOME``, processes whose
        command line names a path in its home (the PostgreSQL server: started as another
        user, with a clean environment), and children of processes already found ours (the
        server's backends)."""
        if process.pid in descendants or process.ppid() in self._ours_pids:
            return True
        with contextlib.suppress(psutil.Error):
            if process.environ().get("INGEST_HOME") == self.home:
                return True
        with contextlib.suppress(psutil.Error):
            inside = self.home.rstrip("/") + "/"
            return any(inside in word for word in process.cmdline())
        return False

    def _name(self, process: psutil.Process, cmdline: list[str]) -> str:
        """``process``'s component (:func:`component`); a PySpark program's JVM is its
        parent's."""
        if process.pid == self._me:
            return "soak"
        name = component(cmdline)
        if name.startswith("other: java"):
            with contextlib.suppress(psutil.Error):
                parent = process.parent()
                if parent is not None:
                    name = f"{component(parent.cmdline())} (JVM)"
        return name

    def sample(self) -> None:
        """Add each platform process's CPU since its last sample to its component."""
        descendants = {self._me}
        with contextlib.suppress(psutil.Error):
            descendants |= {p.pid for p in psutil.Process(self._me).children(recursive=True)}
        seconds = self.account.seconds
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                key = (process.pid, process.create_time())
                if key not in self._seen:
                    ours = self._ours(process, descendants)
                    self._seen[key] = ("", 0.0, None) if ours else None
                    if ours:
                        self._ours_pids.add(process.pid)
                seen = self._seen[key]
                if seen is None:
                    continue
                name, before, named_from = seen
                cmdline = process.cmdline()
                if cmdline != named_from:
                    # Named afresh when the command line changes: an always-on job's launcher
                    # execs spark-submit, which execs the driver's JVM, all in one process
                    # (soak run 10 charged the drivers' CPU to the launchers).
                    name = self._name(process, cmdline)
                times = process.cpu_times()
                now = times.user + times.system
                seconds[name] = seconds.get(name, 0.0) + max(0.0, now - before)
                self._seen[key] = (name, now, cmdline)
        self.account.machine_s = _machine_cpu() - self._machine0
        self.account.wall_s = time.monotonic() - self._wall0


def _machine_cpu() -> float:
    times = psutil.cpu_times()
    return float(times.user + times.system + getattr(times, "nice", 0.0))
