"""The event contracts declared in ``include/contracts/`` (JSON Schema in YAML): what the
loader derives from them, what it refuses, and that real events and malformed records are
judged by the declarations as a JSON Schema validator (jsonschema, independent of the
platform's code) judges them."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from ingest_core import contracts
from ingest_core.contracts import CONTRACTS_DIR, ContractError, load_contracts

pytestmark = pytest.mark.unit


def _decimals(value: Any) -> Any:
    """``value`` with every float a ``Decimal`` of its shortest text: money's
    ``multipleOf: 0.01`` is exact only in decimal (9.19 / 0.01 is 918.999... in binary), as
    a consumer that reads JSON numbers as decimals sees it."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {k: _decimals(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decimals(v) for v in value]
    return value


def _validators() -> dict[str, Draft202012Validator]:
    """A validator of the whole event per topic, from the files alone."""
    documents = [
        _decimals(yaml.safe_load(p.read_text())) for p in sorted(CONTRACTS_DIR.glob("*.yaml"))
    ]
    registry: Registry = Registry().with_resources(
        (d["$id"], Resource.from_contents(d)) for d in documents
    )
    return {
        d["x-ingest-source"]["topic"]: Draft202012Validator(d, registry=registry)
        for d in documents
        if "x-ingest-source" in d
    }


def test_the_declarations_derive_what_the_code_held_before() -> None:
    """The four event types moved from Python to ``include/contracts/`` unchanged: the Spark
    DDL Silver parses with, the ids, keys and required fields are the ones the code
    declared (pinned here as they were at ``d542d45``; sources onboarded since come after)."""
    assert contracts.TOPICS[:4] == ("orders", "payments", "refunds", "customer_activity")
    assert contracts.ENVELOPE_DDL == (
        "event_id string, event_type string, event_time string, schema_version int"
    )
    assert contracts.PAYLOAD_DDL["orders"] == (
        "order_id string, customer_id string, status string, "
        "items array<struct<product_id: string, seller_id: string, quantity: int, "
        "price: decimal(18,2), freight: decimal(18,2)>>, "
        "total decimal(18,2), currency string"
    )
    assert contracts.PAYLOAD_DDL["payments"] == (
        "payment_id string, order_id string, customer_id string, method string, "
        "installments int, amount decimal(18,2), currency string, status string"
    )
    assert contracts.ID_FIELDS["refunds"] == ("event_id", "refund_id", "order_id", "customer_id")
    assert contracts.ITEM_ID_FIELDS == ("product_id", "seller_id")
    payment = contracts.contract_for("payment")
    assert (payment.key_field, payment.money_fields) == ("order_id", ("amount",))
    assert payment.required == ("payment_id", "order_id", "method", "amount", "currency", "status")
    assert {"authorized", "failed"} == contracts.PAYMENT_STATUSES
    assert "not_defined" in contracts.PAYMENT_METHODS
    orders = {c.event_type for c in contracts.CONTRACTS.values() if c.topic == "orders"}
    assert orders == {"order_placed", "order_status_changed", "order_canceled"}


def test_generated_events_satisfy_their_declared_json_schema() -> None:
    """What the replay tool sends is valid by the declarations, read by a JSON Schema
    validator: the files are the contract, not a comment beside the code."""
    from ingestctl.replay.generator import generate_events

    validators = _validators()
    start = datetime(2026, 3, 1, tzinfo=UTC)
    seen = set()
    for event in generate_events(2000, seed=3, start=start):
        value = _decimals(event.to_value())
        errors = [e.message for e in validators[event.topic].iter_errors(value)]
        assert errors == [], (value, errors)
        seen.add(event.topic)
    # the generator's four sources (onboarded ones come from their datasets' files)
    assert seen == set(contracts.TOPICS[:4])


