"""The embedded Airflow's OpenLineage settings: on, events to a file under INGEST_HOME unless
the environment configures a transport (OPENLINEAGE_URL of a Marquez server wins)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_core.settings import get_settings
from ingestctl.airflow_runtime import (
    LINEAGE_TRANSPORT_SETTINGS,
    airflow_environment,
    lineage_environment,
)

pytestmark = pytest.mark.unit

TRANSPORT = "AIRFLOW__OPENLINEAGE__TRANSPORT"
DISABLED = "AIRFLOW__OPENLINEAGE__DISABLED"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    monkeypatch.setenv("INGEST_AIRFLOW__DATABASE", "sqlite")  # no embedded PostgreSQL
    for key in (*LINEAGE_TRANSPORT_SETTINGS, DISABLED, "OPENLINEAGE__TRANSPORT__TYPE"):
        monkeypatch.delenv(key, raising=False)
    get_settings.cache_clear()
    yield tmp_path.resolve()
    get_settings.cache_clear()


def test_by_default_events_are_appended_to_a_file_under_ingest_home(home: Path) -> None:
    env = airflow_environment()
    transport = json.loads(env[TRANSPORT])
    assert transport == {
        "type": "file",
        "log_file_path": str(home / "lineage" / "events.jsonl"),
        "append": True,
    }
    assert (home / "lineage").is_dir()  # the transport opens the file; the folder exists
    assert env[DISABLED] == "False"


def test_the_default_transport_is_one_that_openlineage_builds() -> None:
    from openlineage.client.transport import get_default_factory
    from openlineage.client.transport.file import FileConfig, FileTransport

    config = {"type": "file", "log_file_path": "/tmp/x/events.jsonl", "append": True}
    transport = get_default_factory().create(config)
    assert isinstance(transport, FileTransport)
    assert transport.config == FileConfig.from_dict(config)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("OPENLINEAGE_URL", "http://marquez:5000"),
        ("OPENLINEAGE_CONFIG", "/etc/openlineage.yml"),
        (TRANSPORT, '{"type": "console"}'),
        ("AIRFLOW__OPENLINEAGE__CONFIG_PATH", "/etc/openlineage.yml"),
        ("OPENLINEAGE__TRANSPORT__TYPE", "console"),
    ],
)
def test_a_transport_of_the_environment_wins(
    home: Path, monkeypatch: pytest.MonkeyPatch, key: str, value: str
) -> None:
    monkeypatch.setenv(key, value)
    assert TRANSPORT not in lineage_environment()
    assert lineage_environment()[DISABLED] == "False"
    assert TRANSPORT not in airflow_environment()


def test_an_explicit_opt_out_is_kept(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLED, "True")
    assert DISABLED not in lineage_environment()  # the caller's "True" reaches Airflow
