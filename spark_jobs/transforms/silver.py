"""Silver transforms: parse Bronze records against the event contracts, decide which are
usable, and split what is not. Pure DataFrame -> DataFrame functions: no I/O, no clock (the
caller passes ``now``), testable on a local session without Kafka.

Parsing goes through Spark 4's VARIANT type (``try_parse_json``, ``try_variant_get``), which
never raises on bad data, so ANSI mode stays on.

Quarantine: a record is judged by the ordered rules of
:data:`ingest_core.quarantine.QUARANTINE_RULES` (data: name, reason, origin, when it
applies; ``ingestctl catalog rules`` prints them with what a topic's contract adds), each
computed here by :data:`RULE_COLUMNS`; the first that applies is recorded, with its detail
(``duplicate key 'status'``, ``missing: event_id``, ``control character in customer_id``,
``negative amount``...). ``event_time_skew`` is explained at :func:`parse_topic`: one
skewed record would otherwise move the watermark for everyone.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache, reduce
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DecimalType, IntegerType, StringType, StructType
from pyspark.sql.window import WindowSpec

from ingest_core.contracts import (
    CONTRACTS,
    ENVELOPE_DDL,
    ENVELOPE_FIELDS,
    ID_FIELDS,
    ITEM_ID_FIELDS,
    PAYLOAD_DDL,
    SCHEMA_VERSION,
    get_contracts,
)
from ingest_core.quarantine import (
    EVENT_TIME_CHECKS,
    QUARANTINE_RULES,
    ValueCheck,
    value_checks,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping


#: Bronze columns carried into Silver rows for lineage.
COORDINATES = ("topic", "partition", "offset", "kafka_timestamp")
_INTEGRAL = "^(TINYINT|SMALLINT|INT|BIGINT)$"
_NUMERIC = "^(TINYINT|SMALLINT|INT|BIGINT|DECIMAL.*|DOUBLE|FLOAT)$"
#: ISO-8601 date *and* time with an offset ("2026-11-29" alone, or no offset, is refused).
_ISO_WITH_OFFSET = r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|z|[+-]\d\d(:?\d\d)?)$"
#: Earliest plausible event time: anything before is a producer bug, not history.
EARLIEST_EVENT_TIME = datetime(1970, 1, 1, tzinfo=UTC)
#: Java regex of a control character (Unicode category Cc), refused in ids.
_CONTROL = r"\p{Cc}"
#: Records on each side (in offset order, same partition) that a record's event time is
#: compared with by the ``event_time_skew`` rule.
SKEW_NEIGHBOURS = 10


def payload_schema(topic: str) -> StructType:
    """Spark schema of a whole event on ``topic``: envelope then payload fields.

    :raises KeyError: ``topic`` carries no declared events.
    """
    schema = StructType.fromDDL(f"{ENVELOPE_DDL}, {PAYLOAD_DDL[topic]}")
    assert isinstance(schema, StructType)
    return schema


def _first_reason(checks: list[tuple[str, Column, Column]]) -> tuple[Column, Column, Column]:
    """The first matching check of (reason, condition, detail) triples, in three parts.

    :returns: ``(check, reason, detail)``: ``check`` is a ``CASE WHEN`` over the conditions
        giving the matching check's position (int, null when none matches), named
        ``_check``, to be computed in a projection of its own; ``reason`` and ``detail``
        read ``_check``.
        So each condition is evaluated once per record. Two ``CASE WHEN``s over the same
        conditions (one for the reason, one for its detail) evaluated every condition twice:
        Spark shares only a ``CASE``'s first condition between expressions, and the
        conditions (JSON tokenizing, regular expressions, timestamp parsing) were most of
        the parse (JFR of a 300k-record parse, ``bench/results/REFERENCE.md``, 2026-12-04).
    """

    (first_reason, first_condition, first_detail), *rest = checks
    check = F.when(first_condition, F.lit(0))
    for position, (_, condition, _) in enumerate(rest, start=1):
        check = check.when(condition, F.lit(position))
    name = "_check"
    index = F.col(name)
    reason = F.when(index == 0, F.lit(first_reason))
    detail = F.when(index == 0, first_detail)
    for position, (reason_name, _, text) in enumerate(rest, start=1):
        reason = reason.when(index == position, F.lit(reason_name))
        detail = detail.when(index == position, text)
    return check.alias(name), reason, detail


def parse_topic(
    bronze: DataFrame,
    topic: str,
    *,
    now: datetime,
    max_future_skew: timedelta,
    event_time_skew: timedelta | None = None,
) -> DataFrame:
    """Parse the Bronze records of one topic against its contracts.

    The ``event_time_skew`` rule works on each record's *lead*, its event time minus its
    Kafka timestamp. A record is ``event_time_skew`` when its lead is more than
    ``event_time_skew``

    * above zero: the event happened after the producer sent it (a producer clock ahead), or
    * above the lead of the rest of its partition: the lower median of the leads of the
      :data:`SKEW_NEIGHBOURS` records before it *and* of those after it (offset order, same
      topic and partition, this batch; a record without records on both sides is not
      judged by this part). Historic replays send old events now
      (leads of minus years, equal within a day), so only this part catches an event days
      ahead of its neighbours there. Comparing leads rather than event times keeps a live
      partition that was quiet for days from looking skewed, and comparing with the records
      after as well keeps a replay's jump to the next day from looking skewed; a run of up
      to half of :data:`SKEW_NEIGHBOURS` skewed records is still caught. Limit: the last
      record of its partition in the batch is judged only by the producer rule, since it
      cannot be told from the first record of a sparse replay's next day; if it is an
      outlier it is kept, and the per-partition watermark keeps it from making other
      partitions' or topics' events late.

    :param bronze: Bronze rows (see :func:`spark_jobs.bronze_ingest.to_bronze`) of ``topic``.
        With ``event_time_skew`` it must be a batch (static) DataFrame: the rule uses
        row-based windows, which streaming DataFrames do not support.
    :param topic: one of :data:`ingest_core.contracts.TOPICS`.
    :param now: the batch's processing time (UTC); events more than ``max_future_skew`` after
        it are ``event_time_skew``.
    :param max_future_skew: tolerated clock skew of producers against ``now``.
    :param event_time_skew: tolerated lead of an event over its Kafka timestamp and over its
        partition (see above); ``None`` turns the rule off.
    :returns: one row per input row: ``topic``, ``partition``, ``offset``,
        ``kafka_timestamp``, ``key`` binary, ``value`` binary, ``_quarantine_reason``
        string (null when usable), ``_quarantine_detail`` string, the envelope (``event_id``,
        ``event_type``, ``schema_version`` int, ``event_time`` timestamp in UTC,
        ``event_date`` date), the payload fields typed as in
        :data:`ingest_core.contracts.PAYLOAD_DDL` (money ``decimal(18,2)``, currency
        upper-case), ``_rescued_data`` string (JSON object of the
        fields the contract does not know, or null) and ``payload_hash`` string (SHA-256 of
        the typed event, for duplicate conflicts).
    """

    incarnation = tuple(c for c in _INCARNATION if c in bronze.columns)
    plan = _built_plan(topic, incarnation, event_time_skew)
    latest = now + max_future_skew
    df = bronze.select(*plan.head)
    if event_time_skew is not None:
        # The neighbours' leads first, on rows that are still narrow: the window's shuffle
        # and sort then move the Bronze record and its parsed value, not the dozens of
        # per-field columns below (that made the rule cost more than the rest of parsing).
        df = _neighbour_leads(df, list(incarnation))
    # The batch's clock enters as columns, so that the expressions need not be rebuilt.
    df = df.select(
        "*",
        plan.text.alias("_text"),
        F.lit(latest).alias("_latest"),
        F.lit(f"event_time after {latest.isoformat()} (the batch's clock + skew)").alias(
            "_latest_detail"
        ),
    )
    # Each field's value is looked up once and its kind and typed value computed once, in
    # projections of their own: the checks refer to them many times, and Spark keeps such
    # projections apart rather than repeat non-trivial expressions (CollapseProject), so a
    # record is parsed in tens of microseconds, not hundreds. So are the event time, the
    # top-level keys and the unknown fields, then which check (if any) the record fails.
    df = df.select("*", *plan.raws).select("*", *plan.parts).select("*", *plan.early)
    df = df.select("*", plan.check)
    return df.select(*plan.parsed).select("*", *plan.derived)


def prepare_parse(topics: Iterable[str], event_time_skew: timedelta | None) -> None:
    """Build :func:`parse_topic`'s expressions for ``topics`` of Bronze rows now (Bronze
    has ``topic_id``), so that the first micro-batch finds them built: a job can do it in a
    thread while its query starts. Safe beside :func:`parse_topic`, which waits for a topic
    being built rather than build it twice.

    :param topics: contract topics (:data:`ingest_core.contracts.TOPICS`).
    :param event_time_skew: as the job will pass to :func:`parse_topic`.
    """
    for topic in topics:
        _built_plan(topic, _INCARNATION, event_time_skew)


#: Bronze columns that tell a re-created topic's records apart (see :func:`parse_topic`).
_INCARNATION = ("topic_id",)
#: Held while :func:`_topic_plan` builds, so that two threads never build the same plan.
_PLANS_BUILDING = threading.Lock()


def _built_plan(
    topic: str, incarnation: tuple[str, ...], event_time_skew: timedelta | None
) -> _TopicPlan:
    with _PLANS_BUILDING:
        return _topic_plan(topic, incarnation, event_time_skew)


@dataclass(frozen=True)
class _TopicPlan:
    """The column expressions of :func:`parse_topic` for one topic, in the order of its
    projections (see :func:`_topic_plan`)."""

    head: list[Column]
    text: Column
    raws: list[Column]
    parts: list[Column]
    early: list[Column]
    check: Column
    parsed: list[Column]
    derived: list[Column]


@dataclass(frozen=True)
class RecordFields:
    """What the quarantine rules of one topic read: column expressions over the projections
    :func:`parse_topic` builds, so that each rule below is a few lines.

    :param text: the value as text; ``v``: parsed as VARIANT (null: not one JSON value).
    :param single: the text holds exactly one JSON value; ``repeated``: its repeated
        top-level keys (null when none); ``not_object``: one value, not an object.
    :param typed: each declared field's typed value (``event_time`` still as text).
    :param envelope_missing, envelope_mismatch, payload_missing, payload_mismatch, controls,
        invalid: (name, condition) pairs the rules combine; a detail lists the names whose
        conditions hold.
    :param skewed, skew_detail: the ``event_time_skew`` rule (:func:`_skew_checks`).
    """

    topic: str
    event_types: list[str]
    text: Column
    v: Column
    single: Column
    repeated: Column
    not_object: Column
    typed: dict[str, Column]
    envelope_missing: list[tuple[str, Column]]
    envelope_mismatch: list[tuple[str, Column]]
    payload_missing: list[tuple[str, Column]]
    payload_mismatch: list[tuple[str, Column]]
    controls: list[tuple[str, Column]]
    invalid: list[tuple[str, Column]]
    skewed: Column
    skew_detail: Column


def _names_where(pairs: list[tuple[str, Column]]) -> Column:
    """The names of ``pairs`` whose conditions hold, comma-separated."""
    return F.concat_ws(", ", *[F.when(cond, F.lit(name)) for name, cond in pairs])


def _any_of(pairs: list[tuple[str, Column]]) -> Column:
    return reduce(lambda a, b: a | b, [cond for _, cond in pairs])


def _listed(prefix: str, pairs: list[tuple[str, Column]]) -> tuple[Column, Column]:
    """A rule that matches when any of ``pairs`` holds, its detail ``prefix`` + their names."""
    return _any_of(pairs), F.concat(F.lit(prefix), _names_where(pairs))


def _repeated_keys_detail(r: RecordFields) -> Column:
    quoted = F.transform(r.repeated, lambda k: F.concat(F.lit("'"), k, F.lit("'")))
    return F.concat(F.lit("duplicate key "), F.concat_ws(", ", quoted))


def _unknown_event_type(r: RecordFields) -> tuple[Column, Column]:
    allowed = f" is not one of {', '.join(r.event_types)} on topic {r.topic}"
    detail = F.concat(F.lit("event_type "), r.typed["event_type"], F.lit(allowed))
    return ~r.typed["event_type"].isin(*r.event_types), detail


def _invalid_value(r: RecordFields) -> tuple[Column, Column]:
    pairs = [(d, F.coalesce(c, F.lit(False))) for d, c in r.invalid]
    return _any_of(pairs), _names_where(pairs)


#: How each rule of :data:`ingest_core.quarantine.QUARANTINE_RULES` is computed: its name ->
#: (condition, detail) over a topic's :class:`RecordFields`. Checked in that list's order.
RULE_COLUMNS: dict[str, Callable[[RecordFields], tuple[Column, Column]]] = {
    "empty_value": lambda r: (
        F.col("value").isNull() | (F.length("value") == 0),
        F.lit("no bytes"),
    ),
    "invalid_utf8": lambda r: (~F.is_valid_utf8(r.text), F.lit("value is not UTF-8")),
    "duplicate_json_key": lambda r: (
        F.coalesce(F.size(r.repeated) > 0, F.lit(False)),
        _repeated_keys_detail(r),
    ),
    "malformed_json": lambda r: (
        r.v.isNull() | ~F.coalesce(r.single, F.lit(False)),
        F.concat(F.lit("not one JSON value: "), F.left(r.text, F.lit(80))),
    ),
    "not_an_object": lambda r: (r.not_object, F.concat(F.lit("JSON "), F.schema_of_variant(r.v))),
    "envelope_missing": lambda r: _listed("missing: ", r.envelope_missing),
    "envelope_type": lambda r: _listed("wrong type: ", r.envelope_mismatch),
    "unknown_event_type": _unknown_event_type,
    "unsupported_schema_version": lambda r: (
        r.typed["schema_version"] != SCHEMA_VERSION,
        F.concat(F.lit("schema_version "), r.typed["schema_version"].cast("string")),
    ),
    "payload_missing": lambda r: _listed("missing: ", r.payload_missing),
    "payload_type": lambda r: _listed("wrong type: ", r.payload_mismatch),
    "control_character": lambda r: _listed("control character in ", r.controls),
    "invalid_value": _invalid_value,
    "event_time_skew": lambda r: (r.skewed, r.skew_detail),
}


def _raw(field: str) -> Column:
    return F.col(f"_raw_{field}")


def _absent(field: str) -> Column:
    """The field is missing, JSON null, or a blank string (as good as no value for a
    required id or code)."""
    blank = F.trim(F.col(f"_str_{field}")) == ""
    return _raw(field).isNull() | F.is_variant_null(_raw(field)) | F.coalesce(blank, F.lit(False))


def _field_parts(schema: StructType) -> tuple[list[Column], list[Column]]:
    """Each field's raw VARIANT (``_raw_<f>``), then its kind (``_kind_<f>``, not for arrays),
    its string (``_str_<f>``) and its typed value (``_typed_<f>``): two projections."""
    raws = [
        F.variant_get(F.col("_v"), f"$.{f.name}", "variant").alias(f"_raw_{f.name}")
        for f in schema.fields
    ]
    # An array field's kind is not needed: its typed value is null unless it is an array
    # whose elements fit, and schema_of_variant of an array merges every element's schema.
    parts = [
        expression.alias(f"_{part}_{f.name}")
        for f in schema.fields
        for part, expression in (
            *(
                []
                if isinstance(f.dataType, ArrayType)
                else [("kind", F.schema_of_variant(_raw(f.name)))]
            ),
            ("str", F.try_variant_get(_raw(f.name), "$", "string")),
            ("typed", F.try_variant_get(_raw(f.name), "$", f.dataType.simpleString())),
        )
    ]
    return raws, parts


def _typed_fields(schema: StructType) -> tuple[dict[str, Column], list[tuple[str, Column]]]:
    """Each field's typed value, and (field, present but of the wrong JSON type) pairs."""
    typed: dict[str, Column] = {}
    mismatch: list[tuple[str, Column]] = []
    for field in schema.fields:
        value = F.col(f"_typed_{field.name}")
        typed[field.name] = value
        if isinstance(field.dataType, ArrayType):
            # try_variant_get casts only an array (whose elements fit) to an array type.
            mismatch.append((field.name, ~_absent(field.name) & value.isNull()))
            continue
        kind = F.col(f"_kind_{field.name}")
        if isinstance(field.dataType, StringType):
            ok = kind == "STRING"
        elif isinstance(field.dataType, IntegerType):
            ok = kind.rlike(_INTEGRAL) & value.isNotNull()
        elif isinstance(field.dataType, DecimalType):
            ok = kind.rlike(_NUMERIC) & value.isNotNull()
        else:  # pragma: no cover - the contracts use only the types above
            raise TypeError(
                f"unsupported contract type {field.dataType.simpleString()} for {field.name}"
            )
        mismatch.append((field.name, ~_absent(field.name) & ~ok))
    return typed, mismatch


