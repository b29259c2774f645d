"""With which engine: a gated table's increment validated by its Great Expectations suite,
on a Spark or a pandas frame, in the platform's file-backed GX project (one process at a time:
:func:`gx_project`), and the Data Docs built once per gate run. Part of the gate job
(:mod:`spark_jobs.quality.gate`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest_core.locks import file_lock
from ingest_core.quality.rules import TableRules
from ingest_core.quality.rules import volume_band as learn_band
from ingest_core.quality.state import Increment, gate_results
from ingest_core.quality.suites import build_suite
from ingest_core.settings import PlatformSettings, get_settings

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd
    from pyspark.sql import DataFrame

#: The GX data source of each engine; a table's asset and validation definition (named
#: ``<table>.<engine>``) belong to its engine's source.
GX_SOURCES = {"spark": "platform", "pandas": "platform_pandas"}
#: ``validate --engine``: ``auto`` is pandas up to ``quality.pandas_max_rows``, else Spark.
ENGINE_CHOICES = ("auto", "pandas", "spark")


@dataclass
class TableOutcome:
    """One table's gate result: ``status`` is ``passed``, ``failed`` or ``empty``; ``failed``
    lists the broken expectations (type, column, observed value, the bounds a bounded one
    was held to, unexpected count and share, examples)."""

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
    tests/unit/ingest_core/test_gate_concurrency.py). A validation takes seconds, so waiting
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


def _summarise(result: Any) -> dict[str, Any]:
    """One failed expectation as ``ops_gate_results`` records it: what was observed and, for
    a bounded one (the row-count band, a range), the bounds it was held to (soak run 20: an
    operator saw "observed 69" and not the band it missed)."""
    config = result.expectation_config
    details = result.result or {}
    kwargs = config.kwargs
    bounds = {k: kwargs[k] for k in ("min_value", "max_value") if kwargs.get(k) is not None}
    return {
        "expectation": config.type,
        "column": kwargs.get("column") or kwargs.get("column_list") or kwargs.get("column_A"),
        "observed": details.get("observed_value"),
        **({"expected": bounds} if bounds else {}),
        "unexpected_count": details.get("unexpected_count"),
        "unexpected_percent": details.get("unexpected_percent"),
        "examples": (details.get("partial_unexpected_list") or [])[:5],
    }


def validate_frame(
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
    The result is stored in the GX project; Data Docs are built by the caller, once.

    :returns: ``(passed, failed expectations, unexpected event ids)``; the ids only with
        ``collect_ids`` (a failed rate rule, "mostly", is marked ``row_wise: False``).
    """
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


def volume_band_for(results: Any, table: str, settings: PlatformSettings) -> tuple[int, int] | None:
    """The row-count band of ``table`` (:func:`ingest_core.quality.rules.volume_band`) from
    its passed, non-empty results in ``results`` (``ops_gate_results`` as pandas), newest
    first. A result without rows is no increment's size: a ``layer_full_refresh`` records one
    (``rows`` 0) for each table it swaps in, and the 2-hour soak (run 16) swapped Gold five
    times in an hour: the band learned a median of 0 and every Gold increment after it failed
    its gate (``expect_table_row_count_to_be_between``). An increment validated more than
    once (gates at once, a retried gate: the same ``from_version``, ``to_version`` and
    ``rows``; a table a refresh swapped in starts its versions again, hence the rows) counts
    once: the soak's three concurrent gates made one 1,703-row increment three of the five
    the band was learned from (run 20)."""
    if results.empty:
        return None
    mine = results[
        (results["table"] == table) & (results["status"] == "passed") & (results["rows"] > 0)
    ].sort_values("validated_at", ascending=False)
    if {"from_version", "to_version"} <= set(mine.columns):  # each at its first validation
        mine = mine.drop_duplicates(subset=["from_version", "to_version", "rows"], keep="last")
    history = mine["rows"].astype(int).tolist()
    return learn_band(history, settings.quality)


def validate_increments(
    rules_by_table: dict[str, TableRules],
    increments: list[Increment],
    load: Callable[[Increment], tuple[Any, int, Callable[[], object]]],
    engine: str,
    settings: PlatformSettings,
    now: datetime,
) -> list[TableOutcome]:
    """Validate each increment (``load`` gives its rows, their count and a release), then
    build the Data Docs once.

    :returns: one :class:`TableOutcome` per increment (``empty`` for no rows).
    """
    history = gate_results(settings)
    outcomes = []
    with gx_project(settings) as context:
        for inc in increments:
            rows, count, release = load(inc)
            try:
                if count == 0:
                    outcomes.append(TableOutcome(inc, 0, "empty"))
                    continue
                ok, failed, _ = validate_frame(
                    context,
                    rules_by_table[inc.table],
                    rows,
                    settings,
                    engine=engine,
                    band=volume_band_for(history, inc.table, settings),
                    now=now,
                    collect_ids=False,
                )
                outcomes.append(TableOutcome(inc, count, "passed" if ok else "failed", failed))
            finally:
                release()
        if any(o.status != "empty" for o in outcomes):
            context.build_data_docs()
    return outcomes
