"""The streaming supervisor: keeps the always-on jobs running (no Airflow import here; the
``streaming_supervisor`` DAG calls these functions).

A job is *running* when the pid recorded in its checkpoint lock (written by the driver after
it took the lock, :mod:`ingest_core.locks`) is a live process whose command line names the
job. Its *heartbeat* is the file its ``StreamingQueryListener`` rewrites on every query
event (:mod:`spark_jobs.streaming_runtime`).

:func:`supervise` decides, per run:

====================================  ====================================================
job disabled by an operator           leave it alone (``action=start`` re-enables it)
job paused by a task (maintenance)    leave it alone until the pause ends (:func:`pause`)
running, heartbeat fresh              healthy: report its last progress
running, no heartbeat yet             starting, within ``startup_grace_s`` of its start
running, heartbeat stale              stuck: stop its process group, then restart
not running, a dependency down        wait: no start, nothing counted against the budget;
                                      says what it waits for and since when
not running                           restart, after an exponential back-off
                                      (``backoff_base_s * 2**(starts in window - 1)``,
                                      at most ``max_backoff_s``)
``crash_loop_restarts`` starts in     crash loop: go on restarting with the capped
window                                back-off, and fail the round's task
                                      (:class:`SupervisorError` with the driver log's
                                      tail) so an operator sees it; the supervisor never
                                      gives up on a job by itself
running ``stable_after_s`` since its  a fresh restart budget: the starts before no
last start, heartbeat fresh           longer count
====================================  ====================================================

This is Kubernetes' restart policy for a crashing container (back-off doubling from 10 s,
capped at 5 minutes, reset after 10 minutes of running without trouble: "Container
restarts", kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle), with the task's
failure as the alert. Before soak run 6 the supervisor refused to restart after
``max_restarts`` starts in an hour until an operator started the job: the soak killed each
always-on driver about six times an hour, and ``payment_alerts`` and ``payment_alerts_rt``
stayed down for the rest of the run although nothing was wrong with them.

The dependency check (``probe``: the Kafka cluster, :func:`ingest_core.topics.
broker_problem`) keeps an outage of the broker from spending the restart budget: a job that
died because the broker is down would die again after each start (~190 s each, while the
Kafka source retries). While the probe fails the job waits and the round says what for;
once it answers again, the starts before the outage no longer count (a fresh budget: the
job failed for the outage, not for itself).

A start launches the job's ``spark-submit`` command in a session of its own (it outlives
the Airflow task) with its output in ``driver.log``, and waits until the driver holds its
checkpoint lock. A second driver can never run on the same checkpoint: the lock refuses it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest_core.catalog import get_catalog
from ingest_core.locks import file_lock, lock_holder
from ingest_core.processes import command_line, stop_group
from ingest_core.runtime_files import RuntimeFiles, read_json, runtime_files, write_json
from ingest_core.settings import PROJECT_ROOT, PlatformSettings, SupervisorSettings, get_settings
from ingest_core.waiting import wait_until

#: Supervisor actions a DAG run can ask for.
ACTIONS = ("supervise", "start", "stop")


class SupervisorError(RuntimeError):
    """A job could not be kept running (repeated failures, or a start that failed); the
    message carries the driver log's tail."""


@dataclass(frozen=True)
class JobStatus:
    """What the supervisor sees of one always-on job.

    :param pid: the driver's pid (from the checkpoint lock) when it runs.
    :param heartbeat_age_s: seconds since the heartbeat was written; None without one.
    :param heartbeat: the heartbeat JSON (see :class:`spark_jobs.streaming_runtime.
        HeartbeatListener`), None without one.
    """

    job: str
    running: bool
    pid: int | None
    disabled: bool
    heartbeat_age_s: float | None
    heartbeat: dict[str, Any] | None
    paused_by: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: state, pid, heartbeat age and each query's last batch."""
        if self.disabled:
            state = "disabled by an operator"
        elif self.paused_by and not self.running:
            state = f"paused by {'; '.join(self.paused_by)}"
        else:
            state = f"running (pid {self.pid})" if self.running else "not running"
        parts = [f"{self.job}: {state}"]
        if self.heartbeat_age_s is not None and self.heartbeat:
            parts.append(
                f"heartbeat {self.heartbeat_age_s:.0f} s ago ({self.heartbeat.get('status')})"
            )
            for name, query in (self.heartbeat.get("queries") or {}).items():
                progress = query.get("last_progress") or {}
                rate = progress.get("processed_rows_per_second") or 0
                parts.append(
                    f"{name}: last batch with data {progress.get('batch_id')} "
                    f"({progress.get('input_rows')} rows, {rate:.0f} rows/s), "
                    f"{query.get('status')}"
                )
        return "; ".join(parts)


