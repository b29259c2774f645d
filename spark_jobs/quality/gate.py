"""The quality gate job: validate what a layer added since the last gate that passed.

For every gated table of the layer (:data:`spark_jobs.quality.suites.LAYER_RULES`) the gate
reads the table's increment through Delta's change data feed (versions after the newest
cleared result in ``ops_gate_results``, up to the current one), validates it with the
table's GX suite, appends one result row per table to ``ops_gate_results`` and rebuilds the
GX Data Docs once (``<storage.state_dir>/gx/gx/uncommitted/data_docs/local_site/index.html``).

Two engines, same suites and same results: increments of at most
``quality.pandas_max_rows`` change rows in all are read with delta-rs and validated by GX's
pandas engine, with no JVM (:func:`validate_layer_without_spark`; the Airflow gate task runs
it in its own process); larger ones are read and validated by Spark
(:func:`validate_layer`, under spark-submit).

A failed table keeps its validated mark where it was, so every later run of the gate fails
on the same increment until an operator resolves it (README, "Quality gates"):

* ``quarantine``: the increment's rows that broke a row-wise expectation are held back
  (``ops_gate_holds``; Gold reads Silver without them) and their raw Bronze records are
  written to ``silver_quarantine`` with the expectation as reason; nothing is deleted;
* ``accept``: the failed increment is recorded as accepted (who, why) and flows on.

Run (Airflow runs ``validate``; operators run the others)::

    python -m spark_jobs.quality.gate validate --layer silver --run-id manual_1 [--engine auto]
    python -m spark_jobs.quality.gate status --layer silver
    python -m spark_jobs.quality.gate quarantine --layer silver --reason "bad amounts" --by ana
    python -m spark_jobs.quality.gate accept --layer gold --reason "known outage" --by ana
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest_core.catalog import get_catalog
from ingest_core.locks import file_lock
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.delta_io import append_idempotent, read_table
from spark_jobs.local_frames import local_frame
from spark_jobs.quality.holds import held_event_ids
from spark_jobs.quality.state import (
    HOLDS_TABLE,
    RESULTS_TABLE,
    Increment,
    gate_results,
    pending,
    unresolved_failures,
)
from spark_jobs.quality.suites import (
    ALREADY_IN_TABLE,
    TableRules,
    build_suite,
    layer_rules,
    validated_columns,
)
from spark_jobs.quality.suites import volume_band as learn_band

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

JOB_NAME = "quality_gate"
#: ``ops_gate_results`` schema.
RESULTS_SCHEMA = (
    "run_id string, layer string, table string, from_version long, to_version long, "
    "rows long, status string, failed_expectations string, docs_url string, "
    "resolved_by string, reason string, validated_at timestamp"
)
_CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
#: Change-feed rows that are a table's new rows (inserts, and updated rows' new images).
_NEW_ROWS = ("insert", "update_postimage")
#: The GX data source of each engine; a table's asset and validation definition (named
#: ``<table>.<engine>``) belong to its engine's source.
GX_SOURCES = {"spark": "platform", "pandas": "platform_pandas"}
#: ``validate --engine``: ``auto`` is pandas up to ``quality.pandas_max_rows``, else Spark.
ENGINE_CHOICES = ("auto", "pandas", "spark")


class RemedyError(ValueError):
    """A remedy cannot apply (nothing to resolve, or a failure rows cannot be held for)."""


@dataclass
class TableOutcome:
    """One table's gate result: ``status`` is ``passed``, ``failed`` or ``empty``; ``failed``
    lists the broken expectations (type, column, observed value, unexpected count and share,
    examples)."""

    increment: Increment
    rows: int
    status: str
    failed: list[dict[str, Any]] = field(default_factory=list)
    unexpected_ids: set[str] = field(default_factory=set)


def gx_context(settings: PlatformSettings) -> Any:
    """The file-backed GX project in ``<storage.state_dir>/gx`` (suites, results, Data Docs),
    with progress bars and usage statistics off. Not safe beside another process using the
    project: the gates open it through :func:`gx_project`."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    root = settings.storage.state_path / "gx"
    root.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=str(root))
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


