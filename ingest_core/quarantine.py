"""Silver's quarantine rules as data: the ordered list of named rules a Bronze record is
judged by, and the value checks each contract adds (Spark-free; issue 53).

A record goes to ``silver_quarantine`` with the reason of the *first* rule that matches
(:data:`QUARANTINE_RULES`, in order) and that rule's detail. ``platform`` rules hold for
every topic; ``contract`` rules are compiled from the topic's declaration in
``include/contracts/<topic>.yaml``: its event types, required fields, field types, ids
(``x-ingest-id``) and :func:`value_checks` (enums marked ``x-ingest-quarantine``,
``minimum``/``maximum`` of integers, money). ``spark_jobs.transforms.silver`` compiles each
rule by its name into one Spark condition and detail; ``ingestctl catalog rules`` prints
them for a topic, with what its contract adds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ingest_core.contracts import Contracts, SourceContract


@dataclass(frozen=True)
class QuarantineRule:
    """One quarantine rule.

    :param name: the rule's own name (unique; two rules may share a reason: the envelope's
        and the payload's missing fields).
    :param reason: what ``silver_quarantine.reason`` records.
    :param origin: ``platform`` (every topic alike) or ``contract`` (from the topic's
        declaration).
    :param applies: when it matches, in one line.
    """

    name: str
    reason: str
    origin: Literal["platform", "contract"]
    applies: str


_R = QuarantineRule
#: The rules in the order they are checked: the first that matches is recorded.
QUARANTINE_RULES: tuple[QuarantineRule, ...] = (
    _R("empty_value", "empty_value", "platform", "null value (Kafka tombstone) or zero bytes"),
    _R("invalid_utf8", "invalid_utf8", "platform", "the value's bytes are not UTF-8"),
    _R("duplicate_json_key", "duplicate_json_key", "platform",
       "a top-level key twice (JSON leaves such an object's meaning open)"),
    _R("malformed_json", "malformed_json", "platform",
       "not one JSON value: a syntax error, text after the value, a nested key twice"),
    _R("not_an_object", "not_an_object", "platform", "a JSON array, scalar or null"),
    _R("envelope_missing", "missing_required_field", "platform",
       "an envelope field absent, null or blank"),
    _R("envelope_type", "type_mismatch", "platform",
       "an envelope field of the wrong JSON type, or an event time that is no timestamp"),
    _R("unknown_event_type", "unknown_event_type", "contract",
       "event_type not one the topic's contract declares"),
    _R("unsupported_schema_version", "unsupported_schema_version", "platform",
       "schema_version not the envelope's"),
    _R("payload_missing", "missing_required_field", "contract",
       "a field the contract requires absent, null or blank"),
    _R("payload_type", "type_mismatch", "contract",
       "a payload field (or an item's) of the wrong JSON type"),
    _R("control_character", "control_character", "contract",
       "an id field (x-ingest-id, item ids) holding a control character"),
    _R("invalid_value", "invalid_value", "contract",
       "an event time without offset or before 1970, or a value check of the contract fails"),
    _R("event_time_skew", "event_time_skew", "platform",
       "event time too far ahead of the batch's clock, the producer's, or its partition's"),
)  # fmt: skip
#: The reasons ``silver_quarantine`` may record, in rule order.
QUARANTINE_REASONS: tuple[str, ...] = tuple(dict.fromkeys(r.reason for r in QUARANTINE_RULES))
#: The rules by name.
RULES_BY_NAME: dict[str, QuarantineRule] = {rule.name: rule for rule in QUARANTINE_RULES}
#: Event-time checks of ``invalid_value`` that hold for every topic (before the contract's).
EVENT_TIME_CHECKS = (
    "event_time is not an ISO-8601 date-time with offset",
    "event_time before 1970",
)


@dataclass(frozen=True)
class ValueCheck:
    """One ``invalid_value`` check a contract declares, for one field.

    :param field: the payload field.
    :param kind: ``enum`` (value not in :attr:`values`; declared ``x-ingest-quarantine``),
        ``minimum`` / ``maximum`` (an integer below / above :attr:`limit`), ``negative``
        (money below 0), ``decimals`` (money with more than 2 decimals).
    :param detail: what the quarantined record's detail says.
    """

    field: str
    kind: Literal["enum", "minimum", "maximum", "negative", "decimals"]
    detail: str
    values: tuple[str, ...] = ()
    limit: int | float | None = None


_BOUNDS: tuple[tuple[Literal["minimum", "maximum"], str], ...] = (
    ("minimum", "below"),
    ("maximum", "above"),
)


def value_checks(source: SourceContract) -> list[ValueCheck]:
    """The ``invalid_value`` checks ``source`` declares, field by field in declaration order
    (for each field: enum, minimum, maximum, money).

    :param source: a loaded contract (``ingest_core.contracts.get_contracts().sources``).
    """
    checks: list[ValueCheck] = []
    for declared in source.fields:
        name = declared.name
        label = declared.schema.get("x-ingest-quarantine")
        if label and declared.enum is not None:
            why = label if isinstance(label, str) else f"unknown {name}"
            checks.append(ValueCheck(name, "enum", why, values=tuple(sorted(declared.enum))))
        if not declared.is_money and declared.spark_type == "int":
            for bound, outside in _BOUNDS:
                limit = declared.schema.get(bound)
                if limit is not None:
                    checks.append(ValueCheck(name, bound, f"{name} {outside} {limit}", limit=limit))
        if declared.is_money:
            checks.append(ValueCheck(name, "negative", f"negative {name}"))
            checks.append(ValueCheck(name, "decimals", f"{name} has more than 2 decimals"))
    return checks


def rule_specifics(contracts: Contracts, topic: str) -> list[tuple[QuarantineRule, str]]:
    """Every rule with what it checks on ``topic`` (empty for a rule that names nothing
    topic-specific), for ``ingestctl catalog rules``.

    :raises KeyError: ``topic`` has no contract.
    """
    source = contracts.sources[topic]
    envelope = [f.name for f in contracts.envelope_fields]
    ids = [f.name for f in (*contracts.envelope_fields, *source.fields) if f.is_id]
    item_ids = [f"items.{f.name}" for f in source.items.get("items", ()) if f.is_id]
    values = [*EVENT_TIME_CHECKS, *(c.detail for c in value_checks(source))]
    if "items" in source.items:
        values.append("item price/freight negative, more than 2 decimals; quantity not positive")
    specifics = {
        "envelope_missing": ", ".join(envelope),
        "envelope_type": ", ".join(envelope),
        "unknown_event_type": "event_type not in: " + ", ".join(source.event_types),
        "unsupported_schema_version": "schema_version not "
        + str(contracts.envelope["properties"]["schema_version"]["const"]),
        "payload_missing": ", ".join(source.required) or "(none required)",
        "payload_type": ", ".join(source.names),
        "control_character": ", ".join([*ids, *item_ids]),
        "invalid_value": "; ".join(values),
    }
    return [(rule, specifics.get(rule.name, "")) for rule in QUARANTINE_RULES]
