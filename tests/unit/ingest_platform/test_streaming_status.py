"""The Streaming page's data: job states, query views, Kafka lag arithmetic, table facts
from real Delta tables (written with delta-rs), Prometheus series, the heartbeat history,
consumer-group offsets and the plugin's login requirement. No Spark, no broker here (the
broker-backed checks are in tests/integration/test_always_on.py and tests/e2e)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ingest_core.consumer_groups import consumer_group, kafka_offsets
from ingest_core.runtime_files import read_json, runtime_files
from ingest_core.settings import get_settings
from ingest_platform.streaming_status import (
    JOB_STATES,
    job_activity,
    job_state,
    lag_rows,
    metric_families,
    query_view,
    table_view,
)

pytestmark = pytest.mark.unit


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    monkeypatch.setenv("INGEST_KAFKA__TOPIC_PREFIX", "t1.")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


@pytest.mark.parametrize(
    ("running", "status", "age", "expected"),
    [
        (True, "running", 5.0, "running"),
        (True, "running", 500.0, "stale"),
        (True, None, None, "starting"),
        (False, "stopped", 5.0, "stopped"),
        (False, None, None, "stopped"),
        (False, "running", 5.0, "failed"),  # killed (kill -9, OOM): no clean stop
        (False, "stopping", 5.0, "failed"),
        (False, "failed", 5.0, "failed"),
        (True, "failed", 5.0, "failed"),
    ],
)
def test_job_state(running: bool, status: str | None, age: float | None, expected: str) -> None:
    assert job_state(running, status, age, timeout_s=180) == expected
    assert expected in JOB_STATES


def test_query_view_reads_rates_durations_and_the_watermark() -> None:
    query = {
        "status": "active",
        "last_progress": {
            "batch_id": 7,
            "timestamp": "2026-01-01T10:00:00.000Z",
            "input_rows_per_second": 120.5,
            "processed_rows_per_second": float("nan"),
            "duration_ms": {"triggerExecution": 1500, "addBatch": 900},
            "event_time": {"watermark": "2026-01-01T09:59:00.000Z"},
            "state_rows": 42,
        },
        "history": [{"batch_id": 6}, {"batch_id": 7}],
    }
    now = pd.Timestamp("2026-01-01T10:00:30Z").timestamp()
    view = query_view("velocity", query, now)
    assert view["batch_id"] == 7
    assert view["input_rows_per_second"] == 120.5
    assert view["processed_rows_per_second"] is None  # NaN is not JSON
    assert view["batch_duration_s"] == 1.5
    assert view["watermark_delay_s"] == pytest.approx(90.0)
    assert view["state_rows"] == 42
    assert [b["batch_id"] for b in view["history"]] == [6, 7]
    assert view["has_watermark"] is True
    # A stateless query reports no watermark at all: the page says it has none.
    stateless = {**query, "last_progress": {**query["last_progress"], "event_time": {}}}
    assert query_view("q", stateless, now)["has_watermark"] is False
    assert query_view("q", {"status": "running"}, now)["has_watermark"] is None
    # Spark's "no watermark yet" is the epoch: shown as none, not as a 56-year delay.
    query["last_progress"]["event_time"] = {"watermark": "1970-01-01T00:00:00.000Z"}
    assert query_view("", query, now)["watermark_delay_s"] is None
    assert query_view("", query, now)["name"] == "(job)"


def test_kafka_offsets_keeps_kafka_sources_only() -> None:
    sources = [
        {"t1.orders": {"0": 5, "1": 7}},
        {"reservoirId": "abc", "reservoirVersion": 3, "index": -1, "isStartingVersion": False},
        None,
        {"t1.orders": {"0": 9}, "t1.payments": {"2": 1}},
    ]
    assert kafka_offsets(sources) == {"t1.orders": {0: 9, 1: 7}, "t1.payments": {2: 1}}
    assert kafka_offsets([]) == {}


def test_consumer_group_is_the_job_under_the_topic_prefix(home: Path) -> None:
    assert consumer_group("bronze_ingest") == "t1.bronze_ingest"


def test_lag_rows_equal_end_minus_committed() -> None:
    positions = {"bronze_ingest": {"": {"t1.orders": {0: 10, 1: 4}}}}
    ends = {("t1.orders", 0): 15, ("t1.orders", 1): 4, ("t1.orders", 2): 8, ("t1.payments", 0): 3}
    starts = {("t1.orders", 2): 2, ("t1.payments", 0): 0}
    declared = {"bronze_ingest": ["t1.orders"], "payment_alerts_rt": ["t1.payments"]}
    rows = lag_rows(positions, ends, starts, declared)
    got = {(r["job"], r["topic"], r["partition"]): (r["committed"], r["lag"]) for r in rows}
    # Independent arithmetic: end - committed; a partition never committed counts from the
    # earliest offset Kafka holds.
    assert got == {
        ("bronze_ingest", "t1.orders", 0): (10, 5),
        ("bronze_ingest", "t1.orders", 1): (4, 0),
        ("bronze_ingest", "t1.orders", 2): (None, 6),
        ("payment_alerts_rt", "t1.payments", 0): (None, 3),
    }
    assert {r["query"] for r in rows if r["job"] == "bronze_ingest"} == {"bronze_ingest"}
    assert not any(r["note"] for r in rows)


def test_lag_rows_flag_offsets_the_broker_cannot_match() -> None:
    positions = {"bronze_ingest": {"": {"t1.orders": {0: 50, 1: 3}}}}
    ends = {("t1.orders", 0): 10, ("t1.orders", 1): 40}
    starts = {("t1.orders", 0): 0, ("t1.orders", 1): 25}
    rows = {r["partition"]: r for r in lag_rows(positions, ends, starts, {})}
    # Checkpoint past the end: a re-created topic; not "lag 0, all is well".
    assert rows[0]["lag"] == 0
    assert "re-created" in rows[0]["note"]
    # Retention deleted 22 records the job never read: 15 are left to read.
    assert rows[1]["lag"] == 15
    assert rows[1]["note"].startswith("22 records deleted by retention")


def test_table_view_reads_version_freshness_and_rows_added(home: Path) -> None:
    from deltalake import write_deltalake

    from ingest_core.catalog import get_catalog

    path = get_catalog().table("gold_payment_alerts").path()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_deltalake(str(path), pd.DataFrame({"alert_id": ["a", "b"]}))
    write_deltalake(str(path), pd.DataFrame({"alert_id": ["c", "d", "e"]}), mode="append")
    import time

    view = table_view("gold_payment_alerts", get_settings(), time.time(), gate=None)
    assert view["layer"] == "gold"
    assert view["version"] == 1
    assert view["rows_added"] == 3
    assert 0 <= view["freshness_s"] < 120
    missing = table_view("silver_orders", get_settings(), time.time(), gate=None)
    assert missing["version"] is None
    assert missing["freshness_s"] is None
    # The gate's pending versions come from the version read here: 0 validated, now at 1.
    gated = table_view("gold_payment_alerts", get_settings(), time.time(), {"validated_through": 0})
    assert gated["gate"]["pending_versions"] == 1
    never = table_view(
        "gold_payment_alerts", get_settings(), time.time(), {"validated_through": -1}
    )
    assert never["gate"]["pending_versions"] == 2
    absent = table_view("silver_orders", get_settings(), time.time(), {"validated_through": -1})
    assert absent["gate"]["pending_versions"] == 0


def test_table_view_after_maintenance_shows_the_last_data_commit(home: Path) -> None:
    """Issue 51: OPTIMIZE, VACUUM and property commits are maintenance, not data: freshness
    and rows added stay those of the last write, the gate has nothing pending."""
    import time

    from deltalake import DeltaTable, write_deltalake

    from ingest_core.catalog import get_catalog

    path = get_catalog().table("gold_payment_alerts").path()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_deltalake(str(path), pd.DataFrame({"alert_id": ["a", "b"]}))
    write_deltalake(str(path), pd.DataFrame({"alert_id": ["c", "d", "e"]}), mode="append")
    written = DeltaTable(str(path)).history(1)[0]["timestamp"] / 1000
    time.sleep(1.1)
    table = DeltaTable(str(path))
    table.optimize.compact()
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 30 days"})
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert DeltaTable(str(path)).version() > 2
    now = time.time()
    view = table_view("gold_payment_alerts", get_settings(), now, {"validated_through": 1})
    assert view["version"] == DeltaTable(str(path)).version()
    assert view["operation"] == "WRITE"
    assert view["rows_added"] == 3
    assert view["freshness_s"] == pytest.approx(now - written, abs=0.01)
    assert view["maintenance"]["operation"] in ("VACUUM END", "SET TBLPROPERTIES", "OPTIMIZE")
    assert view["maintenance"]["age_s"] < view["freshness_s"]
    assert view["gate"]["pending_versions"] == 0
    # A write after the maintenance is pending again, and the maintenance is no longer news.
    write_deltalake(str(path), pd.DataFrame({"alert_id": ["f"]}), mode="append")
    later = table_view("gold_payment_alerts", get_settings(), time.time(), {"validated_through": 1})
    assert later["rows_added"] == 1
    assert later["maintenance"] is None
    assert later["gate"]["pending_versions"] == 1


def test_metric_families_parse_as_prometheus_text() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    snap = {
        "jobs": [
            {
                "job": "bronze_ingest",
                "state": "running",
                "activity": "idle",
                "restarts_last_hour": 1,
                "queries": [
                    {
                        "name": "bronze_ingest",
                        "input_rows_per_second": 50.0,
                        "processed_rows_per_second": 60.0,
                        "batch_duration_s": 1.2,
                        "batch_id": 3,
                        "watermark_delay_s": float("nan"),  # never a NaN sample
                        "state_rows": 0,
                        "last_batch_age_s": 400.0,
                    }
                ],
            },
            {"job": "payment_alerts"},  # a job whose view failed: skipped
        ],
        "lag": {
            "partitions": [
                {
                    "job": "bronze_ingest",
                    "query": "bronze_ingest",
                    "topic": "orders",
                    "partition": 0,
                    "lag": 7,
                },
            ],
            "jobs": [{"job": "bronze_ingest", "total": 7}],
        },
        "tables": [
            {
                "table": "silver_orders",
                "layer": "silver",
                "version": 4,
                "freshness_s": 12.5,
                "rows_added": 100,
                "maintenance": {"operation": "OPTIMIZE", "age_s": 3.0},
                "gate": {"pending_versions": 2, "held": True},
            },
            {"table": "bronze_events", "layer": "bronze", "version": None},
        ],
        "errors": {"alerts": "boom"},
    }

    class Collector:
        def collect(self):
            return metric_families(snap)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("ingest_job_up", (("job", "bronze_ingest"),))] == 1.0
    assert samples[("ingest_job_state", (("job", "bronze_ingest"), ("state", "stale")))] == 0.0
    assert samples[("ingest_job_restarts_last_hour", (("job", "bronze_ingest"),))] == 1.0
    idle = ("ingest_job_activity", (("activity", "idle"), ("job", "bronze_ingest")))
    assert samples[idle] == 1.0
    stuck = ("ingest_job_activity", (("activity", "stuck"), ("job", "bronze_ingest")))
    assert samples[stuck] == 0.0
    age = (
        "ingest_query_last_batch_age_seconds",
        (("job", "bronze_ingest"), ("query", "bronze_ingest")),
    )
    assert samples[age] == 400.0
    silver_key = (("layer", "silver"), ("table", "silver_orders"))
    assert samples[("ingest_table_maintenance_age_seconds", silver_key)] == 3.0
    rate = (
        "ingest_query_input_rows_per_second",
        (("job", "bronze_ingest"), ("query", "bronze_ingest")),
    )
    assert samples[rate] == 50.0
    lag = (
        "ingest_kafka_lag_records",
        (
            ("job", "bronze_ingest"),
            ("partition", "0"),
            ("query", "bronze_ingest"),
            ("topic", "orders"),
        ),
    )
    assert samples[lag] == 7.0
    silver = (("layer", "silver"), ("table", "silver_orders"))
    assert samples[("ingest_table_freshness_seconds", silver)] == 12.5
    assert samples[("ingest_gate_pending_versions", silver)] == 2.0
    assert samples[("ingest_gate_held", silver)] == 1.0
    assert (
        "ingest_table_version",
        (("layer", "bronze"), ("table", "bronze_events")),
    ) not in samples
    assert samples[("ingest_status_errors", (("section", "alerts"),))] == 1.0
    assert not any(math.isnan(v) for v in samples.values())


def _progress(batch: int, query_id: str = "q-id") -> SimpleNamespace:
    return SimpleNamespace(
        id=query_id,
        runId="run",
        name="bronze_ingest",
        batchId=batch,
        timestamp=f"2026-01-01T10:00:{batch % 60:02d}.000Z",
        numInputRows=10,
        inputRowsPerSecond=5.0,
        processedRowsPerSecond=20.0,
        durationMs={"triggerExecution": 500},
        sources=[SimpleNamespace(endOffset=json.dumps({"t1.orders": {"0": 10 * batch}}))],
        stateOperators=[],
        eventTime={},
        observedMetrics={},
    )


def test_heartbeat_keeps_a_bounded_history_and_commits_kafka_offsets(home: Path) -> None:
    from spark_jobs.streaming_runtime import HISTORY, HeartbeatListener

    committed: list[dict] = []
    committer = SimpleNamespace(commit=committed.append)
    files = runtime_files("bronze_ingest")
    listener = HeartbeatListener("bronze_ingest", files, committer)  # type: ignore[arg-type]
    for batch in range(HISTORY + 5):
        listener.onQueryProgress(SimpleNamespace(progress=_progress(batch)))
    history = read_json(files.heartbeat)["queries"]["bronze_ingest"]["history"]
    assert [p["batch_id"] for p in history] == list(range(5, HISTORY + 5))
    assert history[-1] == {
        "batch_id": HISTORY + 4,
        "timestamp": _progress(HISTORY + 4).timestamp,
        "input_rows": 10,
        "input_rows_per_second": 5.0,
        "processed_rows_per_second": 20.0,
        "duration_ms": 500,
    }
    assert committed[-1] == {"t1.orders": {0: 10 * (HISTORY + 4)}}
    assert len(committed) == HISTORY + 5


def test_a_restarted_driver_keeps_its_last_batch_until_a_new_one(home: Path) -> None:
    """Issue 51: after a restart with no new data, the heartbeat still has the last batch
    (marked carried over) and its history; the first new batch replaces it."""
    from spark_jobs.streaming_runtime import HeartbeatListener

    files = runtime_files("bronze_ingest")
    first = HeartbeatListener("bronze_ingest", files)
    for batch in range(3):
        first.onQueryProgress(SimpleNamespace(progress=_progress(batch)))
    # The new driver's query has a new id; its started and idle events come first.
    second = HeartbeatListener("bronze_ingest", files)
    second.onQueryStarted(SimpleNamespace(id="new-id", runId="run2", name="bronze_ingest"))
    second.onQueryIdle(SimpleNamespace(id="new-id"))
    kept = read_json(files.heartbeat)["queries"]["bronze_ingest"]
    assert kept["carried_over"] is True
    assert kept["status"] == "idle"
    assert kept["id"] == "new-id"
    assert kept["last_progress"]["batch_id"] == 2
    assert [p["batch_id"] for p in kept["history"]] == [0, 1, 2]
    view = query_view("bronze_ingest", kept, now=pd.Timestamp("2026-01-01T10:10:02Z").timestamp())
    assert view["batch_id"] == 2
    assert view["carried_over"] is True
    assert view["last_batch_age_s"] == pytest.approx(600.0)
    second.onQueryProgress(SimpleNamespace(progress=_progress(3, "new-id")))
    fresh = read_json(files.heartbeat)["queries"]
    assert list(fresh) == ["bronze_ingest"]
    assert "carried_over" not in fresh["bronze_ingest"]
    assert [p["batch_id"] for p in fresh["bronze_ingest"]["history"]] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("state", "lag", "age", "expected"),
    [
        ("running", 0, 5.0, "processing"),
        ("running", 500, 5.0, "processing"),
        ("running", 0, 900.0, "idle"),
        ("running", None, 900.0, "idle"),  # a job that reads no Kafka
        ("running", 0, None, "idle"),  # no batch since it started, nothing to read
        ("running", 12, 900.0, "stuck"),
        ("running", 12, None, "stuck"),
        ("stale", 12, 900.0, None),
        ("failed", 0, None, None),
    ],
)
def test_job_activity_tells_idle_from_stuck(
    state: str, lag: int | None, age: float | None, expected: str | None
) -> None:
    assert job_activity(state, lag, age, stuck_after_s=180) == expected


def test_plugin_routes_refuse_anonymous_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.api_fastapi import app as api_app
    from fastapi.testclient import TestClient

    from ingest_platform.streaming_page import IngestPlatformPlugin, create_app

    client = TestClient(create_app())
    for route in ("/", "/api/status", "/metrics"):
        assert client.get(route).status_code == 401, route
    # A browser's visit (it accepts HTML) is sent to the UI's login page, and back after it
    # (the auth manager of the API server; tests/e2e/test_streaming_page.py uses the real one).
    login = mock.Mock()
    login.get_url_login.side_effect = lambda next_url: f"/auth/login?next={next_url}"
    monkeypatch.setattr(api_app, "get_auth_manager", lambda: login)
    visit = client.get("/", headers={"Accept": "text/html"}, follow_redirects=False)
    assert visit.status_code == 307
    assert "login" in visit.headers["location"]
    assert "next=" in visit.headers["location"]
    for route in ("/docs", "/redoc", "/openapi.json"):  # FastAPI's own, outside the login
        assert client.get(route).status_code == 404, route
    (view,) = IngestPlatformPlugin.external_views
    assert view["href"] == "/streaming/"
    assert view["destination"] == "nav"


def test_one_request_computes_a_snapshot_the_others_share_it(monkeypatch) -> None:
    """Requests never queue behind each other's snapshots: while one request computes, the
    others get the previous snapshot at once (only the very first waits)."""
    import threading
    import time

    from ingest_platform import streaming_page, streaming_status

    calls: list[float] = []
    release = threading.Event()

    def slow_snapshot() -> dict:
        calls.append(time.monotonic())
        release.wait(10)
        return {"n": len(calls)}

    monkeypatch.setattr(streaming_status, "snapshot", slow_snapshot)
    monkeypatch.setattr(streaming_page, "_cache", {"computing": False})
    results: list[dict] = []
    first = [
        threading.Thread(target=lambda: results.append(streaming_page.current_snapshot()))
        for _ in range(4)
    ]
    for thread in first:
        thread.start()
    time.sleep(0.3)
    release.set()
    for thread in first:
        thread.join(10)
    assert results == [{"n": 1}] * 4
    assert len(calls) == 1
    # Stale: one request recomputes (blocked here), another gets the old snapshot at once.
    release.clear()
    streaming_page._cache["at"] -= streaming_page.SNAPSHOT_TTL_S + 1
    slow = threading.Thread(target=lambda: results.append(streaming_page.current_snapshot()))
    slow.start()
    time.sleep(0.3)
    started = time.monotonic()
    assert streaming_page.current_snapshot() == {"n": 1}
    assert time.monotonic() - started < 1
    release.set()
    slow.join(10)
    assert results[-1] == {"n": 2}
    assert streaming_page.current_snapshot() == {"n": 2}


def test_offset_commits_to_a_broker_that_is_down_never_hold_the_exit(
    home: Path, monkeypatch
) -> None:
    """Nothing listens on the port: close() returns within its bound, leaving no thread
    behind (kafka-python's constructor probe would leak one per attempt)."""
    import threading
    import time

    from ingest_core.consumer_groups import GroupOffsetCommitter
    from tests.conftest import free_port

    monkeypatch.setenv("INGEST_KAFKA__PORT", str(free_port()))
    get_settings.cache_clear()
    before = threading.active_count()
    committer = GroupOffsetCommitter("bronze_ingest")
    for offset in range(50):  # coalesced, not queued: one attempt, not fifty
        committer.commit({"t1.orders": {0: offset}})
    started = time.monotonic()
    committer.close(timeout_s=15)
    assert time.monotonic() - started < 20
    time.sleep(0.5)
    assert threading.active_count() <= before


def test_lag_with_the_broker_down_is_a_timeout_not_a_hang(home: Path, monkeypatch) -> None:
    """kafka-python's metadata calls wait for ever on a broker that is down: the lag gives up
    after KAFKA_TIMEOUT_MS, says so, and leaves no client thread behind."""
    import threading
    import time

    from ingest_platform.streaming_status import KAFKA_TIMEOUT_MS, kafka_lag
    from tests.conftest import free_port

    monkeypatch.setenv("INGEST_KAFKA__PORT", str(free_port()))
    get_settings.cache_clear()
    before = threading.active_count()
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="did not answer within 6 s"):
        kafka_lag(get_settings(), time.time())
    assert time.monotonic() - started < KAFKA_TIMEOUT_MS / 1000 + 5
    time.sleep(1)
    assert threading.active_count() <= before


def test_newest_alerts_give_iso_times_the_page_can_parse(home: Path) -> None:
    from datetime import UTC, datetime
    from decimal import Decimal

    from deltalake import write_deltalake

    from ingest_core.catalog import get_catalog
    from ingest_platform.streaming_status import newest_alerts

    path = get_catalog().table("gold_payment_alerts").path()
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(
        {
            "detected_at": [
                datetime(2026, 12, 5, 23, 28, 25, 155000, tzinfo=UTC),
                datetime(2026, 12, 5, 23, 30, tzinfo=UTC),
            ],
            "rule": ["amount_over_threshold", "amount_over_threshold"],
            "customer_id": ["c1", None],
            "amount": [Decimal("2500.10"), Decimal("3000.00")],
            "currency": ["BRL", "BRL"],
            "payment_count": [1, 2],
        }
    )
    write_deltalake(str(path), frame)
    alerts = newest_alerts(get_settings())
    assert [a["detected_at"] for a in alerts] == [
        "2026-12-05T23:30:00+00:00",
        "2026-12-05T23:28:25.155000+00:00",
    ]
    assert alerts[0]["customer_id"] is None
    assert alerts[1]["amount"] == "2500.10"
