"""``ingestctl catalog check``: the catalog and the contracts checked together, one line per
problem; each refusal on a copy of ``include/`` changed in one place."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from ingest_core.catalog_check import check
from ingest_core.settings import INCLUDE_DIR
from ingestctl.cli import app

pytestmark = pytest.mark.unit


@pytest.fixture
def include(tmp_path: Path) -> Path:
    """A copy of the repository's ``pipeline.yaml`` and ``contracts/``."""
    shutil.copy(INCLUDE_DIR / "pipeline.yaml", tmp_path / "pipeline.yaml")
    shutil.copytree(INCLUDE_DIR / "contracts", tmp_path / "contracts")
    return tmp_path


def _edit(path: Path, change: Any) -> None:
    document = yaml.safe_load(path.read_text())
    change(document)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def test_the_repository_passes(include: Path) -> None:
    assert check(include) == []
    assert check() == []


def test_a_contract_landing_in_an_undeclared_table(include: Path) -> None:
    _edit(
        include / "contracts" / "refunds.yaml",
        lambda d: d["x-ingest-source"].update(silver_table="silver_returns"),
    )
    assert (
        "contracts/refunds.yaml: silver_table 'silver_returns' is not declared in pipeline.yaml's"
        " tables"
    ) in check(include)
    # and the table it left has no contract any more
    assert any(
        p.startswith("pipeline.yaml: tables.silver_refunds: schema_from contract")
        for p in check(include)
    )


def test_a_contract_landing_in_a_table_of_another_layer(include: Path) -> None:
    _edit(
        include / "contracts" / "refunds.yaml",
        lambda d: d["x-ingest-source"].update(silver_table="bronze_events"),
    )
    assert any(
        p.startswith("contracts/refunds.yaml: silver_table 'bronze_events' must be declared")
        for p in check(include)
    )


def test_a_topic_bronze_does_not_read_and_one_without_contract(include: Path) -> None:
    _edit(
        include / "pipeline.yaml",
        lambda d: d["jobs"]["bronze_ingest"]["source"].update(
            topics=["orders", "payments", "customer_activity", "returns"]
        ),
    )
    problems = check(include)
    assert (
        "pipeline.yaml: jobs.bronze_ingest: does not read topic 'refunds', which "
        "contracts/refunds.yaml declares: its events would never land"
    ) in problems
    assert (
        "pipeline.yaml: jobs.bronze_ingest: reads topic 'returns', which no contract declares: "
        "Silver could not parse its events"
    ) in problems


def test_every_broken_contract_is_listed_not_only_the_first(include: Path) -> None:
    _edit(include / "contracts" / "orders.yaml", lambda d: d.update(required=["order_no"]))
    _edit(
        include / "contracts" / "payments.yaml",
        lambda d: d["properties"].update(fee={"type": "number"}),
    )
    problems = check(include)
    assert "contracts/orders.yaml: required field 'order_no' is not a declared property" in problems
    assert any(
        p.startswith("contracts/payments.yaml.fee: a number must be money") for p in problems
    )


def test_a_malformed_catalog_names_the_key(include: Path) -> None:
    _edit(
        include / "pipeline.yaml", lambda d: d["tables"]["silver_orders"].update(layer="platinum")
    )
    problems = check(include)
    assert problems
    assert all(p.startswith("pipeline.yaml: tables.silver_orders.layer") for p in problems)


def test_the_command_prints_one_line_per_problem_and_exits_1(include: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["catalog", "check", "--include", str(include)])
    assert ok.exit_code == 0, ok.output
    sources = len(list((include / "contracts").glob("*.yaml"))) - 1  # the envelope aside
    assert f"{sources} event contracts: no problem found" in ok.output
    _edit(include / "contracts" / "orders.yaml", lambda d: d.update(required=["order_no"]))
    bad = runner.invoke(app, ["catalog", "check", "--include", str(include)])
    assert bad.exit_code == 1
    assert "contracts/orders.yaml: required field 'order_no'" in bad.output


