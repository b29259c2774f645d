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


def _imports(path: Path) -> list[tuple[int, str]]:
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
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


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
