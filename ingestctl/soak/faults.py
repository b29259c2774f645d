"""What each fault kind (:mod:`ingestctl.soak.plan`) does to the running platform, and how
the soak recognises that the platform recovered from it without a human.

An injector returns a :class:`Recovery`: what it did, and a check that answers None once the
platform is whole again (else what is still wrong). Injectors find their targets the way an
operator would (the checkpoint lock's holder, the standalone's processes, Airflow's REST API)
and never change the platform's code or configuration. The Kafka broker and the metadata
database are external services in production: after a kill -9 the soak plays their service
manager and starts them again after the drawn pause.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import psutil

from ingest_core.waiting import wait_until
from ingestctl.soak.plan import ALWAYS_ON, PlannedFault

if TYPE_CHECKING:
    from ingest_core.settings import KafkaSettings, PlatformSettings
    from ingestctl.airflow_runtime import AirflowClient, Standalone

MEDALLION = "medallion_incremental"
#: The Spark tasks of medallion_incremental (task id -> job).
SPARK_TASKS = {
    "refine_silver": "silver_refine",
    "aggregate_gold": "gold_aggregate",
    "correct_late": "late_corrections",
    "recompute_gold": "gold_backfill",
}


#: Task instance states before an end (None: not scheduled yet).
UNFINISHED = (None, "scheduled", "queued", "running", "up_for_retry")


class FaultNotInjectedError(RuntimeError):
    """The fault's target was not there in time (no run to hit); nothing was done."""


class NotRecoverableError(RuntimeError):
    """Raised by a recovery check whose answer is final (a restore that failed, a crashed
    gate): waiting longer cannot make the platform whole; a human must look."""


def _final(problem: str | None) -> Callable[[], str | None]:
    """A check whose answer is known now: None, or a :class:`NotRecoverableError`."""

    def check() -> str | None:
        if problem:
            raise NotRecoverableError(problem)
        return None

    return check


@dataclass
class Recovery:
    """What an injector did, and how recovery is recognised.

    :param detail: what was done, one line.
    :param check: None once the platform is whole again, else what is still wrong.
    :param in_progress: True while the fault itself still runs (a DAG run the fault
        triggered): the recovery deadline waits for it, up to twice the recovery timeout
        (soak run 5: a table_maintenance run of 21 tasks at load 7 finished 6 s after the
        deadline and was judged to need a human).
    """

    detail: str
    check: Callable[[], str | None]
    in_progress: Callable[[], bool] = lambda: False


