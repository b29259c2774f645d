"""The quality gate job: validate what a layer added since the last gate that passed.

For every gated table of the layer (:data:`ingest_core.quality.rules.LAYER_RULES`) the gate
reads the table's increment through Delta's change data feed (versions after the newest
cleared result in ``ops_gate_results``, up to the current one), validates it with the
table's GX suite, appends one result row per table to ``ops_gate_results`` and rebuilds the
GX Data Docs once (``<storage.state_dir>/gx/gx/uncommitted/data_docs/local_site/index.html``).

Two engines, same suites and same results: increments of at most
``quality.pandas_max_rows`` change rows in all are read with delta-rs and validated by GX's
pandas engine, with no JVM (:func:`ingest_core.quality.pandas_gate.validate_layer_without_spark`;
the Airflow gate task runs it in its own process); larger ones are read and validated by
Spark (:func:`validate_layer`, under spark-submit).

A failed table keeps its validated mark where it was, so every later run of the gate fails
on the same increment until an operator resolves it (README, "Quality gates"):

* ``quarantine``: the increment's rows that broke a row-wise expectation are held back
  (``ops_gate_holds``; Gold reads Silver without them) and their raw Bronze records are
  written to ``silver_quarantine`` with the expectation as reason; nothing is deleted;
* ``accept``: the failed increment is recorded as accepted (who, why) and flows on.

The work is split by responsibility: what to validate (:mod:`ingest_core.quality.increments`,
the Spark read in :mod:`spark_jobs.quality.increments`), with which engine
(:mod:`ingest_core.quality.validation`), where the results go
(:mod:`ingest_core.quality.results`) and how a failure is resolved
(:mod:`spark_jobs.quality.results`); this module runs a layer's gate and is the command
line. What runs without Spark is in ``ingest_core``, so the Airflow side never imports this
package.

Run (Airflow runs ``validate``; operators run the others)::

    python -m spark_jobs.quality.gate validate --layer silver --run-id manual_1 [--engine auto]
    python -m spark_jobs.quality.gate status --layer silver
    python -m spark_jobs.quality.gate quarantine --layer silver --reason "bad amounts" --by ana
    python -m spark_jobs.quality.gate accept --layer gold --reason "known outage" --by ana
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession

from ingest_core.quality.increments import increment_without_spark, pending_increments
from ingest_core.quality.pandas_gate import validate_layer_without_spark
from ingest_core.quality.results import (
    RESULTS_SCHEMA,
    RemedyError,
    failure_message,
    quarantinable,
    report,
    status,
    unresolved,
)
from ingest_core.quality.rules import validated_columns
from ingest_core.quality.state import Increment, pending
from ingest_core.quality.validation import (
    ENGINE_CHOICES,
    TableOutcome,
    docs_index,
    gx_context,
    gx_project,
    validate_increments,
)
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.quality.increments import increment
from spark_jobs.quality.results import accept, quarantine, record

if TYPE_CHECKING:
    from collections.abc import Callable


JOB_NAME = "quality_gate"
#: What other modules and operators use of the gate, wherever it is defined.
__all__ = [
    "ENGINE_CHOICES",
    "JOB_NAME",
    "RESULTS_SCHEMA",
    "RemedyError",
    "TableOutcome",
    "accept",
    "docs_index",
    "failure_message",
    "gx_context",
    "gx_project",
    "increment",
    "increment_without_spark",
    "main",
    "quarantine",
    "report",
    "status",
    "validate_layer",
    "validate_layer_without_spark",
]


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
    settings, now, increments, rules_by_table = pending_increments(layer, settings, now)
    if not increments:
        return []

    def spark_rows(inc: Increment) -> tuple[Any, int, Callable[[], object]]:
        rules = rules_by_table[inc.table]
        rows = increment(spark, rules, inc, settings)
        wanted = validated_columns(rules)
        rows = rows.select(*[c for c in rows.columns if c in wanted]).cache()
        return rows, rows.count(), rows.unpersist

    outcomes = validate_increments(rules_by_table, increments, spark_rows, "spark", settings, now)
    record(spark, layer, run_id, outcomes, settings, now)
    return outcomes


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
            quarantinable(args.layer)
        if args.command in ("accept", "quarantine"):
            unresolved(args.layer, args.reason, args.by, settings)
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
