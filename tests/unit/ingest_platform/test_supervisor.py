"""The streaming supervisor's decisions with real processes (a stand-in driver that holds
the checkpoint lock and writes heartbeats like a Spark driver would; no Spark here)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from ingest_core.runtime_files import runtime_files
from ingest_core.settings import get_settings
from ingest_platform import supervisor

pytestmark = pytest.mark.unit

#: Holds bronze_ingest's checkpoint lock, beats every 0.2 s (unless told to hang), and exits
#: when the stop request appears. Its command line names the job's module, as a driver's does.
FAKE_DRIVER = """
import sys, time, json, os
from pathlib import Path
from ingest_core.catalog import get_catalog
from ingest_core.locks import checkpoint_lock
from ingest_core.runtime_files import runtime_files, write_json
job, mode = sys.argv[1].rsplit(".", 1)[-1], sys.argv[2]
files = runtime_files(job)
if mode == "crash":
    print("driver failed: boom", flush=True)
    sys.exit(3)
with checkpoint_lock(get_catalog().job(job).checkpoint()):
    while not files.stop_request.exists():
        if mode != "hang":
            write_json(files.heartbeat, {"status": "running", "updated_at_epoch_s": time.time()})
        time.sleep(0.2)
    files.stop_request.unlink()
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    monkeypatch.setenv("INGEST_SUPERVISOR__BACKOFF_BASE_S", "0")
    monkeypatch.setenv("INGEST_SUPERVISOR__STARTUP_GRACE_S", "20")
    monkeypatch.setenv("INGEST_SUPERVISOR__STOP_TIMEOUT_S", "5")
    get_settings.cache_clear()
    yield tmp_path
    for job in supervisor.always_on_jobs():
        pid = supervisor.driver_pid(job)
        if pid:
            os.kill(pid, signal.SIGKILL)
    get_settings.cache_clear()


def command(mode: str = "ok") -> list[str]:
    return [sys.executable, "-c", FAKE_DRIVER, "spark_jobs.bronze_ingest", mode]


def test_starts_a_stopped_job_and_reports_healthy(home: Path) -> None:
    assert supervisor.status("bronze_ingest").running is False
    outcome = supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)
    assert outcome.startswith("bronze_ingest: started (pid ")
    time.sleep(0.5)
    assert supervisor.supervise("bronze_ingest", command(), echo=lambda _: None) == (
        "bronze_ingest: healthy"
    )


def test_never_two_drivers_on_one_checkpoint(home: Path) -> None:
    supervisor.start("bronze_ingest", command())
    with pytest.raises(supervisor.SupervisorError, match="already runs"):
        supervisor.start("bronze_ingest", command())


def test_restarts_after_kill_9(home: Path) -> None:
    supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)
    first = supervisor.driver_pid("bronze_ingest")
    assert first is not None
    os.kill(first, signal.SIGKILL)
    time.sleep(0.5)
    outcome = supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)
    assert "because not running" in outcome
    second = supervisor.driver_pid("bronze_ingest")
    assert second is not None
    assert second != first


def test_a_stale_heartbeat_gets_the_driver_replaced(home: Path, monkeypatch) -> None:
    monkeypatch.setenv("INGEST_SUPERVISOR__HEARTBEAT_TIMEOUT_S", "1")
    monkeypatch.setenv("INGEST_SUPERVISOR__STARTUP_GRACE_S", "1")
    get_settings.cache_clear()
    supervisor.start("bronze_ingest", command("hang"), wait_s=20)
    stuck = supervisor.driver_pid("bronze_ingest")
    time.sleep(1.5)
    outcome = supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)
    assert "no heartbeat" in outcome
    assert supervisor.driver_pid("bronze_ingest") not in (None, stuck)


def _age_starts(seconds: float) -> None:
    """Move bronze_ingest's recorded starts ``seconds`` into the past (time passing)."""
    from ingest_core.runtime_files import read_json, write_json

    files = runtime_files("bronze_ingest")
    record = read_json(files.supervisor)
    record["starts"] = [t - seconds for t in record["starts"]]
    write_json(files.supervisor, record)


