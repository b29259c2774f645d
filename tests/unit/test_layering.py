"""The packages' import rules (issue 16): a Spark-free, Airflow-free core imported by the Spark
jobs, the Airflow side and the CLI, and no cycle between them.

Every ``import`` is checked, also those inside functions (a lazy import is still a
dependency), except under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "ingest_core": ROOT / "ingest_core",
    "spark_jobs": ROOT / "spark_jobs",
    "ingest_platform": ROOT / "plugins" / "ingest_platform",
    "ingestctl": ROOT / "ingestctl",
}
#: Top-level modules a package must never import.
FORBIDDEN = {
    "ingest_core": {
        "pyspark",
        "delta",
        "airflow",
        "great_expectations",
        "spark_jobs",
        "ingest_platform",
        "ingestctl",
    },
    "spark_jobs": {"airflow", "ingest_platform", "ingestctl"},
    "ingest_platform": {"ingestctl"},
    "ingestctl": set(),
}


#: The Spark jobs' modules the Airflow side (plugins, DAGs) and the CLI still import (issue
#: 52: Spark-free code Airflow needs moves to ingest_core, one module at a time). A ratchet:
#: a new import of ``spark_jobs`` from there fails; a moved module leaves this list.
SPARK_JOBS_STILL_IMPORTED = {
    "spark_jobs.quality",  # the gate job itself (operators: from spark_jobs.quality import gate)
}


def _imports(path: Path, *, whole: bool = False) -> list[tuple[int, str]]:
    """``(line, module)`` of every import of ``path`` outside ``if TYPE_CHECKING:``; the
    top-level package of each, or with ``whole`` the module as written."""
    tree = ast.parse(path.read_text(), str(path))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(child) for stmt in node.body for child in ast.walk(stmt)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found if whole else [(line, module.split(".")[0]) for line, module in found]


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_package_imports_only_what_its_layer_allows(package: str) -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted(PACKAGES[package].rglob("*.py"))
        for line, module in _imports(path)
        if module in FORBIDDEN[package]
    ]
    assert not bad, "\n".join(bad)


def test_the_layer_rules_see_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import pyspark\n"
        "def f():\n    from airflow.sdk import DAG\n"
    )
    assert _imports(module) == [(1, "typing"), (5, "airflow")]


def test_the_airflow_side_and_the_cli_import_no_more_of_the_spark_jobs() -> None:
    """The ratchet of :data:`SPARK_JOBS_STILL_IMPORTED` (issue 52)."""
    sides = [PACKAGES["ingest_platform"], PACKAGES["ingestctl"], ROOT / "dags"]
    seen = {
        (f"{path.relative_to(ROOT)}:{line}", module)
        for side in sides
        for path in sorted(side.rglob("*.py"))
        for line, module in _imports(path, whole=True)
        if module.split(".")[0] == "spark_jobs"
    }
    new = sorted(
        f"{where} imports {module}"
        for where, module in seen
        if module not in SPARK_JOBS_STILL_IMPORTED
    )
    assert not new, "\n".join(new)
    gone = SPARK_JOBS_STILL_IMPORTED - {module for _, module in seen}
    assert not gone, f"no longer imported: take {sorted(gone)} off the list"


def test_no_gold_job_imports_another() -> None:
    """Issue 52: ``gold_aggregate`` and ``late_corrections`` imported each other, and
    ``gold_backfill`` both; what they share lives in ``spark_jobs.gold.common``."""
    gold = PACKAGES["spark_jobs"] / "gold"
    jobs = {p.stem for p in gold.glob("*.py")} - {"__init__", "common"}
    assert jobs == {"gold_aggregate", "late_corrections", "gold_backfill"}
    bad = []
    for path in sorted(gold.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            bad += [
                f"{path.name}:{node.lineno} imports {name}"
                for name in names
                if name.startswith("spark_jobs.gold.") and name.split(".")[2] in jobs - {path.stem}
            ]
    assert not bad, "\n".join(bad)
