"""``ingestctl catalog check``: the catalog (``include/pipeline.yaml``) and every event
contract (``include/contracts/``) checked before anything runs, one line per problem
saying what is wrong and where."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ingest_core.catalog import Catalog
from ingest_core.contracts import ContractError, contract_problems, load_contracts
from ingest_core.quality.rules import window_problems
from ingest_core.replay_mappings import mapping_problems
from ingest_core.settings import catalog_dir


def _catalog(path: Path) -> tuple[Catalog | None, list[str]]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        return None, [f"{path.name}: not UTF-8 ({error.reason} at byte {error.start})"]
    except (OSError, yaml.YAMLError) as error:
        return None, [f"{path.name}: cannot be read as YAML: {' '.join(str(error).split())}"]
    sections = ("tables", "jobs", "batch_jobs")
    if not isinstance(document, dict) or not all(
        isinstance(document.get(s) or {}, dict)
        and all(isinstance(spec, dict) for spec in (document.get(s) or {}).values())
        for s in sections
    ):
        return None, [
            f"{path.name}: a mapping with tables, jobs and batch_jobs, each a mapping of "
            "names to mappings"
        ]
    try:
        return Catalog.model_validate(document), []
    except ValidationError as error:
        return None, [
            f"{path.name}: {'.'.join(str(p) for p in e['loc']) or '(top)'}: "
            f"{e['msg'].removeprefix('Value error, ')}"
            for e in error.errors()
        ]


def _cross_problems(catalog: Catalog, include: Path) -> list[str]:
    """Contracts against the catalog: each declared Gold window reads columns its source
    declares, of types its measures take; each source lands in a declared Silver table whose
    schema is the contract's, each such table has a source, and the Bronze jobs read every
    source's topic and no topic without a contract."""
    try:
        contracts = load_contracts(include / "contracts")
    except ContractError as error:  # pragma: no cover - contract_problems found it first
        return [str(error)]
    sources = contracts.sources
    problems = [
        *mapping_problems(contracts),
        *window_problems(catalog, contracts),
        *_window_lists(catalog),
        *_window_sources_read(catalog),
        *_silver_lists(catalog, sorted({s.silver_table for s in sources.values()})),
    ]
    landing = {s.silver_table: s for s in sources.values()}
    for source in sources.values():
        where = f"contracts/{source.path.name}"
        table = catalog.tables.get(source.silver_table)
        if table is None:
            problems.append(
                f"{where}: silver_table {source.silver_table!r} is not declared in "
                "pipeline.yaml's tables"
            )
        elif table.layer != "silver" or table.schema_from != "contract":
            problems.append(
                f"{where}: silver_table {source.silver_table!r} must be declared with "
                f"layer: silver and schema_from: contract (it has layer: {table.layer}, "
                f"schema_from: {table.schema_from})"
            )
    for table in catalog.tables.values():
        if table.schema_from == "contract" and table.name not in landing:
            problems.append(
                f"pipeline.yaml: tables.{table.name}: schema_from contract, but no file in "
                "contracts/ declares it as its silver_table"
            )
    for job in catalog.applications.values():
        read = _kafka_topics(job)
        if read is None or "bronze_events" not in job.outputs:
            continue
        section = "jobs" if job.name in catalog.jobs else "batch_jobs"
        for topic in sorted(set(sources) - set(read)):
            problems.append(
                f"pipeline.yaml: {section}.{job.name}: does not read topic {topic!r}, which "
                f"contracts/{sources[topic].path.name} declares: its events would never land"
            )
        for topic in sorted(set(read) - set(sources)):
            problems.append(
                f"pipeline.yaml: {section}.{job.name}: reads topic {topic!r}, which no "
                "contract declares: Silver could not parse its events"
            )
    return problems


def _lists_all(
    catalog: Catalog, tables: list[str], roles: Callable[[Any], list[str]], what: str
) -> list[str]:
    """A job listing some of ``tables`` in one of its ``roles(job)`` lists them all; one
    line per list that does not, naming the missing ones and ``what`` they are."""
    problems = []
    for job in catalog.applications.values():
        section = "jobs" if job.name in catalog.jobs else "batch_jobs"
        for role in roles(job):
            listed = getattr(job, role)
            missing = [t for t in tables if t not in listed]
            if missing and len(missing) < len(tables):
                problems.append(
                    f"pipeline.yaml: {section}.{job.name}.{role}: lists some {what} but not "
                    f"{missing}"
                )
    return problems


def _window_lists(catalog: Catalog) -> list[str]:
    """The Gold jobs work on every declared window: a job listing one windowed table among
    its outputs (or inputs) lists them all, so that its lineage, Assets and refreshes cover
    a newly declared one."""
    return [
        f"{problem} (it works on every declared window)"
        for problem in _lists_all(
            catalog,
            list(catalog.windowed_tables()),
            lambda job: ["outputs", "inputs"],
            "windowed Gold tables",
        )
    ]


def _window_sources_read(catalog: Catalog) -> list[str]:
    """A job that writes a declared window and reads Silver reads the window's source, and
    has it among ``work_from`` when it declares one: the medallion skips a job whose
    ``work_from`` tables have no new data, so a source left out there never reaches Gold
    (a new user's catalog: the reviews' Silver table missing from gold_aggregate's lists)."""
    problems = []
    windows = catalog.windowed_tables()
    for job in catalog.applications.values():
        section = "jobs" if job.name in catalog.jobs else "batch_jobs"
        reads_silver = any(
            t in catalog.tables and catalog.tables[t].layer == "silver" for t in job.inputs
        )
        for table in [t for t in job.outputs if t in windows]:
            source = windows[table].source
            if reads_silver and source not in job.inputs:
                problems.append(
                    f"pipeline.yaml: {section}.{job.name}.inputs: lacks {source!r}, the "
                    f"source of the window {table!r} it writes"
                )
            work_from = getattr(job, "work_from", None)
            if work_from and source not in work_from:
                problems.append(
                    f"pipeline.yaml: {section}.{job.name}.work_from: lacks {source!r}: "
                    f"new data there would not run the job, and {table!r} would not update"
                )
    return problems


def _silver_lists(catalog: Catalog, landing: list[str]) -> list[str]:
    """A job that lists some of the Silver tables the contracts land in among its outputs
    (silver_refine, layer_refresh), or among its inputs while it writes no Gold window (the
    gates), lists them all: a new source's table left out would be neither refined, nor
    rebuilt, nor gated."""
    windowed = set(catalog.windowed_tables())

    def roles(job: Any) -> list[str]:
        return ["outputs"] + ([] if windowed & set(job.outputs) else ["inputs"])

    return _lists_all(catalog, landing, roles, "Silver tables of the contracts")


def _kafka_topics(job: object) -> list[str] | None:
    source = getattr(job, "source", None)
    if source is not None and getattr(source, "kind", None) == "kafka":
        return list(source.topics)
    topics = getattr(job, "topics", None)
    return list(topics) if topics else None


def check(include: Path | None = None) -> list[str]:
    """Check ``pipeline.yaml`` and ``contracts/`` under ``include`` (default:
    :func:`ingest_core.settings.catalog_dir`).

    :returns: one line per problem, naming the file and the key or field; ``[]`` when all
        is well. Never raises for a bad declaration.
    """
    include = include or catalog_dir()
    catalog, problems = _catalog(include / "pipeline.yaml")
    found = contract_problems(include / "contracts")
    problems += [f"contracts/{p}" for p in found]
    if catalog is not None and not found:
        problems += _cross_problems(catalog, include)
    return problems