def _controls(topic: str, typed: dict[str, Column]) -> list[tuple[str, Column]]:
    """(id field, holds a control character) pairs: the topic's ids, then the items' ids."""
    id_fields = [f for f in ID_FIELDS[topic] if f in typed]
    controls = [(f, F.coalesce(typed[f].rlike(_CONTROL), F.lit(False))) for f in id_fields]
    if "items" in typed:
        items = F.try_variant_get(F.col("_v"), "$.items", "array<variant>")

        def control_in(name: str) -> Callable[[Column], Column]:
            return lambda x: F.try_variant_get(x, f"$.{name}", "string").rlike(_CONTROL)

        for name in ITEM_ID_FIELDS:
            in_item = F.exists(items, control_in(name))
            controls.append((f"items.{name}", F.coalesce(in_item, F.lit(False))))
    return controls


def _value_check(check: ValueCheck, value: Column) -> Column:
    """The condition under which ``value`` fails ``check``."""
    if check.kind == "enum":
        return ~value.isin(*check.values)
    if check.kind in ("minimum", "maximum"):
        limit = F.lit(check.limit)
        return value < limit if check.kind == "minimum" else value > limit
    if check.kind == "negative":
        return value < 0
    exact = F.try_variant_get(F.col("_v"), f"$.{check.field}", "decimal(38,18)")
    return exact != value


