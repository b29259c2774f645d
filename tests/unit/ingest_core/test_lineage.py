"""Lineage datasets from the catalog (ingest_core.lineage): every job's inputs and outputs
equal what include/pipeline.yaml declares, named by the OpenLineage naming spec; schemas
where the contracts give them; the file transport's events read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest_core.catalog import KafkaSinkSpec, KafkaSourceSpec, get_catalog
from ingest_core.contracts import CONTRACTS, PAYLOAD_DDL
from ingest_core.lineage import (
    FILE_NAMESPACE,
    SchemaField,
    gate_lineage,
    gate_tables,
    job_lineage,
    lineage_file,
    parse_ddl,
    read_events,
)
from ingest_core.settings import PlatformSettings, get_settings

pytestmark = pytest.mark.unit

Keys = set[tuple[str, str]]


@pytest.fixture
def settings(cluster_settings: PlatformSettings) -> PlatformSettings:
    """A platform with a topic prefix and a two-server external cluster (tests/unit/conftest)."""
    return cluster_settings


def catalog_lineage(job: str, settings: PlatformSettings) -> tuple[Keys, Keys]:
    """``(inputs, outputs)`` of ``job`` read straight from the catalog (an independent
    reading of what ingest_core.lineage derives)."""
    catalog = get_catalog()
    spec = catalog.application(job)
    kafka = "kafka://broker-a:9093"
    topics = list(getattr(spec, "topics", []))
    source = getattr(spec, "source", None)
    if isinstance(source, KafkaSourceSpec):
        topics += source.topics
    inputs = {(kafka, f"t1.{t}") for t in topics}
    inputs |= {("file", str(catalog.table(t).path(settings))) for t in spec.inputs}
    outputs = {("file", str(catalog.table(t).path(settings))) for t in spec.outputs}
    if isinstance(getattr(spec, "sink", None), KafkaSinkSpec):
        outputs.add((kafka, f"t1.{settings.alerts.topic}"))
    return inputs, outputs


@pytest.mark.parametrize("job", sorted(get_catalog().applications))
def test_every_jobs_lineage_equals_the_catalog(job: str, settings: PlatformSettings) -> None:
    lineage = job_lineage(job)
    inputs, outputs = catalog_lineage(job, settings)
    assert {d.key for d in lineage.inputs} == inputs
    assert {d.key for d in lineage.outputs} == outputs
    assert len(lineage.inputs) == len(inputs)  # no dataset twice
    assert len(lineage.outputs) == len(outputs)


def test_topics_and_tables_are_named_by_the_openlineage_spec(settings: PlatformSettings) -> None:
    ingest = job_lineage("bronze_ingest")
    assert ingest.inputs[0].key == ("kafka://broker-a:9093", "t1.orders")
    bronze = ingest.outputs[0]
    assert bronze.namespace == FILE_NAMESPACE == "file"
    assert Path(bronze.name).is_absolute()
    assert bronze.name == str(settings.storage.data_path / "bronze" / "bronze_events")
    alerts = job_lineage("payment_alerts_rt").outputs
    assert [d.key for d in alerts] == [("kafka://broker-a:9093", "t1.payment_alerts")]


def test_the_embedded_broker_gives_the_kafka_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    monkeypatch.setenv("INGEST_KAFKA__PORT", "19092")
    monkeypatch.delenv("INGEST_KAFKA__BOOTSTRAP", raising=False)
    monkeypatch.delenv("INGEST_KAFKA__TOPIC_PREFIX", raising=False)
    get_settings.cache_clear()
    try:
        topics = job_lineage("payment_alerts").inputs
    finally:
        get_settings.cache_clear()
    assert [d.key for d in topics] == [("kafka://127.0.0.1:19092", "payments")]


def test_contract_tables_and_topics_carry_their_schema(settings: PlatformSettings) -> None:
    silver = {Path(d.name).name: d for d in job_lineage("silver_refine").outputs}
    payments = silver["silver_payments"].fields
    assert payments is not None
    names = [f.name for f in payments]
    assert names[:4] == ["event_id", "event_type", "event_time", "schema_version"]
    assert SchemaField("event_time", "timestamp") in payments
    assert SchemaField("amount", "decimal(18,2)") in payments
    assert set(names) >= {"payment_id", "order_id", "method", "currency", "status"}
    # Every table a contract lands in has the contract's fields; no other table has a schema.
    contract_tables = {c.silver_table for c in CONTRACTS.values()}
    for name, dataset in silver.items():
        assert (dataset.fields is not None) == (name in contract_tables), name
    assert get_catalog().table("silver_orders").schema_from == "contract"
    # On the wire, event_time is the ISO-8601 string of the contract.
    orders_topic = job_lineage("bronze_ingest").inputs[0]
    assert orders_topic.fields is not None
    assert SchemaField("event_time", "string") in orders_topic.fields
    items = next(f for f in orders_topic.fields if f.name == "items")
    assert items.type == "array"
    (element,) = items.fields
    assert element.name == "_element"
    assert element.type == "struct"
    assert [f.name for f in element.fields] == [
        "product_id",
        "seller_id",
        "quantity",
        "price",
        "freight",
    ]
    # The alerts topic has no contract: no schema.
    assert job_lineage("payment_alerts_rt").outputs[0].fields is None


def test_parse_ddl_reads_every_contract_payload() -> None:
    assert parse_ddl("a string, b decimal(18,2), c array<struct<d: int, e: string>>") == (
        SchemaField("a", "string"),
        SchemaField("b", "decimal(18,2)"),
        SchemaField(
            "c",
            "array",
            (
                SchemaField(
                    "_element", "struct", (SchemaField("d", "int"), SchemaField("e", "string"))
                ),
            ),
        ),
    )
    assert [f.name for f in parse_ddl(PAYLOAD_DDL["orders"])] == [
        "order_id",
        "customer_id",
        "status",
        "items",
        "total",
        "currency",
    ]
    for topic, ddl in PAYLOAD_DDL.items():
        for field in parse_ddl(ddl):
            assert field.name.isidentifier(), topic
            assert field.type in ddl or field.type in ("array", "struct"), (topic, field)


@pytest.mark.parametrize("layer", ["silver", "gold"])
def test_a_gate_reads_its_layers_gated_tables_and_writes_the_ops_tables(
    layer: str, settings: PlatformSettings
) -> None:
    from ingest_core.quality.rules import GATED_LAYERS, layer_rules

    assert layer in GATED_LAYERS
    rules = [r.table for r in layer_rules(layer)]
    assert gate_tables(layer) == rules  # the catalog's quality_gate agrees with the suites
    catalog = get_catalog()

    def path(table: str) -> tuple[str, str]:
        return ("file", str(catalog.table(table).path(settings)))

    lineage = gate_lineage(layer)
    assert [d.key for d in lineage.inputs] == [
        *map(path, rules),
        path("ops_gate_results"),
        path("ops_gate_holds"),
    ]
    assert [d.key for d in lineage.outputs] == [path("ops_gate_results"), path("ops_gate_holds")]


def test_every_gated_layer_is_in_the_catalogs_quality_gate() -> None:
    from ingest_core.quality.rules import GATED_LAYERS

    for layer in GATED_LAYERS:
        assert gate_tables(layer), layer
    with pytest.raises(ValueError, match="no table of layer 'landing'"):
        gate_lineage("landing")


def test_the_events_file_is_under_ingest_home(
    settings: PlatformSettings, ingest_home: Path
) -> None:
    assert lineage_file() == ingest_home.resolve() / "lineage" / "events.jsonl"


def test_read_events_reads_lines_and_one_file_per_event(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    first = {"eventType": "START", "eventTime": "2026-01-01T00:00:01+00:00"}
    second = {"eventType": "COMPLETE", "eventTime": "2026-01-01T00:00:03+00:00"}
    path.write_text(json.dumps(second) + "\n" + json.dumps(first) + "\n" + '{"cut sh')
    assert read_events(path) == [first, second]
    # Without append, the file transport writes <path>-<timestamp>.json per event.
    single = {"eventType": "START", "eventTime": "2026-01-01T00:00:02+00:00"}
    (tmp_path / "events.jsonl-20260101-000002.000000.json").write_text(json.dumps(single))
    assert read_events(path) == [first, single, second]
    assert read_events(tmp_path / "absent.jsonl") == []
