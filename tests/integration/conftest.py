"""Fixtures of the medallion integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_core.settings import get_settings
from tests.integration.medallion import Platform, make_platform


@pytest.fixture
def platform(spark, kafka_bootstrap, tmp_path: Path, monkeypatch) -> Iterator[Platform]:
    """An isolated platform (own INGEST_HOME, own topic prefix) on the real broker."""
    yield make_platform(spark, kafka_bootstrap, tmp_path, monkeypatch)
    get_settings.cache_clear()
