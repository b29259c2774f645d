"""The embedded Airflow's metadata database without starting anything: which database is
chosen, the password file, the socket URL, settings validation, the health report and the
launcher's restart loop."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import psutil
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from ingest_core.processes import is_alive
from ingest_core.settings import PlatformSettings, get_settings
from ingest_core.waiting import wait_until
from ingestctl.airflow_runtime import (
    AirflowError,
    Standalone,
    airflow_environment,
    airflow_home,
    default_parallelism,
    describe_health,
    metadata_database,
    private_airflow_home,
)
from ingestctl.airflow_standalone import (
    RestartingSubCommand,
    SkippedComponent,
    component_factory,
    skipped_components,
)
from ingestctl.postgres_cluster import (
    EmbeddedPostgres,
    PostgresError,
    ensure_password_file,
    socket_url,
)
from tests.conftest import free_ports

pytestmark = pytest.mark.unit

CONN = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
CONNECT_ARGS = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INGEST_HOME", str(tmp_path / "home"))
    for suffix in ("", "_CMD", "_SECRET"):
        monkeypatch.delenv(f"{CONN}{suffix}", raising=False)
    for name in ("INGEST_AIRFLOW__DATABASE", "INGEST_AIRFLOW__POSTGRES_DIR", CONNECT_ARGS):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    yield tmp_path / "home"
    get_settings.cache_clear()


def _use(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    get_settings.cache_clear()


# -- which database ---------------------------------------------------------------------------
def test_the_embedded_postgres_is_the_default(home: Path) -> None:
    assert metadata_database() == "postgres"
    env = airflow_environment()
    url = urlsplit(env[CONN])
    assert url.scheme == "postgresql+psycopg2"
    assert url.hostname is None  # no TCP host: the Unix socket
    assert parse_qs(url.query)["host"] == [str(home / "postgres" / "run")]
    assert url.path == "/airflow"
    assert urlsplit(airflow_environment(cli=True)[CONN]).path == "/airflow_cli"
    assert url.password == (home / "postgres" / "password").read_text().strip()
    assert CONNECT_ARGS not in env  # the SQLite busy timeout is for SQLite only


def test_sqlite_is_an_opt_out(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    _use(monkeypatch, "INGEST_AIRFLOW__DATABASE", "sqlite")
    assert metadata_database() == "sqlite"
    env = airflow_environment()
    assert CONN not in env  # Airflow's default: airflow.db in AIRFLOW_HOME
    assert env[CONNECT_ARGS] == "ingestctl.airflow_runtime.SQLITE_CONNECT_ARGS"
    assert not (home / "postgres").exists()  # no password generated for nothing


@pytest.mark.parametrize("suffix", ["", "_CMD", "_SECRET"])
@pytest.mark.parametrize("opt_out", [None, "sqlite", "postgres"])
def test_a_users_connection_wins_over_both(
    monkeypatch: pytest.MonkeyPatch, home: Path, suffix: str, opt_out: str | None
) -> None:
    if opt_out:
        _use(monkeypatch, "INGEST_AIRFLOW__DATABASE", opt_out)
    monkeypatch.setenv(f"{CONN}{suffix}", "postgresql://u:p@db.example/airflow")
    assert metadata_database() == "user"
    env = airflow_environment()
    assert CONN not in env
    assert CONNECT_ARGS not in env
    assert not (home / "postgres").exists()


def test_connect_args_exported_by_the_user_win(monkeypatch: pytest.MonkeyPatch) -> None:
    _use(monkeypatch, "INGEST_AIRFLOW__DATABASE", "sqlite")
    monkeypatch.setenv(CONNECT_ARGS, "my.module.ARGS")
    assert CONNECT_ARGS not in airflow_environment()


def test_parallelism_follows_the_machine_on_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    monkeypatch.setattr("os.cpu_count", lambda: 8)
    memory = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory._replace(total=64 * 2**30))
    assert default_parallelism("postgres") == 9
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory._replace(total=4 * 2**30))
    assert default_parallelism("postgres") == 4  # one slot per GiB
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert default_parallelism("postgres") == 3
    assert default_parallelism("sqlite") == 3
    assert airflow_environment()["AIRFLOW__CORE__PARALLELISM"] == "3"
    assert airflow_environment(parallelism=5)["AIRFLOW__CORE__PARALLELISM"] == "5"


# -- settings ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        ("INGEST_AIRFLOW__DATABASE", "mysql", "airflow.database"),
        ("INGEST_AIRFLOW__POSTGRES_START_TIMEOUT_S", "0", "airflow.postgres_start_timeout_s"),
        ("INGEST_AIRFLOW__POSTGRES_START_TIMEOUT_S", "soon", "airflow.postgres_start_timeout_s"),
    ],
)
def test_invalid_settings_are_refused_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, field: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        PlatformSettings()


def test_the_cluster_folder_is_below_ingest_home_unless_absolute(
    monkeypatch: pytest.MonkeyPatch, home: Path, tmp_path: Path
) -> None:
    assert EmbeddedPostgres().folder == home / "postgres"
    _use(monkeypatch, "INGEST_AIRFLOW__POSTGRES_DIR", "db/pg")
    assert EmbeddedPostgres().folder == home / "db" / "pg"
    _use(monkeypatch, "INGEST_AIRFLOW__POSTGRES_DIR", str(tmp_path / "elsewhere"))
    assert EmbeddedPostgres().folder == tmp_path / "elsewhere"


def test_a_socket_path_too_long_is_refused_before_anything_starts(tmp_path: Path) -> None:
    folder = tmp_path / ("x" * 90)
    with pytest.raises(PostgresError, match="INGEST_AIRFLOW__POSTGRES_DIR"):
        EmbeddedPostgres(folder, start_timeout_s=5).up()
    assert not (folder / "data").exists()


# -- password ---------------------------------------------------------------------------------
def test_the_password_file_is_created_private_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "pg" / "password"
    first = ensure_password_file(path)
    assert len(first) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_password_file(path) == first  # stable: the cluster was initialised with it
    assert ensure_password_file(tmp_path / "other" / "password") != first


def test_a_password_file_open_to_others_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text("s3cret\n")
    path.chmod(0o644)
    assert ensure_password_file(path) == "s3cret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_empty_password_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text("\n")
    with pytest.raises(PostgresError, match="empty"):
        ensure_password_file(path)


def test_the_cluster_folder_is_private(home: Path) -> None:
    cluster = EmbeddedPostgres()
    cluster.password()
    assert stat.S_IMODE(cluster.folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(cluster.password_file.stat().st_mode) == 0o600


def test_socket_url_quotes_every_part() -> None:
    url = urlsplit(socket_url("p@ss/w:rd", Path("/tmp/a b/run"), "air flow"))
    assert url.password == "p%40ss%2Fw%3Ard"  # quoted, so SQLAlchemy splits it right
    assert parse_qs(url.query) == {"host": ["/tmp/a b/run"], "port": ["5432"]}
    assert url.path == "/air%20flow"


# -- commands ---------------------------------------------------------------------------------
def test_postgres_status_exits_3_when_stopped(home: Path) -> None:
    from ingestctl.cli import app

    result = CliRunner().invoke(app, ["postgres", "status"])
    assert result.exit_code == 3
    assert "postgres: stopped" in result.output
    down = CliRunner().invoke(app, ["postgres", "down"])
    assert (down.exit_code, down.output.strip()) == (0, "postgres: was not running")


# -- health -----------------------------------------------------------------------------------
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def _health(scheduler: str, beat: datetime | None) -> dict[str, object]:
    return {
        "metadatabase": {"status": "healthy"},
        "scheduler": {
            "status": scheduler,
            "latest_scheduler_heartbeat": beat.isoformat() if beat else None,
        },
        "triggerer": {"status": None, "latest_triggerer_heartbeat": None},
        "dag_processor": {
            "status": "healthy",
            "latest_dag_processor_heartbeat": (NOW - timedelta(seconds=2)).isoformat(),
        },
    }


def test_a_live_scheduler_is_reported_with_its_heartbeat() -> None:
    ok, lines = describe_health(_health("healthy", NOW - timedelta(seconds=4)), NOW)
    assert ok
    assert lines[0] == "metadatabase: healthy"
    beat = (NOW - timedelta(seconds=4)).isoformat()
    assert lines[1] == f"scheduler: healthy, latest heartbeat {beat} (4 s ago)"
    assert lines[2] == "triggerer: unknown, no heartbeat yet"


def test_a_triggerer_left_out_is_reported_as_not_started() -> None:
    ok, lines = describe_health(
        _health("healthy", NOW - timedelta(seconds=4)), NOW, {"triggerer": "settings say so"}
    )
    assert ok
    assert lines[2] == "triggerer: not started (settings say so)"
    assert lines[3].startswith("dag_processor: healthy, latest heartbeat")


def test_a_dead_scheduler_is_unhealthy_with_the_age_of_its_last_heartbeat() -> None:
    ok, lines = describe_health(_health("unhealthy", NOW - timedelta(minutes=5)), NOW)
    assert not ok
    assert "scheduler: unhealthy" in lines[1]
    assert "(300 s ago)" in lines[1]
    assert describe_health(None, NOW) == (False, ["airflow api: not answering"])


# -- the launcher's restart loop --------------------------------------------------------------
class _Parent:
    def __init__(self) -> None:
        self.output_queue: deque[tuple[str, bytes]] = deque()


def _python_component(
    parent: _Parent, name: str, code: str, **options: Any
) -> RestartingSubCommand:
    """A component whose process is ``python -c <code>``, started."""
    component = RestartingSubCommand(
        parent,
        name,
        [code],
        env={},
        launcher=lambda command: [sys.executable, "-c", *command],
        **options,
    )
    component.start()
    return component


def test_a_component_that_exits_is_started_again_until_stopped() -> None:
    parent = _Parent()
    component = _python_component(parent, "dag-processor", "print('beat')", backoff_s=0.05)
    deadline = time.monotonic() + 30
    while component.restarts < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    component.stop()
    component.join(timeout=10)
    assert not component.is_alive()
    assert component.restarts >= 2
    lines = [(name, line.decode().strip()) for name, line in parent.output_queue]
    assert ("dag-processor", "beat") in lines
    assert ("standalone", "dag-processor exited with code 0; restarting it in 0 s") in lines


def test_a_component_is_restarted_even_when_what_it_left_behind_holds_its_output() -> None:
    """A scheduler killed with SIGKILL leaves its log server and executor workers, which hold
    its output pipe and log port: it was never restarted (the loop waited for the end of its
    output) and its log port stayed taken. Here the component leaves a sleeper behind."""
    parent = _Parent()
    leave_a_child = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "print('child', child.pid, flush=True)\n"
    )
    component = _python_component(parent, "scheduler", leave_a_child, backoff_s=0.05)
    try:
        wait_until(lambda: component.restarts >= 2, 30, 0.05, what="two restarts")
    finally:
        component.stop()
        component.join(timeout=30)
    assert not component.is_alive()
    lines = [line.decode().split() for name, line in parent.output_queue if name == "scheduler"]
    children = [int(words[1]) for words in lines if words[:1] == ["child"]]
    assert len(children) >= 2, parent.output_queue
    assert not any(is_alive(pid) for pid in children)  # none left behind
    said = [line.decode() for name, line in parent.output_queue if name == "standalone"]
    assert "scheduler: stopping 1 process(es) it left behind" in said


def test_a_stop_while_a_component_restarts_leaves_nothing_running() -> None:
    for _ in range(20):  # stop() at any moment of the restart loop
        parent = _Parent()
        component = _python_component(
            parent, "dag-processor", "import time; time.sleep(0.01)", backoff_s=0.001
        )
        time.sleep(0.05)
        component.stop()
        component.join(timeout=30)
        assert not component.is_alive()
        assert component.process is None or component.process.poll() is not None


def test_stopping_during_the_pause_restarts_nothing() -> None:
    parent = _Parent()
    component = _python_component(parent, "dag-processor", "pass", backoff_s=30)
    deadline = time.monotonic() + 30
    while not parent.output_queue and time.monotonic() < deadline:
        time.sleep(0.05)
    stopper = threading.Timer(0.1, component.stop)
    stopper.start()
    component.join(timeout=10)
    assert not component.is_alive()  # woken at once, not after 30 s
    assert component.restarts == 0


def test_the_scheduler_starts_once_the_api_server_answers() -> None:
    """Its tasks report to the API server from their first second: one started before it
    listened got "Connection refused" and failed its run (a demo restarted after an
    interrupted one)."""
    parent = _Parent()
    with socket.socket() as probe:  # a free port, nothing listening on it yet
        probe.bind(("127.0.0.1", 0))
        address = probe.getsockname()
    component = _python_component(
        parent,
        "scheduler",
        "print('beat', flush=True); import time; time.sleep(30)",
        wait_for=address,
    )
    try:
        time.sleep(1.5)
        assert component.process is None  # still waiting
        assert not parent.output_queue
        with socket.create_server(address):
            deadline = time.monotonic() + 30
            while not parent.output_queue and time.monotonic() < deadline:
                time.sleep(0.05)
            assert ("scheduler", b"beat\n") in parent.output_queue
    finally:
        component.stop()
        component.join(timeout=10)
    assert not component.is_alive()
    # Only the scheduler waits, and only for the API server's own address.
    make = component_factory({}, api=("127.0.0.1", 8081))
    assert make(parent, "scheduler", ["scheduler"], {}).wait_for == ("127.0.0.1", 8081)
    assert make(parent, "dag-processor", ["dag-processor"], {}).wait_for is None


def test_the_standalone_that_stays_imports_nothing_of_airflow() -> None:
    """Airflow's set-up runs in a child that exits (``prepare``); the long-lived process
    held ~180 MB of Airflow's imports only to restart components and forward their output."""
    code = (
        "import sys\n"
        "import ingestctl.airflow_standalone as s\n"
        "s.component_factory({'triggerer': 'off'}, api=('127.0.0.1', 1))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'airflow', 'pydantic'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_triggerer_runs_without_its_log_server_unless_settings_leave_it_out(
    ingest_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 51: Airflow's health shows a triggerer that never heartbeats as failed, so it
    runs by default, without its log server (no platform task defers: nothing to serve);
    ``INGEST_AIRFLOW__TRIGGERER=false`` leaves it out, saying so."""
    assert skipped_components() == {}
    parent = _Parent()
    make = component_factory(skipped_components())
    triggerer = make(parent, name="triggerer", command=["triggerer"], env={})
    scheduler = make(parent, name="scheduler", command=["scheduler"], env={})
    assert isinstance(triggerer, RestartingSubCommand)
    assert triggerer.command == ["triggerer", "--skip-serve-logs"]
    assert isinstance(scheduler, RestartingSubCommand)
    assert scheduler.command == ["scheduler"]

    monkeypatch.setenv("INGEST_AIRFLOW__TRIGGERER", "false")
    get_settings.cache_clear()
    assert list(skipped_components()) == ["triggerer"]
    left_out = component_factory(skipped_components())(parent, "triggerer", ["triggerer"], {})
    assert isinstance(left_out, SkippedComponent)
    left_out.start()
    left_out.join(timeout=10)
    left_out.stop()
    assert list(parent.output_queue) == [
        (
            "standalone",
            b"triggerer: not started (settings airflow.triggerer is off: no platform task defers)",
        )
    ]


def test_a_standalone_is_refused_beside_whatever_holds_its_ports(
    ingest_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second demo on one machine: its log server failed to bind with only an Errno 98 in
    standalone.log, and on a taken API port the other Airflow's health passed for its own."""
    monkeypatch.setenv("INGEST_AIRFLOW__DATABASE", "sqlite")
    get_settings.cache_clear()
    with (
        socket.create_server(("127.0.0.1", 0)) as api,
        socket.create_server(("127.0.0.1", 0)) as logs,
    ):
        api_port, log_port = api.getsockname()[1], logs.getsockname()[1]
        standalone = Standalone(port=api_port, log_ports=(log_port, log_port + 1))
        with pytest.raises(AirflowError) as refused:
            standalone.up(timeout_s=5)
    message = str(refused.value)
    assert f"port {api_port}, the API server and UI" in message
    assert f"port {log_port}, the worker log server" in message
    assert not standalone.pid_file.exists()  # nothing started


@pytest.mark.parametrize("bound_on", ["0.0.0.0", "::"])
def test_a_log_port_held_on_every_interface_is_refused_too(
    monkeypatch: pytest.MonkeyPatch, bound_on: str
) -> None:
    """Airflow's log servers listen on every interface, where a connection to 127.0.0.1 is
    not always answered (an IPv6-only listener): the port is probed by binding it."""
    _use(monkeypatch, "INGEST_AIRFLOW__DATABASE", "sqlite")
    family = socket.AF_INET6 if ":" in bound_on else socket.AF_INET
    if family == socket.AF_INET6 and not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    with socket.socket(family) as held:
        if family == socket.AF_INET6:
            held.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        held.bind((bound_on, 0))
        held.listen()
        port = held.getsockname()[1]
        api_port, trigger_port = free_ports(2)
        standalone = Standalone(port=api_port, log_ports=(port, trigger_port))
        with pytest.raises(AirflowError, match=f"port {port}, the worker log server"):
            standalone.up(timeout_s=5)
    assert not standalone.pid_file.exists()


def test_a_log_port_that_is_not_a_number_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _use(monkeypatch, "INGEST_AIRFLOW__DATABASE", "sqlite")
    monkeypatch.setenv("AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT", "87x3")
    with pytest.raises(AirflowError) as refused:
        Standalone(port=free_ports(1)[0]).up(timeout_s=5)
    assert str(refused.value) == (
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT='87x3' is not a port number (1-65535)"
    )


def _orphaned_session(name: str) -> tuple[int, list[int]]:
    """A session led by a process named ``name`` that died (SIGKILL) and left two children:
    (the dead leader's pid, the orphans' pids)."""
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 300 & sleep 300 & wait", name], start_new_session=True
    )
    wait_until(lambda: len(psutil.Process(leader.pid).children()) == 2, 10, 0.05, what="forks")
    orphans = [child.pid for child in psutil.Process(leader.pid).children()]
    leader.kill()
    leader.wait()
    return leader.pid, orphans


