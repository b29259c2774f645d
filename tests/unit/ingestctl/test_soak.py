"""The soak's pure parts: the seeded fault schedule, the soak's log, and the verdict's checks
on small hand-made frames (each check must fail on the fault it names)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from ingestctl.soak import verdict
from ingestctl.soak.plan import KINDS, KINDS_BY_NAME, parse_kinds, schedule
from ingestctl.soak.runner import FaultOutcome, summarise
from ingestctl.soak.stream import SoakLog, read_log, value_hash

pytestmark = pytest.mark.unit


def test_the_schedule_is_reproducible_covers_every_kind_and_stays_in_its_window() -> None:
    first = schedule(7, 1200, 40, longest_outage_s=120, start_s=60)
    assert first == schedule(7, 1200, 40, longest_outage_s=120, start_s=60)
    assert first != schedule(8, 1200, 40, longest_outage_s=120, start_s=60)
    assert {f.kind for f in first} == {k.name for k in KINDS}
    times = [f.at_s for f in first]
    assert times == sorted(times)
    assert times[0] >= 60
    assert times[-1] < 1260
    for fault in first:
        assert fault.params.get("seconds", 0) <= 120
    drivers = [f.params["job"] for f in first if f.kind == "kill_always_on_driver"]
    assert set(drivers) <= {"bronze_ingest", "payment_alerts", "payment_alerts_rt"}


def test_kinds_are_parsed_and_an_unknown_one_is_refused() -> None:
    assert parse_kinds(None) == KINDS
    assert parse_kinds("stop_broker, backfill") == (
        KINDS_BY_NAME["stop_broker"],
        KINDS_BY_NAME["backfill"],
    )
    with pytest.raises(ValueError, match="unknown fault kinds \\['stop_brokr'\\]"):
        parse_kinds("stop_brokr")
    with pytest.raises(ValueError, match="positive"):
        schedule(1, 0, 3)


def test_a_clusters_fault_kinds_apply_only_to_a_cluster() -> None:
    """Issue 54: one broker killed or stopped at a time needs replicas on the others."""
    cluster = parse_kinds(None, brokers=3)
    assert {k.name for k in cluster} - {k.name for k in KINDS} == {
        "kill_cluster_broker",
        "stop_cluster_broker",
    }
    with pytest.raises(ValueError, match="need the local-cluster profile's clusters"):
        parse_kinds("kill_cluster_broker", brokers=1)
    planned = schedule(3, 3600, 60, cluster, longest_outage_s=120)
    nodes = {f.params["node"] for f in planned if f.kind == "kill_cluster_broker"}
    assert nodes <= {"leader", "controller", "any"}
    assert nodes
    assert all(5 <= f.params["seconds"] <= 120 for f in planned if "cluster" in f.kind)


def test_a_spark_clusters_fault_kinds_apply_only_with_workers() -> None:
    """Issue 54: a worker or an executor lost needs a Spark cluster; both clusters at once
    need both."""
    spark_only = {k.name for k in parse_kinds(None, brokers=1, workers=2)}
    assert spark_only - {k.name for k in KINDS} == {"kill_spark_worker", "kill_spark_executor"}
    both = {k.name for k in parse_kinds(None, brokers=3, workers=2)}
    assert both - {k.name for k in KINDS} == {
        "kill_cluster_broker",
        "stop_cluster_broker",
        "kill_spark_worker",
        "kill_spark_executor",
        "kill_broker_and_worker",
    }
    with pytest.raises(ValueError, match=r"spark_cluster\.workers > 0"):
        parse_kinds("kill_spark_worker", brokers=3, workers=0)
    with pytest.raises(ValueError, match=r"\['kill_broker_and_worker'\]"):
        parse_kinds("kill_broker_and_worker", brokers=1, workers=2)
    planned = schedule(5, 3600, 40, parse_kinds(None, brokers=3, workers=2), longest_outage_s=30)
    worker_faults = [
        f for f in planned if f.kind in ("kill_spark_worker", "kill_broker_and_worker")
    ]
    assert worker_faults
    assert all(5 <= f.params["seconds"] <= 30 for f in worker_faults)


def test_the_log_reads_back_tags_and_acknowledgements(tmp_path: Path) -> None:
    path = tmp_path / "sent.jsonl"
    lines = [
        {"sent": ["event", "payments", "e1", value_hash(b"{}")]},
        {"sent": ["malformed:malformed_json", "payments", None, value_hash(b"{")]},
        {"ack": ["payments", 0, 7, "event", "e1"]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    log = read_log(path)
    assert log.tags == {value_hash(b"{}"): "event", value_hash(b"{"): "malformed:malformed_json"}
    assert log.acknowledged == {("payments", 0, 7): ("event", "e1")}
    assert read_log(tmp_path / "missing.jsonl") == SoakLog({}, {})


def _records(*rows: tuple[str, int, int, bytes | None]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["topic", "partition", "offset", "value"])
    return frame.assign(hash=[value_hash(v) for v in frame.value])


def test_bronze_checks_find_a_lost_a_doubled_and_a_changed_record() -> None:
    kafka = _records(("payments", 0, 0, b"a"), ("payments", 0, 1, b"b"), ("payments", 1, 0, b"c"))
    log = SoakLog({}, {("payments", 0, 0): ("event", "x"), ("payments", 0, 1): ("event", "y")})
    whole = verdict.bronze_checks(kafka, kafka.copy(), log)
    assert all(c.ok for c in whole)
    broken = _records(("payments", 0, 0, b"a"), ("payments", 0, 0, b"a"), ("payments", 1, 0, b"X"))
    failures = {c.name: c.failures for c in verdict.bronze_checks(kafka, broken, log)}
    assert failures["bronze: every acknowledged record is in Kafka and in Bronze"] == 1
    assert failures["bronze: no record twice"] == 1
    assert failures["bronze: every Kafka record landed"] == 1
    assert failures["bronze: each record's bytes as Kafka holds them"] == 1


def _event(event_id: str, event_type: str = "payment", **payload: object) -> bytes:
    return json.dumps({"event_id": event_id, "event_type": event_type, **payload}).encode()


def test_silver_checks_find_a_lost_event_a_duplicate_and_a_wrong_quarantine() -> None:
    kafka = _records(
        ("payments", 0, 0, _event("p1")),
        ("payments", 0, 1, _event("p2")),
        ("payments", 0, 2, _event("p2")),  # a copy (producer retry)
        ("payments", 0, 3, b"{bad"),
    ).assign(tag=["event", "event", "duplicate", "malformed:malformed_json"])
    events = verdict.well_formed_events(kafka)
    tables = {"payment": "silver_payments"}
    malformed = kafka[kafka.tag.str.startswith("malformed:")]
    quarantine = pd.DataFrame(
        [("payments", 0, 3, "malformed_json")], columns=["topic", "partition", "offset", "reason"]
    )
    late = pd.DataFrame([("p2", "payment")], columns=["event_id", "event_type"])
    silver = {"silver_payments": pd.DataFrame({"event_id": ["p1", "p2"]})}
    # p2 on time and late: allowed, Kafka holds two copies of it.
    assert all(
        c.ok for c in verdict.silver_checks(events, silver, late, quarantine, malformed, tables)
    )
    # A Silver table not written yet reads as a frame without columns: every event is lost.
    never = {
        c.name: c.failures
        for c in verdict.silver_checks(
            events,
            {"silver_payments": pd.DataFrame()},
            late.iloc[:0],
            quarantine,
            malformed,
            tables,
        )
    }
    assert never["silver: every payment event in silver_payments or silver_late_events"] == 2
    lost = {"silver_payments": pd.DataFrame({"event_id": ["p2", "p2"]})}
    wrong = quarantine.assign(reason="invalid_utf8")
    failed = {
        c.name: c.failures
        for c in verdict.silver_checks(events, lost, late.iloc[:0], wrong, malformed, tables)
    }
    assert failed["silver: silver_payments holds each event id once"] == 1
    assert failed["silver: every payment event in silver_payments or silver_late_events"] == 1
    assert failed["silver: every malformed record quarantined with its reason"] == 1


def _payments(*rows: tuple[str, str, str, float, str, str]) -> pd.DataFrame:
    frame = pd.DataFrame(
        rows, columns=["event_id", "event_time", "currency", "amount", "status", "method"]
    )
    return frame.assign(event_time=pd.to_datetime(frame.event_time).astype("datetime64[us]"))


def test_payment_windows_by_hand_tumbling_sliding_and_success_rates() -> None:
    payments = _payments(
        ("a", "2026-01-01 10:01", "BRL", 10.0, "authorized", "card"),
        ("b", "2026-01-01 10:04", "BRL", 5.5, "authorized", "card"),
        ("c", "2026-01-01 10:06", "BRL", 1.0, "declined", "boleto"),
        ("d", "2026-01-01 10:07", "BRL", 2.0, "authorized", "boleto"),
    )
    watermark = datetime(2026, 1, 1, 10, 10, tzinfo=UTC)
    at = pd.Timestamp
    assert verdict.expected_payment_totals(payments, 5, None, watermark) == {
        (at("2026-01-01 10:00"), "BRL", 2, 15.5),
        (at("2026-01-01 10:05"), "BRL", 1, 2.0),
    }
    # 10-minute windows every 5: those that end by 10:10 are final (not 10:05-10:15).
    assert verdict.expected_payment_totals(payments, 10, 5, watermark) == {
        (at("2026-01-01 09:55"), "BRL", 2, 15.5),
        (at("2026-01-01 10:00"), "BRL", 3, 17.5),
    }
    assert verdict.expected_success_rates(payments, 15, watermark) == set()
    later = datetime(2026, 1, 1, 10, 15, tzinfo=UTC)
    assert verdict.expected_success_rates(payments, 15, later) == {
        (at("2026-01-01 10:00"), "card", 2, 2),
        (at("2026-01-01 10:00"), "boleto", 2, 1),
    }
    gold = pd.DataFrame(
        {
            "window_start": ["2026-01-01T10:00:00Z", "2026-01-01T10:05:00Z"],
            "window_end": ["2026-01-01T10:05:00Z", "2026-01-01T10:10:00Z"],
            "currency": ["BRL", "BRL"],
            "payment_count": [2, 1],
            "amount_total": [15.5, 2.5],
        }
    )
    check = verdict.compare(
        "t",
        verdict.expected_payment_totals(payments, 5, None, watermark),
        verdict.actual_payment_totals(gold, watermark),
    )
    assert check.failures == 2  # one window differs: missing the right one, an extra wrong one


def test_sessions_by_hand_split_after_the_gap_and_join_at_exactly_the_gap() -> None:
    activity = pd.DataFrame(
        {
            "customer_id": ["c1", "c1", "c1", "c2"],
            "activity": ["page_view", "checkout", "page_view", "page_view"],
            "event_time": pd.to_datetime(
                ["2026-01-01 10:00", "2026-01-01 10:10", "2026-01-01 10:21", "2026-01-01 10:00"]
            ).astype("datetime64[us]"),
        }
    )
    gap = timedelta(minutes=10)
    at = pd.Timestamp
    assert verdict.expected_sessions(activity, gap, datetime(2026, 1, 1, 10, 40, tzinfo=UTC)) == {
        ("c1", at("2026-01-01 10:00"), at("2026-01-01 10:20"), 2, True),
        ("c1", at("2026-01-01 10:21"), at("2026-01-01 10:31"), 1, False),
        ("c2", at("2026-01-01 10:00"), at("2026-01-01 10:10"), 1, False),
    }


def test_alerts_and_reconciliation_checks() -> None:
    payments = pd.DataFrame({"event_id": ["big", "small"], "amount": [9000.0, 5.0]})
    alerts = pd.DataFrame(
        {"alert_id": ["a1", "a1"], "rule": ["amount_above_threshold"] * 2, "event_id": ["big"] * 2}
    )
    failed = {c.name: c.failures for c in verdict.alert_checks(payments, alerts, 5000)}
    assert failed == {
        "alerts: every payment above the threshold alerted": 0,
        "alerts: every alert landed once": 1,
    }
    missing = verdict.alert_checks(payments, alerts.iloc[:0], 5000)
    assert missing[0].failures == 1
    counts = pd.DataFrame(
        {
            "query_id": ["q", "q"],
            "batch_id": [1, 2],
            "batch_time": pd.to_datetime(["2026-01-01 10:00", "2026-01-01 10:01"]),
            "records_read": [10, 10],
            "records_written": [7, 7],
            "records_quarantined": [1, 1],
            "duplicates_dropped": [1, 1],
            "late_events": [1, 0],
        }
    )
    balanced, read_once = verdict.reconciliation_check(counts, 20)
    assert (balanced.failures, read_once.failures) == (1, 0)
    assert verdict.reconciliation_check(counts, 21)[1].failures == 1


def test_the_summary_counts_recoveries_per_kind_and_fails_on_any_failed_check() -> None:
    outcomes = [
        FaultOutcome(
            1, "stop_broker", "stop_broker (30 s)", 10, True, recovered=True, recovery_s=40
        ),
        FaultOutcome(
            2, "stop_broker", "stop_broker (20 s)", 20, True, recovered=True, recovery_s=20
        ),
        FaultOutcome(3, "backfill", "backfill", 30, True, recovered=False, still_wrong="failed"),
        FaultOutcome(4, "backfill", "backfill", 40, False),
    ]
    ok = verdict.Check("x", 0, 5, "lost")
    by_kind, totals = summarise(outcomes, [ok])
    assert by_kind["stop_broker"] == {
        "planned": 2,
        "injected": 2,
        "recovered": 2,
        "human": [],
        "recovery_p50_s": 30.0,
        "recovery_max_s": 40,
    }
    assert by_kind["backfill"]["human"] == ["#3: failed"]
    assert totals["passed"] is False  # a fault needed a human
    _, totals = summarise(outcomes[:2], [ok, verdict.Check("y", 2, 5, "duplicated")])
    assert (totals["duplicated"], totals["passed"]) == (2, False)
    _, totals = summarise(outcomes[:2], [ok])
    assert totals["passed"] is True


def test_sigterm_to_the_soak_interrupts_it_like_ctrl_c() -> None:
    """``kill <pid>`` of ``ingestctl soak`` ended it at once, its platform left running: it
    now raises KeyboardInterrupt, which stops the platform on the way out."""
    import os
    import signal

    from ingest_core.processes import interrupts_raise

    def terminated() -> None:
        with interrupts_raise():
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 5)  # the handler raises before this returns

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="signal 15"):
        terminated()
    assert signal.getsignal(signal.SIGTERM) is before


def test_every_fault_kind_has_an_injector_and_the_issue_s_kinds_are_there() -> None:
    from ingestctl.soak.faults import INJECTORS

    assert set(INJECTORS) == set(KINDS_BY_NAME)
    # Issue 50's list: a task past its execution_timeout, a killed gate, concurrent commits.
    assert {"hang_scheduled_driver", "kill_gate", "concurrent_commits"} <= set(KINDS_BY_NAME)


def test_a_broker_that_exits_during_start_up_is_started_again_like_a_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Soak run 12: a node restarted during a whole-cluster outage could not register with
    the quorum and exited; the soak, playing the service manager, now starts it again."""
    from ingestctl.kafka_broker import BrokerStartError
    from ingestctl.soak import faults

    monkeypatch.setattr(faults.time, "sleep", lambda seconds: None)

    class Broker:
        attempts = 0

        def up(self) -> str:
            self.attempts += 1
            if self.attempts < 3:
                raise BrokerStartError("unable to register with the controller quorum")
            return "running"

    broker = Broker()
    assert faults._restarting(broker)() == "running"
    assert broker.attempts == 3
    with pytest.raises(BrokerStartError):
        faults._restarting(Broker(), give_up_s=-1)()  # past its time: the error stands