@contextmanager
def gx_project(settings: PlatformSettings) -> Iterator[Any]:
    """:func:`gx_context`, with the project's lock (``<state_dir>/gx/.project.lock``, an
    exclusive ``flock``) held for the ``with`` block; gates of other processes wait for it.

    Why: GX's file stores are not safe for concurrent writers. Every gate rewrites its
    tables' suites and validation definitions (``add_or_update``) and builds the Data Docs;
    four gates started together (a backfill beside a scheduled run) crashed three times in
    four with "ExpectationSuite ... not found", "Store already has the following key" or a
    ``ValidationDefinition`` error, and recorded nothing (issue 50;
    tests/unit/spark_jobs/test_gate_concurrency.py). A validation takes seconds, so waiting
    costs little; the lock dies with its holder.
    """
    root = settings.storage.state_path / "gx"
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / ".project.lock"):
        yield gx_context(settings)


def docs_index(settings: PlatformSettings | None = None) -> Path:
    """Where the GX Data Docs of the gates are built (open in a browser)."""
    settings = settings or get_settings()
    return (
        settings.storage.state_path
        / "gx"
        / "gx"
        / "uncommitted"
        / "data_docs"
        / ("local_site/index.html")
    )


def increment(
    spark: SparkSession,
    rules: TableRules,
    inc: Increment,
    settings: PlatformSettings,
) -> DataFrame:
    """The rows ``rules.table`` gained in versions ``inc.from_version..inc.to_version``.

    :returns: the table's columns (inserted rows and post-images of updated rows; for
        ``latest_image`` tables, each key's newest image), without held rows, plus
        ``_already_in_table`` boolean for ``unique_in_table`` tables (key present at
        ``from_version - 1``).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    path = str(get_catalog().table(rules.table).path(settings))
    rows = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", inc.from_version)
        .option("endingVersion", inc.to_version)
        .load(path)
        .where(F.col("_change_type").isin("insert", "update_postimage"))
    )
    if rules.latest_image:
        newest = Window.partitionBy(*rules.keys).orderBy(F.col("_commit_version").desc())
        rows = rows.withColumn("_rank", F.row_number().over(newest)).where("_rank = 1")
        rows = rows.drop("_rank")
    rows = rows.drop(*_CDF_COLUMNS)
    if "event_id" in rows.columns:
        held = held_event_ids(spark, rules.table, settings)
        if held is not None:
            rows = rows.join(F.broadcast(held), "event_id", "left_anti")
    if rules.unique_in_table:
        key = rules.keys[0]
        if inc.from_version > 0:
            before = spark.read.format("delta").option("versionAsOf", inc.from_version - 1)
            earlier = before.load(path).select(F.col(key).alias("_earlier")).distinct()
            rows = rows.join(earlier, rows[key] == earlier["_earlier"], "left")
            rows = rows.withColumn(ALREADY_IN_TABLE, F.col("_earlier").isNotNull())
            rows = rows.drop("_earlier")
        else:
            rows = rows.withColumn(ALREADY_IN_TABLE, F.lit(False))
    return rows


def increment_without_spark(
    rules: TableRules,
    inc: Increment,
    settings: PlatformSettings,
    max_rows: int,
    columns: Sequence[str] | None = None,
) -> pd.DataFrame | None:
    """The rows of :func:`increment` read with delta-rs (``DeltaTable.load_cdf``), as pandas.

    Same rows and columns as the Spark read, with Delta ``timestamp`` columns as naive UTC
    ``datetime64`` (as Spark shows them with its UTC session time zone), strings and
    decimals as object columns of ``str`` and ``decimal.Decimal``.

    :param max_rows: most change-feed rows to read (pre-images and deletes count too).
    :param columns: read only these of the table's columns (and its keys and ``event_id``,
        which the holds and the latest image need); None reads them all.
    :returns: the rows (``attrs["change_rows"]``: the change-feed rows read), or None when
        the increment has more than ``max_rows`` change rows (nothing more is read).
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from ingest_core.delta_tables import table_exists

    path = str(get_catalog().table(rules.table).path(settings))
    delta = DeltaTable(path)
    table_columns = None
    if columns is not None:
        wanted = {*columns, *rules.keys, "event_id"}
        table_columns = [f.name for f in delta.schema().fields if f.name in wanted]
        table_columns += list(_CDF_COLUMNS)
    reader = delta.load_cdf(
        starting_version=inc.from_version, ending_version=inc.to_version, columns=table_columns
    )
    batches: list[pa.RecordBatch] = []
    read = 0
    for batch in reader:
        batches.append(pa.record_batch(batch))
        read += batches[-1].num_rows
        if read > max_rows:
            return None
    table = pa.Table.from_batches(batches, schema=pa.schema(reader.schema))
    rows = table.to_pandas()
    rows = rows[rows["_change_type"].isin(_NEW_ROWS)]
    if rules.latest_image:
        rows = rows.sort_values("_commit_version", kind="stable")
        rows = rows.drop_duplicates(list(rules.keys), keep="last")
    rows = rows.drop(columns=list(_CDF_COLUMNS))
    for column in rows.columns:  # Delta timestamps are UTC instants: naive UTC, like Spark
        if getattr(rows[column].dtype, "tz", None) is not None:
            rows[column] = rows[column].dt.tz_convert("UTC").dt.tz_localize(None)
    holds = get_catalog().table(HOLDS_TABLE).path(settings)
    if "event_id" in rows.columns and table_exists(holds):
        from ingest_core.delta_tables import read_pandas

        held = read_pandas(holds)
        if not held.empty:
            rows = rows[~rows.event_id.isin(held.event_id[held.table == rules.table])]
    if rules.unique_in_table:
        key = rules.keys[0]
        earlier: set[Any] = set()
        if inc.from_version > 0 and not rows.empty:
            before = DeltaTable(path, version=inc.from_version - 1).to_pyarrow_dataset()
            wanted = pc.field(key).isin(pa.array(rows[key].dropna().unique()))
            earlier = set(before.to_table(columns=[key], filter=wanted)[key].to_pylist())
        rows[ALREADY_IN_TABLE] = rows[key].isin(earlier)
    rows = rows.reset_index(drop=True)
    rows.attrs["change_rows"] = read
    return rows