def _invalid_values(
    topic: str, typed: dict[str, Column], event_time: Column
) -> tuple[list[tuple[str, Column]], dict[str, Column]]:
    """The ``invalid_value`` checks (the event time's, then the contract's
    :func:`~ingest_core.quarantine.value_checks`) as (detail, condition) pairs, and the
    fields as Silver writes them (``x-ingest-case: upper`` applied, ``event_time`` parsed)."""
    event_time_text = typed["event_time"]
    invalid: list[tuple[str, Column]] = list(
        zip(
            EVENT_TIME_CHECKS,
            [~event_time_text.rlike(_ISO_WITH_OFFSET), event_time < F.lit(EARLIEST_EVENT_TIME)],
            strict=True,
        )
    )
    fields = {**typed, "event_time": event_time}
    source = get_contracts().sources[topic]  # include/contracts/<topic>.yaml
    for declared in source.fields:
        if declared.schema.get("x-ingest-case") == "upper":
            fields[declared.name] = F.upper(typed[declared.name])
    for check in value_checks(source):
        # An enum is judged on the value as Silver writes it (upper-cased currency codes).
        value = fields[check.field] if check.kind == "enum" else typed[check.field]
        invalid.append((check.detail, _value_check(check, value)))
    return invalid, fields


def _record_fields(
    topic: str, schema: StructType, event_time_skew: timedelta | None
) -> tuple[RecordFields, dict[str, Column]]:
    """The :class:`RecordFields` of ``topic``'s records, and the fields as Silver writes
    them (see :func:`_invalid_values`)."""
    contracts = [c for c in CONTRACTS.values() if c.topic == topic]
    text, v = F.col("_text"), F.col("_v")
    # try_parse_json (like every JSON reader of Spark's) reads the first value and ignores
    # what follows: "{...}{...}", "{...} xyz", "{...},{...}", "{...}]". Wrapped as "[text]", a
    # single value is an array of one element, and as "[text,0]" an array of two. After the
    # first value, any text but whitespace breaks the syntax (null), adds elements (",...")
    # or closes the array early ("]..."; Jackson ignores what follows its root), and then
    # "[text,0]" has one element: both counts hold only for one value. json_array_length
    # only tokenizes (Jackson, streaming); it builds no value.
    single = (F.json_array_length(F.concat(F.lit("["), text, F.lit("]"))) == 1) & (
        F.json_array_length(F.concat(F.lit("["), text, F.lit(",0]"))) == 2
    )
    # The repeated names are listed (a lambda per key: slow) only for a record that has
    # any, which the sizes tell cheaply (``_keys``: see :func:`_topic_plan`).
    keys = F.col("_keys")
    repeated = F.when(
        F.size(keys) != F.size(F.array_distinct(keys)),
        F.array_distinct(F.filter(keys, lambda k, i: F.array_position(keys, k) != i + 1)),
    )
    typed, mismatch = _typed_fields(schema)
    event_time = F.col("_event_time")
    skewed, skew_detail = _skew_checks(
        event_time, F.col("_latest"), F.col("_latest_detail"), event_time_skew
    )
    controls = _controls(topic, typed)
    # The one JSON value is an object when its text opens with "{" after JSON's whitespace
    # (RFC 8259, section 2). schema_of_variant(v) would build the whole record's schema
    # (every field, every array element's merged) for every record: only the quarantined
    # ones get it, in their detail.
    not_object = v.isNotNull() & ~text.rlike(r"^[ \t\n\r]*[{]")
    envelope_mismatch = [(f, c) for f, c in mismatch if f in ENVELOPE_FIELDS]
    envelope_mismatch.append(("event_time", ~_absent("event_time") & event_time.isNull()))
    payload_mismatch = [(f, c) for f, c in mismatch if f not in ENVELOPE_FIELDS]
    invalid, fields = _invalid_values(topic, typed, event_time)
    if "items" in typed:
        item_mismatch, item_invalid = _item_checks(v)
        payload_mismatch = [
            (f, c | item_mismatch) if f == "items" else (f, c) for f, c in payload_mismatch
        ]
        invalid.extend(item_invalid)
    required = sorted({f for c in contracts for f in c.required})
    record = RecordFields(
        topic=topic,
        event_types=sorted(c.event_type for c in contracts),
        text=text,
        v=v,
        single=single,
        repeated=repeated,
        not_object=not_object,
        typed=typed,
        envelope_missing=[(f, _absent(f)) for f in ENVELOPE_FIELDS],
        envelope_mismatch=envelope_mismatch,
        payload_missing=[(f, _absent(f)) for f in required],
        payload_mismatch=payload_mismatch,
        controls=controls,
        invalid=invalid,
        skewed=skewed,
        skew_detail=skew_detail,
    )
    return record, fields