def always_on_jobs() -> list[str]:
    """Names of the jobs declared ``mode: always_on`` in ``include/pipeline.yaml``."""
    return [name for name, job in get_catalog().jobs.items() if job.mode == "always_on"]


def _check_job(job: str) -> None:
    if job not in always_on_jobs():
        raise ValueError(f"{job!r} is not an always-on job; always-on jobs: {always_on_jobs()}")


def _alive(pid: int, job: str) -> bool:
    """Whether ``pid`` is a live driver of ``job``: its command line runs the job's module
    (``spark_jobs/<job>.py`` under spark-submit, ``spark_jobs.<job>`` under ``python -m``).
    A zombie has an empty command line; a reused pid names another program; an operator's
    ``ingestctl checkpoints restore <job>`` or an Airflow task names the job, not its module.
    """
    import re

    cmdline = command_line(pid)
    # Whole module names: payment_alerts is not payment_alerts_rt.
    module = re.compile(rf"(spark_jobs/{job}\.py|spark_jobs\.{job})(\s|$)")
    return cmdline is not None and module.search(cmdline) is not None


def driver_pid(job: str, settings: PlatformSettings | None = None) -> int | None:
    """Pid of the live driver holding ``job``'s checkpoint lock, or None.

    Whether the lock is held is asked of the kernel (:func:`ingest_core.locks.lock_holder`),
    never read from the file alone: a repair or a finished run that held the lock before
    leaves no driver behind, and a live process whose command line merely names the job
    (an Airflow task, an editor) is not the driver. The holder must also be a process whose
    command line names the job (a ``recover`` run by an operator holds the lock briefly and
    is not a driver either).
    """
    checkpoint = get_catalog().job(job).checkpoint(settings or get_settings())
    pid = lock_holder(checkpoint)
    return pid if pid and _alive(pid, job) else None


def status(
    job: str, settings: PlatformSettings | None = None, now: float | None = None
) -> JobStatus:
    """Inspect ``job`` (see :class:`JobStatus`). :raises ValueError: not an always-on job."""
    _check_job(job)
    settings = settings or get_settings()
    files = runtime_files(job, settings)
    pid = driver_pid(job, settings)
    beat = read_json(files.heartbeat)
    age = None
    if beat and isinstance(beat.get("updated_at_epoch_s"), float | int):
        age = max(0.0, (now or time.time()) - float(beat["updated_at_epoch_s"]))
    disabled = files.disabled.exists()
    return JobStatus(job, pid is not None, pid, disabled, age, beat, paused_by(files))


def paused_by(files: RuntimeFiles) -> tuple[str, ...]:
    """Who holds a pause of the job (:func:`pause`), oldest first. A pause whose task is
    no longer alive (killed before it could resume the job) is removed and not counted.

    :returns: each pause's ``by`` text.
    """
    from ingest_core.processes import is_alive

    # Read once, ordered by the time each pause recorded: a pause may end (its file go)
    # while this runs unlocked (the Streaming page), and then is simply not there.
    pauses = [(path, read_json(path)) for path in files.pauses.glob("*.json")]
    holders = []
    for path, record in sorted(
        ((p, r) for p, r in pauses if r is not None), key=lambda pause: float(pause[1].get("at", 0))
    ):
        if not is_alive(int(record.get("pid", 0))):
            path.unlink(missing_ok=True)
            continue
        holders.append(str(record.get("by")))
    return tuple(holders)


def pause(job: str, by: str, settings: PlatformSettings | None = None) -> tuple[Path, str]:
    """Stop ``job`` gracefully and keep the supervisor from starting it until
    :func:`resume`, without disabling it: an operator's stop (``disabled``) during the pause
    stays in force after it. Several pauses may be held at once; the job starts again once
    all have ended. A pause whose process died (``os.getpid()`` of the caller) ends by
    itself.

    :param by: who pauses and why, shown by the supervisor and ``status``
        (e.g. ``"table_maintenance of bronze_events"``).
    :returns: the pause's token (for :func:`resume`) and the stop's outcome, one line.
    :raises ValueError: ``job`` is not an always-on job.
    """
    import uuid

    settings = settings or get_settings()
    _check_job(job)
    files = runtime_files(job, settings)
    with _acting_on(job, settings):
        files.pauses.mkdir(exist_ok=True)
        token = files.pauses / f"{uuid.uuid4().hex}.json"
        write_json(token, {"by": by, "pid": os.getpid(), "at": time.time()})
        return token, _stop(job, settings, disable=False)


