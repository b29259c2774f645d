"""A gate's results written with Spark (:func:`record`) and the remedies of a failure,
:func:`accept` and :func:`quarantine`. Part of the gate job (:mod:`spark_jobs.quality.gate`);
the rows, the report and the status are in :mod:`ingest_core.quality.results`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ingest_core.catalog import get_catalog
from ingest_core.quality.results import (
    RESULTS_SCHEMA,
    RemedyError,
    quarantinable,
    result_rows,
    unresolved,
)
from ingest_core.quality.rules import layer_rules
from ingest_core.quality.state import HOLDS_TABLE, RESULTS_TABLE, Increment, gate_results
from ingest_core.quality.validation import (
    TableOutcome,
    gx_project,
    validate_frame,
    volume_band_for,
)
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.delta_io import append_idempotent, read_table
from spark_jobs.local_frames import local_frame
from spark_jobs.quality.increments import increment


def record(
    spark: SparkSession,
    layer: str,
    run_id: str,
    outcomes: list[TableOutcome],
    settings: PlatformSettings,
    now: datetime,
    *,
    resolved_by: str | None = None,
    reason: str | None = None,
) -> None:
    """Append :func:`ingest_core.quality.results.result_rows` to ``ops_gate_results`` with
    Spark (:func:`ingest_core.quality.results.record_without_spark` writes them without)."""
    rows = result_rows(
        layer, run_id, outcomes, settings, now, resolved_by=resolved_by, reason=reason
    )
    path = get_catalog().table(RESULTS_TABLE).path(settings)
    local_frame(spark, rows, RESULTS_SCHEMA).write.format("delta").mode("append").save(str(path))


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
