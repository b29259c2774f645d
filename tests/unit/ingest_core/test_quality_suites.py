"""The gate hands GX only the columns its suites read (ingest_core/quality/suites.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ingest_core.quality.rules import GATED_LAYERS, layer_rules, validated_columns
from ingest_core.quality.suites import build_suite
from ingest_core.settings import get_settings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("engine", ["spark", "pandas"])
def test_the_validated_columns_are_exactly_those_the_suites_read(engine: str) -> None:
    import great_expectations as gx

    gx.get_context(mode="ephemeral")  # a suite adds its expectations through a context
    quality = get_settings().quality.model_copy(update={"freshness_limit_s": 3600})
    for layer in GATED_LAYERS:
        for rules in layer_rules(layer):
            suite = build_suite(rules, quality, band=(1, 10), now=datetime.now(UTC), engine=engine)
            read: set[str] = set()
            for expectation in suite.expectations:
                kwargs = expectation.configuration.kwargs
                read |= {kwargs[k] for k in ("column", "column_A", "column_B") if kwargs.get(k)}
                read |= set(kwargs.get("column_list") or ())
            columns = validated_columns(rules)
            assert len(columns) == len(set(columns)), rules.table  # each once
            # Every column an expectation reads is handed over, and nothing else: a new
            # expectation on another column fails here until validated_columns knows it.
            assert set(columns) == read, rules.table