def resume(job: str, token: Path, settings: PlatformSettings | None = None) -> None:
    """End the pause ``token`` of :func:`pause`; the next supervisor round starts the job
    unless another pause or an operator's stop holds it, with a fresh restart budget
    (``budget_from``): a job stopped on purpose did not fail (soak run 5: four maintenance
    pauses in an hour spent ``payment_alerts``' five starts, and the supervisor gave up on
    it; re-enabling it used to forget the starts, which this keeps for the record)."""
    settings = settings or get_settings()
    files = runtime_files(job, settings)
    with _acting_on(job, settings):
        Path(token).unlink(missing_ok=True)
        record = _record(files)
        record["budget_from"] = time.time()
        write_json(files.supervisor, record)


def _record(files: RuntimeFiles) -> dict[str, Any]:
    """The job's supervisor record; what a hand edit or a foreign write left unreadable
    (``starts`` not a list of numbers, ``budget_from`` not a number) is dropped, never
    raised on every round (a job never restarted again)."""
    record = read_json(files.supervisor)
    if not isinstance(record, dict):
        return {"starts": []}
    starts = record.get("starts")
    record["starts"] = [
        float(t) for t in (starts if isinstance(starts, list) else []) if _number(t)
    ]
    if not _number(record.get("budget_from", 0)):
        record.pop("budget_from")
    return record


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def log_tail(files: RuntimeFiles, lines: int = 30) -> str:
    """The last ``lines`` lines of the driver log ("" when there is none)."""
    try:
        return "\n".join(files.driver_log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def start(
    job: str,
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    settings: PlatformSettings | None = None,
    wait_s: float | None = None,
) -> int:
    """Launch ``command`` (the job's spark-submit) detached and wait for its driver.

    :param env: extra environment for the driver.
    :param wait_s: how long to wait for the driver to hold its lock (default: the larger of
        ``supervisor.startup_grace_s`` and 60 s: a JVM takes seconds to start).
    :returns: the driver's pid.
    :raises SupervisorError: the job already runs, or the process exited or did not take
        the lock in time (the message has the log's tail; the process group is stopped).
    """
    settings = settings or get_settings()
    files = runtime_files(job, settings)
    running = driver_pid(job, settings)
    if running is not None:
        raise SupervisorError(f"{job} already runs (pid {running}); one driver per checkpoint")
    if files.driver_log.exists():
        files.driver_log.replace(files.driver_log.with_suffix(".log.1"))
    record = _record(files)
    with files.driver_log.open("ab") as log:
        process = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=PROJECT_ROOT,
            env={**os.environ, **(env or {})},
        )
    record["starts"] = [*record.get("starts", []), time.time()]
    record["process_group"] = process.pid
    write_json(files.supervisor, record)
    wait_s = wait_s or max(60.0, settings.supervisor.startup_grace_s)

    def started() -> int:  # the driver's pid, 0 while it has not taken its lock
        pid = driver_pid(job, settings)
        if pid is None and process.poll() is not None:
            raise SupervisorError(
                f"{job} exited with code {process.returncode} while "
                f"starting; {files.driver_log}:\n{log_tail(files)}"
            )
        return pid or 0

    with contextlib.suppress(TimeoutError):
        return wait_until(started, wait_s, 0.5, what=f"{job}'s driver to take its lock")
    _terminate(process.pid, None, job)
    raise SupervisorError(
        f"{job} did not take its checkpoint lock within "
        f"{wait_s:.0f} s; stopped it; "
        f"{files.driver_log}:\n{log_tail(files)}"
    )


def _terminate(process_group: int | None, pid: int | None, job: str, grace_s: float = 20) -> None:
    """SIGTERM the job's process group (and its driver), SIGKILL what outlives ``grace_s``
    seconds (:func:`ingest_core.processes.stop_group`)."""
    stop_group(process_group, pid, grace_s, alive=lambda p: _alive(p, job))