def _summarise(result: Any) -> dict[str, Any]:
    config = result.expectation_config
    details = result.result or {}
    kwargs = config.kwargs
    return {
        "expectation": config.type,
        "column": kwargs.get("column") or kwargs.get("column_list") or kwargs.get("column_A"),
        "observed": details.get("observed_value"),
        "unexpected_count": details.get("unexpected_count"),
        "unexpected_percent": details.get("unexpected_percent"),
        "examples": (details.get("partial_unexpected_list") or [])[:5],
    }


def _validate(
    context: Any,
    rules: TableRules,
    rows: DataFrame | pd.DataFrame,
    settings: PlatformSettings,
    *,
    engine: str,
    band: tuple[int, int] | None,
    now: datetime,
    collect_ids: bool,
) -> tuple[bool, list[dict[str, Any]], set[str]]:
    """Validate ``rows`` (a Spark or pandas frame, per ``engine``) with the table's suite.
    The result is stored in the GX project; Data Docs are built by the caller, once."""
    import great_expectations as gx

    # One data source per engine, created once and kept: GX's add_or_update_* replaces a
    # data source with an empty one, and a stored validation definition whose asset is gone
    # no longer loads (it broke the first pandas gate after a Spark one).
    name = GX_SOURCES[engine]
    try:
        source = context.data_sources.get(name)
    except KeyError:
        add = (
            context.data_sources.add_spark if engine == "spark" else context.data_sources.add_pandas
        )
        source = add(name=name)
    names = [asset.name for asset in source.assets]
    asset = (
        source.get_asset(rules.table)
        if rules.table in names
        else source.add_dataframe_asset(name=rules.table)
    )
    batch = (
        asset.batch_definitions[0]
        if asset.batch_definitions
        else asset.add_batch_definition_whole_dataframe("increment")
    )
    suite = build_suite(rules, settings.quality, band=band, now=now, engine=engine)
    suite = context.suites.add_or_update(suite)
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=f"{rules.table}.{engine}", data=batch, suite=suite)
    )
    result_format: dict[str, Any] = {"result_format": "SUMMARY"}
    if collect_ids:
        result_format = {"result_format": "COMPLETE", "unexpected_index_column_names": ["event_id"]}
    validation = definition.run(batch_parameters={"dataframe": rows}, result_format=result_format)
    failed: list[dict[str, Any]] = []
    ids: set[str] = set()
    for result in validation.results:
        if result.success:
            continue
        failed.append(_summarise(result))
        if collect_ids:
            unexpected = (result.result or {}).get("unexpected_index_list")
            # A rate rule ("mostly": at most N% nulls) judges the increment, not a row:
            # each row on its own is fine (a guest checkout has no customer).
            if unexpected is None or "mostly" in result.expectation_config.kwargs:
                failed[-1]["row_wise"] = False
            else:
                ids.update(str(row["event_id"]) for row in unexpected if row.get("event_id"))
    return bool(validation.success), failed, ids


