"""Kafka -> Bronze -> Silver -> Gold on the real broker, real Spark and real Delta, with
small inputs whose right answers are worked out by hand."""

from __future__ import annotations

import pytest

from ingest_core.quarantine import RULES_BY_NAME
from ingest_core.settings import get_settings
from tests.integration.medallion import (
    Platform,
    activity,
    delete_topic,
    payment,
    values_of,
    windows,
)
from tests.unit.spark_jobs.transforms.test_silver import CASES

pytestmark = pytest.mark.integration


def test_every_quarantine_reason_end_to_end_and_counts_balance(platform: Platform) -> None:
    platform.send("payments", [value for _, value in CASES])
    platform.send("payments", [payment("ok-1", "2026-01-01T10:00:00Z")])
    platform.bronze()
    platform.silver()
    quarantine = platform.read("silver_quarantine")
    # CASES name the rule each message triggers first; the table records its reason.
    assert sorted(quarantine.reason) == sorted(RULES_BY_NAME[rule].reason for rule, _ in CASES)
    assert list(platform.read("silver_payments").event_id) == ["ok-1"]
    recon = platform.read("silver_reconciliation")
    assert recon.records_read.sum() == len(CASES) + 1
    assert (
        recon.records_written
        + recon.records_quarantined
        + recon.duplicates_dropped
        + recon.late_events
        == recon.records_read
    ).all()


PAYMENTS = [
    payment("p1", "2026-01-01T10:01:00Z", 10.0),
    payment("p2", "2026-01-01T10:04:00Z", 20.0),
    payment("p3", "2026-01-01T10:06:00Z", 5.0),
    payment("p4", "2026-01-01T10:30:00Z", 1.0),  # moves the watermark past both windows
]
EXPECTED_5M = {("10:00", "BRL"): (2, 30.0), ("10:05", "BRL"): (1, 5.0)}


def test_windows_in_one_run(platform: Platform) -> None:
    platform.send("payments", PAYMENTS)
    platform.all_layers()
    assert windows(platform.read("gold_payment_totals_5m")) == EXPECTED_5M
    sliding = windows(platform.read("gold_payment_totals_10m_sliding"))
    assert sliding == {
        ("09:55", "BRL"): (2, 30.0),
        ("10:00", "BRL"): (3, 35.0),
        ("10:05", "BRL"): (1, 5.0),
    }
    version = platform.version("gold_payment_totals_5m")
    platform.all_layers()  # nothing new: nothing changes
    assert platform.version("gold_payment_totals_5m") == version


def test_windows_spread_over_runs_carry_the_watermark(platform: Platform) -> None:
    for batch in (PAYMENTS[:1], PAYMENTS[1:3], PAYMENTS[3:]):
        platform.send("payments", batch)
        platform.all_layers()
    assert windows(platform.read("gold_payment_totals_5m")) == EXPECTED_5M  # each exactly once


def test_session_windows(platform: Platform) -> None:
    platform.send(
        "customer_activity",
        [
            activity("a1", "2026-01-01T10:00:00Z", "c1"),
            activity("a2", "2026-01-01T10:05:00Z", "c1", "checkout"),
            activity("a3", "2026-01-01T10:30:00Z", "c1"),
            activity("a4", "2026-01-01T11:30:00Z", "c2"),  # moves the watermark past c1's sessions
        ],
    )
    platform.all_layers()
    sessions = platform.read("gold_customer_sessions")
    got = sorted(
        (
            r.customer_id,
            r.session_start.strftime("%H:%M"),
            r.session_end.strftime("%H:%M"),
            int(r.event_count),
            bool(r.reached_checkout),
        )
        for r in sessions.itertuples()
    )
    assert got == [("c1", "10:00", "10:15", 2, True), ("c1", "10:30", "10:40", 1, False)]


def test_late_event_lands_in_late_events_and_corrections_update_gold(platform: Platform) -> None:
    platform.send(
        "payments",
        [payment("p1", "2026-01-01T10:01:00Z", 10.0), payment("p9", "2026-01-01T10:50:00Z", 1.0)],
    )
    platform.all_layers()
    assert windows(platform.read("gold_payment_totals_5m"))[("10:00", "BRL")] == (1, 10.0)
    platform.send("payments", [payment("late", "2026-01-01T10:02:00Z", 7.0)])
    platform.all_layers()
    late = platform.read("silver_late_events")
    assert list(late.event_id) == ["late"]
    assert late.lateness_seconds.iloc[0] == 18 * 60  # watermark 10:20 - event 10:02
    assert "late" not in set(platform.read("silver_payments").event_id)
    assert windows(platform.read("gold_payment_totals_5m"))[("10:00", "BRL")] == (1, 10.0)

    changed = platform.correct_late()
    assert changed["gold_payment_totals_5m"] == 1
    assert windows(platform.read("gold_payment_totals_5m"))[("10:00", "BRL")] == (2, 17.0)
    version = platform.version("gold_payment_totals_5m")
    assert platform.correct_late()["gold_payment_totals_5m"] == 0  # idempotent
    assert platform.version("gold_payment_totals_5m") == version