@contextmanager
def _acting_on(job: str, settings: PlatformSettings) -> Iterator[None]:
    """One supervisor action per job at a time (two runs at once would both start a driver
    and both rewrite the job's records). Waits for the other action to finish."""
    files = runtime_files(job, settings)
    with file_lock(files.folder / "supervisor.lock"):
        yield


def supervise(
    job: str,
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    settings: PlatformSettings | None = None,
    echo: Callable[[str], None] = print,
    probe: Callable[[], str | None] | None = None,
) -> str:
    """One supervision round for ``job`` (see the module docstring's table).

    :param command: the job's spark-submit command, used when it must (re)start.
    :param probe: asked before a (re)start: None when the job's dependencies answer, else
        what is down, one line (``StreamingJobHook`` passes the Kafka cluster's probe).
    :returns: what was done, one line (also passed to ``echo`` with the job's status).
    :raises SupervisorError: the job is crash-looping (``crash_loop_restarts`` starts in
        ``failure_window_s``; it is restarted all the same once its back-off has passed),
        or a start failed.
    :raises ValueError: ``job`` is not an always-on job.
    """
    settings = settings or get_settings()
    with _acting_on(job, settings):
        return _supervise(job, command, env, settings, echo, probe)


def _waiting_for(
    job: str,
    probe: Callable[[], str | None],
    files: RuntimeFiles,
    record: dict[str, Any],
    now: float,
    echo: Callable[[str], None],
) -> str | None:
    """Ask ``probe``; record an outage (its start) or its end (a fresh restart budget from
    then: ``budget_from``). :returns: what the job waits for, or None to go on."""
    problem = probe()
    since = record.get("outage_since")
    if problem:
        if since is None:
            record["outage_since"] = since = now
            write_json(files.supervisor, record)
        return f"waiting for {problem}, down for {now - float(since):.0f} s"
    if since is not None:
        echo(
            f"{job}: its dependencies answer again after {now - float(since):.0f} s: "
            "restarting with a fresh restart budget"
        )
        record.pop("outage_since")
        record["budget_from"] = now
        write_json(files.supervisor, record)
    return None


def _supervise(
    job: str,
    command: Sequence[str],
    env: Mapping[str, str] | None,
    settings: PlatformSettings,
    echo: Callable[[str], None],
    probe: Callable[[], str | None] | None,
) -> str:
    limits = settings.supervisor
    now = time.time()
    holder = lock_holder(get_catalog().job(job).checkpoint(settings))
    if holder and not _alive(holder, job):
        # An operator's restore, recovery or reset holds the lock: neither kill it (a restore
        # cut off half-way leaves a half-copied checkpoint) nor start beside it.
        what = (command_line(holder) or "?")[:80]
        return (
            f"{job}: checkpoint lock held by pid {holder} ({what}), not a driver (an "
            "operator's restore or recovery?): left alone this round"
        )
    current = status(job, settings, now)
    echo(current.describe())
    files = runtime_files(job, settings)
    if current.disabled:
        return f"{job}: disabled by an operator; trigger streaming_supervisor with action=start"
    if current.paused_by and not current.running:
        return f"{job}: paused by {'; '.join(current.paused_by)}: starts once that ends"
    record = _record(files)
    starts = sorted(record["starts"])
    since_start = now - starts[-1] if starts else None
    if since_start is not None and since_start < 0:
        # The wall clock stepped back (NTP) past the last start: how long ago it was is
        # unknown, so neither a back-off nor a start-up grace holds (a hung driver must not
        # look like one still starting until the clock catches up).
        since_start = float("inf")
    reason = "not running"
    if current.running:
        budget_from = record.get("budget_from")
        last_start = starts[-1] if starts else None
        verdict, reason = _judge_running(
            job, current.heartbeat_age_s, record, since_start, last_start, now, limits
        )
        if verdict is not None:
            if record.get("budget_from") != budget_from:
                write_json(files.supervisor, record)
            return verdict
        echo(f"{job}: stuck ({reason}): stopping pid {current.pid}")
        _terminate(record.get("process_group"), current.pid, job)
    if probe is not None:
        waiting = _waiting_for(job, probe, files, record, now, echo)
        if waiting:
            return f"{job}: down ({reason}); {waiting}; not started"
    budget_from = float(record.get("budget_from", 0))
    recent = [t for t in starts if now - t < limits.failure_window_s and t >= budget_from]
    crash_loop = len(recent) >= limits.crash_loop_restarts
    looping = (
        f"{job} is crash-looping: down ({reason}) after {len(recent)} starts in the last "
        f"{limits.failure_window_s:.0f} s"
    )
    if recent and since_start is not None:
        backoff = min(limits.backoff_base_s * 2 ** (len(recent) - 1), limits.max_backoff_s)
        if since_start < backoff:
            waiting = f"back-off: next start in {backoff - since_start:.0f} s"
            if crash_loop:
                raise SupervisorError(f"{looping}; {waiting}.{_look(files)}")
            return f"{job}: down ({reason}); {waiting}"
    tail = _look(files) if crash_loop else ""  # before the start rotates the log
    from ingest_core.recovery import recover

    for action in recover(job, settings):  # crash leftovers: repaired, audited
        echo(f"{job}: checkpoint recovery: {action}")
    pid = start(job, command, env=env, settings=settings)
    if crash_loop:
        raise SupervisorError(f"{looping}; started it again (pid {pid}).{tail}")
    return f"{job}: started (pid {pid}) because {reason}"