def _band(results: Any, table: str, settings: PlatformSettings) -> tuple[int, int] | None:
    if results.empty:
        return None
    mine = results[(results["table"] == table) & (results["status"] == "passed")]
    history = mine.sort_values("validated_at", ascending=False)["rows"].astype(int).tolist()
    return learn_band(history, settings.quality)


def _pending(
    layer: str, settings: PlatformSettings | None, now: datetime | None
) -> tuple[PlatformSettings, datetime, list[Increment], dict[str, TableRules]]:
    """Settings, validation time, ``layer``'s pending increments and its rules by table."""
    settings = settings or get_settings()
    rules_by_table = {rules.table: rules for rules in layer_rules(layer)}
    return settings, now or datetime.now(UTC), pending(layer, settings), rules_by_table


def validate_layer(
    spark: SparkSession,
    layer: str,
    *,
    run_id: str,
    settings: PlatformSettings | None = None,
    now: datetime | None = None,
) -> list[TableOutcome]:
    """Validate every pending increment of ``layer`` and record the results.

    :param run_id: recorded with the results (Airflow's run id, or ``manual__<time>``).
    :param now: validation time (UTC); the freshness reference. Defaults to now.
    :returns: one outcome per table with pending versions ([] when nothing is pending).
    :raises ValueError: ``layer`` has no gate.
    """
    settings, now, increments, rules_by_table = _pending(layer, settings, now)
    if not increments:
        return []

    def spark_rows(inc: Increment) -> tuple[Any, int, Callable[[], object]]:
        rules = rules_by_table[inc.table]
        rows = increment(spark, rules, inc, settings)
        wanted = validated_columns(rules)
        rows = rows.select(*[c for c in rows.columns if c in wanted]).cache()
        return rows, rows.count(), rows.unpersist

    outcomes = _validate_increments(rules_by_table, increments, spark_rows, "spark", settings, now)
    _record(spark, layer, run_id, outcomes, settings, now)
    return outcomes


def validate_layer_without_spark(
    layer: str,
    *,
    run_id: str,
    settings: PlatformSettings | None = None,
    now: datetime | None = None,
) -> list[TableOutcome] | None:
    """:func:`validate_layer` with no JVM: delta-rs reads, GX's pandas engine, delta-rs
    appends to ``ops_gate_results``. Same suites, outcomes and recorded rows.

    :returns: one outcome per table with pending versions ([] when nothing is pending); None
        when the pending increments have more than ``quality.pandas_max_rows`` change rows
        in all (nothing validated, nothing recorded: run :func:`validate_layer`).
    :raises ValueError: ``layer`` has no gate.
    """
    settings, now, increments, rules_by_table = _pending(layer, settings, now)
    if not increments:
        return []
    budget = settings.quality.pandas_max_rows
    frames = {}
    for inc in increments:
        rules = rules_by_table[inc.table]
        rows = increment_without_spark(rules, inc, settings, budget, validated_columns(rules))
        if rows is None:
            return None
        budget -= rows.attrs["change_rows"]
        frames[inc] = rows

    def pandas_rows(inc: Increment) -> tuple[Any, int, Callable[[], object]]:
        rows = frames.pop(inc)
        return rows, len(rows), lambda: None

    outcomes = _validate_increments(
        rules_by_table, increments, pandas_rows, "pandas", settings, now
    )
    _record(None, layer, run_id, outcomes, settings, now)
    return outcomes


