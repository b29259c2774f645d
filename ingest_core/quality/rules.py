"""The quality gates' rules as data: one list of table rules per layer, which
:func:`ingest_core.quality.suites.build_suite` turns into GX suites.

Row-level rules (a missing key, a malformed record) are the Silver job's: such rows never
reach Silver, they go to ``silver_quarantine``. The rules here are batch-level, applied to a
layer's *increment* (the rows a table gained since the last gate that passed): types, keys,
uniqueness, ranges, sets, null rates, volume against recent increments, freshness
(DESIGN.md, section 6).

Spark-free and GX-free (the Airflow side reads :data:`LAYER_RULES` at parse time).
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass, field
from typing import Any

from ingest_core.catalog import Catalog, WindowSpec, get_catalog
from ingest_core.contracts import (
    MONEY_TYPE,
    Contracts,
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
    "IntegerType": "int32",
    "DoubleType": "float64",
    "BooleanType": "bool",
}
#: GX execution engines a suite is built for.
ENGINES = ("spark", "pandas")

#: GX's Spark type name of each contract field type (``ingest_core.contracts.Field``).
_GX_TYPES = {
    "string": "StringType",
    "int": "IntegerType",
    "bigint": "LongType",
    "double": "DoubleType",
    "boolean": "BooleanType",
    "timestamp": "TimestampType",
    MONEY_TYPE: "DecimalType",
}


def contract_rules(source: SourceContract, contracts: Contracts) -> TableRules:
    """A Silver table's rules, derived from its source's declaration (``include/contracts``):
    the envelope and every required field with its type, required fields not null, money in
    range, every declared ``enum`` as a set, the event-time field's freshness, ``event_id``
    new to the table, and ``x-ingest-source.customer_column``'s null share capped.

    :param contracts: every declaration (the envelope's and the table's column types:
        :meth:`ingest_core.contracts.Contracts.column_types`).
    """
    types = contracts.column_types(source.silver_table)
    envelope = [f.name for f in contracts.envelope_fields if f.name in types]
    columns = {name: gx_type(types[name]) for name in (*envelope, *source.required)}
    return TableRules(
        source.silver_table,
        columns,
        not_null=source.required,
        unique_in_table=True,
        amounts=tuple(f.name for f in source.fields if f.is_money),
        sets={f.name: f.enum for f in source.fields if f.enum is not None},
        customer_column=source.schema["x-ingest-source"].get("customer_column"),
        time_column=contracts.event_time_field,
    )


def gx_type(spark_type: str) -> str:
    """GX's Spark type name of a Spark DDL type (``decimal(28,2)`` -> ``DecimalType``).

    :raises KeyError: a type the gates do not check (arrays, maps).
    """
    return "DecimalType" if spark_type.startswith("decimal(") else _GX_TYPES[spark_type]


def window_rules(table: str, window: WindowSpec, contracts: Contracts | None = None) -> TableRules:
    """A declared windowed Gold table's rules, derived from its window
    (``include/pipeline.yaml``) and its source's contracts: every column with its type,
    window end after start, grouping columns within their declared ``enum``, a ratio of a
    ``count_if`` to a ``count`` within [0, 1] and its numerator at most its denominator;
    each key's newest row validated (late corrections rewrite windows in place).

    :raises ValueError: a column the source does not declare, or a measure its type does
        not take (``ingestctl catalog check`` says so first, :func:`window_problems`).
    """
    contracts = contracts or get_contracts()
    types = contracts.column_types(window.source)

    def column_type(column: str) -> str:
        if column not in types:
            raise ValueError(
                f"{table}: {window.source} declares no column {column!r} (its columns: "
                f"{sorted(types)})"
            )
        return types[column]

    if column_type(window.time_column) != "timestamp":
        raise ValueError(f"{table}: windows are cut on a timestamp, not {window.time_column!r}")
    if window.where is not None:
        column_type(window.where.column)
    columns = {window.start_column: "TimestampType", window.end_column: "TimestampType"}
    columns |= {c: gx_type(column_type(c)) for c in window.group_by}
    ratios, ordered = [], [(window.end_column, window.start_column)]
    for name, measure in window.measures.items():
        if measure.where is not None:
            column_type(measure.where.column)
        source_type = column_type(measure.column) if measure.column else None
        try:
            columns[name] = gx_type(measure.result_type(source_type))
        except ValueError as error:
            raise ValueError(f"{table}: measure {name!r}: {error}") from None
        if measure.of is not None:
            numerator, denominator = (window.measures[m].kind for m in measure.of)
            if (numerator, denominator) == ("count_if", "count"):
                ratios.append(name)
                ordered.append((measure.of[1], measure.of[0]))
    enums = contracts.column_enums(window.source)
    return TableRules(
        table,
        {c: columns[c] for c in window.columns},
        sets={c: enums[c] for c in window.group_by if c in enums},
        ratios=tuple(ratios),
        ordered=tuple(ordered),
        latest_image=True,
    )


def window_problems(catalog: Catalog, contracts: Contracts) -> list[str]:
    """Each declared window's columns against its source's contracts, one line per table
    in trouble (:func:`window_rules`'s refusal); ``[]`` when all is well."""
    problems = []
    for table, window in catalog.windowed_tables().items():
        try:
            window_rules(table, window, contracts)
        except ValueError as error:
            problems.append(f"pipeline.yaml: tables.{table}.window: {error}")
    return problems


#: The gated layers, in the order the medallion runs their gates.
GATED_LAYERS = ("silver", "gold")
#: Layer -> its tables' rules (computed on first use: importing this module reads no
#: declaration, so a broken one is reported by ``ingestctl catalog check``).
LAYER_RULES: dict[str, tuple[TableRules, ...]]


@functools.cache
def _layer_rules() -> dict[str, tuple[TableRules, ...]]:
    from ingest_core.contracts import CURRENCIES

    return {
        "silver": tuple(
            contract_rules(source, get_contracts()) for source in get_contracts().sources.values()
        ),
        "gold": (
            *(window_rules(table, w) for table, w in get_catalog().windowed_tables().items()),
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


def __getattr__(name: str) -> Any:
    """:data:`LAYER_RULES`, computed once on first use.

    :raises ingest_core.contracts.ContractError: a contract is broken.
    """
    if name == "LAYER_RULES":
        return _layer_rules()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def layer_rules(layer: str) -> tuple[TableRules, ...]:
    """The rules of ``layer``.

    :raises ValueError: ``layer`` has no gate; the message names the gated layers.
    """
    try:
        return _layer_rules()[layer]
    except KeyError:
        raise ValueError(f"no gate for layer {layer!r}; gated layers: {GATED_LAYERS}") from None


def volume_band(history: list[int], quality: QualitySettings) -> tuple[int, int] | None:
    """Row-count band learned from recent passed increments (``f``:
    ``quality.volume_band_factor``): at most ``f`` times the largest of them, and, only with
    ``quality.volume_lower_bound`` on and a bound of at least
    ``quality.volume_lower_bound_min_rows``, at least their median over ``f``
    (:class:`ingest_core.settings.QualitySettings` says why the lower bound is off).

    The upper bound follows the largest, not the median: increments are as irregular as the
    cycles that make them (a gate run a minute after another validates a few rows, one after
    an outage a catch-up), and in the 2-hour soak (run 20) three small increments made the
    median 3 rows, and a normal 842-row increment failed ``median * 20``. A flood is
    still one many times anything seen lately.

    :param history: row counts of the table's recent passed, non-empty increments, newest
        first.
    :returns: ``(min_rows, max_rows)``, or None with fewer than ``quality.volume_history``
        increments (too little history to judge).
    """
    recent = history[: quality.volume_history]
    if len(recent) < quality.volume_history:
        return None
    factor = quality.volume_band_factor
    lower = int(statistics.median(recent) / factor)
    checked = quality.volume_lower_bound and lower >= quality.volume_lower_bound_min_rows
    return (lower if checked else 0), int(max(recent) * factor) + 1


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
