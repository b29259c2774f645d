"""A real PostgreSQL server for tests: Debian's server binaries (``initdb``, ``pg_ctl``) on a
port and in a data folder of the test's own, with a random password (SCRAM), listening on
127.0.0.1 only, stopped with ``pg_ctl stop`` afterwards.

PostgreSQL refuses to run as root: as root, every server command runs as the ``postgres``
system user (``runuser``), which owns the data folder.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER_USER = "postgres"


class PostgresUnavailableError(RuntimeError):
    """No PostgreSQL server binaries here; the message says how to install them."""


def server_bin_dir() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb`` and ``pg_ctl``.

    :raises PostgresUnavailableError: none is installed (``make test`` installs Debian's
        ``postgresql`` package when run as root).
    """
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if not candidates:
        raise PostgresUnavailableError(
            "PostgreSQL server binaries not found under /usr/lib/postgresql: run `make test` "
            "as root (it runs `apt-get install -y postgresql`) or install Debian's postgresql"
        )
    return candidates[-1].parent


@dataclass
class PostgresServer:
    """One throw-away server: ``start()``, use :attr:`sqlalchemy_url`, ``stop()``."""

    port: int
    database: str = "airflow"
    user: str = "airflow"

    def __post_init__(self) -> None:
        self.bin = server_bin_dir()
        # Not below pytest's tmp folders: they are private to root, and the server runs as
        # the postgres user.
        self.folder = Path(tempfile.mkdtemp(prefix="ingest-test-pg-"))
        self.data = self.folder / "data"
        self.password = secrets.token_urlsafe(24)
        self.as_server_user = os.geteuid() == 0

    @property
    def sqlalchemy_url(self) -> str:
        """``postgresql+psycopg2://`` URL of the database (password inside: pass it through
        the environment only)."""
        return (
            f"postgresql+psycopg2://{self.user}:{self.password}@127.0.0.1:{self.port}/"
            f"{self.database}"
        )

    def _run(self, *command: str) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", SERVER_USER, "--"] if self.as_server_user else []
        done = subprocess.run(
            [*prefix, *command], capture_output=True, text=True, cwd=self.folder, check=False
        )
        if done.returncode != 0:
            log = self.folder / "server.log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(
                f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}\n{tail}"
            )
        return done

    def start(self) -> None:
        """initdb (SCRAM password auth, superuser :attr:`user`), start on 127.0.0.1:port with
        the socket in the data folder, create :attr:`database`."""
        pwfile = self.folder / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self.as_server_user:
            owner = pwd.getpwnam(SERVER_USER)
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        pwfile.chmod(0o600)
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            self.user,
            f"--pwfile={pwfile}",
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--no-instructions",
        )
        pwfile.unlink()
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.folder / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        with contextlib.closing(self.connect("postgres")) as conn:
            conn.autocommit = True
            with conn.cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{self.database}"')

    def connect(self, database: str | None = None) -> Any:
        """A psycopg2 connection as :attr:`user`."""
        import psycopg2

        return psycopg2.connect(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            password=self.password,
            dbname=database or self.database,
        )

    def stop(self) -> None:
        """``pg_ctl stop -m fast`` (this server only, by its data folder), then remove it."""
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)