def _validate_increments(
    rules_by_table: dict[str, TableRules],
    increments: list[Increment],
    load: Callable[[Increment], tuple[Any, int, Callable[[], object]]],
    engine: str,
    settings: PlatformSettings,
    now: datetime,
) -> list[TableOutcome]:
    """Validate each increment (``load`` gives its rows, their count and a release), then
    build the Data Docs once."""
    history = gate_results(settings)
    outcomes = []
    with gx_project(settings) as context:
        for inc in increments:
            rows, count, release = load(inc)
            try:
                if count == 0:
                    outcomes.append(TableOutcome(inc, 0, "empty"))
                    continue
                ok, failed, _ = _validate(
                    context,
                    rules_by_table[inc.table],
                    rows,
                    settings,
                    engine=engine,
                    band=_band(history, inc.table, settings),
                    now=now,
                    collect_ids=False,
                )
                outcomes.append(TableOutcome(inc, count, "passed" if ok else "failed", failed))
            finally:
                release()
        if any(o.status != "empty" for o in outcomes):
            context.build_data_docs()
    return outcomes


def _record(
    spark: SparkSession | None,
    layer: str,
    run_id: str,
    outcomes: list[TableOutcome],
    settings: PlatformSettings,
    now: datetime,
    *,
    resolved_by: str | None = None,
    reason: str | None = None,
) -> None:
    docs = docs_index(settings).as_uri()
    rows = [
        (
            run_id,
            layer,
            o.increment.table,
            o.increment.from_version,
            o.increment.to_version,
            o.rows,
            o.status,
            json.dumps(o.failed, default=str),
            docs,
            resolved_by,
            reason,
            now.replace(tzinfo=None),
        )
        for o in outcomes
    ]
    path = get_catalog().table(RESULTS_TABLE).path(settings)
    if spark is not None:
        frame = local_frame(spark, rows, RESULTS_SCHEMA)
        frame.write.format("delta").mode("append").save(str(path))
        return
    import pyarrow as pa
    from deltalake import write_deltalake

    arrow_types = {
        "string": pa.string(),
        "long": pa.int64(),
        "timestamp": pa.timestamp("us", "UTC"),
    }
    fields = [column.split() for column in RESULTS_SCHEMA.split(",")]
    schema = pa.schema([(name, arrow_types[type_]) for name, type_ in fields])
    utc = [(*row[:-1], row[-1].replace(tzinfo=UTC)) for row in rows]  # validated_at is UTC
    write_deltalake(
        str(path),
        pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in utc], schema),
        mode="append",
    )


def report(layer: str, outcomes: list[TableOutcome], settings: PlatformSettings) -> str:
    """Human-readable lines for the task log: one per table, then each broken expectation."""
    if not outcomes:
        return f"gate {layer}: nothing to validate (no new Delta versions since the last gate)"
    lines = [f"gate {layer}:"]
    for o in outcomes:
        inc = o.increment
        lines.append(
            f"  {inc.table} versions {inc.from_version}..{inc.to_version}: "
            f"{o.status} ({o.rows} rows)"
        )
        for f in o.failed:
            lines.append(
                f"    - {f['expectation']} on {f['column']}: observed "
                f"{f['observed']}, unexpected {f['unexpected_count']} "
                f"({f['unexpected_percent']}%), e.g. {f['examples']}"
            )
    lines.append(f"  Data Docs: {docs_index(settings)}")
    return "\n".join(lines)


def accept(
    spark: SparkSession,
    layer: str,
    *,
    reason: str,
    by: str,
    settings: PlatformSettings | None = None,
) -> list[str]:
    """Record the unresolved failed increments of ``layer`` as accepted: they flow on.

    :returns: the tables accepted.
    :raises RemedyError: nothing to resolve, or ``reason``/``by`` is blank.
    """
    settings = settings or get_settings()
    failures = _unresolved(layer, reason, by, settings)
    newest = failures.drop_duplicates("table", keep="last")
    outcomes = [
        TableOutcome(
            Increment(str(r["table"]), int(r["from_version"]), int(r["to_version"])),
            int(r["rows"]),
            "accepted",
            json.loads(str(r["failed_expectations"])),
        )
        for _, r in newest.iterrows()
    ]
    _record(
        spark,
        layer,
        f"accept__{datetime.now(UTC):%Y%m%dT%H%M%S}",
        outcomes,
        settings,
        datetime.now(UTC),
        resolved_by=by,
        reason=reason,
    )
    return [o.increment.table for o in outcomes]


