"""Silver's quarantine rules as data (``ingest_core.quarantine``): the list's order and
names, the value checks a contract declares, what ``ingestctl catalog rules`` prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ingest_core.contracts import get_contracts, load_contracts
from ingest_core.quarantine import (
    QUARANTINE_REASONS,
    QUARANTINE_RULES,
    ValueCheck,
    rule_specifics,
    value_checks,
)
from ingestctl.cli import app

pytestmark = pytest.mark.unit


def test_rules_have_unique_names_and_the_reasons_silver_records_in_order() -> None:
    assert len({rule.name for rule in QUARANTINE_RULES}) == len(QUARANTINE_RULES)
    # The reasons silver_quarantine has always recorded, first appearance in rule order.
    assert QUARANTINE_REASONS == (
        "empty_value",
        "invalid_utf8",
        "duplicate_json_key",
        "malformed_json",
        "not_an_object",
        "missing_required_field",
        "type_mismatch",
        "unknown_event_type",
        "unsupported_schema_version",
        "control_character",
        "invalid_value",
        "event_time_skew",
    )
    # The envelope is judged before the contract's event types and payload.
    names = [rule.name for rule in QUARANTINE_RULES]
    assert names.index("envelope_missing") < names.index("unknown_event_type")
    assert names.index("unknown_event_type") < names.index("payload_missing")


def test_value_checks_come_from_the_declarations_in_field_order() -> None:
    payments = value_checks(get_contracts().sources["payments"])
    assert [(c.field, c.kind) for c in payments] == [
        ("amount", "negative"),
        ("amount", "decimals"),
        ("currency", "enum"),
        ("status", "enum"),
    ]
    currency = next(c for c in payments if c.field == "currency")
    assert currency.detail == "unknown currency"
    assert "BRL" in currency.values
    reviews = value_checks(get_contracts().sources["reviews"])
    assert [c for c in reviews if c.field == "score"] == [
        ValueCheck("score", "minimum", "score below 1", limit=1),
        ValueCheck("score", "maximum", "score above 5", limit=5),
    ]


def test_a_new_contracts_bounds_and_enums_become_checks(tmp_path: Path) -> None:
    """A source declared in a folder of its own: its integer bounds and its quarantined
    enum are checks; an enum not marked ``x-ingest-quarantine`` is not."""
    folder = tmp_path / "contracts"
    folder.mkdir()
    envelope = get_contracts().sources["payments"].path.parent / "envelope.yaml"
    (folder / "envelope.yaml").write_text(envelope.read_text())
    (folder / "sensors.yaml").write_text(
        """
$schema: https://json-schema.org/draft/2020-12/schema
$id: sensors.yaml
type: object
allOf: [{$ref: envelope.yaml}]
x-ingest-source: {topic: sensors, key: sensor_id, event_types: [reading],
                  silver_table: silver_sensors}
required: [sensor_id, level]
properties:
  sensor_id: {type: string, x-ingest-id: true}
  level: {type: integer, minimum: 0, maximum: 10}
  unit: {type: string, enum: [cm, mm], x-ingest-quarantine: true}
  colour: {type: string, enum: [red, green]}
"""
    )
    source = load_contracts(folder).sources["sensors"]
    assert [(c.kind, c.detail) for c in value_checks(source)] == [
        ("minimum", "level below 0"),
        ("maximum", "level above 10"),
        ("enum", "unknown unit"),
    ]


def test_specifics_name_what_a_topics_contract_adds() -> None:
    specifics = dict((rule.name, text) for rule, text in rule_specifics(get_contracts(), "reviews"))
    assert specifics["unknown_event_type"] == "event_type not in: review_submitted"
    assert "score below 1" in specifics["invalid_value"]
    assert specifics["empty_value"] == ""


def test_catalog_rules_prints_them_in_order_and_refuses_an_unknown_topic() -> None:
    result = CliRunner().invoke(app, ["catalog", "rules", "payments"])
    assert result.exit_code == 0, result.output
    lines = re.findall(r"^ +\d+\. (\S+)", result.output, flags=re.MULTILINE)
    assert lines == [rule.reason for rule in QUARANTINE_RULES]
    assert "unknown payment status" in result.output
    refused = CliRunner().invoke(app, ["catalog", "rules", "nope"])
    assert refused.exit_code == 2
    assert "no contract for topic 'nope'" in refused.output