@cache
def _topic_plan(
    topic: str, incarnation: tuple[str, ...], event_time_skew: timedelta | None
) -> _TopicPlan:
    """Build :func:`parse_topic`'s expressions for ``topic`` once per process.

    They are a few hundred expressions per topic, and building them from Python costs
    tens of thousands of py4j calls: 5-7 s of driver time per micro-batch on a 2-core
    machine, measured with cProfile, more than Spark took to parse 100k records. Column
    expressions name columns, not a DataFrame, so every micro-batch can reuse them; what
    changes per batch (its clock) is read from the ``_latest`` and ``_latest_detail``
    columns :func:`parse_topic` adds. The quarantine rules are
    :data:`ingest_core.quarantine.QUARANTINE_RULES`, each computed by :data:`RULE_COLUMNS`.
    """
    schema = payload_schema(topic)
    known = [f.name for f in schema.fields]
    text = F.col("_text")
    value_text = F.col("value").cast("string")
    # A re-created topic restarts its offsets: its incarnation (topic_id, when Bronze has it)
    # keeps the skew rule's neighbours apart.
    head = [*COORDINATES, *incarnation, "key", "value"]
    head_columns = [F.col(c) for c in head] + [F.try_parse_json(value_text).alias("_v")]
    raws, parts = _field_parts(schema)
    # parse_json refuses duplicate keys (returns null); Jackson's json_object_keys lists the
    # top-level keys, repeats included, so the record can be told apart from broken JSON.
    # A record parse_json read has no repeated key at any level, so only the others are
    # tokenized again (4 % of a parse's time, JFR).
    keys_column = F.when(F.col("_v").isNull(), F.json_object_keys(text)).alias("_keys")
    event_time_column = F.try_to_timestamp(F.col("_typed_event_time")).alias("_event_time")
    record, fields = _record_fields(topic, schema, event_time_skew)
    check, reason, detail = _first_reason(
        [(rule.reason, *RULE_COLUMNS[rule.name](record)) for rule in QUARANTINE_RULES]
    )
    unknown_column, rescued = _rescued(known)
    parsed = [
        *[F.col(c) for c in (*COORDINATES, "key", "value")],
        # Not "reason": refunds have a payload field of that name.
        reason.alias("_quarantine_reason"),
        detail.alias("_quarantine_detail"),
        *[fields[name].alias(name) for name in known],
        rescued.alias("_rescued_data"),
    ]
    payload_cols = [c for c in known if c != "event_id"] + ["_rescued_data"]
    derived = [
        F.to_date("event_time").alias("event_date"),
        F.sha2(F.to_json(F.struct(*payload_cols)), 256).alias("payload_hash"),
    ]
    early = [keys_column, event_time_column, unknown_column]
    return _TopicPlan(head_columns, value_text, raws, parts, early, check, parsed, derived)


