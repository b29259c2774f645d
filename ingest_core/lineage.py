"""OpenLineage datasets of the platform's jobs, derived from the catalog
(``include/pipeline.yaml``).

A job's lineage is what the catalog declares for it, named the way the OpenLineage naming
spec (https://openlineage.io/docs/spec/naming) names such datasets:

* a Kafka topic: namespace ``kafka://<host:port>`` (the first server of
  ``kafka.bootstrap_servers``), name the topic's full name (with ``kafka.topic_prefix``);
* a Delta table: namespace ``file`` (the local file system), name the table's absolute path
  (:meth:`ingest_core.catalog.TableSpec.path`). Airflow's OpenLineage provider names the
  tables' Assets (``file://<path>``) the same way, so both meet in one lineage graph.

Inputs are the job's source topics (``source.topics`` of a Kafka streaming job, ``topics`` of
a batch job) and then its ``inputs`` tables; outputs are its ``outputs`` tables, or the topic
of a Kafka sink. A quality gate (:func:`gate_lineage`) reads its layer's gated tables.

Schemas (an OpenLineage schema facet) only where the catalog knows the columns without Spark
code: a contract topic (its events' envelope and payload fields as on the wire, types as in
the contract's Spark DDL, ``event_time`` a string) and a table whose ``schema_from`` is
``contract`` (the same fields as Silver types them: ``event_time`` a UTC timestamp). A
contract table's schema lists the event's fields only: the columns Silver adds (Kafka
coordinates, ``event_date``, ``_rescued_data``, customer columns) are defined by the Spark
job and not listed. Other tables' schemas live in Spark code: no schema.

The Airflow operators turn these into OpenLineage datasets
(:mod:`ingest_platform.operators`); the embedded Airflow writes the events to
:func:`lineage_file` (docs/lineage.md).

Imports neither pyspark, Airflow nor the OpenLineage client: safe anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest_core.catalog import Catalog, KafkaSinkSpec, KafkaSourceSpec, get_catalog
from ingest_core.contracts import CONTRACTS, ENVELOPE_DDL, PAYLOAD_DDL
from ingest_core.settings import PlatformSettings, get_settings, ingest_home

#: Dataset namespace of the local file system (the OpenLineage naming spec).
FILE_NAMESPACE = "file"
#: The job whose catalog entry declares what the quality gates read and write.
GATE_JOB = "quality_gate"
#: Layer of the gates' own bookkeeping tables.
OPS_LAYER = "ops"


@dataclass(frozen=True)
class SchemaField:
    """One column of a schema facet.

    :param name: column name.
    :param type: Spark SQL type name (``string``, ``decimal(18,2)``, ``timestamp``); for
        nested columns ``array`` or ``struct``, whose parts are in ``fields`` (an array's one
        element is the field ``_element``, as OpenLineage's Spark integration names it).
    :param fields: nested fields (empty for a plain column).
    """

    name: str
    type: str
    fields: tuple[SchemaField, ...] = ()


@dataclass(frozen=True)
class LineageDataset:
    """One OpenLineage dataset.

    :param namespace: ``kafka://<host:port>`` or ``file``.
    :param name: topic name, or the table's absolute path.
    :param fields: the schema, or None when the catalog does not know it.
    """

    namespace: str
    name: str
    fields: tuple[SchemaField, ...] | None = None

    @property
    def key(self) -> tuple[str, str]:
        """``(namespace, name)``: what identifies the dataset."""
        return self.namespace, self.name


@dataclass(frozen=True)
class JobLineage:
    """What a job run reads and writes, in the catalog's order, without repeats."""

    inputs: tuple[LineageDataset, ...]
    outputs: tuple[LineageDataset, ...]


def lineage_file() -> Path:
    """The embedded Airflow's OpenLineage events: ``<INGEST_HOME>/lineage/events.jsonl``,
    one JSON event per line, appended (the file transport; see
    :func:`ingestctl.airflow_runtime.lineage_environment`)."""
    return ingest_home() / "lineage" / "events.jsonl"


def _split(ddl: str) -> list[str]:
    """``ddl`` split on the commas outside ``<...>`` and ``(...)``, stripped."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(ddl):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(ddl[start:i].strip())
            start = i + 1
    parts.append(ddl[start:].strip())
    return [p for p in parts if p]


def _field(name: str, type_: str) -> SchemaField:
    """A field of Spark type ``type_``, nested types unfolded."""
    type_ = type_.strip()
    lower = type_.lower()
    if lower.startswith("array<") and lower.endswith(">"):
        return SchemaField(name, "array", (_field("_element", type_[6:-1]),))
    if lower.startswith("struct<") and lower.endswith(">"):
        members = []
        for part in _split(type_[7:-1]):
            member, _, member_type = part.partition(":")
            members.append(_field(member.strip(), member_type))
        return SchemaField(name, "struct", tuple(members))
    return SchemaField(name, lower)


def parse_ddl(ddl: str) -> tuple[SchemaField, ...]:
    """The fields of a Spark DDL column list (``"a string, b array<struct<c: int>>"``), as
    :mod:`ingest_core.contracts` writes them; no Spark needed."""
    fields = []
    for column in _split(ddl):
        name, _, type_ = column.partition(" ")
        fields.append(_field(name, type_))
    return tuple(fields)


def topic_fields(topic: str) -> tuple[SchemaField, ...] | None:
    """The fields of contract topic ``topic`` (its name before ``kafka.topic_prefix``) as on
    the wire: the envelope (``event_time`` an ISO-8601 string) and the payload; None for a
    topic without a contract (the alerts topic)."""
    if topic not in PAYLOAD_DDL:
        return None
    return parse_ddl(f"{ENVELOPE_DDL}, {PAYLOAD_DDL[topic]}")


def contract_table_fields(table: str) -> tuple[SchemaField, ...] | None:
    """The event fields of a Silver table that contracts land in, as Silver types them
    (``event_time`` a UTC timestamp); None when no contract lands in ``table``."""
    topics = sorted({c.topic for c in CONTRACTS.values() if c.silver_table == table})
    if not topics:
        return None
    fields: dict[str, SchemaField] = {}
    for topic in topics:
        for field in topic_fields(topic) or ():
            if field.name == "event_time":
                field = SchemaField("event_time", "timestamp")
            fields.setdefault(field.name, field)
    return tuple(fields.values())


def kafka_namespace(settings: PlatformSettings) -> str:
    """``kafka://<host:port>`` of the first bootstrap server."""
    return f"kafka://{settings.kafka.bootstrap_servers.split(',')[0].strip()}"


def topic_dataset(kafka_topic: str, settings: PlatformSettings) -> LineageDataset:
    """The dataset of Kafka topic ``kafka_topic`` (its full name, with the prefix)."""
    contract_topic = settings.kafka.contract_topic(kafka_topic)
    fields = topic_fields(contract_topic) if contract_topic is not None else None
    return LineageDataset(kafka_namespace(settings), kafka_topic, fields)


def table_dataset(table: str, settings: PlatformSettings, catalog: Catalog) -> LineageDataset:
    """The dataset of catalog table ``table``: its absolute Delta path, with a schema when
    its ``schema_from`` is ``contract``.

    :raises KeyError: undeclared table.
    """
    spec = catalog.table(table)
    fields = contract_table_fields(table) if spec.schema_from == "contract" else None
    return LineageDataset(FILE_NAMESPACE, str(spec.path(settings)), fields)


def _unique(datasets: Iterable[LineageDataset]) -> tuple[LineageDataset, ...]:
    seen: dict[tuple[str, str], LineageDataset] = {}
    for dataset in datasets:
        seen.setdefault(dataset.key, dataset)
    return tuple(seen.values())


def job_lineage(
    job: str, settings: PlatformSettings | None = None, catalog: Catalog | None = None
) -> JobLineage:
    """What catalog job ``job`` (streaming or batch) reads and writes.

    :returns: inputs: its source topics (a Kafka streaming job's ``source.topics``, a batch
        job's ``topics``), then its ``inputs`` tables; outputs: its ``outputs`` tables, then
        the topic of a Kafka sink.
    :raises KeyError: unknown job (the message names every declared job).
    """
    settings = settings or get_settings()
    catalog = catalog or get_catalog()
    spec = catalog.application(job)
    topics: list[str] = []
    source = getattr(spec, "source", None)
    if isinstance(source, KafkaSourceSpec):
        topics += source.topics
    topics += getattr(spec, "topics", [])
    inputs = [topic_dataset(settings.kafka.topic(t), settings) for t in topics]
    inputs += [table_dataset(t, settings, catalog) for t in spec.inputs]
    outputs = [table_dataset(t, settings, catalog) for t in spec.outputs]
    sink = getattr(spec, "sink", None)
    if isinstance(sink, KafkaSinkSpec):
        outputs.append(topic_dataset(sink.topic(settings), settings))
    return JobLineage(_unique(inputs), _unique(outputs))


def gate_tables(layer: str, catalog: Catalog | None = None) -> list[str]:
    """The tables the quality gate of ``layer`` validates: the ``quality_gate`` job's inputs
    of that layer (checked against the gate's suites by
    ``tests/unit/ingest_core/test_lineage.py``)."""
    catalog = catalog or get_catalog()
    gate = catalog.application(GATE_JOB)
    return [t for t in gate.inputs if catalog.table(t).layer == layer]


def gate_lineage(
    layer: str, settings: PlatformSettings | None = None, catalog: Catalog | None = None
) -> JobLineage:
    """What the quality gate of ``layer`` reads and writes (catalog job ``quality_gate``).

    :returns: inputs: the layer's gated tables (:func:`gate_tables`), then the ``ops``
        tables among the gate's inputs (the last cleared results, the held rows); outputs:
        the ``ops`` tables among its outputs (``ops_gate_results``, and ``ops_gate_holds``
        that its quarantine remedy writes). ``silver_quarantine``, which only the remedy
        writes, is left out.
    :raises ValueError: the gate reads no table of ``layer``.
    """
    settings = settings or get_settings()
    catalog = catalog or get_catalog()
    tables = gate_tables(layer, catalog)
    if not tables:
        raise ValueError(f"the quality gate reads no table of layer {layer!r}")
    gate = catalog.application(GATE_JOB)
    ops_inputs = [t for t in gate.inputs if catalog.table(t).layer == OPS_LAYER]
    ops_outputs = [t for t in gate.outputs if catalog.table(t).layer == OPS_LAYER]
    return JobLineage(
        _unique(table_dataset(t, settings, catalog) for t in [*tables, *ops_inputs]),
        _unique(table_dataset(t, settings, catalog) for t in ops_outputs),
    )


def read_events(path: Path | None = None) -> list[dict[str, Any]]:
    """The OpenLineage events written by the file transport, oldest first.

    :param path: the transport's ``log_file_path`` (default :func:`lineage_file`). With
        ``append`` the events are its lines; without, the transport writes one file per
        event beside it (``<path>-<timestamp>.json``): both are read. A line cut short (an
        event being written) is skipped.
    """
    path = path or lineage_file()
    files = [path] if path.is_file() else []
    files += sorted(path.parent.glob(f"{path.name}-*.json"))
    events: list[dict[str, Any]] = []
    for file in files:
        text = file.read_text(errors="replace")
        chunks = [text] if file != path else text.splitlines()
        for chunk in chunks:
            try:
                event = json.loads(chunk)
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
    return sorted(events, key=lambda e: str(e.get("eventTime", "")))