@pytest.mark.parametrize(
    "reason", ["missing_required_field", "type_mismatch", "unsupported_schema_version"]
)
def test_malformed_records_break_the_declared_json_schema(reason: str) -> None:
    """The demo's malformed records of these reasons are invalid by the declarations too
    (Silver quarantines them; docs/contracts.md)."""
    from ingestctl.replay.faults import malformed_record
    from ingestctl.replay.generator import generate_events

    validators = _validators()
    events = generate_events(40, seed=3, start=datetime(2026, 3, 1, tzinfo=UTC))
    for n, event in enumerate(events):
        record = malformed_record(reason, event.to_value(), n)
        assert isinstance(record, dict)
        assert list(validators[event.topic].iter_errors(_decimals(record))), (reason, record)


def _folder(tmp_path: Path, source: dict[str, Any] | None = None, name: str = "x.yaml") -> Path:
    """A contracts folder: the real envelope, and ``source`` as ``name``."""
    shutil.copy(CONTRACTS_DIR / "envelope.yaml", tmp_path / "envelope.yaml")
    if source is not None:
        (tmp_path / name).write_text(yaml.safe_dump(source, sort_keys=False))
    return tmp_path


def _source(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "reviews.yaml",
        "type": "object",
        "allOf": [{"$ref": "envelope.yaml"}],
        "x-ingest-source": {
            "topic": "reviews",
            "key": "review_id",
            "event_types": ["review_submitted"],
            "silver_table": "silver_reviews",
        },
        "required": ["review_id", "score"],
        "properties": {
            "review_id": {"type": "string", "x-ingest-id": True},
            "score": {"type": "integer", "minimum": 1, "maximum": 5},
            "amount": {"$ref": "envelope.yaml#/$defs/optional_money"},
        },
    }
    for key, value in changes.items():
        if value is None:
            document.pop(key, None)
        else:
            document[key] = value
    return document


def test_a_new_source_loads_from_its_file_alone(tmp_path: Path) -> None:
    loaded = load_contracts(_folder(tmp_path, _source()))
    reviews = loaded.sources["reviews"]
    assert [(f.name, f.spark_type, f.nullable) for f in reviews.fields] == [
        ("review_id", "string", False),
        ("score", "int", False),
        ("amount", "decimal(18,2)", True),
    ]
    assert reviews.field("score").schema["maximum"] == 5
    assert (reviews.key_field, reviews.event_types) == ("review_id", ("review_submitted",))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"properties": {"review_id": {"type": "date"}}, "required": []},
            "not a valid JSON Schema at properties/review_id/type",
        ),
        (
            {"properties": {"review_id": {"type": "boolean"}}, "required": []},
            "reviews.yaml.review_id: unknown type 'boolean'",
        ),
        (
            {"properties": {"review_id": {"type": "string"}, "rating": {"type": "number"}}},
            "reviews.yaml.rating: a number must be money (multipleOf: 0.01",
        ),
        ({"required": ["review_id", "stars"]}, "required field 'stars' is not a declared"),
        (
            {"x-ingest-source": {**_source()["x-ingest-source"], "key": "order_id"}},
            "key 'order_id' is not a field",
        ),
        ({"x-ingest-source": {"topic": "reviews"}}, "lacks key, event_types, silver_table"),
        (
            {"x-ingest-source": {**_source()["x-ingest-source"], "customer_column": "cust"}},
            "customer_column 'cust' is not a field",
        ),
        (
            {"x-ingest-source": {**_source()["x-ingest-source"], "partitions": 3}},
            "x-ingest-source has unknown ['partitions']",
        ),
        ({"allOf": None}, "must extend the envelope"),
        (
            {"properties": {"review_id": {"$ref": "envelope.yaml#/$defs/stars"}}, "required": []},
            "$ref 'envelope.yaml#/$defs/stars' is not",
        ),
        (
            {
                "properties": {"review_id": {"type": "string"}, "event_time": {"type": "string"}},
                "required": ["review_id"],
            },
            "are envelope fields",
        ),
        (
            {"properties": {"review_id": {"type": ["string", "integer"]}}, "required": []},
            "declare one type",
        ),
        (
            {
                "properties": {"review_id": {"type": "string", "x-ingest-quarantine": True}},
                "required": [],
            },
            "reviews.yaml.review_id: x-ingest-quarantine needs an enum",
        ),
        (
            {
                "properties": {"review_id": {"type": "string", "x-ingest-case": "lower"}},
                "required": [],
            },
            "x-ingest-case may only be 'upper'",
        ),
    ],
)
def test_the_loader_refuses_a_bad_declaration_naming_file_and_field(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ContractError) as refused:
        load_contracts(_folder(tmp_path, _source(**changes), "reviews.yaml"))
    assert message in str(refused.value)
    assert "reviews.yaml" in str(refused.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"x-ingest-source": {**_source()["x-ingest-source"], "event_types": "review"}},
            "event_types is a non-empty list of names",
        ),
        (
            {"x-ingest-source": {**_source()["x-ingest-source"], "enrich": [["customers"]]}},
            "enrich is a list of ['customers']",
        ),
        (
            {"x-ingest-source": {**_source()["x-ingest-source"], "topic": ".."}},
            "topic '..' is not a Kafka topic name",
        ),
        (
            {"properties": {**_source()["properties"], "payload_hash": {"type": "string"}}},
            "reviews.yaml.payload_hash: a field name matches",
        ),
        (
            {"properties": {**_source()["properties"], "Score": {"type": "integer"}}},
            "reviews.yaml.Score: a field name matches",
        ),
        (
            {"properties": {**_source()["properties"], "flag": {"type": "string", "enum": [True]}}},
            "enum values are strings",
        ),
        (
            {"properties": {**_source()["properties"], "note": True}},
            "reviews.yaml.note: declare the field as a mapping",
        ),
        ({"required": ["score"]}, "key 'review_id' must be a required field"),
    ],
)
def test_the_loader_refuses_what_would_break_silver(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    """Found by trying to break the loader (helper report, stop 58): each of these loaded,
    or raised a traceback, and would have broken Silver or every import later."""
    with pytest.raises(ContractError) as refused:
        load_contracts(_folder(tmp_path, _source(**changes), "reviews.yaml"))
    assert message in str(refused.value)


def test_a_key_given_twice_in_a_file_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path, _source(), "reviews.yaml")
    text = (folder / "reviews.yaml").read_text()
    (folder / "reviews.yaml").write_text(
        text.replace("properties:\n", "properties:\n  score: {type: string}\n", 1)
    )
    with pytest.raises(ContractError, match=r"key\(s\) \['score'\] given twice"):
        load_contracts(folder)


