"""Event contracts: what an event on each topic looks like, loaded from the declarations in
``include/contracts/`` (one file per source topic, JSON Schema 2020-12 written in YAML;
``docs/contracts.md`` is the reference). This module is the loader, not the definitions.

Kafka values are UTF-8 JSON objects; the Kafka key is the source's ``key`` field (the
entity id: order id for orders and payments, refund id, customer id) so that one entity's
events keep their order inside a partition.

``envelope.yaml`` declares the envelope every event carries (``event_id``, ``event_type``,
``event_time`` with an offset, ``schema_version``) and shared definitions (``currency``,
``money``). Each other file declares one source: its ``x-ingest-source`` block (topic, key,
event types, Silver table) and its payload's properties, ``required`` fields, enums,
ranges and money. From them this module derives what the rest of the platform reads:

* :data:`CONTRACTS` (:class:`EventContract` per event type), :data:`TOPICS`;
* :data:`PAYLOAD_DDL` and :data:`ENVELOPE_DDL`: Spark DDL of each payload (money
  ``decimal(18,2)``, integers ``int``), read by Silver's parser, late corrections and
  the lineage schema facets;
* :data:`ID_FIELDS`, :data:`ITEM_ID_FIELDS`: identifiers (``x-ingest-id``), quarantined as
  ``control_character`` when they hold control characters;
* enums (:func:`enum_of`; :data:`CURRENCIES`, :data:`PAYMENT_METHODS`...), read by Silver's
  quarantine rules (``x-ingest-quarantine``) and the gates' expectations.

Money is a JSON number with at most 2 decimals (``multipleOf: 0.01``), never negative
(``minimum: 0``). Fields a payload does not declare are kept in Silver's ``_rescued_data``
column, never dropped.

Imports neither pyspark nor Airflow.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ingest_core.settings import INCLUDE_DIR, catalog_dir, topic_collision_key

#: The repository's declarations (``INGEST_CATALOG_DIR`` may point elsewhere:
#: :func:`contracts_dir`).
CONTRACTS_DIR: Path = INCLUDE_DIR / "contracts"
#: The file of the envelope and the shared definitions.
ENVELOPE_FILE = "envelope.yaml"
#: JSON Schema types the platform maps to Spark types (a ``"null"`` beside one makes the
#: field nullable, nothing else).
SPARK_TYPES = {"string": "string", "integer": "int"}
#: The keys of a source's ``x-ingest-source`` block: the first four are required.
#: ``customer_column``: the field whose null share the Silver gate caps
#: (``quality.max_null_customer_rate``).
#: ``enrich``: dimensions Silver joins in (:data:`ENRICHMENTS`).
SOURCE_KEYS = ("topic", "key", "event_types", "silver_table", "customer_column", "enrich")
#: Dimensions a source may ask Silver to join in, and the field each joins on: ``customers``
#: adds ``customer_city``, ``customer_state``, ``customer_country`` from ``silver_customers``.
ENRICHMENTS = {"customers": "customer_id"}
#: A field, event type or table name: a plain Spark identifier (no quoting anywhere).
FIELD_NAME = r"[a-z][a-z0-9_]*"
#: A topic name Kafka accepts (before the profile's prefix), without "." or "..".
TOPIC_NAME = r"(?!\.\.?$)[A-Za-z0-9._-]{1,200}"
#: Columns Silver adds beside a payload's fields: a field may not be called so.
RESERVED_FIELDS = frozenset(
    {
        "topic",
        "topic_id",
        "partition",
        "offset",
        "key",
        "value",
        "kafka_timestamp",
        "kafka_timestamp_type",
        "ingestion_time",
        "ingestion_date",
        "event_date",
        "payload_hash",
        "watermark",
        "lateness_seconds",
        "first_payload_hash",
        "customer_city",
        "customer_state",
        "customer_country",
    }
)
#: Spark type of a number with ``multipleOf: 0.01``: money.
MONEY_TYPE = "decimal(18,2)"


class ContractError(ValueError):
    """A contract file is not a valid declaration; the message names the file and the
    field."""


@dataclass(frozen=True)
class EventContract:
    """The contract of one event type.

    :param event_type: value of the envelope's ``event_type``.
    :param topic: Kafka topic the events travel on.
    :param key_field: payload field used as the Kafka key.
    :param required: payload fields that must be present and non-null.
    :param money_fields: fields that are money: non-negative, ``decimal(18,2)``.
    :param silver_table: the Silver table the events land in.
    """

    event_type: str
    topic: str
    key_field: str
    required: tuple[str, ...]
    money_fields: tuple[str, ...]
    silver_table: str


@dataclass(frozen=True)
class Field:
    """One declared field, resolved (``$ref`` followed).

    :param name: the JSON property name.
    :param spark_type: Spark DDL type (``string``, ``int``, ``decimal(18,2)``,
        ``array<struct<...>>``).
    :param nullable: the declaration allows ``null``.
    :param schema: the field's resolved JSON Schema (enum, minimum, ``x-ingest-*``...).
    """

    name: str
    spark_type: str
    nullable: bool
    schema: dict[str, Any]

    @property
    def is_money(self) -> bool:
        """A number with ``multipleOf: 0.01``."""
        return self.spark_type == MONEY_TYPE

    @property
    def enum(self) -> frozenset[str] | None:
        """The declared ``enum``'s values (strings: the loader refuses others), or None."""
        values = self.schema.get("enum")
        return None if values is None else frozenset(str(v) for v in values)

    @property
    def is_id(self) -> bool:
        """Declared ``x-ingest-id``: an identifier (no control characters)."""
        return bool(self.schema.get("x-ingest-id"))


