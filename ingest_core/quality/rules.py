"""The quality gates' rules as data: one list of table rules per layer, which
:func:`spark_jobs.quality.suites.build_suite` turns into GX suites.

Row-level rules (a missing key, a malformed record) are the Silver job's: such rows never
reach Silver, they go to ``silver_quarantine``. The rules here are batch-level, applied to a
layer's *increment* (the rows a table gained since the last gate that passed): types, keys,
uniqueness, ranges, sets, null rates, volume against recent increments, freshness
(DESIGN.md, section 6).

Spark-free and GX-free (the Airflow side reads :data:`LAYER_RULES` at parse time).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ingest_core.catalog import get_catalog
from ingest_core.contracts import (
    CURRENCIES,
    MONEY_TYPE,
    PAYMENT_METHODS,
    Field,
    SourceContract,
    get_contracts,
)
from ingest_core.settings import QualitySettings

#: Column of each increment row telling whether its key was already in the table before the
#: increment (computed by the gate job; see :func:`spark_jobs.quality.increments.increment`).
ALREADY_IN_TABLE = "_already_in_table"


@dataclass(frozen=True)
class TableRules:
    """What a table's increment must satisfy.

    :param table: declared table name (``include/pipeline.yaml``).
    :param columns: required column -> GX Spark type name (``StringType``, ``DecimalType``...).
    :param not_null: further columns that must not be null (besides the keys).
    :param unique_in_table: the key must also be new to the table (Silver's ``event_id``).
    :param amounts: money columns that must lie in ``[0, quality.max_amount]``.
    :param sets: column -> allowed values.
    :param customer_column: column whose null share is capped by
        ``quality.max_null_customer_rate``.
    :param ratios: columns that must lie in ``[0, 1]``.
    :param ordered: ``(later, earlier)`` column pairs with ``later >= earlier``.
    :param time_column: event-time column for the freshness expectation.
    :param latest_image: the table is updated in place (MERGE): validate each key's newest
        row of the increment only.
    """

    table: str
    columns: dict[str, str]
    not_null: tuple[str, ...] = ()
    unique_in_table: bool = False
    amounts: tuple[str, ...] = ()
    sets: dict[str, frozenset[str]] = field(default_factory=dict)
    customer_column: str | None = None
    ratios: tuple[str, ...] = ()
    ordered: tuple[tuple[str, str], ...] = ()
    time_column: str | None = None
    latest_image: bool = False

    @property
    def keys(self) -> tuple[str, ...]:
        """Columns that identify a row: the table's ``keys`` in ``include/pipeline.yaml``.
        Not null, and unique within the increment.

        :raises KeyError: the table is not declared.
        """
        return tuple(get_catalog().table(self.table).keys)


#: The GX pandas engine's name for each Spark type of :attr:`TableRules.columns`, as a
#: delta-rs read converts it (``pyarrow.Table.to_pandas``): strings and decimals become
#: object columns of ``str`` and ``decimal.Decimal`` values (GX checks each value's type),
#: timestamps ``datetime64`` (made naive UTC by the gate), longs ``int64``, doubles
#: ``float64``.
PANDAS_TYPES = {
    "StringType": "str",
    "DecimalType": "Decimal",
    "TimestampType": "datetime64",
    "LongType": "int64",
    "DoubleType": "float64",
    "BooleanType": "bool",
}
#: GX execution engines a suite is built for.
ENGINES = ("spark", "pandas")

_WINDOW = {"window_start": "TimestampType", "window_end": "TimestampType"}

#: GX's Spark type name of each contract field type (``ingest_core.contracts.Field``).
_GX_TYPES = {"string": "StringType", "int": "IntegerType", MONEY_TYPE: "DecimalType"}


def contract_rules(source: SourceContract, envelope: tuple[Field, ...]) -> TableRules:
    """A Silver table's rules, derived from its source's declaration (``include/contracts``):
    the envelope and every required field with its type, required fields not null, money in
    range, every declared ``enum`` as a set, the event-time field's freshness, ``event_id``
    new to the table, and ``x-ingest-source.customer_column``'s null share capped.

    :param envelope: the envelope's fields (:attr:`ingest_core.contracts.Contracts.
        envelope_fields`).
    """
    by_name = {f.name: f for f in source.fields}
    time_column = next(f.name for f in envelope if f.schema.get("x-ingest-event-time"))
    columns = {
        f.name: "TimestampType" if f.name == time_column else _GX_TYPES[f.spark_type]
        for f in envelope
        if f.name != "schema_version"  # Silver does not keep it
    }
    columns |= {name: _GX_TYPES[by_name[name].spark_type] for name in source.required}
    return TableRules(
        source.silver_table,
        columns,
        not_null=source.required,
        unique_in_table=True,
        amounts=tuple(f.name for f in source.fields if f.is_money),
        sets={f.name: f.enum for f in source.fields if f.enum is not None},
        customer_column=source.schema["x-ingest-source"].get("customer_column"),
        time_column=time_column,
    )


LAYER_RULES: dict[str, tuple[TableRules, ...]] = {
    "silver": tuple(
        contract_rules(source, get_contracts().envelope_fields)
        for source in get_contracts().sources.values()
    ),
    "gold": (
        *(
            TableRules(
                table,
                _WINDOW
                | {
                    "currency": "StringType",
                    "payment_count": "LongType",
                    "amount_total": "DecimalType",
                },
                sets={"currency": CURRENCIES},
                ordered=(("window_end", "window_start"),),
                latest_image=True,
            )
            # the tumbling and the sliding payment totals: same columns, same rules
            for table in ("gold_payment_totals_5m", "gold_payment_totals_10m_sliding")
        ),
        TableRules(
            "gold_payment_success_rate_15m",
            _WINDOW
            | {
                "method": "StringType",
                "attempts": "LongType",
                "successes": "LongType",
                "success_rate": "DoubleType",
            },
            sets={"method": PAYMENT_METHODS},
            ratios=("success_rate",),
            ordered=(("attempts", "successes"),),
            latest_image=True,
        ),
        TableRules(
            "gold_customer_sessions",
            {
                "customer_id": "StringType",
                "session_start": "TimestampType",
                "session_end": "TimestampType",
                "event_count": "LongType",
            },
            ordered=(("session_end", "session_start"),),
            latest_image=True,
        ),
        TableRules(
            "gold_customer_metrics",
            {
                "customer_id": "StringType",
                "currency": "StringType",
                "order_count": "LongType",
                "spend": "DecimalType",
            },
            sets={"currency": CURRENCIES},
            latest_image=True,
        ),
    ),
}
GATED_LAYERS = tuple(LAYER_RULES)


def layer_rules(layer: str) -> tuple[TableRules, ...]:
    """The rules of ``layer``.

    :raises ValueError: ``layer`` has no gate; the message names the gated layers.
    """
    try:
        return LAYER_RULES[layer]
    except KeyError:
        raise ValueError(f"no gate for layer {layer!r}; gated layers: {GATED_LAYERS}") from None


def volume_band(history: list[int], quality: QualitySettings) -> tuple[int, int] | None:
    """Row-count band ``[median / f, median * f]`` learned from recent passed increments
    (``f``: ``quality.volume_band_factor``); a lower bound under
    ``quality.volume_lower_bound_min_rows`` is 0 (only the upper bound is checked).

    :param history: row counts of the table's recent passed, non-empty increments, newest
        first.
    :returns: ``(min_rows, max_rows)``, or None with fewer than ``quality.volume_history``
        increments (too little history to judge).
    """
    recent = history[: quality.volume_history]
    if len(recent) < quality.volume_history:
        return None
    ordered = sorted(recent)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    factor = quality.volume_band_factor
    lower = int(median / factor)
    return (lower if lower >= quality.volume_lower_bound_min_rows else 0), int(median * factor) + 1


def validated_columns(rules: TableRules) -> tuple[str, ...]:
    """The columns :func:`build_suite`'s expectations read, in a stable order: the gate
    hands GX only these (an increment's other columns, a URL or a payload, cost the pandas
    engine a copy per row-filtering metric and the Spark cache their bytes, and no
    expectation looks at them). A required column the table lacks stays missing, so its
    ``expect_column_to_exist`` still fails.

    :raises KeyError: the table is not declared (its keys are the catalog's).
    """
    wanted = [
        *rules.columns,
        *rules.keys,
        *rules.not_null,
        *([ALREADY_IN_TABLE] if rules.unique_in_table else []),
        *rules.amounts,
        *rules.sets,
        *([rules.customer_column] if rules.customer_column else []),
        *rules.ratios,
        *(column for pair in rules.ordered for column in pair),
        *([rules.time_column] if rules.time_column else []),
    ]
    return tuple(dict.fromkeys(wanted))