@dataclass
class SoakPlatform:
    """The running platform the faults hit.

    :param settings: the soak's platform settings (its own home, ports and topic prefix).
    :param standalone: the embedded Airflow.
    :param started_at: when the stream started (UTC), for backfill intervals.
    :param stream_span: event time the stream covers (its first event to now).
    """

    settings: PlatformSettings
    standalone: Standalone
    started_at: datetime
    stream_span: timedelta
    #: Data intervals (their starts) a backfill fault already covered: Airflow creates no
    #: run for an interval that has one (``--reprocess-behavior none``), so each backfill
    #: fault takes intervals of its own.
    backfilled: set[datetime] = field(default_factory=set, repr=False)
    #: When (``time.monotonic()``) a fault last killed each Airflow component, by name.
    killed_components: dict[str, float] = field(default_factory=dict, repr=False)
    _client: AirflowClient | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def api(self, call: Callable[[AirflowClient], Any], timeout_s: float = 300) -> Any:
        """``call(client)``, retried (a new login each time) while the API server or the
        metadata database is down, up to ``timeout_s`` seconds.

        :raises TimeoutError: it kept failing; the message has the last error.
        """
        last: list[str] = []

        def attempt() -> Any:
            try:
                with self._lock:
                    if self._client is None:
                        self._client = self.standalone.client()
                    client = self._client
                return ("ok", call(client))
            except Exception as error:  # the API answers again after the fault
                with self._lock:
                    self._client = None
                last[:] = [f"{type(error).__name__}: {error}"[:300]]
                return None

        try:
            return wait_until(attempt, timeout_s, 5, what="the Airflow API")[1]
        except TimeoutError:
            raise TimeoutError(f"Airflow API: {last[0] if last else 'no answer'}") from None

    def medallion_runs(self) -> list[dict[str, Any]]:
        """medallion_incremental's runs (newest 100)."""
        return list(self.api(lambda c: c.runs(MEDALLION)))

    def active_medallion_run(self) -> str | None:
        """The id of a queued or running medallion run, or None."""
        return self.active_run(MEDALLION)

    def active_run(self, dag_id: str) -> str | None:
        """The id of a queued or running run of ``dag_id`` (its newest 100), or None."""
        for run in self.api(lambda c: c.runs(dag_id)):
            if run.get("state") in ("queued", "running"):
                return str(run["dag_run_id"])
        return None

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Trigger ``dag_id`` (retried through outages); :returns: the run id."""
        return str(self.api(lambda c: c.trigger(dag_id, conf)))

    def wait_for_run(self, dag_id: str, run_id: str, timeout_s: float = 1800) -> str:
        """The final state of a run, polled through outages."""

        def final() -> str | None:
            state = self.api(lambda c: c.run_state(dag_id, run_id))
            return state if state in ("success", "failed") else None

        return str(wait_until(final, timeout_s, 5, what=f"{dag_id} run {run_id}"))


def _is_jvm(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return "org.apache.spark.deploy.SparkSubmit" in process.cmdline()
    return False


def spark_submits(job: str) -> list[psutil.Process]:
    """The spark-submit JVMs (client mode: the drivers) running ``job``'s application for
    this platform (``INGEST_HOME`` in their environment: a demo's or a test's drivers beside
    it are never touched)."""
    from ingest_core.settings import ingest_home

    home = str(ingest_home())
    needle = f"spark_jobs/{job}.py"
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if (
                _is_jvm(process)
                and any(part.endswith(needle) for part in process.cmdline())
                and process.environ().get("INGEST_HOME") == home
            ):
                found.append(process)
    return found


def _kill(process: psutil.Process) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        process.send_signal(signal.SIGKILL)


def always_on_whole(settings: PlatformSettings, fresh_s: float = 90) -> str | None:
    """None when every always-on job runs with a heartbeat younger than ``fresh_s``, or is
    held stopped on purpose (an operator's stop or a maintenance pause: another fault's
    doing, which that fault answers for)."""
    from ingest_platform import supervisor

    for job in ALWAYS_ON:
        status = supervisor.status(job, settings)
        if not status.running and (status.disabled or status.paused_by):
            continue
        if not status.running:
            return f"{job} not running"
        if status.heartbeat_age_s is None or status.heartbeat_age_s > fresh_s:
            return f"{job}'s heartbeat is {status.heartbeat_age_s} s old"
    return None


def _medallion_success_since(
    platform: SoakPlatform, since: datetime, hit_run: str | None = None
) -> Callable[[], str | None]:
    """A check: a medallion run that started after ``since`` ended in success, or
    ``hit_run`` did: the run whose task the fault killed, which Airflow retries in the same
    run (soak run 18: four faults counted as not recovered whose own runs succeeded through
    the retry, because the next runs were struck by other faults)."""

    def check() -> str | None:
        for run in platform.medallion_runs():
            started = run.get("start_date")
            if run.get("state") != "success":
                continue
            if run.get("dag_run_id") == hit_run or (
                started and datetime.fromisoformat(started) > since
            ):
                return None
        return f"no medallion_incremental run started after {since:%H:%M:%S} has succeeded"

    return check


def _medallion_running(platform: SoakPlatform) -> Callable[[], bool]:
    """A fault's ``in_progress`` when its recovery is a medallion run's success: a run still
    going keeps the window open (up to twice the recovery timeout). Soak run 19: seven kills
    and marks were judged at 18:09 as the stream ended, while the run that recovered them
    (started 17:49, its Gold task 10 minutes at load 20-27) was still going; it succeeded at
    18:14."""
    return lambda: platform.active_medallion_run() is not None


def airflow_whole(platform: SoakPlatform) -> str | None:
    """None when Airflow's health endpoint answers and calls the metadata database, the
    scheduler and the DAG processor healthy; else what is not."""
    health = platform.standalone.health()
    if health is None:
        return "the API server does not answer"
    for component in ("metadatabase", "scheduler", "dag_processor"):
        state = (health.get(component) or {}).get("status")
        if state not in ("healthy", None):
            return f"{component} {state}"
    return None


def _wait_for_target(
    find: Callable[[], Any], platform: SoakPlatform, wait_s: float, every_s: float = 2
) -> Any:
    """Wait up to ``wait_s`` for ``find()`` (asked every ``every_s`` seconds); trigger a
    medallion run when none is active (asked at most every 15 s: the API is slow at load).

    :raises FaultNotInjectedError: nothing found in time.
    """
    asked = [0.0]

    def found() -> Any:
        target = find()
        if target:
            return target
        if time.monotonic() - asked[0] >= 15:
            asked[0] = time.monotonic()
            if platform.active_medallion_run() is None:
                platform.trigger(MEDALLION)
        return None

    try:
        return wait_until(found, wait_s, every_s, what="a target")
    except TimeoutError:
        raise FaultNotInjectedError(f"no target within {wait_s:.0f} s") from None


# --- the injectors --------------------------------------------------------------------------


#: How long an always-on fault waits for its job's driver to be running (seconds).
DRIVER_WAIT_S = 300


def kill_always_on_driver(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    """kill -9 an always-on job's driver JVM; recovered when the supervisor started another
    and every always-on job is whole.

    :raises FaultNotInjectedError: the job had no running driver for :data:`DRIVER_WAIT_S`
        (run 17: broker outages back to back kept the always-on jobs waiting for Kafka for
        nine minutes, and three such faults counted as failed injections; whether the jobs
        came back is the outages' own check).
    """
    from ingest_platform import supervisor

    job = fault.params["job"]
    try:
        pid = wait_until(
            lambda: supervisor.driver_pid(job, platform.settings), DRIVER_WAIT_S, 2, what=job
        )
    except TimeoutError:
        raise FaultNotInjectedError(
            f"{job} had no running driver within {DRIVER_WAIT_S} s"
        ) from None
    jvm = psutil.Process(pid).parent()
    target = jvm if jvm is not None and _is_jvm(jvm) else psutil.Process(pid)
    _kill(target)

    def check() -> str | None:
        now = supervisor.driver_pid(job, platform.settings)
        if now is None or now == pid:
            return f"{job} not restarted"
        return always_on_whole(platform.settings)

    return Recovery(f"kill -9 {job}'s driver JVM (pid {target.pid})", check)


def kill_scheduled_driver(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    job = fault.params["job"]
    jvms = _wait_for_target(lambda: spark_submits(job), platform, 600)
    hit_run = _run_running(platform, job)
    since = datetime.now(UTC)
    for jvm in jvms:
        _kill(jvm)
    return Recovery(
        f"kill -9 {job}'s driver JVM mid-run (pids {[p.pid for p in jvms]})",
        _medallion_success_since(platform, since, hit_run),
        _medallion_running(platform),
    )


def _run_running(platform: SoakPlatform, job: str) -> str | None:
    """The id of the medallion run whose task runs ``job`` now, or None (none, or the API
    cannot say: then only a later run's success counts)."""
    try:
        found = _running_task(platform, lambda ti: SPARK_TASKS.get(str(ti["task_id"])) == job)
    except Exception:  # the API away under another fault
        return None
    return found[0] if found else None


def hang_scheduled_driver(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    """SIGSTOP of a scheduled job's driver mid-run (spark-submit's JVM and the Python driver
    under it), as a stuck GC, a frozen mount or a paused VM would hang it, left stopped: only
    the task's ``execution_timeout`` (``tasks.spark_timeout_s``) can end it, through
    ``on_kill``, which must kill the stopped processes (SIGKILL reaches a stopped process;
    SIGTERM waits until it runs again) and so free the checkpoint lock.

    :raises FaultNotInjectedError: no driver ran within 600 s, or the one found ended before
        it was stopped (nothing was hung: run 20 counted such a fault as recovered at once).
    """
    job = fault.params["job"]
    jvms = _wait_for_target(lambda: spark_submits(job), platform, 600)
    hit_run = _run_running(platform, job)
    since = datetime.now(UTC)
    frozen: list[psutil.Process] = []
    for jvm in jvms:
        with contextlib.suppress(psutil.Error):
            frozen += [jvm, *jvm.children(recursive=True)]
    if not frozen:  # soak run 20, #219: the run ended between finding and stopping it
        raise FaultNotInjectedError(f"{job}'s driver ended before it could be stopped")
    for process in frozen:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGSTOP)
    # The hung run's task ends at its budget and retries in the same run: that run's success
    # is a recovery (as for kill_scheduled_driver), or a later run's.
    ran = _medallion_success_since(platform, since, hit_run)

    def check() -> str | None:
        left = [p.pid for p in frozen if _alive(p)]
        if left:
            return f"{job}'s stopped driver processes {left} still there"
        return ran()

    # The hung run ends at its task's budget, then retries: wait for it (up to twice the
    # recovery timeout) rather than judge it mid-retry.
    return Recovery(
        f"SIGSTOP {job}'s driver mid-run (pids {[p.pid for p in frozen]}), left stopped",
        check,
        _medallion_running(platform),
    )


def _alive(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    return False


#: How long an Airflow component fault waits for its component to be running (seconds): the
#: standalone restarts a killed component in 65-135 s under the soak's load (run 20).
COMPONENT_WAIT_S = 300
#: A component an earlier fault killed less than this long ago (seconds, the default recovery
#: timeout) and not back yet is that fault's to judge.
RECENT_KILL_S = 900


def kill_airflow_component(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    """kill -9 an Airflow component's main process (``scheduler``, ``dag-processor``,
    ``api-server``); recovered when the standalone started it again and
    Airflow is whole.

    :raises FaultNotInjectedError: an earlier fault killed the component (less than
        :data:`RECENT_KILL_S` ago) and it was not running again for :data:`COMPONENT_WAIT_S`
        (soak run 20: it was being restarted; whether it came back is that fault's own
        check).
    :raises TimeoutError: the component was not running for :data:`COMPONENT_WAIT_S` and no
        fault had killed it: an injector failure, reported as not recovered.
    """
    component = fault.params["component"]

    # As the command line or the process title (setproctitle) names it.
    names = (component, component.replace("-", "_"))

    def find() -> list[psutil.Process]:
        """The component's main process (its forked workers and children left out)."""
        found = {}
        for process in platform.standalone.processes():
            with contextlib.suppress(psutil.Error):
                head = " ".join(process.cmdline()[:3])
                if "airflow" in head and any(name in head.split() for name in names):
                    found[process.pid] = process
        return [p for p in found.values() if p.ppid() not in found]

    try:
        targets = wait_until(find, COMPONENT_WAIT_S, 2, what=f"the {component}")
    except TimeoutError:
        killed = platform.killed_components.get(component)
        if killed is None or time.monotonic() - killed > RECENT_KILL_S:
            raise
        raise FaultNotInjectedError(
            f"the {component} an earlier fault killed was not running again within "
            f"{COMPONENT_WAIT_S} s"
        ) from None
    old = {p.pid for p in targets}
    platform.killed_components[component] = time.monotonic()
    for process in targets:
        _kill(process)

    def check() -> str | None:
        again = [p for p in find() if p.pid not in old]
        if not again:
            return f"the {component} has not been started again"
        return airflow_whole(platform)

    return Recovery(f"kill -9 the {component} (pids {sorted(old)})", check)


def _outage(stop: Callable[[], object], start: Callable[[], object], seconds: float) -> None:
    stop()
    time.sleep(seconds)
    start()


def stop_metadata_db(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    from ingestctl.postgres_cluster import EmbeddedPostgres

    postgres = EmbeddedPostgres()
    seconds = float(fault.params["seconds"])
    _outage(lambda: postgres.down(), postgres.up, seconds)
    return Recovery(f"stopped PostgreSQL for {seconds:.0f} s", lambda: airflow_whole(platform))


def _kill_and_restart(pid: int | None, start: Callable[[], object], seconds: float) -> None:
    """kill -9 ``pid`` (a service), then ``start`` it again ``seconds`` later, as its service
    manager would."""

    def kill() -> None:
        if pid:
            _kill(psutil.Process(pid))

    _outage(kill, start, seconds)


def kill_metadata_db(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    from ingestctl.postgres_cluster import EmbeddedPostgres

    postgres = EmbeddedPostgres()
    seconds, pid = float(fault.params["seconds"]), postgres.status().pid
    _kill_and_restart(pid, postgres.up, seconds)
    return Recovery(
        f"kill -9 PostgreSQL (pid {pid}), started again {seconds:.0f} s later",
        lambda: airflow_whole(platform),
    )


def _broker_whole(platform: SoakPlatform) -> str | None:
    from ingest_core.topics import broker_problem

    return broker_problem(platform.settings.kafka) or always_on_whole(platform.settings)


def stop_broker(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    from ingestctl.kafka_broker import KafkaBroker

    broker = KafkaBroker(platform.settings.kafka)
    seconds = float(fault.params["seconds"])
    _outage(lambda: broker.down(), _restarting(broker), seconds)
    return Recovery(f"stopped the broker for {seconds:.0f} s", lambda: _broker_whole(platform))


def kill_broker(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    from ingestctl.kafka_broker import KafkaBroker

    broker = KafkaBroker(platform.settings.kafka)
    seconds, pid = float(fault.params["seconds"]), broker.status().pid
    if pid is None:  # soak run 12: a no-op counted as a fault recovered in 0 s
        raise FaultNotInjectedError("the broker (or a node of the cluster) is not running")
    _kill_and_restart(pid, _restarting(broker), seconds)
    return Recovery(
        f"kill -9 the broker (pid {pid}), started again {seconds:.0f} s later",
        lambda: _broker_whole(platform),
    )


def _cluster_node(platform: SoakPlatform, which: str, rng_seed: int) -> int:
    """The node (0-based) a cluster fault hits: ``leader`` of the first contract topic's
    partition 0, the KRaft quorum's active ``controller``, or ``any`` (drawn from the fault's
    number, so that a run is reproducible); a node Kafka cannot name now is drawn too."""
    import random

    from ingestctl.kafka_broker import KafkaBroker

    kafka = platform.settings.kafka
    node: int | None = None
    if which == "leader":
        node = partition_leader(kafka)
    elif which == "controller":
        node = KafkaBroker(kafka).quorum_leader()
    if node is not None and 0 <= node < kafka.brokers:
        return node
    return random.Random(rng_seed).randrange(kafka.brokers)


def partition_leader(kafka: KafkaSettings) -> int | None:
    """The node (0-based; KRaft ``node.id`` is node + 1) leading partition 0 of the first
    contract topic, or None when Kafka does not say."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    from ingest_core.contracts import TOPICS

    with contextlib.suppress(KafkaError, OSError, KeyError, IndexError, ValueError):
        admin = KafkaAdminClient(**kafka.client_config(kafka.bootstrap_servers))
        try:
            (topic,) = admin.describe_topics([kafka.topic(TOPICS[0])])
            partitions = {p["partition_index"]: p for p in topic["partitions"]}
            return int(partitions[0]["leader_id"]) - 1
        finally:
            admin.close()
    return None


def _cluster_whole(platform: SoakPlatform) -> str | None:
    """None once every broker runs again, Kafka answers and the always-on jobs are whole."""
    from ingestctl.kafka_broker import KafkaBroker

    status = KafkaBroker(platform.settings.kafka).status()
    if not status.running:
        return f"{len(status.pids)} of {platform.settings.kafka.brokers} brokers running"
    return _broker_whole(platform)


def _restarting(service: Any, give_up_s: float = 600.0) -> Callable[[], object]:
    """``service.up`` (a broker or a Spark worker) as a service manager runs it (systemd's
    ``Restart=on-failure``): a node that exits during start-up is started again every 10 s,
    for ``give_up_s`` seconds. Soak run 12: a node restarted while a whole-cluster outage was
    on could not register with the quorum, exited, and nothing started it again.

    :raises BrokerStartError: (or :class:`SparkClusterError`) still failing after
        ``give_up_s``.
    """
    from ingestctl.kafka_broker import BrokerStartError
    from ingestctl.spark_cluster import SparkClusterError

    def start() -> object:
        deadline = time.monotonic() + give_up_s
        while True:
            try:
                return service.up()
            except (BrokerStartError, SparkClusterError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(10)

    return start


def kill_cluster_broker(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    from ingestctl.kafka_broker import KafkaBroker

    which = str(fault.params["node"])
    node = _cluster_node(platform, which, fault.number)
    broker = KafkaBroker(platform.settings.kafka, node=node)
    seconds, pid = float(fault.params["seconds"]), broker.status().pid
    if pid is None:
        raise FaultNotInjectedError(f"broker node {node} is not running")
    _kill_and_restart(pid, _restarting(broker), seconds)
    return Recovery(
        f"kill -9 broker node {node} ({which}, pid {pid}), started again {seconds:.0f} s later",
        lambda: _cluster_whole(platform),
    )


def stop_cluster_broker(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    from ingestctl.kafka_broker import KafkaBroker

    node = _cluster_node(platform, str(fault.params["node"]), fault.number)
    broker = KafkaBroker(platform.settings.kafka, node=node)
    seconds = float(fault.params["seconds"])
    _outage(lambda: broker.down(), _restarting(broker), seconds)
    return Recovery(
        f"stopped broker node {node} for {seconds:.0f} s", lambda: _cluster_whole(platform)
    )


def _spark_whole(platform: SoakPlatform, app_id: str | None = None) -> str | None:
    """None once the master and every worker run and are registered, the application
    ``app_id`` (an executor's, when one was killed) holds cores again or has ended, and the
    always-on jobs are whole."""
    from ingestctl.spark_cluster import SparkStandalone

    cluster = SparkStandalone(platform.settings)
    status = cluster.status()
    workers = platform.settings.spark_cluster.workers
    if not status.running or status.alive_workers != workers:
        return status.describe()
    if app_id is not None:
        active = {app["id"]: app for app in cluster.state().get("activeapps", [])}
        if app_id in active and not active[app_id].get("cores"):
            return f"application {app_id} ({active[app_id].get('name')}) has no executor"
    return always_on_whole(platform.settings)


def _worker(platform: SoakPlatform, rng_seed: int) -> int:
    """The worker (0-based) a fault hits, drawn from the fault's number (reproducible)."""
    import random

    return random.Random(rng_seed).randrange(platform.settings.spark_cluster.workers)


def _spark_worker(platform: SoakPlatform, fault: PlannedFault) -> tuple[int, str, Any]:
    """The worker a fault hits: its pid, a description, and the object that starts it again.

    :raises FaultNotInjectedError: that worker does not run.
    """
    from ingestctl.spark_cluster import SparkStandalone

    worker = _worker(platform, fault.number)
    node = SparkStandalone(platform.settings, worker=worker)
    pid = node.pid(f"worker-{worker}")
    if pid is None:
        raise FaultNotInjectedError(f"Spark worker {worker} is not running")
    executors = len(node.executors(worker))
    return pid, f"Spark worker {worker} (pid {pid}, {executors} executors)", node


def kill_spark_worker(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    seconds = float(fault.params["seconds"])
    pid, what, node = _spark_worker(platform, fault)
    _kill_and_restart(pid, _restarting(node), seconds)
    return Recovery(
        f"kill -9 {what}, started again {seconds:.0f} s later", lambda: _spark_whole(platform)
    )


def kill_spark_executor(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    """kill -9 one executor JVM (drawn from the fault's number) of a running application."""
    import random

    from ingestctl.spark_cluster import SparkStandalone, app_id_of

    cluster = SparkStandalone(platform.settings)
    executors = sorted(
        (p for w in range(platform.settings.spark_cluster.workers) for p in cluster.executors(w)),
        key=lambda p: p.pid,
    )
    if not executors:
        raise FaultNotInjectedError("no Spark executor runs")
    victim = random.Random(fault.number).choice(executors)
    app_id = app_id_of(victim)
    names = {app["id"]: app.get("name") for app in cluster.applications()}
    _kill(victim)
    return Recovery(
        f"kill -9 an executor (pid {victim.pid}) of {names.get(app_id, '?')} ({app_id})",
        lambda: _spark_whole(platform, app_id),
    )


def kill_broker_and_worker(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    """A rack lost: kill -9 one broker node and one Spark worker together; both are started
    again ``seconds`` later (the broker first: the worker's executors read from it)."""
    from ingestctl.kafka_broker import KafkaBroker

    node = _cluster_node(platform, "any", fault.number)
    broker = KafkaBroker(platform.settings.kafka, node=node)
    seconds, pid = float(fault.params["seconds"]), broker.status().pid
    if pid is None:
        raise FaultNotInjectedError(f"broker node {node} is not running")
    worker_pid, what, worker = _spark_worker(platform, fault)

    def kill_both() -> None:
        for victim in (pid, worker_pid):
            _kill(psutil.Process(victim))

    def start_both() -> None:
        _restarting(broker)()
        _restarting(worker)()

    _outage(kill_both, start_both, seconds)
    return Recovery(
        f"kill -9 broker node {node} (pid {pid}) and {what}, both started again {seconds:.0f} s "
        "later",
        lambda: _cluster_whole(platform) or _spark_whole(platform),
    )


def _task_instances(
    platform: SoakPlatform, run_states: tuple[str, ...] = ("running",)
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(run id, task instance)`` of every task of the medallion runs in ``run_states``."""
    for run in platform.medallion_runs():
        if run.get("state") not in run_states:
            continue
        run_id = str(run["dag_run_id"])

        def tasks(client: AirflowClient, r: str = run_id) -> list[dict[str, Any]]:
            return client.task_instances(MEDALLION, r)

        for ti in platform.api(tasks):
            yield run_id, ti


def _running_task(
    platform: SoakPlatform, wanted: Callable[[dict[str, Any]], bool]
) -> tuple[str, dict[str, Any]] | None:
    """``(run id, task instance)`` of a running task of a running medallion run that
    ``wanted`` accepts, or None."""
    return next(
        ((r, ti) for r, ti in _task_instances(platform) if ti["state"] == "running" and wanted(ti)),
        None,
    )


def mark_task_failed(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    from ingestctl.airflow_runtime import AirflowError

    def spark_task(ti: dict[str, Any]) -> bool:
        task = str(ti["task_id"])
        return task in SPARK_TASKS and bool(spark_submits(SPARK_TASKS[task]))

    run_id, ti = _wait_for_target(lambda: _running_task(platform, spark_task), platform, 600)
    task_id = str(ti["task_id"])
    since = datetime.now(UTC)
    path = f"/dags/{MEDALLION}/dagRuns/{run_id}/taskInstances/{task_id}"
    note = ""

    def mark(client: AirflowClient) -> None:
        nonlocal note
        try:
            client._call("PATCH", path, json={"new_state": "failed"})
        except AirflowError as error:
            # Soak run 19 (#154): the PATCH was retried through an outage after Airflow had
            # applied it (or another fault marked the task first); every retry got 409 until
            # the injector gave up. The task is failed, which is what this fault does.
            if " 409 " not in str(error) or "already in failed state" not in str(error):
                raise
            note = " (it was already failed: an earlier attempt's answer was lost)"

    platform.api(mark)
    return Recovery(
        f"marked {task_id} of {run_id} failed{note}",
        _medallion_success_since(platform, since),
        _medallion_running(platform),
    )


def kill_gate(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    """kill -9 of a running gate task's process (``gate_silver``/``gate_gold`` of a medallion
    run, validating with GX in the task's own process): Airflow retries the task, and the
    retry (or a later run's gate) must validate the same increment again, whole."""
    gates = {"gate_silver", "gate_gold"}
    # A gate runs for seconds: its task instance ids are known before it starts (a run
    # creates them all), so they are read every 20 s and the processes scanned every 0.5 s
    # for the task runner's title (setproctitle "airflow worker -- <task instance id>").
    titles: dict[str, tuple[str, str]] = {}  # task runner title -> (task id, run id)
    read = [0.0]

    def unfinished_gates() -> None:
        titles.clear()
        for run_id, ti in _task_instances(platform, ("queued", "running")):
            if ti["task_id"] in gates and ti["state"] in UNFINISHED:
                titles[f"airflow worker -- {ti['id']}"] = (str(ti["task_id"]), run_id)

    def target() -> tuple[tuple[str, str], psutil.Process] | None:
        if time.monotonic() - read[0] >= 20:
            read[0] = time.monotonic()
            unfinished_gates()
        for process in platform.standalone.processes() if titles else ():
            with contextlib.suppress(psutil.Error):
                title = " ".join(process.cmdline()).strip()
                if title in titles:
                    return titles[title], process
        return None

    (task_id, run_id), process = _wait_for_target(target, platform, 900, every_s=0.5)
    since = datetime.now(UTC)
    _kill(process)
    return Recovery(
        f"kill -9 {task_id}'s task process (pid {process.pid})",
        _medallion_success_since(platform, since, run_id),
        _medallion_running(platform),
    )


def concurrent_commits(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    """Spark and delta-rs appending one-row commits to one Delta table at once beside the
    running platform, Spark's commits paused 50 ms before their atomic step as a GC pause
    would pause them (``python -m spark_jobs.commit_race``, the platform's session and log
    store): every acknowledged append must be in the table once. The table is the soak's
    own (``<home>/soak/commit_race/<fault>``), not one of the platform's."""
    from ingest_core.settings import ingest_home

    folder = ingest_home() / "soak" / "commit_race"
    path = folder / f"fault-{fault.number}"
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "spark_jobs.commit_race", str(path), "--rounds", "12"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (done.stderr.strip().splitlines() or [""])[-1]
        return Recovery(f"commit race exit {done.returncode}", _final(f"no result: {tail[:300]}"))
    acknowledged = sum(len(v) for v in result["acknowledged"].values())
    problem = None
    if not result["ok"]:
        problem = (
            f"lost {result['lost']}, duplicated {result['duplicated']}, failures "
            f"{result['failures']}, versions {result['versions']}"
        )[:500]
    return Recovery(
        f"Spark and delta-rs appended to one table at once: {acknowledged} acknowledged, "
        f"{len(result['landed'])} in the table",
        _final(problem),
    )


def _run_ok(done: subprocess.CompletedProcess[str]) -> str | None:
    text = done.stdout + done.stderr
    if "Traceback" in text or done.returncode not in (0, 1):
        return f"exit {done.returncode}: {text.strip().splitlines()[-1:] or ''}"
    return None


def gates_at_once(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    command = [sys.executable, "-m", "spark_jobs.quality.gate", "validate", "--layer", "silver"]
    gates = [
        subprocess.Popen(
            [*command, "--run-id", f"soak-{fault.number}-{n}", "--engine", "pandas"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    outcomes = []
    for gate in gates:
        out, err = gate.communicate(timeout=900)
        outcomes.append(_run_ok(subprocess.CompletedProcess(gate.args, gate.returncode, out, err)))
    crashed = [o for o in outcomes if o]
    return Recovery(
        f"three Silver gates at once (exit codes {[g.returncode for g in gates]})",
        _final("; ".join(crashed) or None),
    )


def backfill(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    from ingestctl.airflow_runtime import run_cli

    end = (datetime.now(UTC) - platform.stream_span / 3).replace(second=0, microsecond=0)
    end -= timedelta(minutes=end.minute % 15)
    quarter = timedelta(minutes=15)
    # Intervals no earlier backfill fault took (two taken 30 minutes apart were refused as
    # "no backfill run": Airflow had runs for them already).
    while {end - quarter * k for k in range(3)} & platform.backfilled:
        end -= 2 * quarter
    platform.backfilled.update(end - quarter * k for k in range(3))
    start = end - 2 * quarter

    def backfills() -> list[dict[str, Any]]:
        return [r for r in platform.medallion_runs() if r.get("run_type") == "backfill"]

    def create() -> subprocess.CompletedProcess[str] | None:
        """``airflow backfill create``; None while Airflow refuses it because another backfill
        of the DAG still runs (one per DAG; its runs may all have finished before Airflow
        marks it completed), or while its metadata database does not answer: an operator
        waits and tries again, as here. Whether one runs is asked of the REST API first:
        each ``airflow backfill create`` parses every DAG, and three faults waiting so took
        half a core from the platform they measure (soak run 9's CPU table)."""
        try:
            if platform.api(lambda c: c.backfill_running(MEDALLION), timeout_s=60):
                return None
        except TimeoutError:  # the API or its database away: the next try
            return None
        before.clear()
        before.update(r["dag_run_id"] for r in backfills())
        done = run_cli(
            [
                "backfill",
                "create",
                "--dag-id",
                MEDALLION,
                "--from-date",
                start.isoformat(),
                "--to-date",
                end.isoformat(),
            ],
            check=False,
        )
        said = done.stdout + done.stderr
        refused = "AlreadyRunningBackfill" in said
        # The metadata database away (another fault): the operator tries again (soak run 7's
        # create met a killed PostgreSQL: "sqlite3/psycopg OperationalError ... sqlalche.me").
        unreachable = done.returncode != 0 and "OperationalError" in said
        return None if refused or unreachable else done

    before: set[str] = set()
    done = wait_until(create, 1800, 30, what="the running backfill to finish")
    assert done is not None  # wait_until returns a truthy value
    if done.returncode != 0:
        text = (done.stdout + done.stderr).strip().splitlines()[-1:]
        return Recovery(f"airflow backfill create failed: {text}", _final(f"refused: {text}"))

    def check() -> str | None:
        mine = [r for r in backfills() if r["dag_run_id"] not in before]
        if not mine:
            return "no backfill run yet"
        failed = [r["dag_run_id"] for r in mine if r.get("state") == "failed"]
        if failed:
            raise NotRecoverableError(f"backfill runs failed: {failed}")
        open_ = [r for r in mine if r.get("state") != "success"]
        return f"{len(open_)} backfill runs not finished" if open_ else None

    return Recovery(f"backfill {start:%H:%M}..{end:%H:%M} beside the scheduled runs", check)


def _committed(platform: SoakPlatform, job: str) -> bool:
    """Whether a query of ``job``'s checkpoint has committed a batch (what a backup keeps)."""
    from ingest_core.catalog import get_catalog
    from ingest_core.checkpoint_health import query_dirs
    from ingest_core.delta_tables import last_committed_batch

    queries = query_dirs(get_catalog().job(job).checkpoint(platform.settings))
    return any(last_committed_batch(folder) is not None for folder in queries.values())


def checkpoint_backup(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    """``ingestctl checkpoints backup`` of a running always-on job, once it has committed a
    batch: before that the command refuses, rightly, with nothing to back up (soak run 14: a
    Bronze that a maintenance pause and a killed worker held before its first commit).

    :raises FaultNotInjectedError: no batch committed within 600 s.
    """
    job = fault.params["job"]
    try:
        wait_until(lambda: _committed(platform, job), 600, 5, what=f"{job}'s first commit")
    except TimeoutError:
        raise FaultNotInjectedError(f"{job} committed no batch within 600 s") from None
    ingestctl = os.path.join(os.path.dirname(sys.executable), "ingestctl")
    done = subprocess.run(
        [ingestctl, "checkpoints", "backup", job], capture_output=True, text=True, timeout=600
    )
    said = (done.stdout + done.stderr).strip().splitlines()[-1:]  # the refusal's reason
    problem = None if done.returncode == 0 else f"exit {done.returncode}: {said}"
    return Recovery(f"checkpoint backup of {job} while it runs", _final(problem))


#: How long the soak's operator waits for a supervisor run it triggered (stop, start) before
#: giving up. The supervisor's runs queue one at a time (``max_active_runs`` 1) and each takes
#: minutes under the soak's faults: soak run 19's stop of 17:13:14 started at 17:17:25 behind
#: four others, sat out an 84 s database outage and succeeded at 17:23:54, 640 s after it was
#: triggered; the operator had given up at 600 s and the restore counted as not recovered.
OPERATOR_WAIT_S = 1800.0


#: One restore at a time, as one operator does it: soak run 19's restores #214, #218 and #225
#: overlapped; #218's closing start restarted bronze_ingest while #225's restore run waited
#: in the queue, and the restore then refused (rightly: the job was running) and counted as
#: not recovered.
_RESTORING = threading.Lock()


def checkpoint_restore(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    with _RESTORING:
        return _checkpoint_restore(platform)


def _checkpoint_restore(platform: SoakPlatform) -> Recovery:
    from ingest_core.checkpoints import backup, list_backups

    job = "bronze_ingest"
    # The operator's way: a backup now (beside the running job), then stop, restore, start.
    # The restored checkpoint is behind what the job committed meanwhile: the batches it
    # re-plans must be skipped by the Delta sink (the rule every rollback keeps).
    backup(job, platform.settings)
    backups = list_backups(job, platform.settings)
    stopped = restored = "not reached"
    try:
        stop = platform.trigger("streaming_supervisor", {"action": "stop", "jobs": [job]})
        stopped = platform.wait_for_run("streaming_supervisor", stop, OPERATOR_WAIT_S)
        restored = "no backup"
        if stopped == "success" and backups:
            run = platform.trigger(
                "checkpoint_restore", {"job": job, "backup_id": backups[0].backup_id}
            )
            # Its retries (Kafka away, Airflow's own failures: SPREAD_RETRIES) wait about
            # 25 minutes in all, plus the attempts themselves.
            restored = platform.wait_for_run("checkpoint_restore", run, 2400)
    except TimeoutError as error:
        restored = f"not finished ({error})"
    finally:
        # Whatever happened, the operator starts the job again (soak run 7: a stop run that
        # waited 600 s behind others failed the injector, and the job stayed stopped).
        start = platform.trigger("streaming_supervisor", {"action": "start", "jobs": [job]})
        started = platform.wait_for_run("streaming_supervisor", start, OPERATOR_WAIT_S)

    def check() -> str | None:
        if restored != "success":
            raise NotRecoverableError(f"the restore ended {restored}")
        return always_on_whole(platform.settings)

    return Recovery(
        f"stopped {job} ({stopped}), restored {backups[0].backup_id if backups else '-'} "
        f"({restored}), started ({started})",
        check,
    )


def _triggered(platform: SoakPlatform, dag_id: str, conf: dict[str, Any] | None = None) -> Recovery:
    run = platform.trigger(dag_id, conf)
    state: dict[str, str] = {}

    def wait() -> None:
        # Until the run ends, however long (soak run 19: a maintenance run queued for 83
        # minutes ended in success after this wait had given up at 3,600 s, and its fault
        # was judged "not finished"); the recovery window bounds the judgement.
        while "final" not in state:
            with contextlib.suppress(Exception):
                state["final"] = platform.wait_for_run(dag_id, run, 3600)

    threading.Thread(target=wait, daemon=True).start()

    def check() -> str | None:
        if "final" not in state:
            return f"{dag_id} run {run} not finished"
        if state["final"] != "success":
            return f"{dag_id} run {run} {state['final']}"
        return always_on_whole(platform.settings)

    return Recovery(f"triggered {dag_id} ({run})", check, lambda: "final" not in state)


#: How long a maintenance or refresh fault waits for the DAG's previous run to end, and how
#: often it asks (seconds).
IDLE_WAIT_S = 600.0
IDLE_POLL_S = 10.0


def _when_idle(platform: SoakPlatform, dag_id: str) -> None:
    """Wait (up to :data:`IDLE_WAIT_S`) until ``dag_id`` has no run queued or running, as an
    operator does before starting another. Soak run 19 triggered 13 ``table_maintenance``
    runs in 100 minutes; they run one at a time behind Gold's one-slot pool, 5-13 minutes
    each at load, so the queue only grew (a run triggered at 16:33 started at 17:55) and four
    were judged "not finished" after waiting up to 75 minutes.

    :raises FaultNotInjectedError: a run was still queued or running after the wait.
    """

    try:
        wait_until(
            lambda: platform.active_run(dag_id) is None,
            IDLE_WAIT_S,
            IDLE_POLL_S,
            what=f"{dag_id}'s previous run",
        )
    except TimeoutError:
        raise FaultNotInjectedError(
            f"a {dag_id} run was still queued or running after {IDLE_WAIT_S:.0f} s"
        ) from None


def table_maintenance(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    _when_idle(platform, "table_maintenance")
    return _triggered(platform, "table_maintenance")


def layer_full_refresh(platform: SoakPlatform, fault: PlannedFault) -> Recovery:
    """A Gold refresh, triggered at its moment whatever Gold's jobs do: its ``prepare`` waits
    while they run (soak run 10 found it refusing; the soak used to hold the medallion runs
    back for a gap, and refreshes waiting for the same gap started together); not while an
    earlier refresh is still queued or running (:func:`_when_idle`)."""
    _when_idle(platform, "layer_full_refresh")
    return _triggered(platform, "layer_full_refresh", {"layer": "gold"})


#: Fault kind -> injector.
INJECTORS: dict[str, Callable[[SoakPlatform, PlannedFault], Recovery]] = {
    "kill_always_on_driver": kill_always_on_driver,
    "kill_scheduled_driver": kill_scheduled_driver,
    "kill_airflow_component": kill_airflow_component,
    "stop_metadata_db": stop_metadata_db,
    "kill_metadata_db": kill_metadata_db,
    "stop_broker": stop_broker,
    "kill_broker": kill_broker,
    "kill_cluster_broker": kill_cluster_broker,
    "stop_cluster_broker": stop_cluster_broker,
    "kill_spark_worker": kill_spark_worker,
    "kill_spark_executor": kill_spark_executor,
    "kill_broker_and_worker": kill_broker_and_worker,
    "mark_task_failed": mark_task_failed,
    "hang_scheduled_driver": hang_scheduled_driver,
    "kill_gate": kill_gate,
    "gates_at_once": gates_at_once,
    "concurrent_commits": concurrent_commits,
    "backfill": backfill,
    "checkpoint_backup": checkpoint_backup,
    "checkpoint_restore": checkpoint_restore,
    "table_maintenance": table_maintenance,
    "layer_full_refresh": layer_full_refresh,
}
