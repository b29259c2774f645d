"""The Great Expectations gate on real Delta tables: increments by Delta version, failures
that hold back only the bad increment, and both remedies (quarantine, accept)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import pytest

from ingest_core.catalog import get_catalog
from ingest_core.quality import state, validation
from ingest_core.settings import get_settings
from spark_jobs.quality import gate
from tests.integration.medallion import Platform, activity, payment, windows

pytestmark = pytest.mark.integration


def _payments(prefix: str, minute0: int, count: int, amount: float = 10.0) -> list[dict]:
    return [
        payment(f"{prefix}{i}", f"2026-01-01T10:{minute0 + i:02d}:00Z", amount)
        for i in range(count)
    ]


def _silver_gate(platform: Platform, run_id: str) -> dict[str, gate.TableOutcome]:
    outcomes = gate.validate_layer(platform.spark, "silver", run_id=run_id)
    return {o.increment.table: o for o in outcomes}


def test_gate_validates_increments_only_and_empty_passes(platform: Platform) -> None:
    platform.send("payments", _payments("a", 0, 4))
    platform.bronze()
    platform.silver()
    first = _silver_gate(platform, "r1")
    assert first["silver_payments"].status == "passed"
    assert first["silver_payments"].rows == 4
    # Nothing new: nothing pending, nothing validated, nothing recorded.
    assert state.pending("silver") == []
    assert gate.validate_layer(platform.spark, "silver", run_id="r2") == []
    platform.send("payments", _payments("b", 10, 3))
    platform.bronze()
    platform.silver()
    second = _silver_gate(platform, "r3")
    assert second["silver_payments"].rows == 3  # only the new rows
    inc = second["silver_payments"].increment
    assert inc.from_version == first["silver_payments"].increment.to_version + 1
    results = platform.read("ops_gate_results")
    assert sorted(results.run_id.unique()) == ["r1", "r3"]


def test_the_engine_may_change_between_gate_runs(platform: Platform) -> None:
    """A Spark gate run, then a pandas one, then Spark again, on one GX project (as when an
    increment crosses ``quality.pandas_max_rows``): each validates its increment. GX's
    ``add_or_update_*`` emptied a data source on every table, so the second run could not
    load the definitions the first had stored ("Could not find asset named 'silver_orders'
    within 'platform' data source": a 1M-event bench's next cycle)."""
    runs: list[dict[str, gate.TableOutcome]] = []
    for i, engine in enumerate(("spark", "pandas", "spark")):
        platform.send("payments", _payments(f"e{i}", 10 * i, 2))
        when = f"2026-01-01T10:{10 * i:02d}:30Z"
        platform.send("customer_activity", [activity(f"a{i}", when, "c1")])
        platform.bronze()
        platform.silver()
        if engine == "spark":
            outcomes = gate.validate_layer(platform.spark, "silver", run_id=f"r{i}")
        else:
            outcomes = gate.validate_layer_without_spark("silver", run_id=f"r{i}") or []
        runs.append({o.increment.table: o for o in outcomes})
    for outcomes in runs:  # two tables: a data source holds several assets
        assert outcomes["silver_payments"].rows == 2
        assert outcomes["silver_customer_activity"].rows == 1
        assert {o.status for o in outcomes.values()} <= {"passed", "empty"}
    assert sorted(platform.read("ops_gate_results").run_id.unique()) == ["r0", "r1", "r2"]


def test_bad_increment_is_held_back_until_quarantined_and_nothing_is_lost(
    platform: Platform,
) -> None:
    good = _payments("g", 0, 4)
    platform.send("payments", good)
    platform.bronze()
    platform.silver()
    assert _silver_gate(platform, "r1")["silver_payments"].status == "passed"
    platform.gold()
    # 30% of the next increment has absurd amounts (valid decimals: Silver keeps them).
    bad = _payments("x", 20, 3, amount=5_000_000.0)
    fine = [*_payments("f", 23, 7, amount=2.0), payment("w", "2026-01-01T11:00:00Z", 1.0)]
    platform.send("payments", bad + fine)
    platform.bronze()
    platform.silver()
    failed = _silver_gate(platform, "r2")["silver_payments"]
    assert failed.status == "failed"
    assert [f["expectation"] for f in failed.failed] == ["expect_column_values_to_be_between"]
    assert failed.failed[0]["unexpected_count"] == 3
    # Every later run fails on the same increment until someone resolves it.
    assert _silver_gate(platform, "r3")["silver_payments"].status == "failed"
    assert not state.unresolved_failures("silver").empty

    held = gate.quarantine(platform.spark, "silver", reason="amounts in cents", by="test")
    assert held == {"silver_payments": 3}
    again = gate.quarantine  # a second remedy finds nothing left to resolve only after a pass
    after = _silver_gate(platform, "r4")["silver_payments"]
    assert after.status == "passed", after.failed
    assert after.rows == len(fine)
    with pytest.raises(gate.RemedyError, match="no unresolved failure"):
        again(platform.spark, "silver", reason="x", by="test")

    platform.gold()
    gold = windows(platform.read("gold_payment_totals_5m"))
    # Independent expectation: good and fine payments only, 5-minute windows before 11:00.
    expected: dict[tuple[str, str], tuple[int, float]] = {}
    for event in good + fine:
        minute = int(event["event_time"][14:16])
        if event["event_time"].startswith("2026-01-01T10"):
            key = (f"10:{minute - minute % 5:02d}", "BRL")
            count, total = expected.get(key, (0, 0.0))
            expected[key] = (count + 1, total + event["amount"])
    assert gold == expected
    # Nothing lost: the held rows stay in Silver and their raw records are in quarantine.
    assert set(platform.read("silver_payments").event_id) >= {e["event_id"] for e in bad}
    quarantine = platform.read("silver_quarantine")
    mine = quarantine[quarantine.reason == "gate:silver_payments"]
    assert sorted(json.loads(v)["event_id"] for v in mine.value) == ["x0", "x1", "x2"]


def test_accept_records_the_override_and_lets_the_increment_through(platform: Platform) -> None:
    platform.send("payments", _payments("g", 0, 2) + _payments("x", 5, 2, amount=9e6))
    platform.bronze()
    platform.silver()
    assert _silver_gate(platform, "r1")["silver_payments"].status == "failed"
    with pytest.raises(gate.RemedyError, match="--reason and --by"):
        gate.accept(platform.spark, "silver", reason=" ", by="ana")
    assert gate.accept(platform.spark, "silver", reason="real whale", by="ana") == [
        "silver_payments"
    ]
    assert state.pending("silver") == []
    results = platform.read("ops_gate_results")
    accepted = results[results.status == "accepted"].iloc[0]
    assert (accepted.resolved_by, accepted.reason) == ("ana", "real whale")


def test_quarantine_refuses_a_whole_increment_failure(platform: Platform, monkeypatch) -> None:
    # Five passed increments of ~2 rows teach a band; then a flood of 200 rows.
    from ingest_core.settings import get_settings

    monkeypatch.setenv("INGEST_QUALITY__VOLUME_HISTORY", "2")
    monkeypatch.setenv("INGEST_QUALITY__VOLUME_BAND_FACTOR", "3")
    get_settings.cache_clear()
    for round_ in range(2):
        platform.send("payments", _payments(f"r{round_}-", round_ * 2, 2))
        platform.bronze()
        platform.silver()
        assert _silver_gate(platform, f"v{round_}")["silver_payments"].status == "passed"
    flood = [payment(f"flood{i}", f"2026-01-01T10:{10 + i % 40:02d}:00Z") for i in range(40)]
    platform.send("payments", flood)
    platform.bronze()
    platform.silver()
    outcome = _silver_gate(platform, "v9")["silver_payments"]
    assert [f["expectation"] for f in outcome.failed] == ["expect_table_row_count_to_be_between"]
    with pytest.raises(gate.RemedyError, match="whole increment"):
        gate.quarantine(platform.spark, "silver", reason="flood", by="test")


def test_freshness_expectation_fails_a_stale_increment(platform: Platform, monkeypatch) -> None:
    from ingest_core.settings import get_settings

    monkeypatch.setenv("INGEST_QUALITY__FRESHNESS_LIMIT_S", "3600")
    get_settings.cache_clear()
    platform.send("payments", _payments("old", 0, 2))  # 2026-01-01: far older than an hour
    platform.bronze()
    platform.silver()
    outcome = _silver_gate(platform, "f1")["silver_payments"]
    assert [f["expectation"] for f in outcome.failed] == ["expect_column_max_to_be_between"]


def _same_rows(spark_rows: pd.DataFrame, pandas_rows: pd.DataFrame) -> None:
    columns = sorted(spark_rows.columns)
    assert sorted(pandas_rows.columns) == columns
    left = spark_rows[columns].astype(str).sort_values(columns).reset_index(drop=True)
    right = pandas_rows[columns].astype(str).sort_values(columns).reset_index(drop=True)
    pd.testing.assert_frame_equal(left, right)


def test_pandas_engine_reads_and_judges_increments_like_spark(platform: Platform) -> None:
    """Same increment, both engines: the same rows (inserts, updated Gold windows' newest
    images) and the same failed expectations with the same counts."""
    from ingest_core.quality.rules import layer_rules, validated_columns

    platform.send("payments", [*_payments("g", 0, 4), payment("w", "2026-01-01T10:50:00Z")])
    platform.all_layers()
    for layer in ("silver", "gold"):
        outcomes = gate.validate_layer(platform.spark, layer, run_id=f"{layer}1")
        assert {o.status for o in outcomes} == {"passed"}
    # Absurd amounts and a payment method outside the set reach Silver; late payments
    # (behind the 10:20 watermark) are corrected into Gold's 10:00 window by a MERGE: the
    # Gold increment holds new images of existing rows.
    bad = _payments("x", 40, 3, amount=5_000_000.0)
    odd = [payment("m0", "2026-01-01T10:45:00Z", 3.0, method="barter")]
    platform.send("payments", bad + odd + _payments("u", 1, 3, amount=2.0))
    platform.all_layers()
    assert platform.correct_late()["gold_payment_totals_5m"] == 1
    now = datetime.now(UTC)
    settings = get_settings()
    context = gate.gx_context(settings)
    compared = 0

    def judge(table: Any, rows: Any, engine: str) -> tuple[bool, list[tuple[Any, ...]], set[str]]:
        """The verdict on ``rows``: passed, (expectation, column, count) per failure, names."""
        ok, failed, _ = validation.validate_frame(
            context, table, rows, settings, engine=engine, band=None, now=now, collect_ids=False
        )
        brief = [(f["expectation"], f["column"], f["unexpected_count"]) for f in failed]
        return ok, brief, {f["expectation"] for f in failed}

    for layer in ("silver", "gold"):
        rules = {r.table: r for r in layer_rules(layer)}
        for inc in state.pending(layer, settings):
            table = rules[inc.table]
            by_spark = gate.increment(platform.spark, table, inc, settings).toPandas()
            by_pandas = gate.increment_without_spark(table, inc, settings, 10_000)
            assert by_pandas is not None
            _same_rows(by_spark, by_pandas)
            spark = judge(table, gate.increment(platform.spark, table, inc, settings), "spark")
            assert judge(table, by_pandas, "pandas") == spark
            # The gate reads and hands GX only the columns the suite reads: same verdicts.
            columns = validated_columns(table)
            narrow = gate.increment_without_spark(table, inc, settings, 10_000, columns)
            assert narrow is not None
            assert set(narrow.columns) <= {*columns, "event_id"}
            assert judge(table, narrow, "pandas") == spark
            compared += 1
            if inc.table == "silver_payments":
                assert spark[2] == {
                    "expect_column_values_to_be_between",
                    "expect_column_values_to_be_in_set",
                }
    assert compared >= 3  # silver_payments and the corrected Gold payment tables


def test_pandas_gate_records_results_spark_reads_and_stops_at_its_row_limit(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform.send("payments", _payments("g", 0, 4) + _payments("x", 10, 2, amount=9e6))
    platform.bronze()
    platform.silver()
    monkeypatch.setenv("INGEST_QUALITY__PANDAS_MAX_ROWS", "5")
    get_settings.cache_clear()
    # Six change rows: above the limit, nothing validated or recorded.
    assert gate.validate_layer_without_spark("silver", run_id="p0") is None
    assert not get_catalog().table(state.RESULTS_TABLE).path(get_settings()).exists()
    monkeypatch.setenv("INGEST_QUALITY__PANDAS_MAX_ROWS", "6")
    get_settings.cache_clear()
    outcomes = gate.validate_layer_without_spark("silver", run_id="p1")
    assert outcomes is not None
    (failed,) = outcomes
    assert (failed.increment.table, failed.status, failed.rows) == ("silver_payments", "failed", 6)
    assert [f["unexpected_count"] for f in failed.failed] == [2]
    # Spark appends after delta-rs, reads both rows; the failure still holds the mark.
    again = gate.validate_layer(platform.spark, "silver", run_id="s1")
    assert [(o.status, o.rows) for o in again] == [("failed", 6)]
    results = platform.spark.read.format("delta").load(
        str(get_catalog().table(state.RESULTS_TABLE).path(get_settings()))
    )
    rows = sorted((r.run_id, r.status, r.rows) for r in results.collect())
    assert rows == [("p1", "failed", 6), ("s1", "failed", 6)]
    assert gate.docs_index().exists()