@dataclass(frozen=True)
class SourceContract:
    """One source topic's declaration, as loaded.

    :param path: the file it was read from.
    :param schema: the document, as written (a JSON Schema of the whole event).
    :param fields: payload fields in declaration order (envelope excluded).
    :param items: the fields of each element of an array-of-objects field, by field name.
    :param enrich: dimensions Silver joins in (:data:`ENRICHMENTS`).
    """

    path: Path
    topic: str
    key_field: str
    event_types: tuple[str, ...]
    silver_table: str
    required: tuple[str, ...]
    fields: tuple[Field, ...]
    items: dict[str, tuple[Field, ...]]
    schema: dict[str, Any]
    enrich: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The payload's field names, in declaration order."""
        return tuple(f.name for f in self.fields)

    def enum(self, name: str) -> frozenset[str]:
        """The values field ``name`` declares. :raises KeyError: no such field, or no enum."""
        values = self.field(name).enum
        if values is None:
            raise KeyError(f"{self.topic}.{name} declares no enum")
        return values

    def field(self, name: str) -> Field:
        """:raises KeyError: no such payload field."""
        for field in self.fields:
            if field.name == name:
                return field
        raise KeyError(f"{self.topic} declares no field {name!r}")


@dataclass(frozen=True)
class Contracts:
    """Everything in ``include/contracts/``: the envelope and the sources by topic."""

    envelope: dict[str, Any]
    envelope_fields: tuple[Field, ...]
    sources: dict[str, SourceContract]

    @property
    def event_time_field(self) -> str:
        """The envelope field declared ``x-ingest-event-time`` (``event_time``)."""
        return next(f.name for f in self.envelope_fields if f.schema.get("x-ingest-event-time"))

    def column_types(self, silver_table: str) -> dict[str, str]:
        """Silver ``silver_table``'s scalar columns -> Spark DDL type, as the contracts
        landing in it declare them: the envelope (``schema_version`` aside: Silver does not
        keep it; the event-time field a ``timestamp``) and every payload field that is not
        an array. Empty when no contract lands in the table."""
        sources = [s for s in self.sources.values() if s.silver_table == silver_table]
        if not sources:
            return {}
        types = {
            f.name: "timestamp" if f.name == self.event_time_field else f.spark_type
            for f in self.envelope_fields
            if f.name != "schema_version"
        }
        for source in sources:
            types |= {f.name: f.spark_type for f in source.fields if "<" not in f.spark_type}
        return types

    def column_enums(self, silver_table: str) -> dict[str, frozenset[str]]:
        """Silver ``silver_table``'s columns with a declared ``enum`` -> its values."""
        return {
            f.name: f.enum
            for s in self.sources.values()
            if s.silver_table == silver_table
            for f in s.fields
            if f.enum is not None
        }


