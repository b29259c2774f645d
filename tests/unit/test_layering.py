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
    "dags": ROOT / "dags",
}
#: Top-level modules a package must never import.
#: ``ingest_core`` may use Great Expectations: its pandas engine runs without Spark, in the
#: Airflow gate task (:mod:`ingest_core.quality.pandas_gate`). Issue 52: the Airflow side
#: (plugins, DAGs) and the CLI import nothing of the Spark jobs; what they need of them and
#: runs without Spark lives in ``ingest_core``.
FORBIDDEN = {
    "ingest_core": {"pyspark", "delta", "airflow", "spark_jobs", "ingest_platform", "ingestctl"},
    "spark_jobs": {"airflow", "ingest_platform", "ingestctl"},
    "ingest_platform": {"ingestctl", "spark_jobs", "pyspark", "delta"},
    "ingestctl": {"spark_jobs", "pyspark", "delta"},
    "dags": {"ingestctl", "spark_jobs", "pyspark", "delta"},
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


def _violations(package: str, paths: list[Path]) -> list[str]:
    """``<path>:<line> imports <module>`` for each import of ``paths`` that ``package``'s
    layer forbids (paths under the repository are shown relative to it)."""
    return [
        f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line} imports {module}"
        for path in paths
        for line, module in _imports(path)
        if module in FORBIDDEN[package]
    ]


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_package_imports_only_what_its_layer_allows(package: str) -> None:
    bad = _violations(package, sorted(PACKAGES[package].rglob("*.py")))
    assert not bad, "\n".join(bad)


def test_the_layer_rules_see_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import pyspark\n"
        "def f():\n    from airflow.sdk import DAG\n"
    )
    assert _imports(module) == [(1, "typing"), (5, "airflow")]


def test_a_plugin_importing_a_spark_job_is_refused(tmp_path: Path) -> None:
    """Issue 52 (c): the rule above fails on a ``plugins -> spark_jobs`` import, lazy or not."""
    module = tmp_path / "operator.py"
    module.write_text("def execute():\n    from spark_jobs.quality import gate\n")
    assert _violations("ingest_platform", [module]) == [f"{module}:2 imports spark_jobs"]


def test_the_spark_jobs_import_pyspark_at_module_top() -> None:
    """Issue 52: with the Airflow side free of ``spark_jobs``, nothing needs pyspark kept out
    at import time; a Spark module states its dependencies where a reader looks first."""
    inside = []
    for path in sorted(PACKAGES["spark_jobs"].rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside += [
                    f"{path.relative_to(ROOT)}:{child.lineno} ({node.name})"
                    for child in ast.walk(node)
                    if isinstance(child, ast.ImportFrom)
                    and (child.module or "").split(".")[0] in ("pyspark", "delta")
                ]
    assert not inside, "\n".join(inside)


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


def test_the_hooks_do_not_import_the_operators() -> None:
    """Issue 52: operators use hooks, never the reverse (the hooks found a job's application
    file through ``ingest_platform.operators``; it is the catalog's fact,
    ``ingest_core.catalog.job_application``)."""
    hooks = PACKAGES["ingest_platform"] / "hooks.py"
    imported = [module for _, module in _imports(hooks, whole=True)]
    assert "ingest_platform.operators" not in imported, imported