def _unresolved(layer: str, reason: str, by: str, settings: PlatformSettings) -> Any:
    if not reason.strip() or not by.strip():
        raise RemedyError("a remedy needs --reason and --by: they are recorded with it")
    failures = unresolved_failures(layer, settings)
    if failures.empty:
        raise RemedyError(f"gate {layer} has no unresolved failure: nothing to resolve")
    return failures


def _quarantinable(layer: str) -> None:
    if layer != "silver":
        raise RemedyError(
            f"quarantine applies to Silver rows; a failed {layer} gate is resolved by fixing "
            "Silver and rebuilding, or by `accept`"
        )


def quarantine(
    spark: SparkSession,
    layer: str,
    *,
    reason: str,
    by: str,
    settings: PlatformSettings | None = None,
) -> dict[str, int]:
    """Hold back the rows of ``layer``'s failed increments that broke a row-wise expectation.

    The held rows' raw Bronze records go to ``silver_quarantine`` (reason
    ``gate:<expectation>``) and their ids to ``ops_gate_holds``; both writes are idempotent
    per failure. The next gate run validates the increment without them.

    :returns: rows held per table.
    :raises RemedyError: nothing to resolve; the layer is not Silver; or a failure is about
        the whole increment (volume, freshness, types), which only ``accept`` resolves.
    """
    from pyspark.sql import functions as F

    settings = settings or get_settings()
    _quarantinable(layer)
    failures = _unresolved(layer, reason, by, settings).drop_duplicates("table", keep="last")
    catalog = get_catalog()
    rules_by_table = {rules.table: rules for rules in layer_rules(layer)}
    history = gate_results(settings)
    now = datetime.now(UTC)
    plans = []
    for _, failure in failures.iterrows():
        table = str(failure["table"])
        inc = Increment(table, int(failure["from_version"]), int(failure["to_version"]))
        rows = increment(spark, rules_by_table[table], inc, settings).cache()
        with gx_project(settings) as context:
            _, failed, ids = _validate(
                context,
                rules_by_table[table],
                rows,
                settings,
                engine="spark",
                band=_band(history, table, settings),
                now=now,
                collect_ids=True,
            )
        whole = [f["expectation"] for f in failed if f.get("row_wise") is False]
        if whole:
            raise RemedyError(
                f"{table} versions {inc.from_version}..{inc.to_version} failed {whole}, which "
                "judge the whole increment, not single rows: nothing to quarantine; use accept"
            )
        plans.append((inc, rows, failed, ids))
    held: dict[str, int] = {}
    bronze = read_table(spark, catalog.table("bronze_events").path(settings))
    for inc, rows, failed, ids in plans:
        detail = "; ".join(f"{f['expectation']} on {f['column']}" for f in failed)
        app_id = f"gate-quarantine-{inc.table}"
        bad = rows.where(F.col("event_id").isin(sorted(ids))) if ids else rows.limit(0)
        coordinates = bad.select("topic", "partition", "offset", "kafka_timestamp", "event_id")
        assert bronze is not None
        raw = coordinates.join(
            bronze.select("topic", "partition", "offset", "key", "value"),
            ["topic", "partition", "offset"],
            "left",
        )
        quarantined = raw.select(
            "topic",
            "partition",
            "offset",
            "kafka_timestamp",
            "key",
            "value",
            F.lit(f"gate:{inc.table}").alias("reason"),
            F.lit(f"{detail} ({reason}; by {by})").alias("detail"),
            "event_id",
        )
        append_idempotent(
            quarantined,
            catalog.table("silver_quarantine").path(settings),
            app_id=app_id,
            version=inc.to_version,
        )
        holds = bad.select(
            F.lit(inc.table).alias("table"),
            "event_id",
            F.lit(reason).alias("reason"),
            F.lit(f"quarantine__{now:%Y%m%dT%H%M%S}").alias("run_id"),
            F.lit(by).alias("held_by"),
            F.lit(now.replace(tzinfo=None)).alias("held_at"),
        )
        append_idempotent(
            holds, catalog.table(HOLDS_TABLE).path(settings), app_id=app_id, version=inc.to_version
        )
        held[inc.table] = len(ids)
        rows.unpersist()
    return held