def test_two_sources_may_not_share_a_table_or_a_field_type(tmp_path: Path) -> None:
    folder = _folder(tmp_path, _source(), "reviews.yaml")
    other = _source()
    other["x-ingest-source"] = {
        **other["x-ingest-source"],
        "topic": "ratings",
        "event_types": ["rating_given"],
    }
    (folder / "ratings.yaml").write_text(yaml.safe_dump(other, sort_keys=False))
    with pytest.raises(ContractError, match="silver_table 'silver_reviews' is already"):
        load_contracts(folder)
    other["x-ingest-source"]["silver_table"] = "silver_ratings"
    other["properties"]["score"] = {"type": "string"}
    (folder / "ratings.yaml").write_text(yaml.safe_dump(other, sort_keys=False))
    with pytest.raises(
        ContractError, match=r"reviews\.yaml\.score: int, but ratings\.yaml declares it string"
    ):
        load_contracts(folder)


def test_two_files_may_not_declare_one_topic_or_one_event_type(tmp_path: Path) -> None:
    folder = _folder(tmp_path, _source(), "reviews.yaml")
    (folder / "reviews_again.yaml").write_text(yaml.safe_dump(_source(), sort_keys=False))
    with pytest.raises(ContractError, match="topic 'reviews' is already declared by reviews"):
        load_contracts(folder)
    again = _source()
    again["x-ingest-source"] = {**again["x-ingest-source"], "topic": "reviews_v2"}
    (folder / "reviews_again.yaml").write_text(yaml.safe_dump(again, sort_keys=False))
    with pytest.raises(ContractError, match="event type 'review_submitted' is already declared"):
        load_contracts(folder)


def test_a_file_that_is_not_yaml_is_named(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "broken.yaml").write_text("properties: [unclosed\n")
    with pytest.raises(ContractError, match=r"broken\.yaml: cannot be read as YAML"):
        load_contracts(folder)
