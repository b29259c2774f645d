"""Full refresh of Gold (``spark_jobs.layer_refresh``) on real Kafka, Spark and Delta: the
rebuild, made beside the live tables with new checkpoints and gated in staging, equals the
incremental Gold; the swap is refused before the gate passed and while a job of the layer
runs; after the swap the live jobs carry on from the new checkpoints."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from ingest_core import refresh
from ingest_core.catalog import get_catalog
from ingest_core.contracts import contract_for
from ingest_core.delta_tables import checkpoint_query_id
from ingest_core.locks import checkpoint_lock
from ingest_core.quality.state import pending
from ingest_core.refresh import RefreshError, RefreshLayout
from ingest_core.settings import get_settings
from ingestctl.replay.generator import generate_events
from spark_jobs import layer_refresh
from spark_jobs.gold import gold_aggregate, late_corrections
from spark_jobs.quality import gate
from tests.integration.medallion import AVAILABLE_NOW, Platform, payment

pytestmark = pytest.mark.integration
GOLD = [
    name
    for name, t in get_catalog().tables.items()
    if t.layer == "gold" and name != "gold_payment_alerts"
]


def _gold(platform: Platform) -> dict[str, pd.DataFrame]:
    frames = {}
    for table in GOLD:
        frame = platform.read(table)
        if frame.empty:
            continue
        keys = get_catalog().table(table).keys
        frames[table] = frame.sort_values(keys).reset_index(drop=True)
    return frames


def test_gold_full_refresh_equals_incremental_and_swaps_only_after_its_gate(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
    events = [e.to_value() for e in generate_events(600, seed=9, start=start, rate=0.3)]
    events.append(payment("wm", (start + timedelta(hours=3)).isoformat()))
    by_topic: dict[str, list[dict]] = {}
    for event in events:
        topic = contract_for(event["event_type"]).topic
        by_topic.setdefault(topic, []).append(event)
    half = {topic: len(values) // 2 for topic, values in by_topic.items()}
    for part in (0, 1):  # two incremental cycles, so Gold is built incrementally
        for topic, values in by_topic.items():
            platform.send(topic, values[: half[topic]] if part == 0 else values[half[topic] :])
        platform.all_layers()
    platform.correct_late()
    gate.validate_layer(platform.spark, "gold", run_id="incremental")
    incremental = _gold(platform)
    assert {"gold_payment_totals_5m", "gold_customer_metrics"} <= set(incremental)
    settings = get_settings()
    job = get_catalog().job("gold_aggregate")
    old_query = checkpoint_query_id(job.checkpoint(settings, "gold_payment_totals_5m"))

    refresh_id = "manual__2026-11-29T10:00:00+00:00"
    with (
        checkpoint_lock(job.checkpoint(settings)),  # gold_aggregate "running"
        pytest.raises(RefreshError, match="gold_aggregate is running"),
    ):
        refresh.prepare("gold", refresh_id)
    staging = refresh.prepare("gold", refresh_id)
    layout = RefreshLayout(refresh_id, settings)
    assert staging == layout.staging

    # The rebuild: the DAG's staged tasks, here in-process with the staging environment.
    with monkeypatch.context() as staged:
        for key, value in layout.environment("gold").items():
            staged.setenv(key, value)
        get_settings.cache_clear()
        gold_aggregate.run(platform.spark, trigger=AVAILABLE_NOW)
        late_corrections.correct(platform.spark)
        with pytest.raises(RefreshError, match="has not passed its gate"):
            layer_refresh.swap(lambda: platform.spark, "gold", refresh_id, settings)
        get_settings.cache_clear()
        outcomes = gate.validate_layer(platform.spark, "gold", run_id=refresh_id)
        assert outcomes
        assert {o.status for o in outcomes} <= {"passed", "empty"}
    get_settings.cache_clear()
    for table, frame in _gold(platform).items():  # nothing live changed during the rebuild
        pd.testing.assert_frame_equal(frame, incremental[table])

    moved = layer_refresh.swap(lambda: platform.spark, "gold", refresh_id)
    assert any("previous" in line for line in moved)
    refreshed = _gold(platform)
    assert set(refreshed) == set(incremental)
    for table, frame in refreshed.items():
        pd.testing.assert_frame_equal(frame, incremental[table], check_dtype=False)
    new_query = checkpoint_query_id(job.checkpoint(settings, "gold_payment_totals_5m"))
    assert new_query != old_query  # new checkpoints
    assert (layout.previous / "gold" / "gold_payment_totals_5m" / "_delta_log").is_dir()
    assert pending("gold") == []  # the gate marks follow the new tables

    # A swap run again (its task retried after a kill between the marks' commit and the
    # journal's record of it) moves nothing and records its marks once.
    marks = platform.read("ops_gate_results")
    marks = marks[marks.run_id == f"full_refresh__{refresh_id}"]
    assert len(marks) > 0
    journal = json.loads((layout.root / "swap.json").read_text())
    (layout.root / "swap.json").write_text(json.dumps(journal | {"marks_recorded": False}))
    assert layer_refresh.swap(lambda: platform.spark, "gold", refresh_id) == []
    again = platform.read("ops_gate_results")
    assert (again.run_id == f"full_refresh__{refresh_id}").sum() == len(marks)

    # The live jobs carry on from the new checkpoints: more events flow into the new Gold.
    platform.send("payments", [payment("after", (start + timedelta(hours=4)).isoformat(), 7.0)])
    platform.all_layers()
    after = platform.read("gold_payment_totals_5m")
    later = after[after.window_start == pd.Timestamp(start + timedelta(hours=3))]
    assert int(later.payment_count.sum()) == 1  # the "wm" payment's window is now final
    assert not os.path.exists(layout.staging / "gold" / "gold_payment_totals_5m")