def test_the_default_schedule_leaves_few_backfills_to_queue() -> None:
    """Airflow runs one backfill of a DAG at a time (75-570 s each in soak run 13): the
    default soak's schedule (seed 1, 40 faults over 85 % of 20 minutes) draws at most three,
    so that they end near the stream's end, not 13 minutes after it (run 13 drew six)."""
    planned = schedule(1, 20 * 60 * 0.85, 40, KINDS, start_s=60)
    backfills = [f for f in planned if f.kind == "backfill"]
    assert backfills  # still one of the kinds the default soak injects
    assert len(backfills) <= 3  # seed 1 drew six at weight 1
    assert KINDS_BY_NAME["backfill"].weight < KINDS_BY_NAME["kill_gate"].weight


def test_a_backup_fault_waits_for_the_jobs_first_commit(tmp_path: Path) -> None:
    """Soak run 14: a backup asked of a Bronze that had not committed its first batch is
    refused, rightly ("nothing to back up"); the fault waits for a commit instead of counting
    that refusal as a platform that did not recover."""
    from types import SimpleNamespace

    from ingest_core.settings import PlatformSettings
    from ingestctl.soak.faults import _committed

    settings = PlatformSettings(storage={"checkpoint_dir": tmp_path})
    platform = SimpleNamespace(settings=settings)
    checkpoint = tmp_path / "bronze_ingest"
    assert not _committed(platform, "bronze_ingest")  # type: ignore[arg-type]
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n{}\n")
    (checkpoint / "commits").mkdir()
    assert not _committed(platform, "bronze_ingest")  # type: ignore[arg-type]  # planned only
    (checkpoint / "commits" / "0").write_text("v1\n{}\n")
    assert _committed(platform, "bronze_ingest")  # type: ignore[arg-type]


