"""The DAGs' wiring and the supervisor's parameters (no services: DagBag parsing only; the
spark-submit the operators run is tested in test_hooks.py)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from ingest_core.catalog import get_catalog

pytestmark = pytest.mark.unit

DAGS = Path(__file__).resolve().parents[3] / "dags"


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_medallion_incremental_runs_the_layers_in_order_behind_gates(dagbag) -> None:
    from airflow.sdk import DeltaDataIntervalTimetable

    dag = dagbag.dags["medallion_incremental"]
    assert isinstance(dag.timetable, DeltaDataIntervalTimetable)
    # An interval timetable (start < end), not a trigger timetable (start = end).
    assert dag.timetable.delta == timedelta(minutes=15)
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    assert dag.get_task("incremental_path").upstream_task_ids == {"choose_path"}
    assert dag.get_task("refine_silver").upstream_task_ids == {"incremental_path"}
    # The late corrections before Gold's gate: what publish_assets announces is validated.
    order = ["refine_silver", "gate_silver", "aggregate_gold", "correct_late", "gate_gold"]
    for upstream, downstream in itertools.pairwise(order):
        # After its predecessor and the branch's marker: it runs when the predecessor
        # succeeded or was skipped for unchanged inputs (the marker succeeded), never when a
        # task before it failed (a failed gate stops everything after it), never on the
        # backfill path (the marker is skipped too).
        assert dag.get_task(downstream).upstream_task_ids == {upstream, "incremental_path"}
        assert dag.get_task(downstream).trigger_rule == "none_failed_min_one_success", downstream
    backfill = ["choose_path", "recompute_gold", "gate_backfill"]
    for upstream, downstream in itertools.pairwise(backfill):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}
    publish = dag.get_task("publish_assets")
    assert publish.upstream_task_ids == {"gate_gold", "gate_backfill", "incremental_path"}
    assert publish.trigger_rule == "none_failed_min_one_success"
    # Gold's writers and gates share one pool slot, whatever run (backfill or not) they are in.
    gold_writers = {t.task_id for t in dag.tasks if t.pool == "gold_layer"}
    assert gold_writers == {
        "aggregate_gold",
        "gate_gold",
        "correct_late",
        "recompute_gold",
        "gate_backfill",
    }
    assert dag.get_task("refine_silver").pool == "silver_layer"
    # What makes each step run, from the catalog (late events alone are correct_late's work).
    gold_work = get_catalog().job("gold_aggregate").work_from
    assert dag.get_task("aggregate_gold").inputs == gold_work
    assert gold_work[:3] == ["silver_payments", "silver_orders", "silver_customer_activity"]
    assert "silver_late_events" not in gold_work
    assert dag.get_task("refine_silver").inputs == ["bronze_events"]
    assert dag.get_task("recompute_gold").job_args == [
        "--start",
        "{{ data_interval_start | ts }}",
        "--end",
        "{{ data_interval_end | ts }}",
    ]
    for task_id in ("refine_silver", "gate_silver", "aggregate_gold", "gate_gold", "correct_late"):
        assert dag.get_task(task_id)._conn_id == "spark_default"
    # retried when it dies; a failed expectation fails it without a retry (the operator's)
    assert dag.get_task("gate_silver").retries == 2
    silver_assets = {a.name for a in dag.get_task("gate_silver").outlets}
    gold_assets = {a.name for a in dag.get_task("publish_assets").outlets}
    assert "silver_payments" in silver_assets
    assert "gold_payment_totals_5m" in gold_assets
    assert all(a.uri.startswith("file:///") for a in dag.get_task("publish_assets").outlets)


def test_streaming_supervisor_has_one_task_per_always_on_job(dagbag) -> None:
    from ingest_platform.supervisor import always_on_jobs

    dag = dagbag.dags["streaming_supervisor"]
    assert set(dag.task_ids) == {f"supervise_{job}" for job in always_on_jobs()}
    assert set(always_on_jobs()) == {"bronze_ingest", "payment_alerts", "payment_alerts_rt"}
    assert dag.params["action"] == "supervise"


def test_unknown_job_or_layer_is_refused_when_the_dag_is_parsed() -> None:
    from ingest_platform.operators import LayerGateOperator, SparkJobOperator

    with pytest.raises(ValueError, match="unknown job 'silver_refined'"):
        SparkJobOperator(task_id="t", job="silver_refined")
    with pytest.raises(ValueError, match="no gate for layer 'bronze'"):
        LayerGateOperator(task_id="t", layer="bronze")


def test_supervisor_parameters_are_validated() -> None:
    from ingest_platform.streaming_control import validate_params

    assert validate_params({}) == (
        "supervise",
        ["bronze_ingest", "payment_alerts_rt", "payment_alerts"],
    )
    assert validate_params({"action": "stop", "jobs": ["payment_alerts"]}) == (
        "stop",
        ["payment_alerts"],
    )
    with pytest.raises(ValueError, match="jobs is empty"):
        validate_params({"action": "stop", "jobs": []})
    with pytest.raises(ValueError, match="unknown action 'restart'"):
        validate_params({"action": "restart"})
    with pytest.raises(ValueError, match=r"not always-on jobs: \['silver_refine'\]"):
        validate_params({"jobs": ["silver_refine"]})


def test_the_volume_band_ignores_results_without_rows() -> None:
    """Soak run 16: five ``layer_full_refresh`` marks (``passed``, ``rows`` 0) in an hour
    made the band (0, 1) and failed every later Gold increment."""
    from ingest_core.quality.validation import volume_band_for
    from ingest_core.settings import PlatformSettings, QualitySettings

    def result(rows: int, minute: int, status: str = "passed") -> dict:
        return {
            "table": "gold_payment_totals_5m",
            "status": status,
            "rows": rows,
            "validated_at": datetime(2026, 12, 7, 10, minute),
        }

    increments = [result(12, m) for m in range(5)]
    marks = [result(0, m) for m in range(10, 15)]  # newer than every increment
    results = pd.DataFrame([*increments, *marks, result(900, 20, "failed")])
    settings = PlatformSettings().model_copy(update={"quality": QualitySettings(volume_history=5)})
    band = volume_band_for(results, "gold_payment_totals_5m", settings)
    assert band == (0, 241)  # median 12 (x 20), not 0
    assert volume_band_for(pd.DataFrame(marks), "gold_payment_totals_5m", settings) is None


def test_volume_band_needs_history_and_uses_the_median() -> None:
    from ingest_core.quality.rules import volume_band
    from ingest_core.settings import QualitySettings

    quality = QualitySettings(
        volume_history=3,
        volume_band_factor=10,
        volume_lower_bound=True,
        volume_lower_bound_min_rows=20,
    )
    assert volume_band([100, 200], quality) is None
    # The newest 3: at least their median (200) / 10, at most their largest (5000) x 10.
    assert volume_band([100, 200, 5000, 1], quality) == (20, 50001)
    # A lower bound under 20 rows is not checked: a 2-row increment of a small table passes.
    assert volume_band([60, 50, 70], quality) == (0, 701)
    on = QualitySettings(volume_history=3, volume_lower_bound=True)
    assert volume_band([60, 50, 70, 100_000], on) == (0, 1401)


def test_a_small_increment_of_good_data_is_not_held_by_default() -> None:
    """Soak run 20: after broker outages a 69-row Silver increment failed against a band of
    [85, 34061] learned from increments of 521-6,053 rows, and every Silver and Gold run was
    held until an operator accepted it. By default only the upper bound is checked."""
    from ingest_core.quality.rules import volume_band
    from ingest_core.settings import QualitySettings

    history = [6053, 3877, 521, 1703, 1703]
    assert volume_band(history, QualitySettings()) == (0, 121061)
    assert volume_band(history, QualitySettings(volume_lower_bound=True)) == (85, 121061)


def test_the_upper_bound_follows_the_largest_recent_increment() -> None:
    """Soak run 20: gates run a minute apart validated increments of 3-5 rows; with the band
    at ``median * 20`` of [3, 3, 3, 430, 262] (one 3-row increment counted thrice), a normal
    842-row Silver increment failed against 61 rows and held every run again. Small
    increments among the history no longer tighten the bound; a flood still fails."""
    from ingest_core.quality.rules import volume_band
    from ingest_core.settings import QualitySettings

    band = volume_band([3, 5, 4, 430, 262], QualitySettings())
    assert band == (0, 8601)
    assert band[0] <= 842 <= band[1]
    assert not band[0] <= 20_000 <= band[1]


def test_an_increment_validated_several_times_counts_once_in_the_volume_band() -> None:
    """Soak run 20: three concurrent Silver gates recorded one 1,703-row increment (versions
    1..2) three times, three of the five the band was learned from. A table a refresh swapped
    in starts its versions again: the same versions with other rows are another increment."""
    from ingest_core.quality.validation import volume_band_for
    from ingest_core.settings import PlatformSettings, QualitySettings

    def result(rows: int, minute: int, versions: tuple[int, int]) -> dict:
        return {
            "table": "silver_customer_activity",
            "status": "passed",
            "rows": rows,
            "from_version": versions[0],
            "to_version": versions[1],
            "validated_at": datetime(2026, 12, 7, 19, minute),
        }

    results = pd.DataFrame(
        [
            result(291, 32, (0, 0)),
            *(result(1703, 40, (1, 2)) for _ in range(3)),
            result(521, 46, (3, 3)),
            result(40, 47, (3, 3)),  # the same versions of a swapped-in table
        ]
    )
    quality = QualitySettings(volume_history=5, volume_band_factor=2)
    settings = PlatformSettings().model_copy(update={"quality": quality})
    # 40, 521, 1703, 291 and no fifth: too little history, where the triple count had 5.
    assert volume_band_for(results, "silver_customer_activity", settings) is None
    results = pd.concat([results, pd.DataFrame([result(100, 50, (4, 4))])])
    assert volume_band_for(results, "silver_customer_activity", settings) == (0, 3407)


def test_suites_cover_every_gated_table_and_build(tmp_path) -> None:
    import great_expectations as gx

    from ingest_core.catalog import get_catalog
    from ingest_core.quality.rules import LAYER_RULES
    from ingest_core.quality.suites import build_suite
    from ingest_core.settings import QualitySettings

    gx.get_context(mode="ephemeral")
    catalog = get_catalog()
    for layer, rules in LAYER_RULES.items():
        for table in rules:
            assert catalog.table(table.table).layer == layer
            suite = build_suite(
                table, QualitySettings(freshness_limit_s=60), band=(1, 9), now=datetime.now(UTC)
            )
            kinds = {e.expectation_type for e in suite.expectations}
            assert "expect_column_values_to_not_be_null" in kinds
            assert "expect_table_row_count_to_be_between" in kinds


def test_pools_the_dags_use_are_declared_in_the_pools_file(dagbag) -> None:
    import json

    from ingest_platform.orchestration import POOLS_FILE

    declared = json.loads(POOLS_FILE.read_text())
    used = {t.pool for dag in dagbag.dags.values() for t in dag.tasks} - {"default_pool"}
    assert used <= set(declared)
    assert all(entry["slots"] == 1 for entry in declared.values())


@pytest.mark.parametrize(
    ("run_type", "ended_ago", "expected"),
    [
        ("backfill", timedelta(days=400), "backfill"),
        ("backfill", timedelta(0), "backfill"),  # a backfill is a backfill, even of today
        ("manual", timedelta(days=2), "backfill"),  # a person re-running a past interval
        ("manual", timedelta(minutes=16), "backfill"),
        ("manual", timedelta(minutes=1), "incremental"),  # "run now"
        ("scheduled", timedelta(hours=5), "incremental"),  # late, but the live schedule
        ("asset_triggered", timedelta(days=1), "incremental"),
    ],
)
def test_medallion_path_follows_run_type_and_interval(
    run_type: str, ended_ago: timedelta, expected: str
) -> None:
    from airflow.sdk.api.datamodels._generated import DagRunType

    from ingest_platform.orchestration import medallion_path

    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    assert medallion_path(run_type, now - ended_ago, now, timedelta(minutes=15)) == expected
    # What the Task SDK really hands the task: an enum whose str() is "DagRunType.X".
    as_enum = DagRunType(run_type)
    assert medallion_path(as_enum, now - ended_ago, now, timedelta(minutes=15)) == expected


def test_a_swap_without_a_rebuild_is_refused_and_alerts_are_never_swapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest_core import refresh
    from ingest_core.catalog import get_catalog
    from ingest_core.settings import get_settings
    from spark_jobs import layer_refresh

    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    get_settings.cache_clear()
    try:
        assert "gold_payment_alerts" not in refresh.rebuilt_tables("gold")
        assert "gold_payment_totals_5m" in refresh.rebuilt_tables("gold")
        live = []
        for table in ("gold_payment_totals_5m", "gold_payment_alerts"):
            log = get_catalog().table(table).path() / "_delta_log"
            log.mkdir(parents=True)
            (log / f"{0:020d}.json").write_text("{}")
            live.append(log.parent)
        refresh.prepare("gold", "r1")
        with pytest.raises(refresh.RefreshError, match="produced no gold_payment_totals_5m"):
            layer_refresh.swap(lambda: None, "gold", "r1")  # type: ignore[arg-type,return-value]
        assert all(path.is_dir() for path in live)  # nothing moved
        for bad in (".", "..", "-x", "a/b"):
            with pytest.raises(ValueError, match="refresh id"):
                refresh.RefreshLayout(bad, get_settings())
    finally:
        get_settings.cache_clear()


def test_bronze_replay_checks_the_range_before_spark(dagbag) -> None:
    dag = dagbag.dags["bronze_replay"]
    assert dag.schedule is None or dag.timetable.summary in ("None", "none")
    assert dag.get_task("replay").upstream_task_ids == {"check_range"}
    assert dag.get_task("replay").job == "bronze_replay"
    assert dag.params["topics"] == get_catalog().application("bronze_replay").topics
    assert {"orders", "payments", "refunds", "customer_activity"} <= set(dag.params["topics"])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"topics": ["paymentz"], "from_ts": "2026-01-01T00:00Z", "to_ts": "2026-01-01T01:00Z"},
            "unknown topic",
        ),
        (
            {"topics": ["payments"], "from_ts": "2026-01-01T02:00Z", "to_ts": "2026-01-01T01:00Z"},
            "not after start",
        ),
        (
            {"topics": [], "from_ts": "2026-01-01T00:00Z", "to_ts": "2026-01-01T01:00Z"},
            "no topic given",
        ),
    ],
)
def test_replay_parameters_are_refused_with_the_reason(params: dict, message: str) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from ingest_platform.orchestration import replay_plan

    with pytest.raises(AirflowFailException, match=message):
        replay_plan(params)


def test_layer_full_refresh_builds_in_staging_and_swaps_last(dagbag) -> None:
    from ingest_core.refresh import RefreshLayout, layers_of
    from ingest_core.settings import get_settings

    dag = dagbag.dags["layer_full_refresh"]
    order = [
        "prepare",
        "rebuild_silver",
        "gate_silver",
        "rebuild_gold",
        "correct_late",
        "gate_gold",
        "swap",
    ]
    for upstream, downstream in itertools.pairwise(order):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}
    assert dag.get_task("swap").pool == "gold_layer"
    assert dag.get_task("rebuild_gold").trigger_rule == "none_failed"  # after skipped Silver
    assert layers_of("gold") == ("gold",)
    assert layers_of("silver") == ("silver", "gold")
    with pytest.raises(ValueError, match="cannot be refreshed"):
        layers_of("bronze")
    layout = RefreshLayout("manual__2026-11-29T10:00:00+00:00", get_settings())
    env = layout.environment("gold")
    assert str(layout.staging) in env["INGEST_STORAGE__CHECKPOINT_DIR"]
    assert ":" not in layout.root.name
    staged = layout.staged_settings("gold")
    from ingest_core.catalog import get_catalog

    catalog = get_catalog()
    assert catalog.table("gold_payment_totals_5m").path(staged).is_relative_to(layout.staging)
    assert catalog.table("silver_payments").path(staged) == catalog.table("silver_payments").path(
        get_settings()
    )  # Silver stays live for a Gold refresh
    with pytest.raises(ValueError, match="refresh id"):
        RefreshLayout("../../etc", get_settings())


def test_inputs_snapshot_changes_with_a_new_delta_version_or_checkpoint_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest_core.catalog import get_catalog
    from ingest_core.settings import get_settings
    from ingest_platform.operators import inputs_snapshot

    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    get_settings.cache_clear()
    try:
        import pyarrow as pa
        from deltalake import write_deltalake

        bronze = str(get_catalog().table("bronze_events").path())
        write_deltalake(bronze, pa.table({"n": [1]}))
        first = inputs_snapshot("silver_refine", ["bronze_events"])
        assert first["tables"] == {"bronze_events": 0}
        assert inputs_snapshot("silver_refine", ["bronze_events"]) == first
        write_deltalake(bronze, pa.table({"n": [2]}), mode="append")  # Bronze got a commit
        second = inputs_snapshot("silver_refine", ["bronze_events"])
        assert second != first
        commits = get_catalog().job("silver_refine").checkpoint() / "commits"
        commits.mkdir(parents=True)
        (commits / "0").write_text("v1")  # the job's checkpoint moved (e.g. a restore)
        assert inputs_snapshot("silver_refine", ["bronze_events"]) != second
        landing = get_settings().storage.landing_path / "customers"
        landing.mkdir(parents=True)
        third = inputs_snapshot("silver_refine", ["bronze_events"])
        (landing / "olist.csv").write_text("customer_id\n")  # new dimension file
        assert inputs_snapshot("silver_refine", ["bronze_events"]) != third
    finally:
        get_settings.cache_clear()


def test_a_refresh_waits_while_the_layers_jobs_run_then_prepares(dagbag, ingest_home: Path) -> None:
    """Soak run 10: a refresh triggered while the medallion's ``gold_aggregate`` ran failed at
    once (a human had to trigger it again). ``prepare`` is a rescheduling sensor: not done
    while the layer's checkpoint lock is held, done (staging created) once it is free."""
    from airflow.sdk.exceptions import AirflowFailException

    from ingest_core.locks import checkpoint_lock
    from ingest_core.refresh import BUSY_WAIT_S, PREPARED_MARKER, SWAP_JOURNAL

    prepare = dagbag.dags["layer_full_refresh"].get_task("prepare")
    assert prepare.mode == "reschedule"  # its worker slot is free between checks
    assert prepare.timeout == BUSY_WAIT_S
    checkpoint = get_catalog().job("gold_aggregate").checkpoint()
    checkpoint.mkdir(parents=True)
    with checkpoint_lock(checkpoint):  # a Gold run holds it
        waiting = prepare.python_callable(params={"layer": "gold"}, run_id="r1")
    assert waiting.is_done is False
    assert not (ingest_home / "data" / "_refresh").exists()  # nothing prepared yet
    done = prepare.python_callable(params={"layer": "gold"}, run_id="r1")
    assert done.is_done is True
    assert Path(done.xcom_value).is_dir()
    staging = Path(done.xcom_value)
    (staging / "kept").write_text("")
    # A retried attempt (its worker killed after the folders were made): the same staging.
    again = prepare.python_callable(params={"layer": "gold"}, run_id="r1")
    assert again.is_done is True
    assert again.xcom_value == done.xcom_value
    assert (staging / "kept").exists()
    # A preparation interrupted before its marker (a partial copy) is made again.
    (staging.parent / PREPARED_MARKER).unlink()
    again = prepare.python_callable(params={"layer": "gold"}, run_id="r1")
    assert again.is_done is True
    assert not (staging / "kept").exists()
    # Once the swap has begun, the refresh id is spent.
    (staging.parent / SWAP_JOURNAL).write_text("{}")
    with pytest.raises(AirflowFailException, match="has begun its swap"):
        prepare.python_callable(params={"layer": "gold"}, run_id="r1")


