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