def test_a_faults_check_goes_on_a_while_after_its_work_ends() -> None:
    """Soak run 14: a maintenance run that ended at its fault's deadline left the paused jobs
    starting; the check gets SETTLE_S more after the fault's work was last seen, within twice
    the timeout, and no more when the work was never seen past the deadline."""
    from ingestctl.soak.runner import RecoveryWindow

    window = RecoveryWindow(start=0.0, timeout_s=900.0, settle_s=180.0)
    assert window.waiting(10.0, lambda: True)
    assert window.waiting(950.0, lambda: True)  # past the deadline, still busy
    assert window.waiting(1100.0, lambda: False)  # settling: 150 s since last seen busy
    assert not window.waiting(1131.0, lambda: False)  # 181 s
    idle = RecoveryWindow(start=0.0, timeout_s=900.0, settle_s=180.0)
    assert idle.waiting(899.0, lambda: False)
    assert not idle.waiting(901.0, lambda: False)
    broken = RecoveryWindow(start=0.0, timeout_s=900.0)

    def unreachable() -> bool:
        raise TimeoutError("the API does not answer")

    assert not broken.waiting(901.0, unreachable)
    forever = RecoveryWindow(start=0.0, timeout_s=900.0)
    assert not forever.waiting(1800.0, lambda: True)  # twice the timeout at most