def contracts_dir() -> Path:
    """``contracts/`` of :func:`ingest_core.settings.catalog_dir`."""
    return catalog_dir() / "contracts"


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader refusing a key given twice in one mapping (YAML's last-one-wins
    would silently replace a field's declaration)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
        twice = sorted({str(k) for k in keys if keys.count(k) > 1})
        if twice:
            raise yaml.constructor.ConstructorError(
                None, None, f"key(s) {twice} given twice in one mapping", node.start_mark
            )
        return super().construct_mapping(node, deep=deep)


def _read(path: Path) -> dict[str, Any]:
    try:
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except UnicodeDecodeError as error:
        raise ContractError(
            f"{path.name}: not UTF-8 ({error.reason} at byte {error.start})"
        ) from None
    except (OSError, yaml.YAMLError) as error:
        text = " ".join(str(error).split())
        raise ContractError(f"{path.name}: cannot be read as YAML: {text}") from None
    if not isinstance(document, dict):
        raise ContractError(f"{path.name}: a contract is a mapping (a JSON Schema object)")
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(document)
    except SchemaError as error:
        where = "/".join(str(p) for p in error.absolute_path) or "(top)"
        raise ContractError(
            f"{path.name}: not a valid JSON Schema at {where}: {error.message}"
        ) from None
    return document


def _resolve(schema: dict[str, Any], envelope: dict[str, Any], where: str) -> dict[str, Any]:
    """Follow a ``$ref`` into the envelope file's ``$defs`` (the only references allowed)."""
    if not isinstance(schema, dict):
        raise ContractError(f"{where}: declare the field as a mapping with a type, not {schema!r}")
    ref = schema.get("$ref")
    if ref is None:
        return schema
    prefix = f"{ENVELOPE_FILE}#/$defs/"
    name = ref.removeprefix(prefix)
    if not ref.startswith(prefix) or name not in envelope.get("$defs", {}):
        known = sorted(envelope.get("$defs", {}))
        raise ContractError(f"{where}: $ref {ref!r} is not {prefix}<one of {known}>")
    target = envelope["$defs"][name]
    if not isinstance(target, dict) or "$ref" in target:
        raise ContractError(f"{where}: $ref {ref!r} must name a definition with a type")
    return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}


def _field(name: str, schema: dict[str, Any], envelope: dict[str, Any], where: str) -> Field:
    """Map one property's JSON Schema to a :class:`Field`.

    :raises ContractError: a type the platform does not map (see :data:`SPARK_TYPES`).
    """
    schema = _resolve(schema, envelope, f"{where}.{name}")
    if "enum" in schema and not all(isinstance(v, str) for v in schema["enum"]):
        raise ContractError(
            f"{where}.{name}: enum values are strings (quote yes/no/on/off: YAML reads them "
            f"as booleans), not {schema['enum']!r}"
        )
    if "x-ingest-quarantine" in schema and "enum" not in schema:
        raise ContractError(f"{where}.{name}: x-ingest-quarantine needs an enum to check")
    if schema.get("x-ingest-case", "upper") != "upper":
        raise ContractError(f"{where}.{name}: x-ingest-case may only be 'upper'")
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else list(declared or [])
    nullable = "null" in types
    kinds = [t for t in types if t != "null"]
    if len(kinds) != 1:
        raise ContractError(
            f'{where}.{name}: declare one type (and optionally "null"), found {declared!r}'
        )
    kind = kinds[0]
    if kind == "number":
        if schema.get("multipleOf") != 0.01:
            raise ContractError(
                f"{where}.{name}: a number must be money (multipleOf: 0.01, stored "
                f"{MONEY_TYPE}); the platform stores no floating-point values"
            )
        return Field(name, MONEY_TYPE, nullable, schema)
    if kind == "array":
        element = _resolve(schema.get("items") or {}, envelope, f"{where}.{name}[]")
        if element.get("type") != "object":
            raise ContractError(f"{where}.{name}: an array's items must be objects")
        fields = _fields(element, envelope, f"{where}.{name}[]")
        struct = ", ".join(f"{f.name}: {f.spark_type}" for f in fields)
        return Field(name, f"array<struct<{struct}>>", nullable, schema)
    if kind not in SPARK_TYPES:
        raise ContractError(
            f"{where}.{name}: unknown type {kind!r}; the platform maps "
            f"{sorted([*SPARK_TYPES, 'number (money)', 'array (of objects)'])}"
        )
    return Field(name, SPARK_TYPES[kind], nullable, schema)


def _fields(schema: dict[str, Any], envelope: dict[str, Any], where: str) -> tuple[Field, ...]:
    properties = schema.get("properties") or {}
    for name in properties:
        if not re.fullmatch(FIELD_NAME, name) or name in RESERVED_FIELDS:
            raise ContractError(
                f"{where}.{name}: a field name matches {FIELD_NAME} and is none of Silver's "
                f"own columns {sorted(RESERVED_FIELDS)}"
            )
    lower = [n.lower() for n in properties]
    if len(set(lower)) != len(lower):
        raise ContractError(f"{where}: field names differ only by case (Spark would mix them)")
    fields = tuple(_field(n, s, envelope, where) for n, s in properties.items())
    for name in schema.get("required", []):
        if name not in properties:
            raise ContractError(f"{where}: required field {name!r} is not a declared property")
    return fields


