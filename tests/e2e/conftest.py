"""End-to-end fixtures: Airflow (its CLI, a metadata database on a temporary embedded
PostgreSQL cluster) running the real DAGs, whose Spark tasks spark-submit the real jobs
against the real broker."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from deltalake import DeltaTable

from ingest_core.catalog import get_catalog
from ingest_core.delta_tables import table_exists
from ingest_core.settings import get_settings
from ingestctl.airflow_runtime import ensure_pools, run_cli
from tests.e2e.postgres import embedded_postgres_folder


@dataclass
class AirflowPlatform:
    """One isolated platform (own INGEST_HOME, own topic prefix) driven through Airflow."""

    home: Path
    prefix: str
    bootstrap: str

    def airflow(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``airflow <args>`` in the platform's environment (never raises on exit code)."""
        return run_cli(list(args), check=False)

    def dags_test(self, dag_id: str) -> subprocess.CompletedProcess[str]:
        return self.airflow("dags", "test", dag_id)

    def path(self, table: str) -> Path:
        return get_catalog().table(table).path(get_settings())

    def read(self, table: str) -> pd.DataFrame:
        """The table through delta-rs (an independent reader); empty frame if absent."""
        path = self.path(table)
        return DeltaTable(str(path)).to_pandas() if table_exists(path) else pd.DataFrame()

    def versions(self, layers: tuple[str, ...] = ("silver", "gold")) -> dict[str, int]:
        """Delta version of every existing table of ``layers``."""
        return {
            name: DeltaTable(str(self.path(name))).version()
            for name, table in get_catalog().tables.items()
            if table.layer in layers and table_exists(self.path(name))
        }


def run_state(result: subprocess.CompletedProcess[str]) -> str:
    """The DagRun's final state from ``airflow dags test`` output ("success"/"failed")."""
    for line in reversed((result.stdout + result.stderr).splitlines()):
        if "DagRun Finished" in line:
            return "success" if "state=success" in line else "failed"
    return f"unknown (exit {result.returncode}): {(result.stdout + result.stderr)[-3000:]}"


def isolate(
    patch: pytest.MonkeyPatch, home: Path, prefix: str, bootstrap: str, **extra: str
) -> None:
    """Point this process (and what it starts) at an isolated platform: its own
    ``INGEST_HOME`` and topic prefix on the test broker, no unit-test mode and no inherited
    Airflow database; ``extra`` settings as environment variables. Creates the topics."""
    from ingest_core.contracts import TOPICS
    from ingest_core.topics import ensure_topics

    host, port = bootstrap.rsplit(":", 1)
    env = {
        "INGEST_HOME": str(home),
        "INGEST_KAFKA__HOST": host,
        "INGEST_KAFKA__PORT": port,
        "INGEST_KAFKA__TOPIC_PREFIX": prefix,
        **extra,
    }
    for key, value in env.items():
        patch.setenv(key, value)
    patch.delenv("AIRFLOW__CORE__UNIT_TEST_MODE", raising=False)
    for suffix in ("", "_CMD", "_SECRET"):
        patch.delenv(f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN{suffix}", raising=False)
    get_settings.cache_clear()
    ensure_topics(bootstrap, [prefix + t for t in TOPICS], partitions=3)


@pytest.fixture(scope="module")
def airflow_platform(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AirflowPlatform]:
    """An isolated platform with a migrated Airflow database; stops its always-on jobs after."""
    from ingest_platform import supervisor

    home = tmp_path_factory.mktemp("e2e") / "home"
    prefix = f"e{uuid.uuid4().hex[:8]}."
    with pytest.MonkeyPatch.context() as patch, embedded_postgres_folder() as postgres:
        isolate(
            patch,
            home,
            prefix,
            kafka_bootstrap,
            # Started by the first Airflow command below; stopped after the module.
            INGEST_AIRFLOW__POSTGRES_DIR=str(postgres),
            # Tests restart at once after a kill; production backs off 30 s, doubling.
            INGEST_SUPERVISOR__BACKOFF_BASE_S="0",
        )
        run_cli(["db", "migrate"])
        ensure_pools()
        platform = AirflowPlatform(home=home, prefix=prefix, bootstrap=kafka_bootstrap)
        try:
            yield platform
        finally:
            for job in supervisor.always_on_jobs():
                supervisor.stop(job, disable=False)
            get_settings.cache_clear()