def test_a_faults_window_stays_open_while_another_fault_is_injected(tmp_path) -> None:
    """Soak run 16: a refresh's check expired during three broker outages in a row (Bronze
    down for seven minutes) and counted as not recovered. Another fault under injection keeps
    the window open (then it settles as usual); the fault's own injection does not."""
    from ingestctl.soak.runner import RecoveryWindow, Soak, SoakOptions

    soak = Soak(SoakOptions(home=tmp_path), echo=lambda _: None)

    def unreachable() -> bool:
        raise TimeoutError("the API does not answer")

    soak.injecting = {7}  # a broker outage under way
    window = RecoveryWindow(start=0.0, timeout_s=900.0, settle_s=180.0)
    assert window.waiting(950.0, soak.busy(5, unreachable))  # past its deadline, kept open
    soak.injecting = set()  # the outage is over
    assert window.waiting(1100.0, soak.busy(5, lambda: False))  # settling
    assert not window.waiting(1131.0, soak.busy(5, lambda: False))
    soak.injecting = {5}  # only itself
    alone = RecoveryWindow(start=0.0, timeout_s=900.0)
    assert not alone.waiting(901.0, soak.busy(5, lambda: False))


def test_an_always_on_fault_without_a_running_driver_is_not_injected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Soak run 17: back-to-back broker outages kept the always-on jobs waiting for Kafka for
    nine minutes; three kill_always_on_driver faults found no driver and counted as failed
    injections (not recovered). No driver to kill is a fault not injected; the outages' own
    checks judge whether the jobs came back."""
    from ingest_platform import supervisor
    from ingestctl.soak import faults
    from ingestctl.soak.plan import PlannedFault

    monkeypatch.setattr(faults, "DRIVER_WAIT_S", 0.2)
    monkeypatch.setattr(supervisor, "driver_pid", lambda job, settings=None: None)
    platform = type("Platform", (), {"settings": None})()
    fault = PlannedFault(number=3, at_s=0.0, kind="kill_always_on_driver", params={"job": "x"})
    with pytest.raises(faults.FaultNotInjectedError, match="x had no running driver"):
        faults.kill_always_on_driver(platform, fault)  # type: ignore[arg-type]


def test_an_airflow_component_fault_while_the_component_is_down_is_not_injected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Soak run 20, #57: a dag-processor killed by #55 a minute before was still down (the
    standalone restarts a killed component in 65-135 s); #57 gave up after 60 s and counted
    as a failed injection. No component to kill is a fault not injected; the earlier
    fault's own check judges whether it came back."""
    from ingestctl.soak import faults
    from ingestctl.soak.plan import PlannedFault

    monkeypatch.setattr(faults, "COMPONENT_WAIT_S", 0.2)
    standalone = type("Standalone", (), {"processes": lambda self: []})()
    platform = type("Platform", (), {"standalone": standalone, "killed_components": {}})()
    fault = PlannedFault(
        number=57,
        at_s=0.0,
        kind="kill_airflow_component",
        params={"component": "dag-processor"},
    )
    # Down, and no fault killed it: the injector's failure (the standalone did not restart it).
    with pytest.raises(TimeoutError):
        faults.kill_airflow_component(platform, fault)  # type: ignore[arg-type]
    platform.killed_components["dag-processor"] = time.monotonic() - 60  # #55, a minute ago
    with pytest.raises(faults.FaultNotInjectedError, match="earlier fault killed"):
        faults.kill_airflow_component(platform, fault)  # type: ignore[arg-type]


