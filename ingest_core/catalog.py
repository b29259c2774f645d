"""The platform's tables and jobs, declared once in ``include/pipeline.yaml``.

Everything else derives from these declarations: a table's Delta path
(``<storage.data_dir>/<layer>/<table>``), a job's checkpoint (``<storage.checkpoint_dir>/<job>``)
and, later, Airflow Asset URIs. No module assembles such a path by hand.

Imports neither pyspark nor Airflow: safe at DAG parse time.
"""

from __future__ import annotations

import importlib.util
import re
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ingest_core.intervals import IntervalError, parse_interval
from ingest_core.settings import (
    INCLUDE_DIR,
    TOPIC_PATTERN,
    JavaOptions,
    PlatformSettings,
    catalog_dir,
    get_settings,
)

#: The repository's catalog (``INGEST_CATALOG_DIR`` may point elsewhere: :func:`get_catalog`).
PIPELINE_YAML: Path = INCLUDE_DIR / "pipeline.yaml"
_NAME = r"^[a-z][a-z0-9_]*$"


def _interval(text: str | None, what: str) -> str | None:
    """Check that ``text`` is an interval (see :mod:`ingest_core.intervals`); keep the text."""
    if text is None:
        return None
    try:
        parse_interval(text, positive=True)
    except IntervalError as error:
        raise ValueError(f"{what}: {error}") from None
    return text


_COMPARISONS = ("equals", "in_", "at_least", "at_most")