def _rescued(known: list[str]) -> tuple[Column, Column]:
    """``_unknown`` (the fields the contract does not know, as a map; null when none) and
    the rescued data column (that map as JSON, null when empty).

    The unknown fields' values only for a record that has any: its top-level keys (a
    streaming tokenization) less the known ones tell, and most records have none. Reading
    every record into a map and filtering it with a lambda (interpreted, per key) cost ~5 %
    of a warm parse (bench/results/REFERENCE.md, 2026-12-04 09:04)."""
    text = F.col("_text")
    extra_keys = F.array_except(F.json_object_keys(text), F.array(*[F.lit(f) for f in known]))
    as_map = F.from_json(text, "map<string,string>")
    unknown_column = F.when(
        F.size(extra_keys) > 0, F.map_filter(as_map, lambda k, _: ~k.isin(*known))
    ).alias("_unknown")
    unknown = F.col("_unknown")
    return unknown_column, F.when(F.size(unknown) > 0, F.to_json(unknown))


def _lead(event_time: Column) -> Column:
    """A record's lead: its event time minus its Kafka timestamp, in microseconds (exact
    for every timestamp, no floating point in the comparisons)."""

    return F.unix_micros(event_time) - F.unix_micros(F.col("kafka_timestamp"))


def _neighbour_leads(df: DataFrame, incarnation: list[str]) -> DataFrame:
    """Add ``_lead_before`` and ``_lead_after`` (bigint, microseconds): the lower median of
    the leads of the :data:`SKEW_NEIGHBOURS` records before and after each record (offset
    order, same topic, ``incarnation`` and partition, this batch); null without any.

    :param df: rows with ``topic``, ``partition``, ``offset``, ``kafka_timestamp`` and
        ``_v`` (the value parsed as VARIANT).
    """

    text = F.try_variant_get(F.col("_v"), "$.event_time", "string")
    ordered = Window.partitionBy("topic", *incarnation, "partition").orderBy("offset")

    def lower_median(frame: WindowSpec) -> Column:
        leads = F.sort_array(F.collect_list("_lead").over(frame))
        middle = F.floor((F.size(leads) + 1) / 2).cast("int")  # 1-based, lower median
        return F.when(F.size(leads) > 0, F.element_at(leads, middle))

    return (
        df.withColumn("_lead", _lead(F.try_to_timestamp(text)))
        .withColumn("_lead_before", lower_median(ordered.rowsBetween(-SKEW_NEIGHBOURS, -1)))
        .withColumn("_lead_after", lower_median(ordered.rowsBetween(1, SKEW_NEIGHBOURS)))
        .drop("_lead")
    )