def test_a_hang_whose_driver_ended_before_it_was_stopped_is_not_injected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Soak run 20, #219: silver_refine's driver ended between being found and being
    stopped; the fault stopped nothing ("pids []") and was judged recovered at once."""
    import psutil

    from ingestctl.soak import faults
    from ingestctl.soak.plan import PlannedFault

    class Ended:
        pid = 4242

        def children(self, recursive: bool = False) -> list:
            raise psutil.NoSuchProcess(self.pid)

    monkeypatch.setattr(faults, "_wait_for_target", lambda find, platform, wait_s: [Ended()])
    monkeypatch.setattr(faults, "_run_running", lambda platform, job: None)
    fault = PlannedFault(
        number=219, at_s=0.0, kind="hang_scheduled_driver", params={"job": "silver_refine"}
    )
    with pytest.raises(faults.FaultNotInjectedError, match="ended before it could be stopped"):
        faults.hang_scheduled_driver(object(), fault)  # type: ignore[arg-type]


def test_a_killed_tasks_own_run_succeeding_through_its_retry_is_a_recovery() -> None:
    """Soak run 18: kill_scheduled_driver and kill_gate asked only for a run started after
    the kill, and counted four faults as not recovered whose own runs succeeded through the
    task's retry while other faults struck the runs after them."""
    from types import SimpleNamespace

    from ingestctl.soak.faults import _medallion_success_since

    since = datetime(2026, 12, 7, 14, 26, 15, tzinfo=UTC)
    runs = [
        {
            "dag_run_id": "manual_1419",
            "state": "success",
            "start_date": "2026-12-07T14:19:04+00:00",
        },
        {"dag_run_id": "sched_1415", "state": "failed", "start_date": "2026-12-07T14:30:00+00:00"},
    ]
    platform = SimpleNamespace(medallion_runs=lambda: runs)
    assert _medallion_success_since(platform, since, "manual_1419")() is None
    assert "no medallion_incremental run started after 14:26:15" in str(
        _medallion_success_since(platform, since)()
    )
    assert _medallion_success_since(platform, since, "sched_1415")() is not None  # failed
    runs.append({"dag_run_id": "later", "state": "success", "start_date": "2026-12-07T14:41:01Z"})
    assert _medallion_success_since(platform, since)() is None