def test_what_a_standalone_killed_with_sigkill_left_is_stopped(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL to the standalone left its components running: down() saw no standalone and
    stopped nothing, and up() refused to start beside their ports."""
    monkeypatch.setenv("AIRFLOW_HOME", str(airflow_home()))  # what its processes inherit
    standalone = Standalone()
    dead, orphans = _orphaned_session("ingestctl.airflow_standalone")
    standalone.pid_file.parent.mkdir(parents=True, exist_ok=True)
    standalone.pid_file.write_text(f"{dead}\n")
    assert standalone.pid() is None
    assert sorted(p.pid for p in standalone.processes()) == sorted(orphans)
    assert standalone.down(timeout_s=5)
    assert not any(is_alive(pid) for pid in orphans)
    assert not standalone.pid_file.exists()
    assert not standalone.down()


def test_components_of_a_standalone_still_exiting_are_found(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Just after SIGKILL the standalone is neither running nor a zombie yet, and its
    command line is already empty: processes() took it for another program and found
    none of the components it left (a fresh clone's e2e run)."""
    env = {**os.environ, "AIRFLOW_HOME": str(airflow_home())}
    leader = subprocess.Popen(["sh", "-c", "sleep 300 & wait"], env=env, start_new_session=True)
    try:
        wait_until(lambda: psutil.Process(leader.pid).children(), 10, 0.05, what="a child")
        component = psutil.Process(leader.pid).children()[0]
        standalone = Standalone()
        standalone.pid_file.parent.mkdir(parents=True, exist_ok=True)
        standalone.pid_file.write_text(f"{leader.pid}\n")
        real_cmdline = psutil.Process.cmdline

        def exiting(self: psutil.Process) -> list[str]:
            return [] if self.pid == leader.pid else real_cmdline(self)

        monkeypatch.setattr(psutil.Process, "cmdline", exiting)
        assert standalone.pid() is None
        assert component.pid in [p.pid for p in standalone.processes()]
    finally:
        leader.kill()
        leader.wait()
        with contextlib.suppress(psutil.Error):
            component.kill()


def test_a_recorded_pid_now_used_by_another_program_is_left_alone(home: Path) -> None:
    standalone = Standalone()
    standalone.pid_file.parent.mkdir(parents=True, exist_ok=True)
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        standalone.pid_file.write_text(f"{other.pid}\n")
        assert standalone.pid() is None
        assert standalone.processes() == []  # its session is not the standalone's
        assert not standalone.down(timeout_s=1)
        assert is_alive(other.pid)
    finally:
        other.kill()
        other.wait()


def test_a_zombie_standalone_is_not_running(home: Path) -> None:
    standalone = Standalone()
    standalone.pid_file.parent.mkdir(parents=True, exist_ok=True)
    exited = subprocess.Popen(["sh", "-c", "exit 3", "standalone"])  # a zombie until reaped
    try:
        wait_until(lambda: not is_alive(exited.pid), 10, 0.05, what="exit")
        standalone.pid_file.write_text(f"{exited.pid}\n")
        assert standalone.pid() is None
    finally:
        exited.wait()


def test_a_standalone_whose_set_up_fails_is_reported_at_once(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A set-up that failed (here: a metadata database URL Airflow cannot use) was reported
    only after the whole timeout, as "did not answer": the exited standalone, never reaped,
    still counted as running."""
    monkeypatch.setenv(CONN, "unknowndialect://nowhere/airflow")
    get_settings.cache_clear()
    standalone = Standalone(port=free_ports(1)[0], log_ports=tuple(free_ports(2)))
    with pytest.raises(AirflowError, match=r"airflow standalone exited \(exit code [1-9]"):
        standalone.up(timeout_s=240)
    assert "set-up failed" in standalone.log_file.read_text()
    assert standalone.down() is False


@contextlib.contextmanager
def _lookalike_standalone(folder: Path, airflow_home_env: str) -> Iterator[int]:
    """A process run as ``python -m ingestctl.airflow_standalone`` with ``AIRFLOW_HOME`` set,
    whose module (from ``folder``, its working directory) only sleeps; yields its pid."""
    (folder / "ingestctl").mkdir(parents=True)
    (folder / "ingestctl" / "__init__.py").write_text("")
    (folder / "ingestctl" / "airflow_standalone.py").write_text("import time; time.sleep(300)")
    env = {**os.environ, "AIRFLOW_HOME": airflow_home_env}
    process = subprocess.Popen(
        [sys.executable, "-m", "ingestctl.airflow_standalone"], cwd=folder, env=env
    )
    try:
        wait_until(lambda: "-m" in psutil.Process(process.pid).cmdline(), 10, 0.05, what="exec")
        yield process.pid
    finally:
        process.kill()
        process.wait()


def test_only_this_homes_standalone_counts_as_running(home: Path, tmp_path: Path) -> None:
    """A pid file naming any process with "standalone" in its command line made status say
    "running" and down() kill it (a reused pid)."""
    standalone = Standalone()
    standalone.pid_file.parent.mkdir(parents=True, exist_ok=True)
    with _lookalike_standalone(tmp_path / "ours", str(airflow_home())) as pid:
        standalone.pid_file.write_text(f"{pid}\n")
        assert standalone.pid() == pid
    with _lookalike_standalone(tmp_path / "another", str(tmp_path / "elsewhere")) as pid:
        standalone.pid_file.write_text(f"{pid}\n")
        assert standalone.pid() is None  # another platform's standalone
        assert standalone.processes() == []
        assert not standalone.down(timeout_s=1)
        assert is_alive(pid)
    sleeper = "import time; time.sleep(300)"
    named = subprocess.Popen([sys.executable, "-c", sleeper, "fake-airflow_standalone"])
    try:
        standalone.pid_file.write_text(f"{named.pid}\n")
        assert standalone.pid() is None  # a name is not enough
        assert not standalone.down(timeout_s=1)
        assert is_alive(named.pid)
    finally:
        named.kill()
        named.wait()


@pytest.mark.parametrize("recorded", ["0", "-5", "1", "-1"])
def test_a_pid_file_naming_no_process_of_ours_signals_nothing(
    home: Path, recorded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pid file holding 0 made down() signal init and every kernel thread (session 0)."""
    signalled: list[object] = []
    monkeypatch.setattr(psutil.Process, "terminate", lambda self: signalled.append(self))
    monkeypatch.setattr(psutil.Process, "kill", lambda self: signalled.append(self))
    standalone = Standalone()
    standalone.pid_file.parent.mkdir(parents=True, exist_ok=True)
    standalone.pid_file.write_text(recorded)
    assert standalone.pid() is None
    assert standalone.processes() == []
    assert not standalone.down(timeout_s=1)
    assert signalled == []


def test_a_standalone_not_yet_exec_ed_is_waited_for(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standalone up() has just started is still a fork of its parent until exec: its
    command line is not yet ``-m ingestctl.airflow_standalone``, and up() reported it as
    "exited (exit code None)" with an empty log (a fresh clone's make test at load 5)."""
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)  # never "ours"
    try:
        monkeypatch.setattr(Standalone, "_start", lambda self: child)
        answers = iter([False, True])
        monkeypatch.setattr(Standalone, "healthy", lambda self: next(answers))
        monkeypatch.setattr("ingestctl.airflow_runtime.ensure_pools", lambda: None)
        standalone = Standalone()
        standalone.password_file.parent.mkdir(parents=True, exist_ok=True)
        standalone.password_file.write_text("{}")
        assert standalone.pid() is None
        standalone.up(timeout_s=30)  # no AirflowError: the process it started still runs
        child.kill()
        child.wait()
        monkeypatch.setattr(Standalone, "healthy", lambda self: False)
        with pytest.raises(AirflowError, match=r"exited \(exit code -9\)"):
            standalone.up(timeout_s=30)
    finally:
        child.kill()
        child.wait()


def test_one_up_at_a_time(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two up() at once started two standalones on one database, one of them left running."""
    inside, most = [0], [0]

    def start(self: Standalone) -> None:
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.3)
        inside[0] -= 1

    monkeypatch.setattr(Standalone, "_start", start)
    monkeypatch.setattr(Standalone, "healthy", lambda self: True)
    monkeypatch.setattr(Standalone, "pid", lambda self: 4242)
    monkeypatch.setattr("ingestctl.airflow_runtime.ensure_pools", lambda: None)
    standalone = Standalone()
    private_airflow_home()
    standalone.password_file.write_text("{}")
    answered: list[str] = []

    def up() -> None:
        standalone.up(timeout_s=10)
        answered.append("up")

    callers = [threading.Thread(target=up) for _ in "ab"]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=30)
    assert answered == ["up", "up"]
    assert most == [1]


def test_status_reports_what_the_running_standalone_left_out_not_the_callers_settings(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standalone started with the triggerer on, asked about from a shell without it, said
    "triggerer: not started"; it is the running standalone's record that counts."""
    monkeypatch.setenv("INGEST_AIRFLOW__TRIGGERER", "false")
    get_settings.cache_clear()
    standalone = Standalone()
    standalone.pid_file.parent.mkdir(parents=True, exist_ok=True)
    standalone.skipped_file.write_text("{}")  # started with the triggerer on
    with _lookalike_standalone(tmp_path / "running", str(airflow_home())) as pid:
        standalone.pid_file.write_text(f"{pid}\n")
        assert skipped_components() == {"triggerer": mock.ANY}  # this shell's settings
        assert standalone.skipped_components() == {}
        standalone.skipped_file.write_text('{"triggerer": "off"}')
        assert standalone.skipped_components() == {"triggerer": "off"}
    assert standalone.skipped_components() == {}  # nothing runs


def test_a_stale_pid_files_session_of_another_program_is_left_alone(home: Path) -> None:
    """A dead pid in a stale pid file can be another program's session id (a daemon whose
    session leader exited): its processes were stopped as the standalone's leftovers."""
    standalone = Standalone()
    dead, strangers = _orphaned_session("some-daemon")  # no AIRFLOW_HOME of ours
    try:
        standalone.pid_file.parent.mkdir(parents=True, exist_ok=True)
        standalone.pid_file.write_text(f"{dead}\n")
        assert standalone.processes() == []
        assert not standalone.down(timeout_s=1)
        assert all(is_alive(pid) for pid in strangers)
    finally:
        for pid in strangers:
            psutil.Process(pid).kill()


@pytest.mark.parametrize("port", [0, -1, 70000])
def test_a_port_out_of_range_is_refused(port: int) -> None:
    with pytest.raises(AirflowError, match=f"port {port} is not a port number"):
        Standalone(port=port)
    with pytest.raises(AirflowError, match=f"port {port} is not a port number"):
        Standalone(log_ports=(port, 8794))
