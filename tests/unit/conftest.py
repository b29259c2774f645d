"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_core.settings import PlatformSettings, get_settings


@pytest.fixture
def ingest_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``INGEST_HOME`` is ``<tmp_path>/home`` for one test (settings read afresh)."""
    monkeypatch.setenv("INGEST_HOME", str(tmp_path / "home"))
    get_settings.cache_clear()
    yield tmp_path / "home"
    get_settings.cache_clear()


@pytest.fixture
def cluster_settings(
    ingest_home: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[PlatformSettings]:
    """Settings of a platform with a topic prefix (``t1.``) and a two-server Kafka cluster."""
    monkeypatch.setenv("INGEST_KAFKA__TOPIC_PREFIX", "t1.")
    monkeypatch.setenv("INGEST_KAFKA__BOOTSTRAP", "broker-a:9093,broker-b:9093")
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()