#: The envelope fields the platform's code reads by name.
ENVELOPE_NAMES = ("event_id", "event_type", "event_time", "schema_version")


def _envelope_fields(envelope: dict[str, Any]) -> tuple[Field, ...]:
    fields = _fields(envelope, envelope, ENVELOPE_FILE)
    names = [f.name for f in fields]
    if [n for n in ENVELOPE_NAMES if n in names] != list(ENVELOPE_NAMES):
        raise ContractError(f"{ENVELOPE_FILE}: declares {names}; it must declare {ENVELOPE_NAMES}")
    timed = [f.name for f in fields if f.schema.get("x-ingest-event-time")]
    if timed != ["event_time"]:
        raise ContractError(f"{ENVELOPE_FILE}: event_time (only) is x-ingest-event-time: true")
    if not isinstance(envelope["properties"]["schema_version"].get("const"), int):
        raise ContractError(f"{ENVELOPE_FILE}.schema_version: const is the version, an integer")
    return fields


def _source(path: Path, envelope: dict[str, Any]) -> SourceContract:
    document = _read(path)
    where = path.name
    source = document.get("x-ingest-source")
    if not isinstance(source, dict):
        raise ContractError(f"{where}: no x-ingest-source block (topic, key, event_types, ...)")
    missing = [k for k in SOURCE_KEYS[:4] if k not in source]
    if missing:
        raise ContractError(f"{where}: x-ingest-source lacks {', '.join(missing)}")
    unknown = sorted(set(source) - set(SOURCE_KEYS))
    if unknown:
        raise ContractError(f"{where}: x-ingest-source has unknown {unknown}; known: {SOURCE_KEYS}")
    event_types = source["event_types"]
    if (
        not isinstance(event_types, list)
        or not event_types
        or not all(isinstance(t, str) and re.fullmatch(FIELD_NAME, t) for t in event_types)
    ):
        raise ContractError(
            f"{where}: event_types is a non-empty list of names matching {FIELD_NAME}, "
            f"not {event_types!r}"
        )
    for role in ("topic", "key", "silver_table", "customer_column"):
        if role in source and not isinstance(source[role], str):
            raise ContractError(f"{where}: x-ingest-source.{role} is a name, not {source[role]!r}")
    if not re.fullmatch(TOPIC_NAME, source["topic"]):
        raise ContractError(
            f"{where}: topic {source['topic']!r} is not a Kafka topic name ({TOPIC_NAME})"
        )
    if not re.fullmatch(FIELD_NAME, source["silver_table"]):
        raise ContractError(
            f"{where}: silver_table {source['silver_table']!r} must match {FIELD_NAME}"
        )
    if document.get("allOf") != [{"$ref": ENVELOPE_FILE}]:
        raise ContractError(
            f"{where}: must extend the envelope: allOf: [{{$ref: {ENVELOPE_FILE}}}]"
        )
    fields = _fields(document, envelope, where)
    names = [f.name for f in fields]
    clash = sorted(set(names) & set(envelope.get("properties", {})))
    if clash:
        raise ContractError(f"{where}: {clash} are envelope fields; a payload may not redeclare")
    enrich = source.get("enrich", [])
    if not isinstance(enrich, list) or not all(
        isinstance(e, str) and e in ENRICHMENTS for e in enrich
    ):
        raise ContractError(f"{where}: enrich is a list of {sorted(ENRICHMENTS)}, not {enrich!r}")
    for dimension in enrich:
        if ENRICHMENTS[dimension] not in names:
            raise ContractError(
                f"{where}: enrich {dimension} joins on {ENRICHMENTS[dimension]!r}, not a field"
            )
    for role in ("key", "customer_column"):
        if role in source and source[role] not in names:
            raise ContractError(
                f"{where}: {role} {source[role]!r} is not a field (fields: {names})"
            )
    if source["key"] not in document.get("required", []):
        raise ContractError(f"{where}: key {source['key']!r} must be a required field")
    items = {
        f.name: _fields(_resolve(f.schema["items"], envelope, where), envelope, f"{where}.{f.name}")
        for f in fields
        if f.spark_type.startswith("array<")
    }
    return SourceContract(
        path=path,
        topic=str(source["topic"]),
        key_field=str(source["key"]),
        event_types=tuple(source["event_types"]),
        silver_table=str(source["silver_table"]),
        required=tuple(document.get("required", ())),
        fields=fields,
        items=items,
        schema=document,
        enrich=tuple(enrich),
    )


