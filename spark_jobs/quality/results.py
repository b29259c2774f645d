"""Where a gate's results go and how an operator resolves a failure: the rows of
``ops_gate_results`` (:func:`record`), the report for the task log, and the remedies
:func:`accept` and :func:`quarantine`. Part of the gate job (:mod:`spark_jobs.quality.gate`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ingest_core.catalog import get_catalog
from ingest_core.quality.rules import layer_rules
from ingest_core.quality.state import (
    HOLDS_TABLE,
    RESULTS_TABLE,
    Increment,
    gate_results,
    pending,
    unresolved_failures,
)
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.delta_io import append_idempotent, read_table
from spark_jobs.local_frames import local_frame
from spark_jobs.quality.increments import increment
from spark_jobs.quality.validation import (
    TableOutcome,
    docs_index,
    gx_project,
    validate_frame,
    volume_band_for,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: ``ops_gate_results`` schema.
RESULTS_SCHEMA = (
    "run_id string, layer string, table string, from_version long, to_version long, "
    "rows long, status string, failed_expectations string, docs_url string, "
    "resolved_by string, reason string, validated_at timestamp"
)


class RemedyError(ValueError):
    """A remedy cannot apply (nothing to resolve, or a failure rows cannot be held for)."""


def record(
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
    """Append one ``ops_gate_results`` row per outcome (with Spark when ``spark`` is given,
    else with delta-rs), ``resolved_by``/``reason`` for a remedy."""
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
    failures = unresolved(layer, reason, by, settings)
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
    record(
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


def unresolved(layer: str, reason: str, by: str, settings: PlatformSettings) -> Any:
    """``layer``'s unresolved failures (pandas rows of ``ops_gate_results``).

    :raises RemedyError: ``reason`` or ``by`` is blank, or nothing is unresolved.
    """
    if not reason.strip() or not by.strip():
        raise RemedyError("a remedy needs --reason and --by: they are recorded with it")
    failures = unresolved_failures(layer, settings)
    if failures.empty:
        raise RemedyError(f"gate {layer} has no unresolved failure: nothing to resolve")
    return failures


def quarantinable(layer: str) -> None:
    """:raises RemedyError: ``layer`` is not Silver (only Silver rows can be held back)."""
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
    settings = settings or get_settings()
    quarantinable(layer)
    failures = unresolved(layer, reason, by, settings).drop_duplicates("table", keep="last")
    now = datetime.now(UTC)
    plans = [
        _rows_to_hold(spark, layer, str(f["table"]), f, settings, now)
        for _, f in failures.iterrows()
    ]
    held: dict[str, int] = {}
    bronze = read_table(spark, get_catalog().table("bronze_events").path(settings))
    assert bronze is not None
    for inc, rows, failed, ids in plans:
        _hold(bronze, inc, rows, failed, ids, reason=reason, by=by, now=now, settings=settings)
        held[inc.table] = len(ids)
        rows.unpersist()
    return held


def _rows_to_hold(
    spark: SparkSession,
    layer: str,
    table: str,
    failure: Any,
    settings: PlatformSettings,
    now: datetime,
) -> tuple[Increment, DataFrame, list[dict[str, Any]], set[str]]:
    """Validate one failed increment again with Spark, collecting the ids of the rows that
    broke a row-wise expectation.

    :returns: (the increment, its rows (cached), the failed expectations, the held ids).
    :raises RemedyError: a failed expectation judges the whole increment.
    """
    rules = {r.table: r for r in layer_rules(layer)}[table]
    inc = Increment(table, int(failure["from_version"]), int(failure["to_version"]))
    rows = increment(spark, rules, inc, settings).cache()
    with gx_project(settings) as context:
        _, failed, ids = validate_frame(
            context,
            rules,
            rows,
            settings,
            engine="spark",
            band=volume_band_for(gate_results(settings), table, settings),
            now=now,
            collect_ids=True,
        )
    whole = [f["expectation"] for f in failed if f.get("row_wise") is False]
    if whole:
        raise RemedyError(
            f"{table} versions {inc.from_version}..{inc.to_version} failed {whole}, which "
            "judge the whole increment, not single rows: nothing to quarantine; use accept"
        )
    return inc, rows, failed, ids


def _hold(
    bronze: DataFrame,
    inc: Increment,
    rows: DataFrame,
    failed: list[dict[str, Any]],
    ids: set[str],
    *,
    reason: str,
    by: str,
    now: datetime,
    settings: PlatformSettings,
) -> None:
    """Quarantine the held rows' raw Bronze records and record their ids in
    ``ops_gate_holds``; both writes idempotent per increment (its end version)."""
    from pyspark.sql import functions as F

    catalog = get_catalog()
    detail = "; ".join(f"{f['expectation']} on {f['column']}" for f in failed)
    app_id = f"gate-quarantine-{inc.table}"
    bad = rows.where(F.col("event_id").isin(sorted(ids))) if ids else rows.limit(0)
    coordinates = bad.select("topic", "partition", "offset", "kafka_timestamp", "event_id")
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


def failure_message(layer: str) -> str:
    """What an operator reads when ``layer``'s gate failed: the increment is held, and how
    to resolve it."""
    remedy = f"quarantine|accept --layer {layer} --reason ..."
    return (
        f"gate {layer} FAILED: the increment is held back. Resolve with "
        f"`python -m spark_jobs.quality.gate {remedy}` (docs/quality.md)."
    )