def test_a_swap_killed_between_renames_fences_the_live_jobs_until_its_retry_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review of soak run 15's fix: the checkpoint locks die with a killed swap, and the
    live jobs then ran on half-swapped tables and checkpoints (counting windows twice, or
    recreating a moved table so that the retry refused for good). The swap fences the live
    checkpoints from before its first rename until its gate marks are recorded; its retry
    finishes and lifts the fence, and a retry after it finished returns at once."""
    import json
    import pathlib

    import pandas as pd
    from deltalake import write_deltalake

    from ingest_core import refresh
    from ingest_core.locks import CheckpointBusyError, CheckpointFencedError, checkpoint_lock
    from ingest_core.settings import get_settings
    from spark_jobs import layer_refresh

    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    get_settings.cache_clear()
    try:
        settings = get_settings()
        refresh.prepare("gold", "r1")
        layout = refresh.RefreshLayout("r1", settings)
        staged = layout.staged_settings("gold")
        for name in refresh.rebuilt_tables("gold"):  # live and rebuilt tables, one commit each
            for where in (settings, staged):
                path = get_catalog().table(name).path(where)
                write_deltalake(str(path), pd.DataFrame({"x": [1]}))
        job = get_catalog().job("gold_aggregate")
        for where in (settings, staged):
            (job.checkpoint(where) / "commits").mkdir(parents=True)
        monkeypatch.setattr(layer_refresh, "check_swappable", lambda layer, layout: None)
        marks: list[dict] = []
        monkeypatch.setattr(
            layer_refresh,
            "_record_passed",
            lambda spark, layer, refresh_id, settings, versions: marks.append(versions),
        )
        rename = pathlib.Path.rename
        calls = {"n": 0}

        def killed_after_three(self: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
            calls["n"] += 1
            if calls["n"] > 3:
                raise OSError("killed")
            return rename(self, target)

        with monkeypatch.context() as kill:
            kill.setattr(pathlib.Path, "rename", killed_after_three)
            with pytest.raises(OSError, match="killed"):
                layer_refresh.swap(lambda: None, "gold", "r1")  # type: ignore[arg-type,return-value]
        journal = json.loads((layout.root / refresh.SWAP_JOURNAL).read_text())
        assert journal["done"] == 3
        # Half swapped, no process holds a lock: the live Gold jobs, another refresh and a
        # restore are all refused, naming the unfinished swap.
        live = job.checkpoint(settings)
        with (
            pytest.raises(CheckpointFencedError, match="full refresh r1 of gold is swapping"),
            checkpoint_lock(live),
        ):
            pass
        with pytest.raises(refresh.LayerBusyError):
            refresh.prepare("gold", "r2")
        with (
            pytest.raises(refresh.RefreshError, match="fenced"),
            refresh.locked("gold", settings, "r2"),
        ):
            pass
        with pytest.raises(CheckpointBusyError), checkpoint_lock(live, fence_owner="refresh r2"):
            pass
        # The retry finishes the moves, records the marks once (for the versions the gate
        # passed in staging) and lifts the fence.
        moved = layer_refresh.swap(lambda: None, "gold", "r1")  # type: ignore[arg-type,return-value]
        assert moved  # the rest of the moves
        finished = json.loads((layout.root / refresh.SWAP_JOURNAL).read_text())
        assert finished["done"] == len(finished["moves"])
        assert finished["marks_recorded"]
        for name in refresh.rebuilt_tables("gold"):  # every table swapped, none half-way
            assert (get_catalog().table(name).path(settings) / "_delta_log").is_dir()
            assert (layout.previous / "gold" / name / "_delta_log").is_dir()
        assert marks == [{name: 0 for name in refresh.rebuilt_tables("gold")}]
        with checkpoint_lock(job.checkpoint(settings)):
            pass
        assert (job.checkpoint(settings) / "commits").is_dir()
        # A retry after it finished: nothing moved, nothing recorded, no lock needed.
        with checkpoint_lock(job.checkpoint(settings)):
            assert layer_refresh.swap(lambda: None, "gold", "r1") == []  # type: ignore[arg-type,return-value]
        assert len(marks) == 1
    finally:
        get_settings.cache_clear()