def load_contracts(folder: Path | None = None, table_order: Sequence[str] = ()) -> Contracts:
    """Read and check every declaration in ``folder`` (default :func:`contracts_dir`).

    :param table_order: Silver table names; the sources come in the order of their tables
        there (the catalog's order: what the jobs and pages list first), then by file name.
    :returns: the envelope and the sources by topic.
    :raises ContractError: a file is not valid YAML or JSON Schema, uses a type the
        platform does not map, names a key or required field it does not declare, or two
        files declare one topic or one event type; the message names the file and field.
    """
    folder = folder or contracts_dir()
    envelope = _read(folder / ENVELOPE_FILE)
    envelope_fields = _envelope_fields(envelope)
    sources: dict[str, SourceContract] = {}
    owner: dict[str, str] = {}
    for path in sorted(folder.glob("*.yaml")):
        if path.name == ENVELOPE_FILE:
            continue
        source = _source(path, envelope)
        if source.topic in sources:
            raise ContractError(
                f"{path.name}: topic {source.topic!r} is already declared by "
                f"{sources[source.topic].path.name}"
            )
        for event_type in source.event_types:
            if event_type in owner:
                first = owner[event_type]
                raise ContractError(
                    f"{path.name}: event type {event_type!r} is already declared by {first}"
                )
            owner[event_type] = path.name
        for other in sources.values():
            if other.silver_table == source.silver_table:
                raise ContractError(
                    f"{path.name}: silver_table {source.silver_table!r} is already "
                    f"{other.path.name}'s; one source per Silver table"
                )
            if topic_collision_key(other.topic) == topic_collision_key(source.topic):
                raise ContractError(
                    f"{path.name}: topic {source.topic!r} collides with {other.topic!r} "
                    f"({other.path.name}): Kafka treats '.' and '_' alike"
                )
            for field in source.fields:
                if (
                    field.name in other.names
                    and other.field(field.name).spark_type != field.spark_type
                ):
                    raise ContractError(
                        f"{path.name}.{field.name}: {field.spark_type}, but "
                        f"{other.path.name} declares it {other.field(field.name).spark_type}: "
                        "Silver reads the topics together, one type per field name"
                    )
        sources[source.topic] = source
    position = {table: i for i, table in enumerate(table_order)}
    ordered = sorted(sources.values(), key=lambda s: position.get(s.silver_table, len(position)))
    return Contracts(envelope, envelope_fields, {s.topic: s for s in ordered})


def contract_problems(folder: Path | None = None) -> list[str]:
    """Every problem :func:`load_contracts` would refuse, one line each (the first of each
    file, then the clashes between files), for ``ingestctl catalog check``.

    :returns: ``[]`` when the folder loads.
    """
    folder = folder or contracts_dir()
    try:
        envelope = _read(folder / ENVELOPE_FILE)
        _envelope_fields(envelope)
    except ContractError as error:
        return [str(error)]
    problems = []
    for path in sorted(folder.glob("*.yaml")):
        if path.name != ENVELOPE_FILE:
            try:
                _source(path, envelope)
            except ContractError as error:
                problems.append(str(error))
    if not problems:
        try:
            _derive(load_contracts(folder))
        except ContractError as error:
            problems.append(str(error))
        except (KeyError, ValueError, TypeError) as error:
            what = error.args[0] if error.args else error
            problems.append(f"the platform's code needs {what!r}, which the files do not declare")
    return problems


@lru_cache(maxsize=1)
def get_contracts() -> Contracts:
    """:func:`load_contracts` of :func:`contracts_dir` in the catalog's table order, once
    per process."""
    from ingest_core.catalog import get_catalog

    return load_contracts(table_order=list(get_catalog().tables))


def enum_of(topic: str, field: str) -> frozenset[str]:
    """The values ``topic``'s ``field`` declares (``enum``).

    :raises KeyError: no such topic or field, or the field declares no enum.
    """
    return get_contracts().sources[topic].enum(field)


def _ddl(fields: tuple[Field, ...]) -> str:
    return ", ".join(f"{f.name} {f.spark_type}" for f in fields)