def test_a_faults_window_past_its_cap_stays_open_while_a_later_fault_is_unrecovered(
    tmp_path: Path,
) -> None:
    """Soak run 18: #7, #14 and #131 were judged at their cap (twice the recovery timeout)
    while later driver kills and broker outages kept Bronze down; the platform recovered by
    itself minutes later. Past the cap a window waits for faults injected *after* it (then
    settles), never for earlier ones, so two windows cannot wait on each other."""
    from ingestctl.soak.runner import RecoveryWindow, Soak, SoakOptions

    soak = Soak(SoakOptions(home=tmp_path), echo=lambda _: None)
    soak.began = {7: 100.0, 9: 500.0, 3: 50.0}
    soak.recovering = {7, 9, 3}
    assert soak.held(7)  # #9 came later and is not recovered
    assert not soak.held(9)  # #7 and #3 came before it
    window = RecoveryWindow(start=0.0, timeout_s=900.0, settle_s=180.0)
    assert window.waiting(1850.0, lambda: True, lambda: soak.held(7))
    soak.recovering = {7, 3}  # #9 recovered
    assert window.waiting(2000.0, lambda: True, lambda: soak.held(7))  # settling
    assert not window.waiting(2031.0, lambda: True, lambda: soak.held(7))
    soak.injecting = {11}
    soak.began[11] = 900.0  # a later fault being injected holds it too
    assert soak.held(7)
    capped = RecoveryWindow(start=0.0, timeout_s=900.0, settle_s=180.0)
    assert not capped.waiting(1800.0, lambda: True, lambda: False)  # nothing later: the cap


def test_a_hung_drivers_own_run_succeeding_through_its_retry_is_a_recovery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The twin of kill_scheduled_driver's judgement: a hung driver's task ends at its
    execution_timeout and retries in the same run; that run's success is the recovery even
    when later runs were struck by other faults."""
    from types import SimpleNamespace

    from ingestctl.soak import faults
    from ingestctl.soak.plan import PlannedFault

    class Stopped:
        """A driver JVM stopped by the fault, then killed by on_kill: gone by the check."""

        pid = 4343

        def children(self, recursive: bool = False) -> list:
            return []

        def send_signal(self, signal: int) -> None:
            pass

        def is_running(self) -> bool:
            return False

    monkeypatch.setattr(faults, "_wait_for_target", lambda find, platform, timeout: [Stopped()])
    monkeypatch.setattr(faults, "_run_running", lambda platform, job: "struck")
    runs = [{"dag_run_id": "struck", "state": "success", "start_date": "2026-12-07T14:00:00Z"}]
    platform = SimpleNamespace(medallion_runs=lambda: runs, active_medallion_run=lambda: None)
    fault = PlannedFault(
        number=4, at_s=0.0, kind="hang_scheduled_driver", params={"job": "silver_refine"}
    )
    recovery = faults.hang_scheduled_driver(platform, fault)  # type: ignore[arg-type]
    assert recovery.check() is None
    runs[0]["state"] = "failed"
    assert "no medallion_incremental run started after" in str(recovery.check())


def test_the_restores_operator_waits_for_a_stop_queued_behind_other_supervisor_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Soak run 19 (#129): the stop run the restore needs queued behind four supervisor runs
    and a database outage and succeeded 640 s after it was triggered; the soak's operator
    gave up at 600 s and the restore counted as not recovered. It waits as long as a
    supervisor run takes under the soak (30 minutes) now."""
    from types import SimpleNamespace

    from ingest_core import checkpoints
    from ingestctl.soak import faults
    from ingestctl.soak.plan import PlannedFault

    monkeypatch.setattr(checkpoints, "backup", lambda job, settings: None)
    monkeypatch.setattr(
        checkpoints, "list_backups", lambda job, settings: [SimpleNamespace(backup_id="b1")]
    )
    monkeypatch.setattr(faults, "always_on_whole", lambda settings: None)
    took = {"streaming_supervisor": 640.0, "checkpoint_restore": 120.0}

    def wait_for_run(dag_id: str, run_id: str, timeout_s: float = 1800) -> str:
        if took[dag_id] > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {dag_id}")
        return "success"

    platform = SimpleNamespace(
        settings=None, trigger=lambda dag_id, conf=None: f"run-{dag_id}", wait_for_run=wait_for_run
    )
    fault = PlannedFault(number=129, at_s=0.0, kind="checkpoint_restore", params={})
    recovery = faults.checkpoint_restore(platform, fault)  # type: ignore[arg-type]
    assert "restored b1 (success)" in recovery.detail
    assert recovery.check() is None


