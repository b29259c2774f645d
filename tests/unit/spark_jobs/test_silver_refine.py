"""silver_refine's watermark bookkeeping (pure Python): per-partition maxima, per-topic
watermarks combined by the minimum, never moving back."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from spark_jobs.silver_refine import Watermarks, advance_watermarks, id_horizon

pytestmark = pytest.mark.unit
DELAY = timedelta(minutes=30)
T = datetime(2010, 12, 1, 12, 0)


def test_an_outlier_on_one_partition_moves_no_topic_watermark() -> None:
    state = advance_watermarks(
        Watermarks(),
        {("orders", 0): T, ("orders", 1): T, ("payments", 0): T},
        DELAY,
    )
    after = advance_watermarks(state, {("orders", 1): T + timedelta(days=3)}, DELAY)
    assert after.topics == {"orders": T - DELAY, "payments": T - DELAY}
    assert after.partition_max[("orders", 1)] == T + timedelta(days=3)
    assert after.max_event_time == T + timedelta(days=3)
    assert after.combined == T - DELAY


def test_topic_watermark_is_the_slowest_partition_and_the_run_takes_the_slowest_topic() -> None:
    state = advance_watermarks(
        Watermarks(),
        {
            ("orders", 0): T + timedelta(hours=2),
            ("orders", 1): T + timedelta(hours=1),
            ("refunds", 0): T,
        },
        DELAY,
    )
    assert state.for_topic("orders") == T + timedelta(hours=1) - DELAY
    assert state.for_topic("refunds") == T - DELAY
    assert state.for_topic("payments") is None  # nothing seen: nothing is late
    assert state.combined == T - DELAY


def test_a_watermark_never_moves_back() -> None:
    state = advance_watermarks(Watermarks(), {("orders", 0): T}, DELAY)
    # A partition seen for the first time, with older events, lowers the minimum of the
    # maxima but not the watermark already in force.
    later = advance_watermarks(state, {("orders", 2): T - timedelta(hours=5)}, DELAY)
    assert later.for_topic("orders") == T - DELAY
    assert state.partition_max == {("orders", 0): T}  # the earlier state is not changed


def test_a_single_watermark_from_before_the_upgrade_stands_for_every_topic() -> None:
    legacy = Watermarks(fallback=T)
    assert legacy.for_topic("orders") == T
    assert legacy.combined == T
    state = advance_watermarks(legacy, {("orders", 0): T + timedelta(hours=1)}, DELAY)
    assert state.for_topic("orders") == T + timedelta(hours=1) - DELAY
    assert state.for_topic("payments") == T


def test_the_id_history_is_read_back_to_keep_before_the_lowest_watermark_of_the_batch() -> None:
    keep = timedelta(days=30)
    marks = {"orders": T, "payments": T + timedelta(days=3)}
    assert id_horizon(marks, keep) == T - keep
    # A topic with no watermark yet takes nothing for late: every id must be read.
    assert id_horizon({**marks, "refunds": None}, keep) is None
    assert id_horizon({}, keep) is None


def test_decisions_fold_into_balanced_counts_and_the_kept_maxima() -> None:
    """The summary stage: one row per (topic, partition, decision) becomes the batch's
    counts; only kept rows move a partition's maximum (a late or duplicate row's event
    time never advances a watermark)."""
    from types import SimpleNamespace

    from spark_jobs.silver_refine import ReconciliationError, count_decisions

    def row(topic: str, partition: int, decision: str, n: int, top: datetime, conflicts: int = 0):
        return SimpleNamespace(
            _contract_topic=topic, partition=partition, _decision=decision, n=n, top=top,
            conflicts=conflicts,
        )  # fmt: skip

    later = T + timedelta(hours=5)
    summary = [
        row("orders", 0, "kept", 7, T),
        row("orders", 1, "kept", 3, T + timedelta(minutes=1)),
        row("orders", 1, "duplicate", 2, later, conflicts=1),
        row("payments", 0, "late", 4, later),
        row("payments", 0, "quarantined", 5, later),
        row(None, 2, "quarantined", 1, None),  # a topic without contract
    ]
    counts, batch_max = count_decisions(summary, read=22)
    assert (counts.written, counts.duplicates, counts.conflicts) == (10, 2, 1)
    assert (counts.late, counts.quarantined) == (4, 6)
    assert batch_max == {("orders", 0): T, ("orders", 1): T + timedelta(minutes=1)}
    counts.check(batch_id=3)
    unbalanced, _ = count_decisions(summary, read=23)
    with pytest.raises(ReconciliationError, match="read 23 records but accounted for 22"):
        unbalanced.check(batch_id=3)
