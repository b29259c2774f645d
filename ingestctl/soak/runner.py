"""``ingestctl soak``: start the embedded platform in a home of its own, stream, inject the
scheduled faults, drain, judge, write the result and the report (docs/soak.md)."""

from __future__ import annotations

import json
import os
import socket
import statistics
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack, closing
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest_core.processes import interrupts_raise
from ingestctl.soak.faults import (
    INJECTORS,
    MEDALLION,
    FaultNotInjectedError,
    NotRecoverableError,
    SoakPlatform,
    spark_submits,
)
from ingestctl.soak.plan import ALWAYS_ON, KINDS, FaultKind, PlannedFault, schedule
from ingestctl.soak.resources import CpuSampler
from ingestctl.soak.stream import SoakStream, read_log
from ingestctl.soak.verdict import Check

if TYPE_CHECKING:
    from ingestctl.airflow_runtime import AirflowClient

#: DAGs the soak keeps unpaused: the platform as ``make demo`` leaves it running.
UNPAUSED = (
    "streaming_supervisor",
    MEDALLION,
    "checkpoint_maintenance",
    "table_maintenance",
    "checkpoint_restore",
    "layer_full_refresh",
)


@dataclass(frozen=True)
class SoakOptions:
    """What one soak does.

    :param duration_s: how long the stream runs (faults land inside it); the start-up before
        and the drain after add about 5-10 minutes.
    :param faults: infrastructure faults to inject.
    :param seed: seed of the fault schedule, the generator and the data faults.
    :param rate: events per wall-clock second.
    :param speed: event-time seconds per wall-clock second.
    :param cadence_s: a medallion run is triggered this often when none is active (the DAG's
        own schedule is 15 minutes).
    :param kinds: the fault kinds to draw from.
    :param longest_outage_s: cap of the broker's and the database's outages.
    :param recovery_timeout_s: a fault not recovered this long after it ended needed a human.
    :param home: the soak's platform home; default ``<INGEST_HOME>/soak/<run id>``.
    :param keep: leave the platform running afterwards (stop it with ``make demo-down`` and
        ``INGEST_HOME`` set to the home).
    """

    duration_s: float = 20 * 60
    faults: int = 40
    seed: int = 1
    rate: float = 8.0
    speed: float = 4.0
    cadence_s: float = 180.0
    kinds: tuple[FaultKind, ...] = KINDS
    longest_outage_s: float = 180.0
    recovery_timeout_s: float = 900.0
    home: Path | None = None
    keep: bool = False


@dataclass
class FaultOutcome:
    """What happened to one planned fault."""

    number: int
    kind: str
    label: str
    at_s: float
    injected: bool = False
    detail: str = ""
    injected_s: float | None = None
    inject_took_s: float | None = None
    recovered: bool = False
    recovery_s: float | None = None
    still_wrong: str | None = None


