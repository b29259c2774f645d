"""Expectation suites as code: the rules of :mod:`ingest_core.quality.rules`, turned into GX
suites. Imports GX only inside :func:`build_suite`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ingest_core.quality.rules import ALREADY_IN_TABLE, ENGINES, PANDAS_TYPES, TableRules
from ingest_core.settings import QualitySettings

if TYPE_CHECKING:
    import great_expectations as gx


def build_suite(
    rules: TableRules,
    quality: QualitySettings,
    *,
    band: tuple[int, int] | None,
    now: datetime,
    engine: str = "spark",
) -> gx.ExpectationSuite:
    """Build the GX suite of one table's increment (suite name = table name).

    :param band: row-count band from :func:`volume_band`; None skips the volume expectation.
    :param now: validation time (UTC), the reference of the freshness expectation.
    :param engine: ``spark`` or ``pandas``: the engine the increment is validated with; only
        the type names differ (:data:`PANDAS_TYPES`).
    :raises ValueError: unknown ``engine``.
    """
    import great_expectations as gx
    import great_expectations.expectations as gxe

    if engine not in ENGINES:
        raise ValueError(f"unknown GX engine {engine!r}; known: {ENGINES}")
    suite = gx.ExpectationSuite(name=rules.table)
    expectations: list[Any] = []
    for column, spark_type in rules.columns.items():
        type_ = PANDAS_TYPES[spark_type] if engine == "pandas" else spark_type
        expectations.append(gxe.ExpectColumnToExist(column=column))
        expectations.append(gxe.ExpectColumnValuesToBeOfType(column=column, type_=type_))
    for key in (*rules.keys, *rules.not_null):
        expectations.append(gxe.ExpectColumnValuesToNotBeNull(column=key))
    if len(rules.keys) == 1:
        expectations.append(gxe.ExpectColumnValuesToBeUnique(column=rules.keys[0]))
    else:
        expectations.append(gxe.ExpectCompoundColumnsToBeUnique(column_list=list(rules.keys)))
    if rules.unique_in_table:
        expectations.append(
            gxe.ExpectColumnValuesToBeInSet(column=ALREADY_IN_TABLE, value_set=[False])
        )
    for column in rules.amounts:
        expectations.append(
            gxe.ExpectColumnValuesToBeBetween(
                column=column, min_value=0, max_value=quality.max_amount
            )
        )
    for column, values in rules.sets.items():
        expectations.append(
            gxe.ExpectColumnValuesToBeInSet(column=column, value_set=sorted(values))
        )
    if rules.customer_column:
        expectations.append(
            gxe.ExpectColumnValuesToNotBeNull(
                column=rules.customer_column, mostly=1 - quality.max_null_customer_rate
            )
        )
    for column in rules.ratios:
        expectations.append(
            gxe.ExpectColumnValuesToBeBetween(column=column, min_value=0, max_value=1)
        )
    for later, earlier in rules.ordered:
        expectations.append(
            gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                column_A=later, column_B=earlier, or_equal=True
            )
        )
    if band is not None:
        expectations.append(
            gxe.ExpectTableRowCountToBeBetween(min_value=band[0], max_value=band[1])
        )
    if rules.time_column and quality.freshness_limit_s > 0:
        oldest = (now - timedelta(seconds=quality.freshness_limit_s)).replace(tzinfo=None)
        freshness = gxe.ExpectColumnMaxToBeBetween(column=rules.time_column, min_value=oldest)
        expectations.append(freshness)
    for expectation in expectations:
        suite.add_expectation(expectation)
    return suite
