"""Where a gate's results go, without Spark: the rows of ``ops_gate_results``
(:func:`result_rows`, written with delta-rs by :func:`record_without_spark`), the report
for the task log, a layer's status and what its failure asks of an operator. The remedies,
which need Spark, are in :mod:`spark_jobs.quality.results`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ingest_core.catalog import get_catalog
from ingest_core.quality.state import RESULTS_TABLE, pending, unresolved_failures
from ingest_core.quality.validation import TableOutcome, docs_index
from ingest_core.settings import PlatformSettings, get_settings

#: ``ops_gate_results`` schema.
RESULTS_SCHEMA = (
    "run_id string, layer string, table string, from_version long, to_version long, "
    "rows long, status string, failed_expectations string, docs_url string, "
    "resolved_by string, reason string, validated_at timestamp"
)


class RemedyError(ValueError):
    """A remedy cannot apply (nothing to resolve, or a failure rows cannot be held for)."""


def result_rows(
    layer: str,
    run_id: str,
    outcomes: list[TableOutcome],
    settings: PlatformSettings,
    now: datetime,
    *,
    resolved_by: str | None = None,
    reason: str | None = None,
) -> list[tuple[Any, ...]]:
    """One ``ops_gate_results`` row per outcome, in :data:`RESULTS_SCHEMA`'s column order
    (``validated_at``: ``now`` as naive UTC), ``resolved_by``/``reason`` for a remedy."""
    docs = docs_index(settings).as_uri()
    return [
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


def record_without_spark(
    layer: str,
    run_id: str,
    outcomes: list[TableOutcome],
    settings: PlatformSettings,
    now: datetime,
) -> None:
    """Append :func:`result_rows` to ``ops_gate_results`` with delta-rs."""
    rows = result_rows(layer, run_id, outcomes, settings, now)
    path = get_catalog().table(RESULTS_TABLE).path(settings)
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


def describe_failure(failure: dict[str, Any]) -> str:
    """One failed expectation (as :func:`ingest_core.quality.validation.validate_frame`
    records it) in a line: the expectation, its column if any, what was observed, the bounds
    it missed, and for a row-wise one how many rows and examples. Only what applies: a
    table-level expectation such as the row-count band has no column and no rows of its own.
    """
    name = failure["expectation"]
    if failure.get("column") is not None:
        name += f" on {failure['column']}"
    parts = []
    if failure.get("observed") is not None:
        parts.append(f"observed {failure['observed']}")
    expected = failure.get("expected") or {}
    if expected:
        low, high = expected.get("min_value"), expected.get("max_value")
        parts.append(f"expected {'' if low is None else low}..{'' if high is None else high}")
    if failure.get("unexpected_count") is not None:
        parts.append(
            f"unexpected {failure['unexpected_count']} ({failure.get('unexpected_percent')}%),"
            f" e.g. {failure.get('examples')}"
        )
    return f"{name}: {', '.join(parts)}" if parts else name


def describe_failures(recorded: object) -> list[str]:
    """One ``ops_gate_results`` row's ``failed_expectations`` (the gate's JSON list) as
    lines of :func:`describe_failure`; text that is not that JSON comes back as it is, one
    line."""
    try:
        failed = json.loads(str(recorded or "[]"))
    except ValueError:
        return [str(recorded)]
    if not isinstance(failed, list):
        return [str(recorded)]
    return [
        describe_failure(f) if isinstance(f, dict) and "expectation" in f else str(f)
        for f in failed
    ]


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
        lines += [f"    - {describe_failure(f)}" for f in o.failed]
    lines.append(f"  Data Docs: {docs_index(settings)}")
    return "\n".join(lines)


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


def status(layer: str, settings: PlatformSettings | None = None) -> str:
    """What is pending and what awaits an operator, as text."""
    settings = settings or get_settings()
    lines = [f"gate {layer}:"]
    for inc in pending(layer, settings):
        lines.append(f"  pending  {inc.table} versions {inc.from_version}..{inc.to_version}")
    failures = unresolved_failures(layer, settings)
    for _, row in failures.iterrows():
        versions = f"{row['from_version']}..{row['to_version']}"
        lines.append(f"  FAILED   {row['table']} versions {versions} (run {row['run_id']})")
        lines += [f"           - {line}" for line in describe_failures(row["failed_expectations"])]
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