def test_a_crash_loop_fails_each_round_but_never_stops_restarting(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Soak run 6: after five starts in an hour the supervisor refused to restart
    payment_alerts_rt and payment_alerts until an operator started them, and they stayed
    down for the rest of the run. A crash loop now backs off (capped) and restarts, and the
    round's task fails so an operator sees it."""
    monkeypatch.setenv("INGEST_SUPERVISOR__CRASH_LOOP_RESTARTS", "2")
    monkeypatch.setenv("INGEST_SUPERVISOR__BACKOFF_BASE_S", "60")
    monkeypatch.setenv("INGEST_SUPERVISOR__MAX_BACKOFF_S", "90")
    get_settings.cache_clear()
    quiet = lambda _: None  # noqa: E731
    with pytest.raises(supervisor.SupervisorError, match="exited with code 3"):
        supervisor.supervise("bronze_ingest", command("crash"), echo=quiet)
    # One start in the window: the next waits 60 s instead of restarting at once, quietly.
    assert "back-off: next start in" in supervisor.supervise("bronze_ingest", command(), echo=quiet)
    _age_starts(61)
    with pytest.raises(supervisor.SupervisorError, match="exited with code 3"):
        supervisor.supervise("bronze_ingest", command("crash"), echo=quiet)
    # Two starts: a crash loop. The back-off would be 120 s; it is capped at 90 s, and the
    # round fails (red in Airflow) with what to do and the log's tail.
    with pytest.raises(
        supervisor.SupervisorError,
        match=r"crash-looping: .* after 2 starts .* next start in (8\d|90) s",
    ) as waiting:
        supervisor.supervise("bronze_ingest", command(), echo=quiet)
    assert "action=stop" in str(waiting.value)
    assert "driver failed: boom" in str(waiting.value)  # the log's tail
    assert supervisor.driver_pid("bronze_ingest") is None
    _age_starts(91)
    with pytest.raises(supervisor.SupervisorError, match=r"started it again \(pid \d+\)"):
        supervisor.supervise("bronze_ingest", command(), echo=quiet)
    assert supervisor.driver_pid("bronze_ingest") is not None  # restarted all the same
    time.sleep(0.5)
    assert supervisor.supervise("bronze_ingest", command(), echo=quiet) == "bronze_ingest: healthy"


@pytest.mark.parametrize(
    "record",
    [
        {"starts": ["abc", None]},
        {"starts": 5},
        {"starts": None, "budget_from": "x"},
        {"starts": [True]},
    ],
)
def test_an_unreadable_record_is_dropped_not_raised_every_round(
    home: Path, record: dict[str, object]
) -> None:
    """Found by a helper trying to break it: garbage in supervisor.json raised on every
    round, and the job was never restarted."""
    from ingest_core.runtime_files import write_json

    files = runtime_files("bronze_ingest")
    files.folder.mkdir(parents=True, exist_ok=True)
    write_json(files.supervisor, record)
    assert "started" in supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)


def test_a_clock_stepped_back_neither_stretches_the_back_off_nor_hides_a_hang(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INGEST_SUPERVISOR__BACKOFF_BASE_S", "60")
    get_settings.cache_clear()
    with pytest.raises(supervisor.SupervisorError, match="exited with code 3"):
        supervisor.supervise("bronze_ingest", command("crash"), echo=lambda _: None)
    _age_starts(-3600)  # the start now lies an hour ahead of the clock
    outcome = supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)
    assert outcome.startswith("bronze_ingest: started (pid ")  # no 3,660 s back-off