def _skew_checks(
    event_time: Column, latest: Column, now_detail: Column, skew: timedelta | None
) -> tuple[Column, Column]:
    """The ``event_time_skew`` rule of :func:`parse_topic` on rows with ``kafka_timestamp``
    and, with ``skew``, the neighbours' leads of :func:`_neighbour_leads`.

    :param latest: ``now + max_future_skew`` (timestamp): any later event time is skewed.
    :param now_detail: the detail (string) of an event time after ``latest``.
    :param skew: see :func:`parse_topic`'s ``event_time_skew``; ``None``: only ``latest``.
    :returns: (condition, detail).
    """

    ahead_of_now = F.coalesce(event_time > latest, F.lit(False))
    if skew is None:
        return ahead_of_now, F.when(ahead_of_now, now_detail)
    lead = _lead(event_time)
    limit = F.lit(int(skew / timedelta(microseconds=1)))
    before, after = F.col("_lead_before"), F.col("_lead_after")
    # Both sides must have records: with only the records before it, a record cannot be
    # told from the first of a sparse replay's next day (6 valid Olist events were
    # quarantined that way); an unknown side leaves the comparison null, i.e. not skewed.
    ahead_of_producer = F.coalesce(lead > limit, F.lit(False))
    ahead_of_partition = F.coalesce((lead > before + limit) & (lead > after + limit), F.lit(False))
    detail = (
        F.when(ahead_of_now, now_detail)
        .when(ahead_of_producer, F.lit(f"event_time more than {skew} ahead of its Kafka timestamp"))
        .otherwise(F.lit(f"event_time more than {skew} ahead of the rest of its partition"))
    )
    return ahead_of_now | ahead_of_producer | ahead_of_partition, detail


def _item_checks(v: Column) -> tuple[Column, list[tuple[str, Column]]]:
    """Element-level rules for ``items``: the typed cast alone would turn a string price into
    a number, round 10.555 and null what it cannot read.

    :returns: (type mismatch condition, [(invalid_value detail, condition)]).
    """

    items = F.try_variant_get(v, "$.items", "array<variant>")

    def field(x: Column, name: str) -> Column:
        return F.variant_get(x, f"$.{name}", "variant")

    def kind(x: Column, name: str) -> Column:
        return F.coalesce(F.schema_of_variant(field(x, name)), F.lit("ABSENT"))

    def exact(x: Column, name: str) -> Column:
        return F.try_variant_get(x, f"$.{name}", "decimal(38,18)")

    numeric = f"{_NUMERIC[:-2]}|VOID|ABSENT)$"  # optional numbers may be null or absent
    mismatch = F.exists(
        items,
        lambda x: (
            ~F.schema_of_variant(x).startswith("OBJECT")
            | ~kind(x, "product_id").isin("STRING")
            | ~kind(x, "price").rlike(_NUMERIC)
            | ~kind(x, "freight").rlike(numeric)
            | ~kind(x, "quantity").rlike(_INTEGRAL[:-2] + "|VOID|ABSENT)$")
            | (exact(x, "price") > 1e16)
        ),
    )
    invalid = [
        (
            "negative item price or freight",
            F.exists(items, lambda x: (exact(x, "price") < 0) | (exact(x, "freight") < 0)),
        ),
        (
            "item price or freight has more than 2 decimals",
            F.exists(
                items,
                lambda x: (
                    (exact(x, "price") != F.round(exact(x, "price"), 2))
                    | (exact(x, "freight") != F.round(exact(x, "freight"), 2))
                ),
            ),
        ),
        (
            "item quantity not positive",
            F.exists(items, lambda x: F.try_variant_get(x, "$.quantity", "bigint") <= 0),
        ),
    ]
    return F.coalesce(mismatch, F.lit(False)), invalid


