"""Small DataFrames from rows held in the driver, built in the JVM.

pyspark's ``SparkSession.createDataFrame(<list>, schema)`` ships the rows as a pickled RDD and
re-serializes it with a Python ``map`` (``pyspark/sql/session.py`` ``_createFromLocal`` ->
``SparkContext.parallelize``; ``RDD._to_java_object_rdd`` -> ``_reserialize``): its first use
in a driver starts Spark's Python worker daemon and workers (``python -m pyspark.daemon``),
about 150 MB resident (a daemon and two workers on 2 cores, each importing pyspark), which
then live as long as the driver. The platform's jobs use it for one-row records (a Silver
batch's reconciliation row, a gate's results, a Kafka gap); as literal expressions over
``spark.range`` the same rows need no Python worker at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType


def _literal(value: Any, data_type: DataType) -> Column:
    """``value`` as a column of type ``data_type``: structs from tuples or mappings, arrays
    from sequences, maps from mappings, anything else through :func:`pyspark.sql.functions.lit`
    (a naive ``datetime`` is a local time, as ``createDataFrame`` takes it) and a cast."""

    if value is None:
        return F.lit(None).cast(data_type)
    if isinstance(data_type, StructType):
        fields = data_type.fields
        values = [value.get(f.name) for f in fields] if isinstance(value, Mapping) else list(value)
        if len(values) != len(fields):
            raise ValueError(f"{value!r} has {len(values)} values for {len(fields)} fields")
        return F.struct(
            *[_literal(v, f.dataType).alias(f.name) for v, f in zip(values, fields, strict=True)]
        )
    if isinstance(data_type, ArrayType):
        return F.array(*[_literal(v, data_type.elementType) for v in value]).cast(data_type)
    if isinstance(data_type, MapType):
        pairs = [
            part
            for key, item in value.items()
            for part in (_literal(key, data_type.keyType), _literal(item, data_type.valueType))
        ]
        return F.create_map(*pairs).cast(data_type)
    return F.lit(value).cast(data_type)


def local_frame(
    spark: SparkSession,
    rows: Iterable[Sequence[Any] | Mapping[str, Any]],
    schema: str | StructType,
) -> DataFrame:
    """A DataFrame of ``rows`` with ``schema``'s column names, order and types, like
    ``spark.createDataFrame(rows, schema)`` but without Python workers (see the module
    docstring). Meant for a handful of rows: every value is a literal in the plan.

    Nullability: a column (or nested field) whose values are all non-null comes out
    non-nullable, because literals are; appending it to a Delta table with nullable columns
    is the same, and a Delta table created from it has nullable columns, as from
    ``createDataFrame``.

    :param rows: tuples in the schema's column order, or mappings by column name (a missing
        key is null).
    :param schema: a DDL string (``"a string, b long"``) or a :class:`StructType`.
    :raises ValueError: a row has more or fewer values than the schema has columns, or
        ``schema`` is not a list of columns.
    :raises pyspark.errors.PySparkException: a value does not cast to its column's type.
    """

    struct = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    if not isinstance(struct, StructType):  # a DDL string of one type, not of columns
        raise ValueError(f"{schema!r} is not a list of columns")
    literals = [_literal(row, struct) for row in rows]
    if not literals:
        return (
            spark.range(0)
            .select(*[_literal(None, f.dataType).alias(f.name) for f in struct.fields])
            .to(struct)
        )
    return spark.range(1).select(F.inline(F.array(*literals))).to(struct)