@dataclass
class SoakResult:
    """The soak's result file (``result.json``)."""

    run_id: str
    home: str
    options: dict[str, Any]
    started_at: str
    finished_at: str = ""
    stream: dict[str, Any] = field(default_factory=dict)
    faults: list[FaultOutcome] = field(default_factory=list)
    by_kind: dict[str, dict[str, Any]] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    drain: list[str] = field(default_factory=list)
    load_average: dict[str, float] = field(default_factory=dict)
    cpu: list[tuple[str, float, float]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Nothing lost, duplicated, differing or orphaned, and every fault recovered."""
        return bool(self.summary.get("passed"))


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's choice)."""
    with closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def soak_environment(home: Path, brokers: int = 1, workers: int = 0) -> dict[str, str]:
    """The soak's platform settings: its own home, broker ports and Airflow log ports, so
    that it runs beside a demo without touching it; an alert threshold its stream reaches; a
    Spark task budget its hung-driver fault can wait for. With ``brokers`` > 1 (the
    ``local-cluster`` profile) the brokers' client and controller ports are two blocks of
    consecutive ports; with ``workers`` > 0 the Spark master and its UI get ports of their
    own, the workers' UIs a block."""
    from ingestctl.kafka_broker import free_port_block

    spark: dict[str, str] = {}
    if workers:
        spark = {
            "INGEST_SPARK__MASTER": f"spark://127.0.0.1:{free_port()}",
            "INGEST_SPARK_CLUSTER__MASTER_UI_PORT": str(free_port()),
            "INGEST_SPARK_CLUSTER__WORKER_UI_PORT": str(free_port_block(workers)),
        }
    if brokers > 1:
        base = free_port_block(2 * brokers)
        port, controller_port = base, base + brokers
    else:
        port, controller_port = free_port(), free_port()
    return {
        "INGEST_HOME": str(home),
        "INGEST_KAFKA__PORT": str(port),
        "INGEST_KAFKA__CONTROLLER_PORT": str(controller_port),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        # The generated payments are 70-2,500 (BRL): about 1 in 20 above 2,000 is alerted.
        "INGEST_ALERTS__AMOUNT_THRESHOLD": "2000",
        # The hang_scheduled_driver fault ends at the task's execution_timeout: 15 minutes,
        # not 30, so that its run recovers within twice the recovery timeout. Not less: at
        # load 24 (soak run 6 beside a demo and a test run) a legitimate refine_silver ran
        # past 7 minutes and was timed out (its retry goes on from the last batch, but the
        # cycle stalls); at load 7 (run 5) it took at most 222 s.
        "INGEST_TASKS__SPARK_TIMEOUT_S": "900",
        **spark,
    }


#: How long a fault's check goes on after the fault's own work ended (its DAG run, its
#: outage): the supervisor's one-minute schedule and an always-on driver's start on a loaded
#: cluster. Soak run 14: a table_maintenance fault whose run ended at its deadline was judged
#: while the paused jobs were still starting (a heartbeat 113 s old); 5 s later another
#: maintenance fault's check found them whole.
SETTLE_S = 180.0


@dataclass
class RecoveryWindow:
    """How long the soak waits for one fault's recovery: ``timeout_s`` after the fault was
    injected; up to twice that while the fault's work is still in progress (``busy``), and
    :data:`SETTLE_S` after it was last seen in progress. Past twice the timeout, only while a
    fault injected *after* this one is still not recovered (``held``), and :data:`SETTLE_S`
    after that: soak run 18 judged three faults (#7, #14, #131) at their cap while later
    driver kills and broker outages kept Bronze down; the platform recovered from all of them
    by itself minutes later. Windows only wait on later faults, whose windows are bounded the
    same way, so no two windows wait on each other and the last fault's window ends them all.

    :param start: when the injection ended (``time.monotonic()``).
    """

    start: float
    timeout_s: float
    settle_s: float = SETTLE_S
    last_busy: float | None = None
    last_held: float | None = None

    def waiting(
        self, now: float, busy: Callable[[], bool], held: Callable[[], bool] | None = None
    ) -> bool:
        """Whether to check again at ``now``; asks ``busy`` (an API that cannot answer counts
        as not busy) and remembers when it last said yes; past twice the timeout asks
        ``held`` instead."""
        if now >= self.start + 2 * self.timeout_s:
            if held is not None and held():
                self.last_held = now
                return True
            return self.last_held is not None and now - self.last_held < self.settle_s
        try:
            in_progress = bool(busy())
        except Exception:  # the API or its database away: not known to be busy
            in_progress = False
        if in_progress:
            self.last_busy = now
        if now < self.start + self.timeout_s:
            return True
        settling = self.last_busy is not None and now - self.last_busy < self.settle_s
        return in_progress or settling


def summarise(
    outcomes: list[FaultOutcome], checks: list[Check]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per-kind recovery figures, and the verdict's totals.

    :returns: (by kind: injected, recovered, recovery p50 and max in seconds, what was still
        wrong; totals: faults, lost, duplicated, differing, orphans, passed).
    """
    by_kind: dict[str, dict[str, Any]] = {}
    for outcome in outcomes:
        entry = by_kind.setdefault(
            outcome.kind, {"planned": 0, "injected": 0, "recovered": 0, "times": [], "human": []}
        )
        entry["planned"] += 1
        if outcome.injected:
            entry["injected"] += 1
            if outcome.recovered and outcome.recovery_s is not None:
                entry["recovered"] += 1
                entry["times"].append(outcome.recovery_s)
            else:
                entry["human"].append(f"#{outcome.number}: {outcome.still_wrong}")
    for entry in by_kind.values():
        times = entry.pop("times")
        entry["recovery_p50_s"] = round(statistics.median(times), 1) if times else None
        entry["recovery_max_s"] = round(max(times), 1) if times else None

    def count(kind: str) -> int:
        return sum(c.failures for c in checks if c.kind == kind)

    injected = sum(1 for o in outcomes if o.injected)
    recovered = sum(1 for o in outcomes if o.injected and o.recovered)
    totals = {
        "faults_planned": len(outcomes),
        "faults_injected": injected,
        "faults_recovered": recovered,
        "lost": count("lost"),
        "duplicated": count("duplicated"),
        "differing": count("differing"),
        "orphans": count("orphan"),
        "other_failures": count("other"),
        "checks_failed": sum(1 for c in checks if not c.ok),
    }
    totals["passed"] = totals["checks_failed"] == 0 and recovered == injected and injected > 0
    return by_kind, totals


def report(result: SoakResult) -> str:
    """The short report a user reads (Markdown)."""
    s, load = result.summary, result.load_average
    lines = [
        f"# Soak {result.run_id}: {'PASSED' if s.get('passed') else 'FAILED'}",
        "",
        f"{result.started_at} .. {result.finished_at}; home `{result.home}`; load average "
        f"mean {load.get('mean', 0):.1f}, max {load.get('max', 0):.1f}",
        "",
        f"- faults: {s.get('faults_injected')} injected of {s.get('faults_planned')} planned, "
        f"{s.get('faults_recovered')} recovered without a human",
        f"- records: {result.stream.get('acknowledged')} acknowledged, "
        f"{result.stream.get('kafka_records')} in Kafka; lost {s.get('lost')}, duplicated "
        f"{s.get('duplicated')}, differing {s.get('differing')}, orphans {s.get('orphans')}, "
        f"other {s.get('other_failures')}",
        "",
        "| fault kind | injected | recovered | recovery p50 s | max s | needed a human |",
        "|---|---|---|---|---|---|",
    ]
    for kind, e in sorted(result.by_kind.items()):
        lines.append(
            f"| {kind} | {e['injected']}/{e['planned']} | {e['recovered']} | "
            f"{e['recovery_p50_s'] or '-'} | {e['recovery_max_s'] or '-'} | "
            f"{'; '.join(e['human']) or '-'} |"
        )
    lines += ["", "| check | failures | checked | examples |", "|---|---|---|---|"]
    for check in result.checks:
        lines.append(
            f"| {check['name']} | {check['failures']} | {check['checked']} | "
            f"{'; '.join(check['examples'])[:300] or '-'} |"
        )
    if result.drain:
        lines += ["", "Drain:", *[f"- {line}" for line in result.drain]]
    if result.cpu:
        lines += [
            "",
            "CPU by component, stream start to judging (sampled; docs/soak.md):",
            "",
            "| component | CPU s | mean cores |",
            "|---|---|---|",
            *[f"| {name} | {seconds:,.0f} | {cores:.2f} |" for name, seconds, cores in result.cpu],
        ]
    return "\n".join(lines) + "\n"


class Soak:
    """One soak run (see :func:`run_soak`)."""

    def __init__(self, options: SoakOptions, echo: Callable[[str], None]) -> None:
        from ingest_core.settings import ingest_home

        self.options = options
        self.echo = echo
        self.run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-seed{options.seed}"
        self.home = (options.home or ingest_home() / "soak" / self.run_id).resolve()
        self.folder = self.home / "soak"
        self.outcomes: list[FaultOutcome] = []
        self.loads: list[float] = []
        self.stop = threading.Event()
        self.started = time.monotonic()
        #: Faults whose injection is under way (an outage lasts its whole injection).
        self.injecting: set[int] = set()
        #: Faults whose recovery is still being waited for.
        self.recovering: set[int] = set()
        #: When each fault's injection began (``time.monotonic()``).
        self.began: dict[int, float] = {}

    def say(self, text: str) -> None:
        minutes, seconds = divmod(int(time.monotonic() - self.started), 60)
        self.echo(f"[{minutes:3d}:{seconds:02d}] {text}")

    # --- phases ------------------------------------------------------------------------

    def start_platform(self) -> SoakPlatform:
        from ingest_core.contracts import TOPICS
        from ingest_core.settings import get_settings
        from ingest_core.spark_config import spark_jar_paths
        from ingest_core.topics import ensure_topics
        from ingestctl.airflow_runtime import Standalone
        from ingestctl.demo import start_engines

        profile = get_settings()
        os.environ.update(
            soak_environment(self.home, profile.kafka.brokers, profile.spark_cluster.workers)
        )
        get_settings.cache_clear()
        settings = get_settings()
        spark_jar_paths()
        self.folder.mkdir(parents=True, exist_ok=True)
        start_engines(settings, self.say)
        ensure_topics(settings.kafka.bootstrap_servers, [settings.kafka.topic(t) for t in TOPICS])
        standalone = Standalone(free_port())
        self.say(f"starting Airflow on {standalone.url} (log {standalone.log_file}) ...")
        standalone.up()
        span = timedelta(seconds=self.options.duration_s * self.options.speed)
        platform = SoakPlatform(settings, standalone, datetime.now(UTC), span)

        def unpause(client: AirflowClient, dags: tuple[str, ...]) -> bool:
            for dag in dags:
                client.wait_for_dag(dag)
                client.unpause(dag)
            return True

        # The always-on jobs first, as make demo does: the layers above start from Bronze.
        platform.api(lambda c: unpause(c, UNPAUSED[:1]))
        run = platform.trigger("streaming_supervisor")
        self.say("starting the always-on jobs ...")
        if platform.wait_for_run("streaming_supervisor", run, 900) != "success":
            raise RuntimeError(f"streaming_supervisor run {run} failed: the platform did not start")
        platform.api(lambda c: unpause(c, UNPAUSED[1:]))
        return platform

    def run_fault(self, platform: SoakPlatform, fault: PlannedFault, outcome: FaultOutcome) -> None:
        began = time.monotonic()
        outcome.injected_s = round(began - self.started, 1)
        self.injecting.add(fault.number)
        self.began[fault.number] = began
        try:
            recovery = INJECTORS[fault.kind](platform, fault)
        except FaultNotInjectedError as error:
            outcome.detail = f"not injected: {error}"
            self.say(f"fault #{fault.number} {fault.label()}: {outcome.detail}")
            return
        except Exception as error:  # an injector's own failure is reported, not fatal
            outcome.injected = True
            outcome.detail = f"injector failed: {type(error).__name__}: {error}"[:500]
            outcome.still_wrong = outcome.detail
            self.say(f"fault #{fault.number} {fault.label()}: {outcome.detail}")
            return
        finally:
            self.injecting.discard(fault.number)
        outcome.injected = True
        outcome.detail = recovery.detail
        ended = time.monotonic()
        outcome.inject_took_s = round(ended - began, 1)
        self.say(f"fault #{fault.number} {fault.label()}: {recovery.detail}")
        wrong: str | None = "not checked"
        window = RecoveryWindow(ended, self.options.recovery_timeout_s)
        self.recovering.add(fault.number)
        try:
            while window.waiting(
                time.monotonic(),
                self.busy(fault.number, recovery.in_progress),
                lambda: self.held(fault.number),
            ):
                try:
                    wrong = recovery.check()
                except NotRecoverableError as error:  # final: waiting cannot help
                    wrong = str(error)
                    break
                except Exception as error:  # a check that cannot answer yet (API down)
                    wrong = f"{type(error).__name__}: {error}"[:300]
                if wrong is None:
                    break
                time.sleep(5)
        finally:
            self.recovering.discard(fault.number)
        outcome.recovered = wrong is None
        outcome.recovery_s = round(time.monotonic() - ended, 1) if wrong is None else None
        outcome.still_wrong = wrong
        state = (
            f"recovered in {outcome.recovery_s} s" if wrong is None else f"NOT recovered: {wrong}"
        )
        self.say(f"fault #{fault.number} {fault.label()}: {state}")

    def busy(self, number: int, in_progress: Callable[[], bool]) -> Callable[[], bool]:
        """What keeps fault ``number``'s recovery window open (:class:`RecoveryWindow`): its
        own work in progress, or another fault being injected. Run 16: a refresh's check
        expired while three broker outages in a row (37:50-44:54) kept Bronze down, and was
        counted as not recovered although the refresh had nothing to do with it."""

        def busy() -> bool:
            return bool(self.injecting - {number}) or in_progress()

        return busy

    def held(self, number: int) -> bool:
        """Whether a fault injected after fault ``number`` is still not recovered (what keeps
        ``number``'s window open past its cap, :class:`RecoveryWindow`)."""
        began = self.began.get(number)
        if began is None:
            return False
        unrecovered = (self.injecting | self.recovering) - {number}
        return any(self.began.get(m, began) > began for m in unrecovered)

    def keep_medallion_going(self, platform: SoakPlatform) -> None:
        while not self.stop.wait(self.options.cadence_s):
            try:
                if platform.active_medallion_run() is None:
                    platform.trigger(MEDALLION)
            except Exception as error:  # the API may be down under a fault: next time
                self.say(f"medallion trigger skipped: {type(error).__name__}")

    def sample_load(self) -> None:
        while not self.stop.wait(15):
            self.loads.append(os.getloadavg()[0])

    def drain(self, platform: SoakPlatform) -> list[str]:
        """Bring every service back, let the platform catch up, run the medallion twice.

        Each wait is bounded by ``recovery_timeout_s``: what does not come back in that time
        is a note (the verdict's "drain" list, a failure), never a hang."""
        from ingest_core.waiting import wait_until
        from ingestctl.demo import kafka_backlog, wait_for_bronze
        from ingestctl.kafka_broker import KafkaBroker
        from ingestctl.postgres_cluster import EmbeddedPostgres
        from ingestctl.soak.faults import airflow_whole, always_on_whole

        notes = []
        settings = platform.settings
        limit = self.options.recovery_timeout_s
        # A service a fault left down would need a human: the soak says so and starts it.
        if KafkaBroker(settings.kafka).status().pid is None:
            notes.append("the broker was down after the faults: started by the soak")
            KafkaBroker(settings.kafka).up()
        if not EmbeddedPostgres().status().running:
            notes.append("PostgreSQL was down after the faults: started by the soak")
            EmbeddedPostgres().up()
        if settings.spark_cluster.workers:
            from ingestctl.spark_cluster import SparkStandalone

            spark = SparkStandalone(settings)
            if not spark.status().running:
                notes.append(f"{spark.status().describe()} after the faults: started by the soak")
                spark.up()
        checks: list[tuple[str, Callable[[], str | None]]] = [
            ("Airflow", lambda: airflow_whole(platform)),
            ("the always-on jobs", lambda: always_on_whole(settings)),
        ]
        for what, check in checks:
            try:
                wait_until(lambda c=check: c() is None, limit, 5, what=what)  # type: ignore[misc]
            except TimeoutError:
                notes.append(f"{what} not whole {limit:.0f} s after the stream: {check()}")
        self.say("draining: Bronze catches up with Kafka ...")
        try:
            wait_for_bronze(settings, kafka_backlog(settings), timeout_s=limit, echo=lambda _: None)
        except Exception as error:
            notes.append(f"Bronze did not catch up: {error}")
        for round_ in (1, 2):
            try:
                wait_until(lambda: platform.active_medallion_run() is None, limit, 10, what="runs")
                run = platform.trigger(MEDALLION)
                state = platform.wait_for_run(MEDALLION, run, limit)
                self.say(f"draining: medallion run {round_}: {state}")
                if state != "success":
                    retry = platform.trigger(MEDALLION)
                    state = platform.wait_for_run(MEDALLION, retry, limit)
                    notes.append(f"drain run {round_} failed; its retry {retry}: {state}")
            except TimeoutError as error:
                notes.append(f"drain run {round_}: {error}")
                break
        self._wait_for_alerts(settings)
        return notes

    def _wait_for_alerts(self, settings: Any) -> None:
        from ingestctl.soak.verdict import read_table

        seen = -1
        for _ in range(24):  # the alerts land within a few micro-batches of the alert job
            count = len(read_table(settings, "gold_payment_alerts"))
            if count == seen:
                return
            seen = count
            time.sleep(10)

    def leftovers(self, platform: SoakPlatform) -> list[Check]:
        """Orphans: Spark processes no running job owns (on a Spark cluster, executors of an
        application that ended or of a killed worker), checkpoint locks held by a process
        that is not the job's driver or fenced by an unfinished swap, task instances still
        running."""
        from ingest_core.catalog import get_catalog
        from ingest_core.locks import fence_of, lock_holder
        from ingest_platform import supervisor

        drivers = {supervisor.driver_pid(job, platform.settings) for job in ALWAYS_ON}
        stray = []
        for name in get_catalog().applications:
            if name not in ALWAYS_ON:
                stray += [f"{name}: pid {p.pid}" for p in spark_submits(name)]
        stale = []
        for name, spec in get_catalog().jobs.items():
            checkpoint = spec.checkpoint(platform.settings)
            holder = lock_holder(checkpoint)
            if holder and holder not in drivers:
                stale.append(f"{name}: held by pid {holder}")
            fenced = fence_of(checkpoint)
            if fenced is not None:  # a refresh's swap that never finished
                stale.append(f"{name}: fenced by {fenced[0]}")
        running = platform.api(
            lambda c: c._call(
                "GET", "/dags/~/dagRuns/~/taskInstances", params={"state": "running", "limit": 100}
            )
        )
        tasks = [
            f"{t['dag_id']}.{t['task_id']} ({t['dag_run_id']})"
            for t in running.get("task_instances", [])
            if t["dag_id"] != "streaming_supervisor"
        ]
        if platform.settings.spark_cluster.workers:
            from ingestctl.spark_cluster import SparkStandalone

            try:
                stray += SparkStandalone(platform.settings).stray_executors(grace_s=60)
            except OSError as error:  # the master down: nothing tells an executor's owner
                stray.append(f"the Spark master did not answer: {error}")
        return [
            Check(
                "no Spark driver (or executor) left by a finished task",
                len(stray),
                0,
                "orphan",
                tuple(stray[:5]),
            ),
            Check("no stale checkpoint lock", len(stale), 0, "orphan", tuple(stale[:5])),
            Check("no task left running", len(tasks), 0, "orphan", tuple(tasks[:5])),
        ]

    @staticmethod
    def restore_environment(saved: dict[str, str]) -> None:
        """Give this process its environment back (the soak's home and ports were set on it
        for the platform it started)."""
        from ingest_core.settings import get_settings

        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()

    def teardown(self) -> None:
        from ingestctl.demo import stop_demo

        stop_demo(echo=self.say)

    def run(self) -> SoakResult:
        from ingestctl.soak.verdict import judge_data

        options = self.options
        result = SoakResult(
            run_id=self.run_id,
            home=str(self.home),
            options={k: v for k, v in asdict(options).items() if k not in ("kinds", "home")}
            | {"kinds": [k.name for k in options.kinds]},
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        plan = schedule(
            options.seed,
            options.duration_s * 0.85,
            options.faults,
            options.kinds,
            longest_outage_s=options.longest_outage_s,
            start_s=options.duration_s * 0.05,
        )
        self.outcomes = [FaultOutcome(f.number, f.kind, f.label(), f.at_s) for f in plan]
        result.faults = self.outcomes
        with ExitStack() as stack:
            stack.callback(self.restore_environment, dict(os.environ))
            if not options.keep:
                stack.callback(self.teardown)
            platform = self.start_platform()
            (self.folder / "plan.json").write_text(json.dumps([asdict(f) for f in plan], indent=1))
            stream = SoakStream(
                bootstrap=platform.settings.kafka.bootstrap_servers,
                prefix=platform.settings.kafka.topic_prefix,
                log_path=self.folder / "sent.jsonl",
                rate=options.rate,
                speed=options.speed,
                duration_s=options.duration_s,
                seed=options.seed,
            )
            helpers = [
                threading.Thread(target=self.keep_medallion_going, args=(platform,), daemon=True),
                threading.Thread(target=self.sample_load, daemon=True),
            ]
            sampler = CpuSampler(self.home)
            begin = time.monotonic()
            self.say(
                f"streaming {options.rate:g} events/s for {options.duration_s:.0f} s "
                f"with {len(plan)} faults"
            )
            stream.start()
            sampler.start()
            for helper in helpers:
                helper.start()
            workers = []
            for fault, outcome in zip(plan, self.outcomes, strict=True):
                delay = begin + fault.at_s - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                worker = threading.Thread(
                    target=self.run_fault, args=(platform, fault, outcome), daemon=True
                )
                worker.start()
                workers.append(worker)
                stats = stream.stats
                self.say(
                    f"stream: {stats.sent} sent, {stats.acknowledged} acknowledged, "
                    f"{stats.failed} failed; busiest (cores): {sampler.account.top()}"
                )
            stream.join(timeout=max(0.0, begin + options.duration_s + 120 - time.monotonic()))
            stream.stop()
            stream.join()
            self.say("stream finished; waiting for the faults to recover ...")
            for worker in workers:
                worker.join()
            self.stop.set()
            if stream.stats.error:
                result.drain.append(f"the stream failed: {stream.stats.error}")
            result.drain += self.drain(platform)
            result.cpu = sampler.stop().table()
            self.say("judging ...")
            log = read_log(self.folder / "sent.jsonl")
            data = judge_data(platform.settings, log)
            checks = [*data.checks, *self.leftovers(platform)]
            result.stream = {
                "sent": stream.stats.sent,
                "acknowledged": len(log.acknowledged),
                "failed": stream.stats.failed,
                "kafka_records": data.kafka_records,
                "data_faults": stream.stats.counts.as_dict(),
            }
            result.checks = [asdict(c) | {"ok": c.ok} for c in checks]
            result.by_kind, result.summary = summarise(self.outcomes, checks)
            if result.drain and result.summary["passed"]:
                result.summary["passed"] = False  # a human (the soak) had to start a service
            loads = self.loads or [os.getloadavg()[0]]
            result.load_average = {
                "mean": round(statistics.mean(loads), 2),
                "max": round(max(loads), 2),
            }
            result.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
            self.write(result)
        return result

    def write(self, result: SoakResult) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "result.json").write_text(json.dumps(asdict(result), indent=1, default=str))
        (self.folder / "report.md").write_text(report(result))


def run_soak(options: SoakOptions, echo: Callable[[str], None] = print) -> SoakResult:
    """Run one soak: start the embedded platform in its own home (free ports, its own broker,
    PostgreSQL and Airflow), stream for ``options.duration_s`` seconds while the scheduled
    faults land, drain, judge, write ``<home>/soak/result.json`` and ``report.md``, and stop
    the platform (unless ``options.keep``).

    :returns: the result (``passed`` tells the verdict).
    :raises RuntimeError: the platform did not start (nothing was judged).
    :raises KeyboardInterrupt: Ctrl-C, SIGTERM or SIGHUP; the platform was stopped first
        (unless ``options.keep``).
    """
    soak = Soak(options, echo)
    try:
        with interrupts_raise():
            return soak.run()
    except Exception:
        echo(traceback.format_exc())
        raise