def test_duplicate_resent_after_restart_is_dropped_once_and_counted(platform: Platform) -> None:
    platform.send("payments", [payment("d1", "2026-01-01T10:01:00Z", 10.0)])
    platform.bronze()
    platform.silver()
    platform.send(
        "payments",
        [
            payment("d1", "2026-01-01T10:01:00Z", 10.0),  # the same event, re-sent
            payment("d1", "2026-01-01T10:01:00Z", 99.0),  # same id, different payload
        ],
    )
    platform.bronze()
    platform.silver()
    silver = platform.read("silver_payments")
    assert list(silver.event_id) == ["d1"]
    assert float(silver.amount.iloc[0]) == 10.0  # the first one is kept
    recon = platform.read("silver_reconciliation")
    assert recon.duplicates_dropped.sum() == 2
    conflicts = platform.read("silver_dedup_conflicts")
    assert len(conflicts) == 1
    assert conflicts.event_id.iloc[0] == "d1"


def test_customer_added_between_runs_is_seen_by_the_next_run(platform: Platform) -> None:
    from ingestctl.replay.runner import write_dimension

    landing = get_settings().storage.landing_path / "customers"
    write_dimension(
        [{"customer_id": "c1", "city": "sorocaba", "state": "SP", "country": "BR"}], landing, "test"
    )
    platform.send("payments", [payment("e1", "2026-01-01T10:00:00Z", customer_id="c2")])
    platform.bronze()
    platform.silver()
    write_dimension(
        [
            {"customer_id": "c1", "city": "sorocaba", "state": "SP", "country": "BR"},
            {"customer_id": "c2", "city": "recife", "state": "PE", "country": "BR"},
        ],
        landing,
        "test",
    )
    platform.send("payments", [payment("e2", "2026-01-01T10:01:00Z", customer_id="c2")])
    platform.bronze()
    platform.silver()
    states = dict(platform.read("silver_payments")[["event_id", "customer_state"]].values)
    # Enrichment happens when an event is refined: e1 was refined before c2 was known and
    # keeps a null state (Silver is append-only); e2 sees the customer loaded before its run.
    assert states == {"e1": None, "e2": "PE"}


def test_lost_kafka_data_fails_clearly_unless_accepted_and_recorded(platform: Platform) -> None:

    from ingest_core.topics import ensure_topics
    from spark_jobs import bronze_ingest
    from tests.integration.medallion import AVAILABLE_NOW

    platform.send("refunds", [{"event_id": f"r{i}"} for i in range(6)])
    platform.bronze()
    topic = platform.prefix + "refunds"
    delete_topic(platform.bootstrap, topic, timeout_s=30)
    ensure_topics(platform.bootstrap, [topic], partitions=3)  # recreated: offsets restart
    platform.send("refunds", [{"event_id": "after"}])

    with pytest.raises(bronze_ingest.DataLossError, match=rf"{topic}\[\d\] offsets \d+\.\.\?"):
        platform.bronze()
    query = bronze_ingest.start(platform.spark, trigger=AVAILABLE_NOW, accept_data_loss=True)
    query.awaitTermination()
    gaps = platform.read("bronze_kafka_gaps")
    assert set(gaps.topic) == {topic}
    assert gaps.reason.str.startswith("topic recreated").all()
    assert gaps.last_missing_offset.isna().all()  # the old topic's end is unknown
    # The record sent to the new topic before the restart is read, not skipped...
    bronze = platform.read("bronze_events")
    assert len(bronze) == 7
    (old_id,) = set(gaps.topic_id)
    assert values_of(bronze[bronze.topic_id != old_id]) == [{"event_id": "after"}]
    # ...and the ingest goes on from there.
    platform.send("refunds", [{"event_id": "later"}])
    platform.bronze()
    assert len(platform.read("bronze_events")) == 8


def test_resent_event_with_a_newer_time_still_meets_its_original(platform: Platform) -> None:
    platform.send(
        "payments",
        [payment("orig", "2026-01-01T10:00:00Z", 5.0), payment("p9", "2026-01-01T11:30:00Z")],
    )
    platform.bronze()
    platform.silver()  # watermark now 11:00: the original's time is behind it
    platform.send("payments", [payment("orig", "2026-01-01T12:01:00Z", 1.0)])
    platform.bronze()
    platform.silver()
    silver = platform.read("silver_payments")
    assert sorted(silver.event_id) == ["orig", "p9"]
    assert float(silver[silver.event_id == "orig"].amount.iloc[0]) == 5.0
    assert list(platform.read("silver_dedup_conflicts").event_id) == ["orig"]


def test_reset_silver_checkpoint_does_not_write_silver_twice(platform: Platform) -> None:
    import shutil

    from ingest_core.catalog import get_catalog

    platform.send("payments", [payment(f"r{i}", f"2026-01-01T10:{i:02d}:00Z") for i in range(8)])
    platform.send("payments", [b"not json"])
    platform.bronze()
    platform.silver()
    shutil.rmtree(get_catalog().job("silver_refine").checkpoint())  # an operator's reset
    platform.silver()  # a new query re-reads all of Bronze
    assert sorted(platform.read("silver_payments").event_id) == [f"r{i}" for i in range(8)]
    recon = platform.read("silver_reconciliation")
    assert recon.query_id.nunique() == 2
    assert (
        recon.records_written
        + recon.records_quarantined
        + recon.duplicates_dropped
        + recon.late_events
        == recon.records_read
    ).all()
    assert sorted(recon.groupby("query_id").duplicates_dropped.sum()) == [0, 8]
    quarantine = platform.read("silver_quarantine")
    assert len(quarantine) == 1  # re-read, counted, not written twice
