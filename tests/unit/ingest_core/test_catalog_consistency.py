"""The code agrees with ``include/pipeline.yaml``: every declared job module exists, writes
only declared tables, uses only the tables it declares; every table has a writer; the gate
suites' keys are the catalog's. No Spark: modules are located (``find_spec``) and read as
source, never imported."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest
import yaml

from ingest_core.catalog import PIPELINE_YAML, Catalog, get_catalog

pytestmark = pytest.mark.unit


def table_names_used(source: str, tables: set[str]) -> set[str]:
    """Catalog table names appearing as string literals in ``source`` (the code names its
    tables as literals: ``catalog.table("silver_payments")``, ``LEDGER_TABLE = "..."``)."""
    return {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in tables
    }


def used_through_shared(
    source: str, tables: set[str], shared: str = "spark_jobs.gold.common"
) -> set[str]:
    """Catalog table names the functions ``source`` imports from ``shared`` use, following
    the calls inside ``shared`` (the Gold jobs' common code reads tables for them)."""
    spec = importlib.util.find_spec(shared)
    assert spec is not None
    assert spec.origin is not None
    defs = {
        node.name: node
        for node in ast.parse(Path(spec.origin).read_text()).body
        if isinstance(node, ast.FunctionDef | ast.ClassDef)
    }
    wanted = [
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module == shared
        for alias in node.names
    ]
    seen: set[str] = set()
    used: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        for node in ast.walk(defs[name]):
            if isinstance(node, ast.Constant) and node.value in tables:
                used.add(node.value)
            elif isinstance(node, ast.Name) and node.id in defs:
                wanted.append(node.id)
    return used


def _schema_problems(table: str, schema_from: str) -> list[str]:
    """``schema_from`` names something that exists: contracts landing in ``table``, its
    declared window (the catalog's own validation ties the two), or an attribute of an
    importable module."""
    if schema_from == "window":
        return []
    if schema_from == "contract":
        from ingest_core.contracts import CONTRACTS

        if not any(c.silver_table == table for c in CONTRACTS.values()):
            return [f"{table}: schema_from contract, but no contract lands in it"]
        return []
    module, _, name = schema_from.partition(":")
    if importlib.util.find_spec(module) is None:
        return [f"{table}: schema_from module {module!r} not found"]
    if not hasattr(importlib.import_module(module), name):
        return [f"{table}: schema_from {schema_from!r}: {module} has no {name!r}"]
    return []


def _property_problems(catalog: Catalog, table: str) -> list[str]:
    """A table that declares Delta properties (``checkpoint_interval``) has them set by each
    of its writers: nothing else applies them (``spark_jobs.delta_io.ensure_table_properties``:
    a streaming writer calls it before its query starts, a batch writer when it creates the
    table). A writer that never calls it is reported."""
    declared = sorted(catalog.table(table).delta_properties)
    if not declared:
        return []
    found = []
    for job in catalog.writers(table):
        spec = importlib.util.find_spec(job.module)
        calls = (
            {
                node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                for node in ast.walk(ast.parse(Path(spec.origin).read_text()))
                if isinstance(node, ast.Call)
            }
            if spec and spec.origin
            else set()
        )
        if "ensure_table_properties" not in calls:
            found.append(
                f"{table}: declares {declared}, but its writer {job.module} never calls "
                "ensure_table_properties"
            )
    return found


def problems(catalog: Catalog) -> list[str]:
    """Every disagreement between ``catalog`` and the code; empty when consistent."""
    found = []
    tables = set(catalog.tables)
    for name, job in catalog.applications.items():
        spec = importlib.util.find_spec(job.module)
        if spec is None or spec.origin is None:
            found.append(f"{name}: module {job.module!r} not found")
            continue
        found += [f"{name}: writes undeclared table {t!r}" for t in job.outputs if t not in tables]
        source = Path(spec.origin).read_text()
        used = table_names_used(source, tables) | used_through_shared(source, tables)
        undeclared = sorted(used - set(job.inputs) - set(job.outputs))
        if undeclared:
            found.append(f"{name}: {job.module} uses {undeclared}, not in its inputs or outputs")
    for table in catalog.tables.values():
        if not catalog.writers(table.name) and table.written_by is None:
            found.append(f"{table.name}: written by no job")
        found += _schema_problems(table.name, table.schema_from)
        found += _property_problems(catalog, table.name)
    from ingest_core.quality.rules import LAYER_RULES

    for rules in (r for layer in LAYER_RULES.values() for r in layer):
        if rules.table not in catalog.tables:
            found.append(f"gate rules for undeclared table {rules.table!r}")
        elif list(rules.keys) != catalog.tables[rules.table].keys:
            found.append(f"{rules.table}: gate keys {rules.keys} differ from the catalog's")
    return found


def test_the_code_agrees_with_the_catalog() -> None:
    assert problems(get_catalog()) == []


def test_the_check_fails_on_an_inconsistent_catalog() -> None:
    declared = yaml.safe_load(PIPELINE_YAML.read_text())
    jobs = declared["batch_jobs"]
    jobs["gold_backfill"]["module"] = "spark_jobs.no_such_job"
    # late_corrections writes its ledger and reads silver_late_events: hide both.
    jobs["late_corrections"]["inputs"].remove("silver_late_events")
    jobs["late_corrections"]["outputs"].remove("gold_late_corrections")
    jobs["late_corrections"]["inputs"].remove("gold_late_corrections")
    declared["tables"]["gold_late_corrections"]["written_by"] = "someone"
    declared["tables"]["gold_payment_alerts"]["schema_from"] = "spark_jobs.transforms.alerts:NOPE"
    declared["tables"]["silver_quarantine"]["schema_from"] = "contract"
    declared["tables"]["gold_payment_alerts"]["checkpoint_interval"] = 50
    found = problems(Catalog.model_validate(declared))
    assert (
        "gold_payment_alerts: declares ['delta.checkpointInterval'], but its writer "
        "spark_jobs.payment_alerts never calls ensure_table_properties" in found
    )
    assert "gold_backfill: module 'spark_jobs.no_such_job' not found" in found
    assert (
        "gold_payment_alerts: schema_from 'spark_jobs.transforms.alerts:NOPE': "
        "spark_jobs.transforms.alerts has no 'NOPE'" in found
    )
    assert "silver_quarantine: schema_from contract, but no contract lands in it" in found
    assert any(
        p.startswith("late_corrections:")
        and "'gold_late_corrections'" in p
        and "'silver_late_events'" in p
        for p in found
    ), found


def test_every_operator_job_is_a_catalog_job() -> None:
    from ingest_platform.operators import JOB_MODULES, job_application

    catalog = get_catalog()
    assert {n: j.module for n, j in catalog.applications.items()} == JOB_MODULES
    assert len(JOB_MODULES) == 10
    for job in JOB_MODULES:
        assert Path(job_application(job)).is_file()


def test_the_gold_jobs_share_one_definition_of_each_window() -> None:
    from spark_jobs.gold.common import windows_by_source
    from spark_jobs.gold.gold_aggregate import windowed_definitions
    from spark_jobs.gold.gold_backfill import windowed_tables

    windowed = get_catalog().windowed_tables()
    assert list(windowed_definitions()) == list(windowed) == list(windowed_tables())
    assert sorted(t for ts in windows_by_source().values() for t in ts) == sorted(windowed)
    for table, spec in windowed_tables().items():
        assert list(spec.keys) == get_catalog().table(table).keys


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"slide": None}, r"a sliding window needs \['slide'\]"),
        ({"gap": "session_gap"}, r"a sliding window takes no \['gap'\]"),
        ({"slide": "20 minutes"}, "slide '20 minutes' is longer than duration"),
        ({"duration": "ten minutes"}, "window duration: interval 'ten minutes' is not"),
        ({"watermark": "no_such_setting"}, "window watermark 'no_such_setting' is no setting"),
        ({"source": "silver_nothing"}, "window source 'silver_nothing' is undeclared"),
        ({"measures": {}}, "measures"),
        ({"measures": {"n": "sum"}}, "a measure is `count` or a one-key mapping"),
        ({"measures": {"n": {"median": "amount"}}}, "unknown measure 'median'"),
        ({"measures": {"currency": "count"}}, "measure 'currency': a measure needs a lower"),
        ({"measures": {"n": "count", "r": {"ratio": ["n", "m"]}}}, "a ratio divides two"),
        ({"measures": {"n": {"count_if": {"column": "status"}}}}, "give exactly one of"),
        ({"where": {"column": "status", "equals": "x", "at_most": 2}}, "give exactly one of"),
        ({"where": {"column": "status", "like": "x"}}, "Extra inputs are not permitted"),
    ],
)
def test_malformed_windows_are_refused(change: dict, message: str) -> None:
    from pydantic import ValidationError

    declared = yaml.safe_load(PIPELINE_YAML.read_text())
    window = declared["tables"]["gold_payment_totals_10m_sliding"]["window"]
    window.update(change)
    with pytest.raises(ValidationError, match=message):
        Catalog.model_validate(declared)


def test_unknown_tables_in_inputs_and_unwritten_tables_are_refused() -> None:
    from pydantic import ValidationError

    declared = yaml.safe_load(PIPELINE_YAML.read_text())
    declared["batch_jobs"]["gold_backfill"]["inputs"].append("silver_nothing")
    with pytest.raises(ValidationError, match=r"reads undeclared table\(s\) \['silver_nothing'\]"):
        Catalog.model_validate(declared)
    declared = yaml.safe_load(PIPELINE_YAML.read_text())
    del declared["tables"]["bronze_kafka_gaps"]["written_by"]
    declared["jobs"]["bronze_ingest"]["outputs"].remove("bronze_kafka_gaps")
    with pytest.raises(ValidationError, match="'bronze_kafka_gaps' is written by no job"):
        Catalog.model_validate(declared)
