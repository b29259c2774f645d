"""The bench's cleanup leaves nothing running (real embedded PostgreSQL)."""

from __future__ import annotations

import pytest

from bench.env import BenchEnv
from ingestctl.postgres_cluster import EmbeddedPostgres
from tests.e2e.postgres import embedded_postgres_folder

pytestmark = pytest.mark.integration


def test_cleanup_stops_the_embedded_postgres_the_cycles_started_in_a_home() -> None:
    # Outside pytest's 0700 tmp_path: the server runs as a user of its own (not root).
    with embedded_postgres_folder() as folder:
        folder.chmod(0o755)
        env = BenchEnv(folder / "run")
        # Where `ingestctl airflow` (the cycles' Airflow CLI) starts it: <INGEST_HOME>/postgres.
        server = EmbeddedPostgres(env.home("main") / "postgres", start_timeout_s=120)
        try:
            assert server.up().running
            env.cleanup()
            assert not server.status().running
        finally:
            server.down()