def test_marking_a_task_failed_that_is_already_failed_is_the_fault_injected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Soak run 19 (#154): the PATCH that marks a running task failed was retried through an
    outage after Airflow had applied it; every retry got 409 "already in failed state" until
    the injector gave up and the fault counted as not recovered. That 409 is the fault done;
    any other error is still one."""
    from types import SimpleNamespace

    from ingestctl.airflow_runtime import AirflowError
    from ingestctl.soak import faults
    from ingestctl.soak.plan import PlannedFault

    monkeypatch.setattr(
        faults, "_wait_for_target", lambda find, platform, timeout: ("run1", {"task_id": "x"})
    )
    answers = [AirflowError('PATCH /p: 409 {"detail":"Task id x is already in failed state"}')]

    class Client:
        def _call(self, method: str, path: str, **kwargs: object) -> None:
            raise answers[0]

    def api(call, timeout_s: float = 300):  # the platform's: no retry needed here
        return call(Client())

    running = ["run2"]
    platform = SimpleNamespace(api=api, active_medallion_run=lambda: running[0])
    fault = PlannedFault(number=154, at_s=0.0, kind="mark_task_failed", params={})
    recovery = faults.mark_task_failed(platform, fault)  # type: ignore[arg-type]
    assert recovery.detail.startswith("marked x of run1 failed (it was already failed")
    # Soak run 19: a medallion run still going keeps the window open (it may recover it).
    assert recovery.in_progress()
    running[0] = None
    assert not recovery.in_progress()
    answers[0] = AirflowError("PATCH /p: 404 not found")
    with pytest.raises(AirflowError, match="404"):
        faults.mark_task_failed(platform, fault)  # type: ignore[arg-type]


def test_restores_run_one_at_a_time_as_one_operator_does_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Soak run 19 (#225): three restore faults overlapped; one's closing start restarted the
    job while another's restore waited, and that restore was refused (the job was running).
    Each restore's stop, restore and start now run before the next restore's stop."""
    import threading
    import time as time_module
    from types import SimpleNamespace

    from ingest_core import checkpoints
    from ingestctl.soak import faults
    from ingestctl.soak.plan import PlannedFault

    monkeypatch.setattr(checkpoints, "backup", lambda job, settings: None)
    monkeypatch.setattr(
        checkpoints, "list_backups", lambda job, settings: [SimpleNamespace(backup_id="b1")]
    )
    steps: list[str] = []

    def trigger(dag_id: str, conf: dict | None = None) -> str:
        steps.append((conf or {}).get("action", "restore"))
        return dag_id

    def wait_for_run(dag_id: str, run_id: str, timeout_s: float = 1800) -> str:
        time_module.sleep(0.05)
        return "success"

    platform = SimpleNamespace(settings=None, trigger=trigger, wait_for_run=wait_for_run)
    fault = PlannedFault(number=1, at_s=0.0, kind="checkpoint_restore", params={})
    threads = [
        threading.Thread(target=faults.checkpoint_restore, args=(platform, fault)) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert steps == ["stop", "restore", "start"] * 3


def test_maintenance_and_refreshes_are_triggered_only_when_the_last_one_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Soak run 19: 13 table_maintenance triggers in 100 minutes queued behind one another
    (one at a time, 5-13 minutes each at load) and four were judged "not finished" after up
    to 75 minutes. Like an operator, the soak waits for the previous run to end, and does
    not inject the fault when it does not end in time."""
    from types import SimpleNamespace

    from ingestctl.soak import faults
    from ingestctl.soak.plan import PlannedFault

    monkeypatch.setattr(faults, "IDLE_WAIT_S", 0.5)
    monkeypatch.setattr(faults, "IDLE_POLL_S", 0.1)
    runs = [{"dag_run_id": "m1", "state": "queued"}]
    triggered: list[str] = []
    platform = SimpleNamespace(
        api=lambda call, timeout_s=300: call(SimpleNamespace(runs=lambda dag_id: runs)),
        trigger=lambda dag_id, conf=None: triggered.append(dag_id) or "m2",
        wait_for_run=lambda dag_id, run_id, timeout_s=1800: "success",
    )
    platform.active_run = lambda dag_id: faults.SoakPlatform.active_run(platform, dag_id)  # type: ignore[arg-type]
    for kind in ("table_maintenance", "layer_full_refresh"):
        fault = PlannedFault(number=1, at_s=0.0, kind=kind, params={})
        with pytest.raises(faults.FaultNotInjectedError, match="still queued or running"):
            faults.INJECTORS[kind](platform, fault)  # type: ignore[arg-type]
    assert triggered == []
    runs[0]["state"] = "success"
    faults.table_maintenance(platform, fault)  # type: ignore[arg-type]
    assert triggered == ["table_maintenance"]


def test_a_triggered_runs_fault_waits_for_the_run_however_long_it_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Soak run 19 (#38): a table_maintenance run queued for 83 minutes succeeded after the
    soak's wait for it had given up at 3,600 s, and the fault stayed "not finished"."""
    import time as time_module
    from types import SimpleNamespace

    from ingestctl.soak import faults

    monkeypatch.setattr(faults, "always_on_whole", lambda settings: None)
    answers: list[object] = [TimeoutError("timed out after 3600 s"), "success"]

    def wait_for_run(dag_id: str, run_id: str, timeout_s: float = 1800) -> str:
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    platform = SimpleNamespace(
        settings=None, trigger=lambda dag_id, conf=None: "m1", wait_for_run=wait_for_run
    )
    recovery = faults._triggered(platform, "table_maintenance")  # type: ignore[arg-type]
    deadline = time_module.monotonic() + 5
    while recovery.in_progress() and time_module.monotonic() < deadline:
        time_module.sleep(0.05)
    assert not recovery.in_progress()
    assert recovery.check() is None


def test_a_held_gate_increment_and_a_remedy_by_hand_fail_the_verdict() -> None:
    """Soak run 20: a Silver gate failed a legitimate 69-row increment for 25 minutes until
    it was accepted by hand, and the verdict had no check that could see it (the medallion
    faults found no task to strike and counted as not injected)."""
    band = json.dumps(
        [
            {
                "expectation": "expect_table_row_count_to_be_between",
                "column": None,
                "observed": 69,
                "expected": {"min_value": 85, "max_value": 34061},
            }
        ]
    )

    def result(run_id: str, status: str, versions: tuple[int, int], **extra: object) -> dict:
        row = {
            "run_id": run_id,
            "table": "silver_customer_activity",
            "from_version": versions[0],
            "to_version": versions[1],
            "rows": 69 if versions == (7, 7) else 1703,
            "status": status,
            "failed_expectations": "[]",
            "resolved_by": None,
            "reason": None,
            "validated_at": datetime(2026, 12, 7, 20, 18 + len(run_id)),
        }
        return {**row, **extra}

    healthy = pd.DataFrame(
        [
            result("scheduled__1", "passed", (1, 2)),
            result("full_refresh__1", "passed", (0, 1), resolved_by="layer_full_refresh"),
        ]
    )
    none = pd.DataFrame()
    assert [c.ok for c in verdict.gate_checks(healthy, none)] == [True, True]
    assert [c.ok for c in verdict.gate_checks(none, none)] == [True, True]

    held = pd.concat(
        [
            healthy,
            pd.DataFrame(
                [
                    *(
                        result(f"manual__{n}", "failed", (7, 7), failed_expectations=band)
                        for n in range(3)
                    ),
                    # validated again after Silver moved on: the same held increment
                    result("manual__4_later", "failed", (7, 8), failed_expectations=band),
                    result(
                        "accept__20261207T204330",
                        "accepted",
                        (7, 7),
                        failed_expectations=band,
                        resolved_by="soak-operator",
                        reason="small increment",
                    ),
                ]
            ),
        ]
    )
    holds = pd.DataFrame(
        [
            {
                "table": "silver_payments",
                "event_id": f"e{n}",
                "reason": "amounts in cents",
                "run_id": "quarantine__20261207T210000",
                "held_by": "ana",
            }
            for n in range(2)
        ]
    )
    # ops_gate_results as delta-rs reads it: in no particular order
    increments, remedies = verdict.gate_checks(held.iloc[::-1], holds)
    assert increments.failures == 1  # one increment, failed four times
    assert increments.examples == (
        "silver_customer_activity versions 7..8: "
        "expect_table_row_count_to_be_between: observed 69, expected 85..34061",
    )
    assert remedies.failures == 2  # the accept and the quarantine
    assert (
        "accepted silver_customer_activity versions 7..7 by soak-operator" in (remedies.examples[0])
    )
    assert remedies.examples[1] == (
        "quarantined 2 rows of silver_payments (quarantine__20261207T210000) by ana: "
        "amounts in cents"
    )