def test_a_stable_run_earns_a_fresh_budget(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kubernetes' rule: a container that ran 10 minutes without trouble has its back-off
    reset. Here 1 s: a job that runs ``stable_after_s`` (and one supervisor round more)
    between kills never counts as crash-looping, however many kills."""
    monkeypatch.setenv("INGEST_SUPERVISOR__CRASH_LOOP_RESTARTS", "2")
    monkeypatch.setenv("INGEST_SUPERVISOR__STABLE_AFTER_S", "1")
    get_settings.cache_clear()

    def round_() -> str:
        return supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)

    def kill() -> None:
        pid = supervisor.driver_pid("bronze_ingest")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)

    for _ in range(3):
        assert "started" in round_()
        time.sleep(1.2)
        assert round_() == "bronze_ingest: healthy"  # ran 1 s: the starts before forgotten
        kill()
    assert "started" in round_()  # a fourth start, not a crash loop


def test_an_outage_longer_than_the_budget_waits_then_resumes(home: Path, monkeypatch) -> None:
    """A dependency down (the broker, here a probe that says so) makes the supervisor wait
    instead of spending its restart budget; once it answers, the job starts again with a
    fresh budget, even though it crashed ``crash_loop_restarts`` times as the outage began;
    while it waits, its rounds say what for and do not fail."""
    monkeypatch.setenv("INGEST_SUPERVISOR__CRASH_LOOP_RESTARTS", "2")
    get_settings.cache_clear()
    quiet = lambda _: None  # noqa: E731
    for _ in range(2):  # the job dies while the broker goes away (the probe not asked yet)
        with pytest.raises(supervisor.SupervisorError, match="exited with code 3"):
            supervisor.supervise("bronze_ingest", command("crash"), echo=quiet)
    down = lambda: "Kafka at 127.0.0.1:9 (NoBrokersAvailable)"  # noqa: E731
    for _ in range(3):
        outcome = supervisor.supervise("bronze_ingest", command(), echo=quiet, probe=down)
        assert "waiting for Kafka at 127.0.0.1:9" in outcome
        assert "not started" in outcome
        assert supervisor.driver_pid("bronze_ingest") is None
    said: list[str] = []
    outcome = supervisor.supervise("bronze_ingest", command(), echo=said.append, probe=lambda: None)
    assert outcome.startswith("bronze_ingest: started (pid ")
    assert any("answer again" in line for line in said)
    assert supervisor.driver_pid("bronze_ingest") is not None


def test_the_broker_probe_names_an_unreachable_cluster(home: Path, monkeypatch) -> None:
    from ingest_core.topics import broker_problem
    from tests.conftest import free_ports

    (port,) = free_ports(1)  # nothing listens there
    monkeypatch.setenv("INGEST_KAFKA__PORT", str(port))
    get_settings.cache_clear()
    threads = threading.active_count()
    for _ in range(3):  # the supervisor asks every round while the broker is down
        problem = broker_problem(timeout_s=1)
        assert problem is not None
        assert f"Kafka at 127.0.0.1:{port}" in problem
    assert threading.active_count() == threads  # no kafka-python IO thread left behind


def test_graceful_stop_disables_until_started_again(home: Path) -> None:
    supervisor.start("bronze_ingest", command())
    assert "stopped gracefully" in supervisor.stop("bronze_ingest")
    assert supervisor.driver_pid("bronze_ingest") is None
    assert "disabled" in supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)
    assert supervisor.driver_pid("bronze_ingest") is None
    supervisor.enable("bronze_ingest")
    assert "started" in supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)
    assert not runtime_files("bronze_ingest").disabled.exists()


def test_an_operators_stop_during_a_pause_outlives_the_pause(home: Path) -> None:
    """Soak run 4: table maintenance paused bronze_ingest, an operator stopped it meanwhile
    (to restore its checkpoint), and the maintenance's end re-enabled it: the supervisor
    started it and the restore was refused. A pause is not a stop."""
    from ingest_core.catalog import get_catalog
    from ingest_platform.maintenance import always_on_writers_paused
    from ingest_platform.streaming_status import job_view

    def round_() -> str:
        return supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)

    supervisor.start("bronze_ingest", command())
    policy = get_catalog().maintenance
    with always_on_writers_paused("bronze_events", policy, dry_run=False):
        assert supervisor.driver_pid("bronze_ingest") is None
        assert "paused by table_maintenance of bronze_events" in round_()
        view = job_view("bronze_ingest", get_settings(), time.time())  # the Streaming page's
        assert view["paused_by"] == ["table_maintenance of bronze_events"]
        assert supervisor.driver_pid("bronze_ingest") is None
        supervisor.stop("bronze_ingest")  # the operator's
    assert "disabled by an operator" in round_()
    assert supervisor.driver_pid("bronze_ingest") is None
    assert list(runtime_files("bronze_ingest").pauses.glob("*")) == []

    supervisor.enable("bronze_ingest")
    with always_on_writers_paused("bronze_events", policy, dry_run=False):
        assert supervisor.driver_pid("bronze_ingest") is None
    assert "started" in round_()


def test_a_pause_does_not_spend_the_restart_budget(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Soak run 5: maintenance paused payment_alerts four times in an hour; each restart
    counted as a failure and the supervisor gave up on a healthy job."""
    monkeypatch.setenv("INGEST_SUPERVISOR__CRASH_LOOP_RESTARTS", "2")
    get_settings.cache_clear()

    def round_() -> str:
        return supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)

    for _ in range(3):
        token, _outcome = supervisor.pause("bronze_ingest", "table_maintenance of bronze_events")
        supervisor.resume("bronze_ingest", token)
        assert "started" in round_()

    def crash() -> None:
        pid = supervisor.driver_pid("bronze_ingest")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)

    # A crash still counts: the budget is spent by failures, not by pauses.
    crash()
    assert "started" in round_()
    crash()
    with pytest.raises(supervisor.SupervisorError, match="after 2 starts"):
        round_()