def status(layer: str, settings: PlatformSettings | None = None) -> str:
    """What is pending and what awaits an operator, as text."""
    settings = settings or get_settings()
    lines = [f"gate {layer}:"]
    for inc in pending(layer, settings):
        lines.append(f"  pending  {inc.table} versions {inc.from_version}..{inc.to_version}")
    failures = unresolved_failures(layer, settings)
    for _, row in failures.iterrows():
        versions = f"{row['from_version']}..{row['to_version']}"
        lines.append(
            f"  FAILED   {row['table']} versions {versions} (run {row['run_id']}): "
            f"{row['failed_expectations']}"
        )
    if len(lines) == 1:
        lines.append("  nothing pending, nothing to resolve")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; a bad value exits 2 with a message saying what is wrong."""
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("validate", "status", "accept", "quarantine"):
        sub = commands.add_parser(name)
        sub.add_argument("--layer", required=True, choices=sorted(("silver", "gold")))
        if name == "validate":
            sub.add_argument("--run-id", default=f"manual__{datetime.now(UTC):%Y%m%dT%H%M%S}")
            sub.add_argument(
                "--engine",
                choices=ENGINE_CHOICES,
                default="auto",
                help="pandas (no JVM) up to quality.pandas_max_rows change rows, else Spark",
            )
        if name in ("accept", "quarantine"):
            sub.add_argument("--reason", required=True, help="why: recorded with the remedy")
            sub.add_argument(
                "--by", default=os.environ.get("USER", ""), help="who resolves it (default: $USER)"
            )
    return parser.parse_args(argv)


def failure_message(layer: str) -> str:
    """What an operator reads when ``layer``'s gate failed: the increment is held, and how
    to resolve it."""
    remedy = f"quarantine|accept --layer {layer} --reason ..."
    return (
        f"gate {layer} FAILED: the increment is held back. Resolve with "
        f"`python -m spark_jobs.quality.gate {remedy}` (docs/quality.md)."
    )


def _validated(layer: str, outcomes: list[TableOutcome], settings: PlatformSettings) -> int:
    print(report(layer, outcomes, settings))
    if any(o.status == "failed" for o in outcomes):
        print(failure_message(layer), file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: exit 0 when the gate passes (or had nothing to do), 1 when it failed or a
    remedy was refused."""
    args = parse_args(argv)
    settings = get_settings()
    if args.command == "status":
        print(status(args.layer, settings))
        return 0
    if args.command == "validate" and args.engine != "spark":
        outcomes = validate_layer_without_spark(args.layer, run_id=args.run_id, settings=settings)
        if outcomes is not None:
            return _validated(args.layer, outcomes, settings)
        limit = settings.quality.pandas_max_rows
        if args.engine == "pandas":
            print(
                f"{JOB_NAME}: gate {args.layer}: the increment has more than "
                f"quality.pandas_max_rows={limit} change rows; use --engine spark or auto",
                file=sys.stderr,
            )
            return 1
        print(f"gate {args.layer}: more than {limit} change rows pending: validating with Spark")
    if args.command == "validate" and not pending(args.layer, settings):
        print(report(args.layer, [], settings))
        return 0
    try:  # what can be refused without Spark is refused before it starts
        if args.command == "quarantine":
            _quarantinable(args.layer)
        if args.command in ("accept", "quarantine"):
            _unresolved(args.layer, args.reason, args.by, settings)
    except RemedyError as error:
        print(f"{JOB_NAME}: {error}", file=sys.stderr)
        return 1
    from spark_jobs.session import build_spark_session

    spark = build_spark_session(f"{JOB_NAME}.{args.layer}")
    try:
        if args.command == "validate":
            outcomes = validate_layer(spark, args.layer, run_id=args.run_id, settings=settings)
            return _validated(args.layer, outcomes, settings)
        if args.command == "accept":
            tables = accept(spark, args.layer, reason=args.reason, by=args.by, settings=settings)
            print(f"accepted the failed increments of {tables}; the next gate run moves on")
        else:
            held = quarantine(spark, args.layer, reason=args.reason, by=args.by, settings=settings)
            print(
                f"held back and quarantined rows per table: {held}; the next gate run "
                "validates the increments without them"
            )
        return 0
    except RemedyError as error:
        print(f"{JOB_NAME}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