# What the rest of the platform imports, derived from the declarations on first use
# (PEP 562 ``__getattr__``): importing this module reads no file, so a broken declaration
# is reported by ``ingestctl catalog check`` instead of failing every import.
SCHEMA_VERSION: int
ENVELOPE_FIELDS: tuple[str, ...]
#: Spark DDL of the envelope; ``event_time`` stays a string here (Silver parses it to UTC).
ENVELOPE_DDL: str
CONTRACTS: dict[str, EventContract]
EVENT_TYPES: frozenset[str]
TOPICS: tuple[str, ...]
#: Spark DDL of each payload (envelope fields excluded), by topic.
PAYLOAD_DDL: dict[str, str]
#: Identifier fields by topic (envelope and payload; ``x-ingest-id``): strings that may not
#: contain control characters (Unicode category Cc: U+0000-U+001F, U+007F-U+009F). JSON can
#: carry them escaped (``"c\u0000"`` is valid JSON), and an id with a NUL in it joins with
#: nothing and prints as something else; Silver quarantines such a record as
#: ``control_character``.
ID_FIELDS: dict[str, tuple[str, ...]]
#: Identifier fields of each element of an order's ``items`` (same rule as :data:`ID_FIELDS`).
ITEM_ID_FIELDS: tuple[str, ...]
CURRENCIES: frozenset[str]
PAYMENT_METHODS: frozenset[str]
PAYMENT_STATUSES: frozenset[str]
ACTIVITIES: frozenset[str]


@lru_cache(maxsize=1)
def _derived() -> dict[str, Any]:
    return _derive(get_contracts())


def _derive(loaded: Contracts) -> dict[str, Any]:
    """The constants above from ``loaded``.

    :raises KeyError, ValueError, TypeError: the declarations lack what the platform's own
        code still names (the envelope's ``schema_version`` const, ``$defs.currency``'s
        enum, ``payments.method`` ...); :func:`contract_problems` reports it.
    """

    def enum(topic: str, field: str) -> frozenset[str]:  # a catalog without the topic: none
        source = loaded.sources.get(topic)
        return source.enum(field) if source is not None else frozenset()

    contracts = {
        event_type: EventContract(
            event_type=event_type,
            topic=source.topic,
            key_field=source.key_field,
            required=source.required,
            money_fields=tuple(f.name for f in source.fields if f.is_money),
            silver_table=source.silver_table,
        )
        for source in loaded.sources.values()
        for event_type in source.event_types
    }
    orders = loaded.sources.get("orders")
    return {
        "SCHEMA_VERSION": int(loaded.envelope["properties"]["schema_version"]["const"]),
        "ENVELOPE_FIELDS": tuple(f.name for f in loaded.envelope_fields),
        "ENVELOPE_DDL": _ddl(loaded.envelope_fields),
        "CONTRACTS": contracts,
        "EVENT_TYPES": frozenset(contracts),
        "TOPICS": tuple(loaded.sources),
        "PAYLOAD_DDL": {t: _ddl(s.fields) for t, s in loaded.sources.items()},
        "ID_FIELDS": {
            topic: tuple(f.name for f in (*loaded.envelope_fields, *source.fields) if f.is_id)
            for topic, source in loaded.sources.items()
        },
        "ITEM_ID_FIELDS": tuple(
            f.name for f in (orders.items.get("items", ()) if orders else ()) if f.is_id
        ),
        "CURRENCIES": frozenset(str(v) for v in loaded.envelope["$defs"]["currency"]["enum"]),
        "PAYMENT_METHODS": enum("payments", "method"),
        "PAYMENT_STATUSES": enum("payments", "status"),
        "ACTIVITIES": enum("customer_activity", "activity"),
    }


def __getattr__(name: str) -> Any:
    """The derived constants above, computed once on first use.

    :raises ContractError: a declaration is broken (``ingestctl catalog check`` lists all).
    """
    if name.startswith("__"):  # the import system's probes (``__path__``...): never derived
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    derived = _derived()
    if name in derived:
        return derived[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def contract_for(event_type: str) -> EventContract:
    """Return the contract of ``event_type``.

    :raises KeyError: unknown event type; the message lists the known ones.
    """
    contracts: dict[str, EventContract] = _derived()["CONTRACTS"]
    try:
        return contracts[event_type]
    except KeyError:
        raise KeyError(f"unknown event type {event_type!r}; known: {sorted(contracts)}") from None
