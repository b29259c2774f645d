"""Peak resident memory of the platform's processes, sampled with psutil every second.

Only processes of this benchmark run count: those whose environment has ``INGEST_HOME``
below the run's folder (every process the platform starts inherits it: the broker, Airflow's
api-server, scheduler, dag-processor, triggerer and task runners, the spark-submit JVMs and
their Python drivers and workers). Other engineers' processes on the shared machine are
never counted. RSS counts shared pages once per process, so a group's sum is an upper
bound of what it really holds; the embedded PostgreSQL, whose processes share its buffers,
is counted by PSS (shared pages divided among the processes sharing them).

The total's PSS is sampled too (``total_peak_pss_mb``): every process's proportional share,
what the platform really takes from the machine. RSS counts the pages JVMs and Python
processes share (libjvm, the Python libraries a driver imports, what Airflow's forked
processes have not written since the fork) once per process: on the demo it is about a fifth
above the PSS. The target stays on the RSS total, the figure the issue was written against.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import psutil

GROUPS = ("broker", "postgres", "airflow", "spark", "bench_tools")
#: The bench's own Spark applications: their Python drivers are Spark drivers, not tools.
BENCH_APPLICATIONS = ("bench/passthrough.py", "bench/shared_always_on.py")


def classify(cmdline: list[str]) -> str:
    """The group of a process by its command line."""
    text = " ".join(cmdline)
    if "kafka.Kafka" in text:
        return "broker"
    # The embedded PostgreSQL: the server ("…/bin/postgres -D …") and its backends, which
    # retitle themselves ("postgres: airflow airflow [local] idle").
    if cmdline and (cmdline[0].endswith("/postgres") or text.startswith("postgres:")):
        return "postgres"
    if (
        "org.apache.spark.deploy.SparkSubmit" in text
        or "pyspark" in text
        or "spark_jobs" in text
        or "spark-submit" in text
        or any(application in text for application in BENCH_APPLICATIONS)
    ):
        return "spark"
    # An always-on job's launcher (``python -m ingest_platform.hooks submit <job>``): the
    # Spark provider's hook, for the seconds before it execs spark-submit (until 2026-12-02
    # it stayed alive beside its driver, ~140 MB each).
    if "airflow" in text or "ingest_platform.hooks" in text:
        return "airflow"
    return "bench_tools"


@dataclass(eq=False)  # a Thread must stay hashable
class MemorySampler(threading.Thread):
    """Sample RSS per group, and the platform's PSS total, every ``interval_s`` (seconds)
    until :meth:`stop`; peaks in MB."""

    root: str
    interval_s: float = 1.0
    peaks_mb: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    total_peak_mb: float = 0.0
    total_peak_pss_mb: float = 0.0
    samples: int = 0
    peak_detail: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, name="memory-sampler", daemon=True)
        self._stop_event = threading.Event()
        self._mine: dict[int, bool] = {}

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)

    def _group(self, process: psutil.Process) -> str | None:
        # Whether a process belongs to this run: its environment, looked up once. Its group:
        # from its command line at every sample, which an exec changes (an always-on job's
        # launcher becomes its spark-submit JVM under the same pid).
        key = process.pid
        try:
            if key not in self._mine:
                home = process.environ().get("INGEST_HOME", "")
                # A child of a process of the run is of the run too: Airflow's processes
                # that retitle themselves (setproctitle: "airflow worker -- LocalExecutor",
                # "airflow serve-logs") overwrite the memory /proc/<pid>/environ reads.
                parent = process.info.get("ppid")
                self._mine[key] = home.startswith(self.root) or (
                    parent is not None and bool(self._mine.get(parent))
                )
            if not self._mine[key]:
                return None
            return classify(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None

    def sample(self) -> None:
        seen: dict[int, tuple[str, psutil.Process, Any]] = {}
        for process in psutil.process_iter(["pid", "ppid", "name", "exe"]):
            group = self._group(process)
            if group is None:
                continue
            try:
                seen[process.pid] = (group, process, process.memory_full_info())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        groups: dict[str, float] = defaultdict(float)
        detail: dict[str, float] = defaultdict(float)
        pss_total = 0.0
        for pid, (group, process, memory) in seen.items():
            parent = seen.get(process.info["ppid"])
            if (
                parent is not None
                and parent[1].info["exe"] == process.info["exe"]
                and parent[2].rss == memory.rss
            ):
                # A child in its parent's address space: a JVM's posix_spawn child between
                # clone and exec (Hadoop's local file system runs `chmod` that way) shows the
                # parent's pages as its own. Counted once, with the parent.
                continue
            # PostgreSQL's processes share its buffers: RSS counts them once per process
            # (275 MiB RSS for a PSS of about 33 MiB with Airflow connected).
            rss = (memory.pss if group == "postgres" else memory.rss) / 2**20
            groups[group] += rss
            detail[f"{group}:{process.info['name']}:{pid}"] += rss
            if group != "bench_tools":
                pss_total += memory.pss / 2**20
        platform = sum(v for g, v in groups.items() if g != "bench_tools")
        for group, value in groups.items():
            self.peaks_mb[group] = max(self.peaks_mb[group], value)
        self.total_peak_pss_mb = max(self.total_peak_pss_mb, pss_total)
        if platform > self.total_peak_mb:
            self.total_peak_mb = platform
            self.peak_detail = {k: round(v, 1) for k, v in sorted(detail.items())}
        self.samples += 1

    def run(self) -> None:
        while not self._stop_event.is_set():
            started = time.monotonic()
            self.sample()
            self._stop_event.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
