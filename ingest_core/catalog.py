"""The platform's tables and jobs, declared once in ``include/pipeline.yaml``.

Everything else derives from these declarations: a table's Delta path
(``<storage.data_dir>/<layer>/<table>``), a job's checkpoint (``<storage.checkpoint_dir>/<job>``)
and, later, Airflow Asset URIs. No module assembles such a path by hand.

Imports neither pyspark nor Airflow: safe at DAG parse time.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, Field, model_validator

from ingest_core.settings import INCLUDE_DIR, TOPIC_PATTERN, PlatformSettings, get_settings

PIPELINE_YAML: Path = INCLUDE_DIR / "pipeline.yaml"
_NAME = r"^[a-z][a-z0-9_]*$"


class TableSpec(BaseModel):
    """One Delta table.

    :param name: ``<layer>_<entity>``, e.g. ``bronze_events``.
    :param layer: ``bronze``, ``silver`` or ``gold``; ``ops`` for the platform's own
        bookkeeping (gate results and holds).
    :param partition_by: partition columns, in order.
    :param keys: columns that identify a row (unique within the table).
    """

    name: str = Field(pattern=_NAME)
    layer: Literal["bronze", "silver", "gold", "ops"]
    description: str = ""
    partition_by: list[str] = []
    keys: list[str] = []

    @model_validator(mode="after")
    def _name_has_layer(self) -> TableSpec:
        if not self.name.startswith(f"{self.layer}_"):
            raise ValueError(f"table {self.name!r} must be named {self.layer}_<entity>")
        return self

    def path(self, settings: PlatformSettings | None = None) -> Path:
        """Absolute Delta path: ``<storage.data_dir>/<layer>/<name>`` (the layer's root is
        ``storage.layer_dirs[layer]`` when set, see :meth:`StorageSettings.layer_path`)."""
        settings = settings or get_settings()
        return settings.storage.layer_path(self.layer) / self.layer / self.name

    def asset_uri(self, settings: PlatformSettings | None = None) -> str:
        """URI of the table's Airflow Asset: ``file://<absolute Delta path>``."""
        return self.path(settings).as_uri()


class KafkaSourceSpec(BaseModel):
    """A job reading Kafka topics (names validated with Kafka's own rule)."""

    kind: Literal["kafka"]
    topics: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _valid_topics(self) -> KafkaSourceSpec:
        import re

        bad = [t for t in self.topics if not re.fullmatch(TOPIC_PATTERN, t)]
        if bad:
            raise ValueError(f"invalid Kafka topic names {bad}: use 1-249 of [A-Za-z0-9._-]")
        return self


class DeltaSourceSpec(BaseModel):
    """A job reading a declared Delta table as a stream."""

    kind: Literal["delta"]
    table: str


class JobSpec(BaseModel):
    """One Spark job: its source, its sink table, its trigger and how it is run.

    :param mode: ``always_on`` (processing-time trigger, supervised) or ``scheduled``
        (AvailableNow, run by a DAG).
    :param default_trigger: see :func:`spark_jobs.triggers.parse_trigger`.
    :param max_offsets_per_trigger: Kafka records per micro-batch at most.
    :param settings: job-specific settings (watermark delays and the like), as strings.
    """

    name: str = Field(pattern=_NAME)
    description: str = ""
    source: KafkaSourceSpec | DeltaSourceSpec = Field(discriminator="kind")
    sink: str
    mode: Literal["always_on", "scheduled"]
    default_trigger: str
    max_offsets_per_trigger: int | None = Field(default=None, ge=1)
    settings: dict[str, str] = {}

    def checkpoint(
        self, settings: PlatformSettings | None = None, query: str | None = None
    ) -> Path:
        """Absolute checkpoint folder, owned by this job alone: ``<checkpoint_dir>/<name>``,
        or ``<checkpoint_dir>/<name>/<query>`` for one of a job's several queries."""
        settings = settings or get_settings()
        base = settings.storage.checkpoint_path / self.name
        return base / query if query else base

    def setting(self, key: str) -> str:
        """Return a job setting; :raises KeyError: naming the job and the missing key."""
        try:
            return self.settings[key]
        except KeyError:
            raise KeyError(f"job {self.name!r} has no setting {key!r}") from None


class Catalog(BaseModel):
    """All table and job declarations.

    :raises pydantic.ValidationError: a declaration is malformed, or a job's sink names an
        undeclared table.
    """

    tables: dict[str, TableSpec]
    jobs: dict[str, JobSpec]

    @model_validator(mode="before")
    @classmethod
    def _names_from_keys(cls, data: dict) -> dict:
        for section in ("tables", "jobs"):
            for name, spec in (data.get(section) or {}).items():
                spec.setdefault("name", name)
        return data

    @model_validator(mode="after")
    def _sinks_declared(self) -> Catalog:
        for job in self.jobs.values():
            if job.sink not in self.tables:
                raise ValueError(f"job {job.name!r} writes undeclared table {job.sink!r}")
            if isinstance(job.source, DeltaSourceSpec) and job.source.table not in self.tables:
                raise ValueError(f"job {job.name!r} reads undeclared table {job.source.table!r}")
        return self

    def table(self, name: str) -> TableSpec:
        """Return the declared table ``name``; :raises KeyError: naming the known tables."""
        try:
            return self.tables[name]
        except KeyError:
            raise KeyError(f"unknown table {name!r}; declared: {sorted(self.tables)}") from None

    def job(self, name: str) -> JobSpec:
        """Return the declared job ``name``; :raises KeyError: naming the known jobs."""
        try:
            return self.jobs[name]
        except KeyError:
            raise KeyError(f"unknown job {name!r}; declared: {sorted(self.jobs)}") from None


@lru_cache(maxsize=1)
def get_catalog() -> Catalog:
    """Load and validate ``include/pipeline.yaml`` once per process."""
    return Catalog.model_validate(yaml.safe_load(PIPELINE_YAML.read_text()))