class Condition(BaseModel):
    """A row predicate of a declared Gold aggregate: ``column`` compared with one value,
    e.g. ``{column: status, equals: authorized}`` or ``{column: score, at_most: 2}``.

    Exactly one comparison: ``equals`` (a string, number or boolean), ``in`` (a list),
    ``at_least`` or ``at_most`` (numbers, inclusive). A null never matches (SQL's rule).

    :raises pydantic.ValidationError: no comparison or several, or an unknown key.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    column: str = Field(pattern=_NAME)
    equals: str | bool | int | float | None = None
    in_: tuple[str | int | float, ...] | None = Field(None, alias="in", min_length=1)
    at_least: float | None = None
    at_most: float | None = None

    @model_validator(mode="after")
    def _one_comparison(self) -> Condition:
        given = [k for k in _COMPARISONS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"condition on {self.column!r}: give exactly one of equals, in, at_least, "
                f"at_most (given: {[k.rstrip('_') for k in given] or 'none'})"
            )
        return self

    @property
    def numeric(self) -> bool:
        """Whether the comparison needs a numeric column (``at_least``/``at_most``)."""
        return self.at_least is not None or self.at_most is not None

    def describe(self) -> str:
        """The condition as a reader writes it, e.g. ``score <= 2``."""
        if self.equals is not None:
            return f"{self.column} = {self.equals!r}"
        if self.in_ is not None:
            return f"{self.column} in {list(self.in_)!r}"
        if self.at_least is not None:
            return f"{self.column} >= {self.at_least:g}"
        return f"{self.column} <= {self.at_most:g}"


#: Measures over a column: the column's values aggregated.
COLUMN_MEASURES = ("sum", "min", "max", "avg")
#: Measures over a condition: ``count_if`` counts the rows matching it, ``any`` is true when
#: one row of the window does.
CONDITION_MEASURES = ("count_if", "any")


class Measure(BaseModel):
    """One column of a declared Gold aggregate, written in ``include/pipeline.yaml`` as:

    ==============================  =====================================================
    ``count``                       rows in the window (bigint)
    ``{sum|min|max|avg: column}``   the column's sum, minimum, maximum or mean (Spark's
                                    result type: a decimal's sum gains 10 digits of
                                    precision, an integer's mean is a double)
    ``{count_if: condition}``       rows matching the :class:`Condition` (bigint)
    ``{any: condition}``            whether a row matches it (boolean)
    ``{ratio: [a, b]}``             measure ``a`` / measure ``b`` of the same row (double;
                                    null when ``b`` is 0), e.g. a success rate
    ==============================  =====================================================

    All but ``ratio`` merge across partial aggregates, which is what a streaming
    aggregation's state keeps; a ratio is computed from two of them.

    :raises pydantic.ValidationError: an unknown form.
    """

    model_config = ConfigDict(frozen=True)

    kind: Literal["count", "count_if", "any", "sum", "min", "max", "avg", "ratio"]
    column: str | None = Field(None, pattern=_NAME)
    where: Condition | None = None
    of: tuple[str, str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: object) -> object:
        if value == "count":
            return {"kind": "count"}
        if isinstance(value, dict) and len(value) == 1 and "kind" not in value:
            ((kind, argument),) = value.items()
            if kind in COLUMN_MEASURES:
                return {"kind": kind, "column": argument}
            if kind in CONDITION_MEASURES:
                return {"kind": kind, "where": argument}
            if kind == "ratio":
                return {"kind": kind, "of": argument}
            raise ValueError(
                f"unknown measure {kind!r}; measures: count, {', '.join(COLUMN_MEASURES)}, "
                f"{', '.join(CONDITION_MEASURES)}, ratio"
            )
        if isinstance(value, dict) and "kind" in value:
            return value
        raise ValueError(
            f"a measure is `count` or a one-key mapping such as {{sum: amount}}, not {value!r}"
        )

    @model_validator(mode="after")
    def _arguments_of_kind(self) -> Measure:
        needs = (
            ("column", self.kind in COLUMN_MEASURES),
            ("where", self.kind in CONDITION_MEASURES),
            ("of", self.kind == "ratio"),
        )
        for argument, needed in needs:
            if (getattr(self, argument) is not None) != needed:
                verb = "needs" if needed else "takes no"
                raise ValueError(f"measure {self.kind} {verb} {argument}")
        return self

    def result_type(self, column_type: str | None = None) -> str:
        """The Spark DDL type of the measure's result: ``bigint`` for ``count`` and
        ``count_if``, ``boolean`` for ``any``, ``double`` for ``ratio``; for a column
        measure Spark's rule for ``column_type``: an ``int``'s sum is a ``bigint`` and its
        mean a ``double``, a ``decimal(p,s)``'s sum a ``decimal(p+10,s)`` and its mean a
        ``decimal(p+4,s+4)``; min and max keep the type.

        :raises ValueError: a type the measure does not take (a sum of strings).
        """
        fixed = {"count": "bigint", "count_if": "bigint", "any": "boolean", "ratio": "double"}
        if self.kind in fixed:
            return fixed[self.kind]
        decimal = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", column_type or "")
        if decimal:
            precision, scale = int(decimal[1]), int(decimal[2])
            if self.kind == "sum":
                return f"decimal({min(precision + 10, 38)},{scale})"
            if self.kind == "avg":
                return f"decimal({min(precision + 4, 38)},{min(scale + 4, 38)})"
            return f"decimal({precision},{scale})"
        if column_type in ("int", "bigint"):
            return {"sum": "bigint", "avg": "double"}.get(self.kind, column_type)
        if self.kind in ("min", "max") and column_type in ("string", "timestamp", "date"):
            return column_type
        raise ValueError(
            f"{self.kind} of {self.column!r}: a {column_type} column cannot be "
            f"{'summed' if self.kind == 'sum' else 'averaged' if self.kind == 'avg' else 'ordered'}"
            " (sum and avg take numbers; min and max numbers, strings and times)"
        )

    @property
    def reads(self) -> tuple[str, ...]:
        """The source columns the measure reads (none for ``count`` and ``ratio``)."""
        if self.column is not None:
            return (self.column,)
        if self.where is not None:
            return (self.where.column,)
        return ()


class WindowSpec(BaseModel):
    """How a Gold table aggregates Silver in event time, declared in
    ``include/pipeline.yaml`` and compiled into Spark by
    :func:`spark_jobs.transforms.gold.aggregate_window`: one definition, used by the
    streaming job (``gold_aggregate``), the late corrections, the backfill, the gate's
    rules (:mod:`ingest_core.quality.rules`) and the catalog check.

    :param kind: ``tumbling`` (``duration``), ``sliding`` (``duration`` and ``slide``) or
        ``session`` (``gap``).
    :param source: the Silver table aggregated.
    :param time_column: the event-time column windows are cut on (a timestamp).
    :param group_by: grouping columns besides the window, in order (a session window needs
        one: sessions are per key).
    :param where: only the rows matching this :class:`Condition` are aggregated (a window
        with none has no row).
    :param measures: output column -> :class:`Measure`, in output order.
    :param duration: window length, e.g. ``"5 minutes"`` (tumbling and sliding).
    :param slide: how far a sliding window moves, e.g. ``"5 minutes"``; at most ``duration``.
    :param gap: name of the writing job's setting holding the session gap (sessions only).
    :param watermark: name of the writing job's setting holding the watermark delay. Gap and
        watermark are job settings so that they are part of the job's checkpoint fingerprint
        (a checkpoint's state only fits the gap and watermark it was made with).
    :raises pydantic.ValidationError: a field the kind needs is missing, one it does not take
        is set, an interval is malformed, a ratio names no earlier measure, or a measure is
        named like a window or grouping column.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["tumbling", "sliding", "session"]
    source: str
    time_column: str = "event_time"
    group_by: list[str] = []
    where: Condition | None = None
    measures: dict[str, Measure] = Field(min_length=1)
    duration: str | None = None
    slide: str | None = None
    gap: str | None = None
    watermark: str

    @model_validator(mode="after")
    def _fields_of_kind(self) -> WindowSpec:
        needs = {"tumbling": {"duration"}, "sliding": {"duration", "slide"}, "session": {"gap"}}
        given = {f for f in ("duration", "slide", "gap") if getattr(self, f) is not None}
        missing, extra = needs[self.kind] - given, given - needs[self.kind]
        if missing:
            raise ValueError(f"a {self.kind} window needs {sorted(missing)}")
        if extra:
            raise ValueError(f"a {self.kind} window takes no {sorted(extra)}")
        if self.kind == "session" and not self.group_by:
            raise ValueError("a session window needs group_by (sessions are per key)")
        _interval(self.duration, "window duration")
        _interval(self.slide, "window slide")
        if self.slide and self.duration and self.slide_delta > self.length:
            raise ValueError(f"slide {self.slide!r} is longer than duration {self.duration!r}")
        taken = {self.start_column, self.end_column, *self.group_by}
        earlier: list[str] = []  # measures a ratio may divide
        for name, measure in self.measures.items():
            if not re.match(_NAME, name) or name in taken:
                raise ValueError(
                    f"measure {name!r}: a measure needs a lower-case name of its own (taken: "
                    f"{sorted(taken)})"
                )
            if measure.of is not None and not set(measure.of) <= set(earlier):
                raise ValueError(
                    f"measure {name!r}: a ratio divides two measures declared before it "
                    f"(not ratios): {list(measure.of)} are not among {earlier}"
                )
            taken.add(name)
            if measure.kind != "ratio":
                earlier.append(name)
        return self

    @property
    def columns(self) -> list[str]:
        """The table's columns in order: window start and end, grouping columns, measures
        (a session window: grouping columns first, as Spark's examples write sessions)."""
        bounds = [self.start_column, self.end_column]
        if self.kind == "session":
            return [*self.group_by, *bounds, *self.measures]
        return [*bounds, *self.group_by, *self.measures]

    @property
    def reads(self) -> list[str]:
        """The source columns the aggregate reads, in order and once each: ``event_id``
        (late corrections deduplicate on it), the time column, grouping columns, the
        ``where`` condition's column and the measures' columns."""
        wanted = ["event_id", self.time_column, *self.group_by]
        if self.where is not None:
            wanted.append(self.where.column)
        for measure in self.measures.values():
            wanted += measure.reads
        return list(dict.fromkeys(wanted))

    @property
    def start_column(self) -> str:
        """Output column holding a row's window (or session) start."""
        return "session_start" if self.kind == "session" else "window_start"

    @property
    def end_column(self) -> str:
        """Output column holding a row's window (or session) end (exclusive)."""
        return "session_end" if self.kind == "session" else "window_end"

    @property
    def length(self) -> timedelta:
        """Window length (:raises ValueError: a session window has none)."""
        if self.duration is None:
            raise ValueError("a session window has no fixed length")
        return parse_interval(self.duration)

    @property
    def slide_delta(self) -> timedelta:
        """How far a window moves (its length for a tumbling one)."""
        return parse_interval(self.slide) if self.slide else self.length


class RowRetentionSpec(BaseModel):
    """How many rows a bookkeeping table keeps (applied by ``table_maintenance``).

    A row goes once its ``time_column`` is older than ``keep``, measured back from
    ``measured_from``, unless it is among the ``keep_newest`` newest rows of its
    ``newest_per`` group (what the platform still reads: a query's last reconciliation row,
    a table's last gate results).

    :param time_column: a timestamp column of the table (UTC).
    :param keep: an interval, e.g. ``"30 days"``.
    :param measured_from: ``now``, or ``silver_watermark``: silver_refine's newest combined
        watermark (``silver_reconciliation.watermark``), for the deduplication id history
        (an event older than the watermark is late whatever the history says).
    :param newest_per: grouping columns of ``keep_newest`` (empty: the whole table).
    :param keep_newest: rows always kept per group, newest by ``time_column``.
    """

    time_column: str
    keep: str
    measured_from: Literal["now", "silver_watermark"] = "now"
    newest_per: list[str] = []
    keep_newest: int = Field(default=0, ge=0)

    @field_validator("keep")
    @classmethod
    def _keep_interval(cls, value: str) -> str:
        return _interval(value, "keep") or value

    @property
    def keep_delta(self) -> timedelta:
        """``keep`` as a timedelta."""
        return parse_interval(self.keep)


class TableMaintenanceSpec(BaseModel):
    """What ``table_maintenance`` does to one table besides compaction and VACUUM.

    :param zorder_by: columns to Z-order by when compacting (None: bin-packing only).
    :param keep_rows: row retention of a bookkeeping table (None: every row is data).
    """

    zorder_by: list[str] | None = None
    keep_rows: RowRetentionSpec | None = None


class MaintenanceSpec(BaseModel):
    """Defaults of Delta table maintenance (``dags/table_maintenance.py``).

    :param retention_floor: VACUUM never removes a file younger than this (constraint (c);
        Delta's own default is 7 days, ``delta.deletedFileRetentionDuration``).
    :param log_retention: ``delta.logRetentionDuration`` set on every table (Delta's
        default is 30 days), raised when a stream or backup needs older log entries.
    :param on_busy: ``wait`` (up to ``lock_wait``) or ``skip`` when a writer holds the
        table's checkpoint lock.
    :param lock_wait: how long ``wait`` waits for a writer to finish.
    :param always_on: ``pause`` (stop the always-on writer, maintain, let the supervisor
        restart it) or ``skip`` tables whose writer is an always-on job.
    :param closed_partition_age: a date partition older than this (by its value) is no
        longer filled by any writer; only such partitions are compacted.
    """

    retention_floor: str = "7 days"
    log_retention: str = "30 days"
    on_busy: Literal["wait", "skip"] = "wait"
    lock_wait: str = "30 minutes"
    always_on: Literal["pause", "skip"] = "pause"
    closed_partition_age: str = "1 day"

    @field_validator("retention_floor", "log_retention", "lock_wait", "closed_partition_age")
    @classmethod
    def _intervals(cls, value: str) -> str:
        try:
            parse_interval(value)  # zero allowed: a test runs with no floor
        except IntervalError as error:
            raise ValueError(str(error)) from None
        return value


class TableSpec(BaseModel):
    """One Delta table.

    :param name: ``<layer>_<entity>``, e.g. ``bronze_events``.
    :param layer: ``bronze``, ``silver`` or ``gold``; ``ops`` for the platform's own
        bookkeeping (gate results and holds).
    :param partition_by: partition columns, in order.
    :param keys: columns that identify a row (unique within the table); the quality gate's
        keys, the MERGE keys of the Gold corrections and backfills.
    :param window: how a windowed Gold table aggregates Silver (None: not windowed).
    :param maintenance: what table maintenance does besides compaction and VACUUM.
    :param written_by: who writes the table when no Spark job of the catalog does (e.g.
        ``ingestctl holds``); None: the jobs whose ``outputs`` list it.
    :param schema_from: where the table's columns are defined: ``contract`` (the event
        contracts of :mod:`ingest_core.contracts` whose ``silver_table`` it is), ``window``
        (its declared ``window``: bounds, grouping columns, measures) or
        ``<module>:<name>`` (a function or constant of the Spark jobs whose docstring or
        value gives the schema). Checked by ``tests/unit/ingest_core/test_catalog_consistency.py``.
    :param checkpoint_interval: Delta's ``delta.checkpointInterval``: commits between two
        checkpoints of the table's log (Delta's default: 10). The commit that reaches one
        writes it before the writer goes on, so a table committed every second pays a
        checkpoint every ten seconds; set by each of the table's writers
        (:func:`spark_jobs.delta_io.ensure_table_properties`: the streaming writer when it
        starts, a batch writer when it creates the table; ``tests/unit/ingest_core/
        test_catalog_consistency.py`` fails on a writer that never calls it). None: Delta's
        default.
    """

    name: str = Field(pattern=_NAME)
    layer: Literal["bronze", "silver", "gold", "ops"]
    description: str = ""
    partition_by: list[str] = []
    keys: list[str] = []
    window: WindowSpec | None = None
    written_by: str | None = None
    maintenance: TableMaintenanceSpec = TableMaintenanceSpec()
    schema_from: str = Field(
        pattern=r"^(contract|window|[a-z_][a-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*)$"
    )
    checkpoint_interval: int | None = Field(None, ge=1, le=10_000)

    @property
    def delta_properties(self) -> dict[str, str]:
        """The Delta table properties the catalog declares for this table (name -> value)."""
        if self.checkpoint_interval is None:
            return {}
        return {"delta.checkpointInterval": str(self.checkpoint_interval)}

    @model_validator(mode="after")
    def _name_has_layer(self) -> TableSpec:
        if not self.name.startswith(f"{self.layer}_"):
            raise ValueError(f"table {self.name!r} must be named {self.layer}_<entity>")
        if (self.window is None) == (self.schema_from == "window"):
            raise ValueError(
                f"table {self.name!r}: schema_from window goes with a window declaration, "
                "and a declared window with schema_from window"
            )
        if self.window is not None:
            expected = [self.window.start_column, *self.window.group_by]
            if sorted(self.keys) != sorted(expected):
                raise ValueError(
                    f"windowed table {self.name!r} must be keyed on {expected} (window start "
                    f"and grouping columns), not {self.keys}"
                )
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
        bad = [t for t in self.topics if not re.fullmatch(TOPIC_PATTERN, t)]
        if bad:
            raise ValueError(f"invalid Kafka topic names {bad}: use 1-249 of [A-Za-z0-9._-]")
        return self


class KafkaSinkSpec(BaseModel):
    """A job writing a Kafka topic rather than a table (real-time mode cannot write Delta).

    :param topic_setting: the platform setting that names the topic (``alerts.topic``, so
        the name lives in one place, before ``kafka.topic_prefix``).
    """

    kind: Literal["kafka"]
    topic_setting: Literal["alerts.topic"]

    def topic(self, settings: PlatformSettings | None = None) -> str:
        """The topic's full name (with ``kafka.topic_prefix``)."""
        settings = settings or get_settings()
        return settings.kafka.topic(settings.alerts.topic)


class DeltaSourceSpec(BaseModel):
    """A job reading a declared Delta table as a stream."""

    kind: Literal["delta"]
    table: str


class _ApplicationSpec(BaseModel):
    """What every Spark application of the catalog declares.

    :param module: the Python module spark-submit runs (``spark_jobs.silver_refine``).
    :param inputs: the tables it reads (Kafka topics: see ``source`` / ``topics``).
    :param outputs: every table it writes (none only for a job whose sink is a Kafka topic).
    :param settings: job-specific settings (watermark delays and the like), as strings.
    :param work_from: the inputs whose new versions give the job something to do (an Airflow
        task skips the job while none changed); None: its inputs that it does not write.
    :param driver_memory: ``spark.driver.memory`` (the driver JVM's heap, e.g. ``768m``) of
        this application; None: the platform's ``spark.driver_memory`` setting.
    :param driver_java_options: more options of this application's driver JVM (each one
        ``-X...`` option; ``-Xmx`` is refused: the heap is ``driver_memory``), after the
        platform's ``spark.driver_java_options`` setting (``include/platform.yaml``: the
        serial GC and a small initial heap on one machine).
    :param cores_max: ``spark.cores.max`` of this application on a standalone cluster whose
        profile caps applications (``spark.cores_max``); None: the profile's cap. A real-time
        query needs a task slot per Kafka partition it reads
        (:func:`spark_jobs.real_time.check_task_slots`).
    """

    name: str = Field(pattern=_NAME)
    description: str = ""
    module: str = Field(pattern=r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$")
    inputs: list[str] = []
    outputs: list[str] = []
    settings: dict[str, str] = {}
    work_from: list[str] | None = None
    driver_memory: str | None = Field(default=None, pattern=r"^\d+[kmgKMG]$")
    driver_java_options: JavaOptions = []
    cores_max: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _work_from_inputs(self) -> _ApplicationSpec:
        outside = sorted(set(self.work_from or ()) - set(self.inputs))
        if outside:
            raise ValueError(f"job {self.name!r}: work_from {outside} are not in its inputs")
        return self

    @property
    def new_data_inputs(self) -> list[str]:
        """The tables whose new versions give the job something to do (``work_from``, else
        its inputs minus its outputs), in declaration order."""
        if self.work_from is not None:
            return list(self.work_from)
        return [t for t in self.inputs if t not in self.outputs]

    def setting(self, key: str) -> str:
        """Return a job setting; :raises KeyError: naming the job and the missing key."""
        try:
            return self.settings[key]
        except KeyError:
            raise KeyError(f"job {self.name!r} has no setting {key!r}") from None


class JobSpec(_ApplicationSpec):
    """One streaming Spark job: it owns a checkpoint (``<checkpoint_dir>/<name>``).

    :param mode: ``always_on`` (processing-time trigger, started and watched by the streaming
        supervisor) or ``available_now`` (AvailableNow, run by a DAG).
    :param source: what the stream reads (Kafka topics, or a Delta table of ``inputs``);
        with ``sink`` and ``settings`` it makes the checkpoint's fingerprint.
    :param sink: the main table it writes (one of ``outputs``), or a Kafka topic
        (:class:`KafkaSinkSpec`); see :attr:`sink_table`.
    :param default_trigger: see :func:`spark_jobs.triggers.parse_trigger`.
    :param max_offsets_per_trigger: Kafka records per micro-batch at most.
    :param output_files_per_batch: a Kafka -> Delta job writes a micro-batch with this many
        tasks (Spark's ``coalesce``), so at most this many files per partition value; None:
        one task and file per Kafka partition (12 for Bronze's four topics of three). Each
        task and file is a fixed cost of every micro-batch: at 5,000 events/s with the 1 s
        trigger, 2 instead of 12 cut Bronze's freshness p50 from 7.1 s to 3.3-5.7 s on a
        2-core machine (``bench/results/REFERENCE.md``). Set it to the cores the job has.
    """

    source: KafkaSourceSpec | DeltaSourceSpec = Field(discriminator="kind")
    sink: str | KafkaSinkSpec
    mode: Literal["always_on", "available_now"]
    default_trigger: str
    max_offsets_per_trigger: int | None = Field(default=None, ge=1)
    output_files_per_batch: int | None = Field(default=None, ge=1)

    @field_validator("default_trigger")
    @classmethod
    def _trigger_interval(cls, value: str) -> str:
        _, _, interval = value.partition("=")
        if interval:
            _interval(interval, f"default_trigger {value!r}")
        return value

    @model_validator(mode="after")
    def _files_per_batch_of_a_kafka_to_delta_job(self) -> JobSpec:
        kafka_to_delta = isinstance(self.source, KafkaSourceSpec) and isinstance(self.sink, str)
        if self.output_files_per_batch is not None and not kafka_to_delta:
            raise ValueError(
                f"job {self.name!r}: output_files_per_batch applies to a job reading Kafka "
                "into a Delta table"
            )
        return self

    @model_validator(mode="after")
    def _sink_and_source_listed(self) -> JobSpec:
        if isinstance(self.sink, str) and self.sink not in self.outputs:
            raise ValueError(f"job {self.name!r}: sink {self.sink!r} is not in its outputs")
        if isinstance(self.sink, KafkaSinkSpec) and self.outputs:
            raise ValueError(
                f"job {self.name!r}: a Kafka sink job writes no table, but outputs lists "
                f"{self.outputs}"
            )
        if isinstance(self.source, DeltaSourceSpec) and self.source.table not in self.inputs:
            raise ValueError(
                f"job {self.name!r}: source table {self.source.table!r} is not in its inputs"
            )
        return self

    @property
    def sink_table(self) -> str | None:
        """The table the job's sink writes; None for a Kafka sink."""
        return self.sink if isinstance(self.sink, str) else None

    def checkpoint(
        self, settings: PlatformSettings | None = None, query: str | None = None
    ) -> Path:
        """Absolute checkpoint folder, owned by this job alone: ``<checkpoint_dir>/<name>``,
        or ``<checkpoint_dir>/<name>/<query>`` for one of a job's several queries."""
        settings = settings or get_settings()
        base = settings.storage.checkpoint_path / self.name
        return base / query if query else base


class BatchJobSpec(_ApplicationSpec):
    """One batch Spark job (no checkpoint of its own), run by a DAG or by hand.

    :param topics: Kafka topics it may read (``bronze_replay``).
    """

    mode: Literal["batch"] = "batch"
    topics: list[str] = []

    @model_validator(mode="after")
    def _writes_a_table(self) -> BatchJobSpec:
        if not self.outputs:
            raise ValueError(f"batch job {self.name!r} declares no outputs")
        return self


class Catalog(BaseModel):
    """All table and job declarations.

    :param jobs: the streaming jobs; each owns a checkpoint (backed up, restored, recovered).
    :param batch_jobs: the batch jobs; no checkpoint.
    :param maintenance: defaults of Delta table maintenance.
    :raises pydantic.ValidationError: a declaration is malformed; a job reads or writes an
        undeclared table; a job name is declared twice; a table is written by no job (and
        declares no ``written_by``); a Gold window names an undeclared source table or a
        watermark or gap setting its writing job lacks.
    """

    tables: dict[str, TableSpec]
    jobs: dict[str, JobSpec]
    batch_jobs: dict[str, BatchJobSpec] = {}
    maintenance: MaintenanceSpec = MaintenanceSpec()

    @model_validator(mode="before")
    @classmethod
    def _names_from_keys(cls, data: dict) -> dict:
        for section in ("tables", "jobs", "batch_jobs"):
            for name, spec in (data.get(section) or {}).items():
                spec.setdefault("name", name)
        return data

    @model_validator(mode="after")
    def _references_declared(self) -> Catalog:
        twice = sorted(set(self.jobs) & set(self.batch_jobs))
        if twice:
            raise ValueError(f"jobs declared both as streaming and batch jobs: {twice}")
        for job in self.applications.values():
            for kind, names in (("reads", job.inputs), ("writes", job.outputs)):
                unknown = [t for t in names if t not in self.tables]
                if unknown:
                    raise ValueError(
                        f"job {job.name!r} {kind} undeclared table(s) {unknown}; "
                        f"declared: {sorted(self.tables)}"
                    )
        for table in self.tables.values():
            writers = self.writers(table.name)
            if not writers and table.written_by is None:
                raise ValueError(
                    f"table {table.name!r} is written by no job: list it in a job's outputs "
                    "or say who writes it (written_by)"
                )
            if table.window is None:
                continue
            if table.window.source not in self.tables:
                raise ValueError(
                    f"table {table.name!r}: window source {table.window.source!r} is undeclared"
                )
            streaming = [job for job in writers if isinstance(job, JobSpec)]
            if len(streaming) != 1:
                raise ValueError(
                    f"windowed table {table.name!r} must be written by exactly one streaming "
                    f"job (its watermark is that job's), not {[j.name for j in streaming]}"
                )
            for field in ("watermark", "gap"):
                key = getattr(table.window, field)
                if key is None:
                    continue
                if key not in streaming[0].settings:
                    raise ValueError(
                        f"table {table.name!r}: window {field} {key!r} is no setting of "
                        f"its streaming writer {streaming[0].name!r}"
                    )
                _interval(streaming[0].settings[key], f"job {streaming[0].name!r} setting {key!r}")
        return self

    @property
    def applications(self) -> dict[str, JobSpec | BatchJobSpec]:
        """Every Spark job, streaming and batch, by name."""
        return {**self.jobs, **self.batch_jobs}

    def table(self, name: str) -> TableSpec:
        """Return the declared table ``name``; :raises KeyError: naming the known tables."""
        try:
            return self.tables[name]
        except KeyError:
            raise KeyError(f"unknown table {name!r}; declared: {sorted(self.tables)}") from None

    def job(self, name: str) -> JobSpec:
        """Return the declared streaming job ``name``; :raises KeyError: naming the known
        streaming jobs."""
        try:
            return self.jobs[name]
        except KeyError:
            raise KeyError(f"unknown job {name!r}; declared: {sorted(self.jobs)}") from None

    def application(self, name: str) -> JobSpec | BatchJobSpec:
        """Return the declared job ``name``, streaming or batch.

        :raises KeyError: naming every declared job.
        """
        try:
            return self.applications[name]
        except KeyError:
            raise KeyError(f"unknown job {name!r}; declared: {sorted(self.applications)}") from None

    def writers(self, table: str) -> list[JobSpec | BatchJobSpec]:
        """The jobs whose ``outputs`` list ``table``, streaming jobs first."""
        return [job for job in self.applications.values() if table in job.outputs]

    def windowed_tables(self) -> dict[str, WindowSpec]:
        """Gold table -> its window, in declaration order."""
        return {n: t.window for n, t in self.tables.items() if t.window is not None}

    def window(self, table: str) -> WindowSpec:
        """The window of ``table``; :raises KeyError: ``table`` is not windowed."""
        window = self.table(table).window
        if window is None:
            raise KeyError(
                f"table {table!r} is not windowed; windowed: {sorted(self.windowed_tables())}"
            )
        return window

    def _window_setting(self, table: str, field: Literal["watermark", "gap"]) -> str:
        key = getattr(self.window(table), field)
        if key is None:
            raise KeyError(f"table {table!r}: its window has no {field}")
        return self.job(self.windowed_writer(table)).setting(key)

    def windowed_writer(self, table: str) -> str:
        """The streaming job that appends ``table``'s windows (its watermark is theirs).

        :raises KeyError: no streaming job writes ``table``.
        """
        for job in self.jobs.values():
            if table in job.outputs:
                return job.name
        raise KeyError(f"no streaming job writes {table!r}")

    def window_watermark(self, table: str) -> str:
        """Watermark delay of ``table``'s window, e.g. ``"10 minutes"`` (from its writer's
        settings)."""
        return self._window_setting(table, "watermark")

    def window_gap(self, table: str) -> str:
        """Session gap of ``table``'s session window, e.g. ``"10 minutes"``.

        :raises KeyError: ``table`` has no session window.
        """
        return self._window_setting(table, "gap")


def job_application(job: str) -> str:
    """Path of the ``.py`` file spark-submit runs for ``job`` (its catalog ``module``), found
    without importing the module (only its parent packages).

    :raises ValueError: unknown job (the message lists the known ones), or a module that is
        not on the Python path.
    """
    applications = get_catalog().applications
    if job not in applications:
        raise ValueError(f"unknown job {job!r}; known: {sorted(applications)}")
    module = applications[job].module
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"job {job!r}: its module {module!r} is not on the Python path")
    return spec.origin


@lru_cache(maxsize=1)
def get_catalog() -> Catalog:
    """Load and validate ``pipeline.yaml`` of :func:`ingest_core.settings.catalog_dir`
    (``include/`` unless ``INGEST_CATALOG_DIR`` says otherwise) once per process."""
    return Catalog.model_validate(yaml.safe_load((catalog_dir() / "pipeline.yaml").read_text()))
