"""How a failed expectation is recorded in ``ops_gate_results`` (quality/validation.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from ingest_core.quality.validation import _summarise

pytestmark = pytest.mark.unit


def test_a_failed_row_count_band_records_the_bounds_it_missed() -> None:
    """Soak run 20: the gate's status said "observed 69" for a failed row-count band, not
    the band; an operator could not tell whether the increment was too small or too large."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    context = gx.get_context(mode="ephemeral")
    batch = (
        context.data_sources.add_pandas("increments")
        .add_dataframe_asset("silver_customer_activity")
        .add_batch_definition_whole_dataframe("increment")
        .get_batch(batch_parameters={"dataframe": pd.DataFrame({"event_id": ["a", "b", "c"]})})
    )
    result = batch.validate(gxe.ExpectTableRowCountToBeBetween(min_value=85, max_value=34061))
    assert not result.success
    summary = _summarise(result)
    assert summary["expectation"] == "expect_table_row_count_to_be_between"
    assert summary["observed"] == 3
    assert summary["expected"] == {"min_value": 85, "max_value": 34061}


def test_a_failure_line_says_only_what_applies() -> None:
    """The task log and ``gate status`` printed "on None: observed 69, unexpected None
    (None%), e.g. []" for the row-count band (soak run 20): a table-level expectation has no
    column and no rows of its own, and the bounds it missed were not shown."""
    from ingest_core.quality.results import describe_failure

    band = {
        "expectation": "expect_table_row_count_to_be_between",
        "column": None,
        "observed": 69,
        "expected": {"min_value": 85, "max_value": 34061},
        "unexpected_count": None,
        "unexpected_percent": None,
        "examples": [],
    }
    assert describe_failure(band) == (
        "expect_table_row_count_to_be_between: observed 69, expected 85..34061"
    )
    row_wise = {
        "expectation": "expect_column_values_to_be_between",
        "column": "amount",
        "expected": {"min_value": 0},
        "unexpected_count": 2,
        "unexpected_percent": 40.0,
        "examples": [-5.0, -1.0],
    }
    assert describe_failure(row_wise) == (
        "expect_column_values_to_be_between on amount: expected 0.., "
        "unexpected 2 (40.0%), e.g. [-5.0, -1.0]"
    )
