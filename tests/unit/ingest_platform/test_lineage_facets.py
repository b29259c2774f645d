"""The operators' OpenLineage facets (what Airflow's OpenLineage provider emits for each task
run) equal the catalog's lineage of their job; no scheduler, no Spark, no OpenLineage server.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ingest_core.catalog import get_catalog
from ingest_core.settings import PlatformSettings
from tests.unit.ingest_core.test_lineage import catalog_lineage

pytestmark = pytest.mark.unit

OPERATORS = Path(__file__).resolve().parents[3] / "plugins" / "ingest_platform" / "operators.py"


@pytest.fixture
def settings(cluster_settings: PlatformSettings) -> PlatformSettings:
    """A platform with a topic prefix and a two-server external cluster (tests/unit/conftest)."""
    return cluster_settings


def _keys(datasets: list[Any]) -> set[tuple[str, str]]:
    return {(d.namespace, d.name) for d in datasets}


@pytest.mark.parametrize("job", sorted(get_catalog().applications))
def test_a_spark_jobs_facets_equal_the_catalog_on_start_and_on_complete(
    job: str, settings: PlatformSettings
) -> None:
    from airflow.providers.openlineage.extractors import OperatorLineage

    from ingest_platform.operators import SparkJobOperator

    operator = SparkJobOperator(task_id=f"run_{job}", job=job)
    inputs, outputs = catalog_lineage(job, settings)
    for facets in (
        operator.get_openlineage_facets_on_start(),
        operator.get_openlineage_facets_on_complete(SimpleNamespace()),
    ):
        assert isinstance(facets, OperatorLineage)
        assert _keys(facets.inputs) == inputs
        assert _keys(facets.outputs) == outputs


@pytest.mark.parametrize("layer", ["silver", "gold"])
def test_a_gates_facets_are_its_layers_tables_in_and_the_ops_tables_out(
    layer: str, settings: PlatformSettings
) -> None:
    from ingest_core.quality.rules import layer_rules
    from ingest_platform.operators import LayerGateOperator

    catalog = get_catalog()

    def keys(tables: list[str]) -> set[tuple[str, str]]:
        return {("file", str(catalog.table(t).path(settings))) for t in tables}

    gate = catalog.application("quality_gate")
    ops_in = [t for t in gate.inputs if catalog.table(t).layer == "ops"]
    ops_out = [t for t in gate.outputs if catalog.table(t).layer == "ops"]
    assert ops_out == ["ops_gate_results", "ops_gate_holds"]
    facets = LayerGateOperator(
        task_id=f"gate_{layer}", layer=layer
    ).get_openlineage_facets_on_start()
    assert _keys(facets.inputs) == keys([r.table for r in layer_rules(layer)] + ops_in)
    assert _keys(facets.outputs) == keys(ops_out)


def test_the_facets_carry_the_contract_schemas_and_serialize(settings: PlatformSettings) -> None:
    from openlineage.client.serde import Serde

    from ingest_platform.operators import SparkJobOperator

    facets = SparkJobOperator(
        task_id="refine", job="silver_refine"
    ).get_openlineage_facets_on_start()
    outputs = {Path(d.name).name: d for d in facets.outputs}
    schema = outputs["silver_orders"].facets["schema"]
    names = [f.name for f in schema.fields]
    assert names[:4] == ["event_id", "event_type", "event_time", "schema_version"]
    items = next(f for f in schema.fields if f.name == "items")
    assert [f.name for f in items.fields[0].fields][:2] == ["product_id", "seller_id"]
    assert "schema" not in outputs["silver_quarantine"].facets  # its columns are Spark's
    text = Serde.to_json(outputs["silver_orders"])
    assert '"name": "silver_orders"' not in text  # the name is the path
    assert str(settings.storage.data_path / "silver" / "silver_orders") in text
    assert '"_element"' in text
    assert '"fields": []' not in text  # plain columns carry no empty "fields"
    topic = SparkJobOperator(
        task_id="replay", job="bronze_replay"
    ).get_openlineage_facets_on_start()
    assert "schema" in topic.inputs[0].facets
    assert topic.inputs[0].namespace == "kafka://broker-a:9093"


def test_a_staged_jobs_facets_name_the_refreshs_staging_tables(settings: PlatformSettings) -> None:
    from ingest_core.lineage import gate_lineage, job_lineage
    from ingest_core.refresh import RefreshLayout
    from ingest_platform.operators import StagedJobOperator

    run_id = "manual__2026-01-01T00:00:00+00:00"
    staged = RefreshLayout(run_id, settings).staged_settings("gold")
    context = {"run_id": run_id, "params": {"layer": "gold"}}
    instance = SimpleNamespace(get_template_context=lambda: context)

    rebuild = StagedJobOperator(task_id="rebuild_gold", job="gold_aggregate", builds="gold")
    facets = rebuild.get_openlineage_facets_on_complete(instance)
    expected = job_lineage("gold_aggregate", staged)
    assert _keys(facets.inputs) == {d.key for d in expected.inputs}
    assert _keys(facets.outputs) == {d.key for d in expected.outputs}
    staging = str(RefreshLayout(run_id, settings).staging)
    assert all(d.name.startswith(staging) for d in facets.outputs)
    live_silver = str(get_catalog().table("silver_payments").path(settings))
    assert live_silver in {d.name for d in facets.inputs}  # a Gold refresh reads live Silver

    gate = StagedJobOperator(task_id="gate_gold", job="quality_gate", builds="gold")
    facets = gate.get_openlineage_facets_on_complete(instance)
    assert _keys(facets.outputs) == {d.key for d in gate_lineage("gold", staged).outputs}

    # A Gold refresh skips the Silver steps: they report nothing; so does a start without a
    # task context (outside a task run).
    skipped = StagedJobOperator(task_id="rebuild_silver", job="silver_refine", builds="silver")
    facets = skipped.get_openlineage_facets_on_complete(instance)
    assert facets.inputs == facets.outputs == []
    assert rebuild.get_openlineage_facets_on_start().outputs == []


def test_no_openlineage_injection_into_spark(settings: PlatformSettings) -> None:
    from ingest_platform.operators import SparkJobOperator

    operator = SparkJobOperator(task_id="refine", job="silver_refine")
    assert operator._openlineage_inject_parent_job_info is False
    assert operator._openlineage_inject_transport_info is False
    hook = operator.get_hook().spark_submit_hook()
    assert not any("openlineage" in key for key in hook._conf)
    for option in ("openlineage_inject_parent_job_info", "openlineage_inject_transport_info"):
        with pytest.raises(ValueError, match="no OpenLineage Spark listener"):
            SparkJobOperator(task_id="refine", job="silver_refine", **{option: True})


def test_the_operators_import_the_openlineage_provider_only_inside_methods() -> None:
    """Parsing a DAG file imports the operators module: it must not import the provider (the
    Spark provider's own imports aside)."""
    tree = ast.parse(OPERATORS.read_text())
    top_level = [
        node
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in ([node.module] if isinstance(node, ast.ImportFrom) else [])
        + [a.name for a in node.names]
        if name and "openlineage" in name
    ]
    assert top_level == []