def quarantine_rows(parsed: DataFrame) -> DataFrame:
    """The unusable rows, shaped for ``silver_quarantine``.

    :returns: ``topic``, ``partition``, ``offset``, ``kafka_timestamp``, ``key`` binary,
        ``value`` binary (raw, as in Bronze), ``reason`` string, ``detail`` string,
        ``event_id`` string (when it could be read).
    """

    return parsed.where("_quarantine_reason IS NOT NULL").select(
        *COORDINATES,
        "key",
        "value",
        F.col("_quarantine_reason").alias("reason"),
        F.col("_quarantine_detail").alias("detail"),
        "event_id",
    )


def usable_rows(parsed: DataFrame) -> DataFrame:
    """The rows that passed every check, without raw bytes or quarantine columns."""
    return parsed.where("_quarantine_reason IS NULL").drop(
        "_quarantine_reason", "_quarantine_detail", "key", "value"
    )


#: What silver_refine decides for each Bronze record (column ``_decision`` of :func:`decide`).
KEPT, DUPLICATE, LATE, QUARANTINED = "kept", "duplicate", "late", "quarantined"
#: Parsed columns :func:`decide` and silver_refine's counts read, with their types.
_DECIDED_ON = {
    "event_id": "string",
    "event_type": "string",
    "event_time": "timestamp",
    "event_date": "date",
    "payload_hash": "string",
    "customer_id": "string",
}


def parse_batch(
    bronze: DataFrame,
    contract_topics: Mapping[str, str | None],
    *,
    now: datetime,
    max_future_skew: timedelta,
    event_time_skew: timedelta | None = None,
) -> tuple[DataFrame, dict[str, list[str]]]:
    """Parse every record of a micro-batch once, whatever its topic, into one frame.

    Each topic's records are parsed by :func:`parse_topic` against their own contracts; a
    topic without contract (``None`` in ``contract_topics``) has its records quarantined as
    ``unknown_event_type``. The results are stacked by column name (a column a topic does
    not have is null), with ``_contract_topic`` naming the contract topic (null for a
    topic without contract). Payload columns shared by several topics have one type in
    :data:`ingest_core.contracts.PAYLOAD_DDL`, so stacking changes no type.

    :param bronze: Bronze rows of one micro-batch, any topics (a batch DataFrame).
    :param contract_topics: Kafka topic (as in Bronze's ``topic``) -> its contract topic, or
        None when it has no contract.
    :param now, max_future_skew, event_time_skew: see :func:`parse_topic`.
    :returns: ``(parsed, columns)``: ``parsed`` has :func:`parse_topic`'s columns of every
        topic (``key`` and ``value`` null but on quarantined rows, which alone write them)
        plus ``_contract_topic`` string; ``columns`` maps each contract topic to the
        columns of its usable rows, in :func:`usable_rows` order (what its Silver table
        holds, with ``payload_hash``).
    """

    frames: list[DataFrame] = []
    columns: dict[str, list[str]] = {}
    for kafka_topic, topic in contract_topics.items():
        rows = bronze.where(F.col("topic") == kafka_topic)
        if topic is None:
            frames.append(
                rows.select(*COORDINATES, "key", "value").select(
                    "*",
                    F.lit("unknown_event_type").alias("_quarantine_reason"),
                    F.lit(f"topic {kafka_topic} has no contract").alias("_quarantine_detail"),
                    # The columns decide() reads, so that a batch of such topics alone works.
                    *[F.lit(None).cast(t).alias(c) for c, t in _DECIDED_ON.items()],
                    F.lit(None).cast("string").alias("_contract_topic"),
                )
            )
            continue
        parsed = parse_topic(
            rows,
            topic,
            now=now,
            max_future_skew=max_future_skew,
            event_time_skew=event_time_skew,
        )
        columns[topic] = usable_rows(parsed).columns
        # The raw bytes only where they are written (silver_quarantine): the deduplication's
        # shuffle and sort, and the materialised decisions, then do not carry every record's
        # key and value a second time beside its parsed columns.
        quarantined = F.col("_quarantine_reason").isNotNull()
        frames.append(
            parsed.withColumns(
                {
                    "key": F.when(quarantined, F.col("key")),
                    "value": F.when(quarantined, F.col("value")),
                    "_contract_topic": F.lit(topic),
                }
            )
        )
    stacked = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
    return stacked, columns


def _watermark_in_force(watermarks: Mapping[str, datetime | None]) -> Column:
    """A timestamp column: the watermark of each row's ``_contract_topic`` (null for a topic
    without one yet); see :func:`decide`."""

    mark: Column = F.lit(None).cast("timestamp")
    for topic, watermark in sorted(watermarks.items()):
        if watermark is not None:
            mark = F.when(
                F.col("_contract_topic") == topic, F.lit(watermark).cast("timestamp")
            ).otherwise(mark)
    return mark


