"""Every file in dags/ imports cleanly in Airflow's DagBag, and every DAG is documented."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

DAGS = Path(__file__).resolve().parents[3] / "dags"


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_no_import_errors(dagbag) -> None:
    assert dagbag.import_errors == {}


def test_every_dag_has_doc_tags_and_owner(dagbag) -> None:
    for dag_id, dag in dagbag.dags.items():
        assert dag.doc_md, f"{dag_id} has no doc_md"
        assert dag.tags, f"{dag_id} has no tags"
        assert dag.owner not in ("", "airflow"), f"{dag_id} has no owner"


def test_dag_id_is_file_name(dagbag) -> None:
    for dag_id, dag in dagbag.dags.items():
        assert Path(dag.fileloc).stem == dag_id


def test_the_check_bites_on_a_broken_dag_file(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "broken.py").write_text("from airflow.sdk import DAG\nimport no_such_module\n")
    assert "no_such_module" in str(DagBag(dag_folder=str(tmp_path)).import_errors)


def test_parsing_the_dag_files_loads_no_pyspark() -> None:
    """The DAG processor parses these files every few seconds: nothing they import may load
    Spark (two files did, through supervisor -> streaming_runtime, 91 pyspark modules). A
    child interpreter parses every DAG file and reports which pyspark modules it loaded."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(DAGS)!r})\n"
        "print(sorted(bag.import_errors.items()))\n"
        "print(len(bag.dags))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark')[:5])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    errors, count, pyspark_modules = result.stdout.strip().splitlines()[-3:]
    assert errors == "[]"
    assert int(count) == len(list(DAGS.glob("*.py")))
    assert pyspark_modules == "[]"