def test_a_pause_whose_task_died_ends_by_itself(home: Path) -> None:
    import subprocess

    from ingest_core.runtime_files import write_json

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pauses = runtime_files("bronze_ingest").pauses
    pauses.mkdir()
    write_json(pauses / "killed.json", {"by": "a killed maintenance", "pid": int(dead.stdout)})
    assert supervisor.status("bronze_ingest").paused_by == ()
    assert not (pauses / "killed.json").exists()
    assert "started" in supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)


def test_refuses_a_job_that_is_not_always_on(home: Path) -> None:
    with pytest.raises(ValueError, match="not an always-on job"):
        supervisor.status("silver_refine")


def test_two_supervisor_runs_at_once_start_one_driver(home: Path) -> None:
    import threading

    outcomes: list[str] = []

    def run() -> None:
        outcomes.append(supervisor.supervise("bronze_ingest", command(), echo=lambda _: None))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum("started" in outcome for outcome in outcomes) == 1
    import json

    record = json.loads(runtime_files("bronze_ingest").supervisor.read_text())
    assert len(record["starts"]) == 1


def test_a_repair_that_held_the_lock_is_not_taken_for_a_running_driver(home: Path) -> None:
    """Issue #15: after the supervisor's own repair (which takes the checkpoint lock in the
    supervising process, whose command line names the job), the next run said 'already
    runs (pid N)' while no driver ran. Only the kernel's lock holder counts."""
    import subprocess

    from ingest_core.catalog import get_catalog
    from ingest_core.locks import checkpoint_lock, lock_path

    checkpoint = get_catalog().job("bronze_ingest").checkpoint()
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "bronze_ingest"]
    )
    try:
        with checkpoint_lock(checkpoint):
            pass  # a repair: held, then released
        lock_path(checkpoint).write_text(f"{bystander.pid}\n")  # a stale pid of a live process
        assert supervisor.driver_pid("bronze_ingest") is None
        outcome = supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)
        assert "started" in outcome
        assert supervisor.driver_pid("bronze_ingest") not in (None, bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()


def test_an_operators_restore_holding_the_lock_is_neither_killed_nor_doubled(home: Path) -> None:
    """Found by the breaker: a process running `ingestctl checkpoints restore bronze_ingest`
    holds the lock; the supervisor took it for a stuck driver and SIGTERMed it mid-restore."""
    import subprocess

    from ingest_core.catalog import get_catalog

    checkpoint = get_catalog().job("bronze_ingest").checkpoint()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from ingest_core.locks import checkpoint_lock\n"
            f"with checkpoint_lock({str(checkpoint)!r}):\n"
            "    print('held', flush=True); time.sleep(60)",
            "checkpoints",
            "restore",
            "bronze_ingest",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        outcome = supervisor.supervise("bronze_ingest", command(), echo=lambda _: None)
        assert "not a driver" in outcome
        assert "left alone" in outcome
        assert holder.poll() is None  # still running: not killed
        assert not runtime_files("bronze_ingest").supervisor.exists()  # nothing started
    finally:
        holder.kill()
        holder.wait()


def test_a_driver_is_recognised_by_its_whole_module_name(monkeypatch) -> None:
    """payment_alerts is not payment_alerts_rt (a pid recorded for one never passes for the
    other's driver), under spark-submit or python -m."""
    lines = {
        1: "python /x/spark_jobs/payment_alerts_rt.py --trigger real-time=1m",
        2: "python -m spark_jobs.payment_alerts_rt --trigger real-time=1m",
        3: "python /x/spark_jobs/payment_alerts.py --trigger processing-time=5s",
        4: "python -m spark_jobs.payment_alerts",
    }
    monkeypatch.setattr(supervisor, "command_line", lines.get)
    assert [supervisor._alive(pid, "payment_alerts") for pid in lines] == [False, False, True, True]
    assert [supervisor._alive(pid, "payment_alerts_rt") for pid in lines] == [
        True,
        True,
        False,
        False,
    ]