def _kept_before(seen: DataFrame, batch_ids: DataFrame) -> DataFrame:
    """``event_id``, ``_seen_hash``: the ids of ``batch_ids`` an earlier batch kept, with
    the kept payload's hash, one row per id (``seen`` cut down to the batch first, see
    :func:`decide`)."""

    return (
        seen.join(batch_ids, "event_id", "left_semi")
        .dropDuplicates(["event_id"])
        .select("event_id", F.col("payload_hash").alias("_seen_hash"))
    )


def decide(
    parsed: DataFrame, watermarks: Mapping[str, datetime | None], seen: DataFrame
) -> DataFrame:
    """Decide every record of a micro-batch at once: quarantined, late, duplicate or kept.

    * ``quarantined``: :func:`parse_topic` gave it a reason.
    * ``late``: usable, and its ``event_time`` is before its topic's watermark in force at
      the start of the micro-batch (Spark's rule for stateful operators; no watermark yet
      means nothing is late).
    * ``duplicate``: on time, and its ``event_id`` was kept before: by an earlier batch (in
      ``seen``, whatever the topic), or earlier in this batch on the same contract topic,
      the earliest arrival (``kafka_timestamp``, ``partition``, ``offset``) winning.
    * ``kept``: the first occurrence: written to Silver.

    Every event type is deduplicated by one join with the id history, cut down to the
    batch's ids first (a semi-join whose build side is the batch): the history grows with
    every event, and a forced broadcast of 1.1M ids exhausted a 1g driver heap in
    ``bench --full``; Spark (AQE) broadcasts whichever side its statistics show small.

    :param parsed: :func:`parse_batch`'s rows (``_contract_topic``, :func:`parse_topic`'s
        columns).
    :param watermarks: contract topic -> its watermark (naive UTC, as Spark returns
        timestamps); a topic absent or None has none yet.
    :param seen: ``event_id`` string, ``payload_hash`` string: ids kept by earlier batches
        within the deduplication horizon.
    :returns: ``parsed``'s rows and columns plus ``_decision`` string (:data:`KEPT`,
        :data:`DUPLICATE`, :data:`LATE`, :data:`QUARANTINED`), ``watermark`` timestamp and
        ``lateness_seconds`` double (watermark minus event time; late rows only),
        ``first_payload_hash`` string (the kept occurrence's hash; duplicates only) and
        ``_conflict`` boolean (a duplicate whose payload differs from the kept one).
    """

    mark = _watermark_in_force(watermarks)
    usable = F.col("_quarantine_reason").isNull()
    marked = parsed.withColumn("watermark", F.when(usable, mark)).withColumn(
        "_candidate", usable & F.coalesce(F.col("event_time") >= F.col("watermark"), F.lit(True))
    )
    late = usable & ~F.col("_candidate")
    order = Window.partitionBy("_candidate", "_contract_topic", "event_id").orderBy(
        "kafka_timestamp", "partition", "offset"
    )
    ranked = marked.withColumn("_rank", F.row_number().over(order)).withColumn(
        "_batch_first_hash", F.first("payload_hash").over(order)
    )
    batch_ids = marked.where("_candidate").select("event_id").distinct()
    joined = ranked.join(_kept_before(seen, batch_ids), "event_id", "left")
    kept = F.col("_candidate") & (F.col("_rank") == 1) & F.col("_seen_hash").isNull()
    decision = (
        F.when(~usable, F.lit(QUARANTINED))
        .when(late, F.lit(LATE))
        .when(kept, F.lit(KEPT))
        .otherwise(F.lit(DUPLICATE))
    )
    is_duplicate = F.col("_decision") == DUPLICATE
    first_hash = F.when(is_duplicate, F.coalesce("_seen_hash", "_batch_first_hash"))
    return (
        joined.withColumn("_decision", decision)
        .withColumn("watermark", F.when(F.col("_decision") == LATE, F.col("watermark")))
        .withColumn(
            "lateness_seconds",
            F.unix_micros("watermark").cast("double") / 1e6
            - F.unix_micros("event_time").cast("double") / 1e6,
        )
        .withColumn("first_payload_hash", first_hash)
        .withColumn(
            "_conflict",
            F.coalesce(
                is_duplicate & (F.col("payload_hash") != F.col("first_payload_hash")),
                F.lit(False),
            ),
        )
        .select(
            *parsed.columns,
            "_decision",
            "watermark",
            "lateness_seconds",
            "first_payload_hash",
            "_conflict",
        )
    )


def enrich_with_customers(events: DataFrame, customers: DataFrame) -> DataFrame:
    """Add the customer's ``customer_city``, ``customer_state`` and ``customer_country``.

    A stream-static join: ``customers`` is the dimension as read for this micro-batch, so a
    customer loaded before a batch starts is seen by that batch. Unknown customers (or a
    null ``customer_id``) keep the event with null customer columns (left join).

    :param customers: ``customer_id``, ``city``, ``state``, ``country`` strings, one row per id.
    """
    dim = customers.selectExpr(
        "customer_id AS _cid",
        "city AS customer_city",
        "state AS customer_state",
        "country AS customer_country",
    )
    joined = events.join(dim, events["customer_id"] == dim["_cid"], "left")
    return joined.drop("_cid")