def _window(change: Any) -> Any:
    def edit(document: dict) -> None:
        table = document["tables"]["gold_payment_success_rate_15m"]
        change(table["window"])
        table["keys"] = ["window_start", *table["window"]["group_by"]]

    return edit


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda w: w.update(group_by=["channel"]),
            "silver_payments declares no column 'channel'",
        ),
        (
            lambda w: w["measures"].update(total={"sum": "method"}),
            "measure 'total': sum of 'method': a string column cannot be summed",
        ),
        (
            lambda w: w["measures"].update(mean={"avg": "status"}),
            "measure 'mean': avg of 'status': a string column cannot be averaged",
        ),
        (lambda w: w.update(time_column="method"), "windows are cut on a timestamp, not 'method'"),
        (
            lambda w: w.update(where={"column": "state", "equals": "x"}),
            "silver_payments declares no column 'state'",
        ),
        (
            lambda w: w["measures"].update(late={"count_if": {"column": "lateness", "at_most": 1}}),
            "silver_payments declares no column 'lateness'",
        ),
    ],
    ids=["group-by", "sum-of-string", "avg-of-string", "time-column", "where", "count-if"],
)
def test_a_gold_window_over_columns_its_source_lacks_or_cannot_aggregate(
    include: Path, change: Any, problem: str
) -> None:
    _edit(include / "pipeline.yaml", _window(change))
    problems = check(include)
    assert len(problems) == 1, problems
    assert problems[0].startswith(
        "pipeline.yaml: tables.gold_payment_success_rate_15m.window: gold_payment_success_rate_15m:"
    )
    assert problem in problems[0]


def test_a_malformed_measure_names_the_key(include: Path) -> None:
    _edit(
        include / "pipeline.yaml",
        _window(lambda w: w["measures"].update(rate={"ratio": ["successes", "refunds"]})),
    )
    (problem,) = check(include)
    assert problem.startswith("pipeline.yaml: tables.gold_payment_success_rate_15m.window: ")
    assert "measure 'rate': a ratio divides two measures declared before it" in problem


def test_a_gold_job_listing_some_windows_but_not_a_new_one(include: Path) -> None:
    def declare(document: dict) -> None:
        window = dict(document["tables"]["gold_payment_totals_5m"])
        document["tables"]["gold_payment_totals_1h"] = {
            **window,
            "window": {**window["window"], "duration": "1 hour"},
        }
        document["jobs"]["gold_aggregate"]["outputs"].append("gold_payment_totals_1h")

    _edit(include / "pipeline.yaml", declare)
    problems = check(include)
    assert {p.split(": lists")[0] for p in problems} == {
        "pipeline.yaml: batch_jobs.late_corrections.outputs",
        "pipeline.yaml: batch_jobs.gold_backfill.outputs",
        "pipeline.yaml: batch_jobs.layer_refresh.outputs",
        "pipeline.yaml: batch_jobs.quality_gate.inputs",
    }
    assert all("but not ['gold_payment_totals_1h']" in p for p in problems)


def _without(job: str, role: str, table: str, section: str = "batch_jobs") -> Any:
    return lambda d: d[section][job][role].remove(table)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            _without("gold_aggregate", "work_from", "silver_reviews", "jobs"),
            "pipeline.yaml: jobs.gold_aggregate.work_from: lacks 'silver_reviews': new data "
            "there would not run the job, and 'gold_reviews_daily' would not update",
        ),
        (
            _without("gold_backfill", "inputs", "silver_reviews"),
            "pipeline.yaml: batch_jobs.gold_backfill.inputs: lacks 'silver_reviews', the "
            "source of the window 'gold_reviews_daily' it writes",
        ),
        (
            _without("layer_refresh", "outputs", "silver_reviews"),
            "pipeline.yaml: batch_jobs.layer_refresh.outputs: lists some Silver tables of the "
            "contracts but not ['silver_reviews']",
        ),
        (
            _without("quality_gate", "inputs", "silver_reviews"),
            "pipeline.yaml: batch_jobs.quality_gate.inputs: lists some Silver tables of the "
            "contracts but not ['silver_reviews']",
        ),
    ],
    ids=["work-from", "gold-input", "refresh-output", "gate-input"],
)
def test_a_new_sources_silver_table_left_out_of_a_jobs_lists(
    include: Path, change: Any, problem: str
) -> None:
    """What a new user's catalog missed (a helper following docs/add-a-source.md): the
    medallion would skip gold_aggregate when only the new source had data, and the refresh
    and the gates would leave its table out."""
    _edit(include / "pipeline.yaml", change)
    assert check(include) == [problem]


def test_a_broken_catalog_in_use_is_checked_not_refused_as_settings(include: Path) -> None:
    """With ``INGEST_CATALOG_DIR`` on the broken folder (as a user editing their catalog
    has it), the check still prints its one line: neither the CLI's settings check nor an
    import that evaluates the contracts' derived constants stops it with a validation
    error first."""
    _edit(
        include / "pipeline.yaml",
        lambda d: d["tables"]["gold_reviews_daily"].update(keys=["window_end"]),
    )
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ingestctl"), "catalog", "check"],
        env={**os.environ, "INGEST_CATALOG_DIR": str(include)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "pipeline.yaml: tables.gold_reviews_daily: windowed table 'gold_reviews_daily' must "
        "be keyed on ['window_start'] (window start and grouping columns), not ['window_end']"
    ]