def _judge_running(
    job: str,
    age: float | None,
    record: dict[str, Any],
    since_start: float | None,
    last_start: float | None,
    now: float,
    limits: SupervisorSettings,
) -> tuple[str | None, str]:
    """A running driver's verdict from its heartbeat's age (s) and the time since its last
    start (s; the start itself at ``last_start``, epoch s): ``(message, "")`` when healthy
    (``record``'s restart budget reset once it has run ``stable_after_s``; the caller saves
    ``record``) or still in its start-up grace, else ``(None, why it is stuck)``."""
    fresh_since_start = age is not None and since_start is not None and age <= since_start
    if (
        age is not None
        and age <= limits.heartbeat_timeout_s
        and (fresh_since_start or since_start is None)
    ):
        if (
            since_start is not None
            and last_start is not None
            and since_start >= limits.stable_after_s
            and float(record.get("budget_from", 0)) < last_start
        ):
            record["budget_from"] = now  # stable: the starts before no longer count
        return f"{job}: healthy", ""
    if since_start is not None and since_start < limits.startup_grace_s:
        return f"{job}: starting ({since_start:.0f} s ago), no heartbeat yet", ""
    if age is None:
        return None, "no heartbeat"
    return None, f"heartbeat {age:.0f} s old (limit {limits.heartbeat_timeout_s:.0f} s)"


def _look(files: RuntimeFiles) -> str:
    """What an operator of a crash-looping job is asked to do, with the log's tail."""
    return (
        f" The supervisor goes on restarting it with back-off; look at {files.driver_log} "
        "and fix the cause (trigger streaming_supervisor with action=stop to keep it down "
        f"meanwhile). Log tail:\n{log_tail(files)}"
    )


def stop(job: str, *, settings: PlatformSettings | None = None, disable: bool = True) -> str:
    """Stop ``job`` gracefully (between micro-batches) and, by default, disable it so the
    supervisor does not restart it.

    Writes the stop request the driver polls for; waits ``supervisor.stop_timeout_s`` (plus
    a margin) for the driver to exit, then terminates its process group.

    :returns: what happened, one line.
    """
    settings = settings or get_settings()
    _check_job(job)
    with _acting_on(job, settings):
        return _stop(job, settings, disable)


def _stop(job: str, settings: PlatformSettings, disable: bool) -> str:
    files = runtime_files(job, settings)
    if disable:
        files.disabled.write_text(f"{time.time()}\n")
    pid = driver_pid(job, settings)
    if pid is None:
        return f"{job}: not running" + ("; disabled" if disable else "")
    files.stop_request.touch()
    with contextlib.suppress(TimeoutError):
        wait_until(
            lambda: driver_pid(job, settings) is None,
            settings.supervisor.stop_timeout_s + 30,
            1,
            what=f"{job} to stop",
        )
    if driver_pid(job, settings) is None:
        return f"{job}: stopped gracefully (pid {pid})" + ("; disabled" if disable else "")
    _terminate(_record(files).get("process_group"), pid, job)
    return f"{job}: did not stop in time; terminated (pid {pid})"


def enable(job: str, settings: PlatformSettings | None = None) -> None:
    """Re-enable a job an operator stopped, and forget its restart history."""
    _check_job(job)
    files = runtime_files(job, settings)
    files.disabled.unlink(missing_ok=True)
    record = _record(files)
    record["starts"] = []
    write_json(files.supervisor, record)
