"""Every file in dags/ imports cleanly in Airflow's DagBag, and every DAG is documented."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

DAGS = Path(__file__).resolve().parents[2] / "dags"


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
