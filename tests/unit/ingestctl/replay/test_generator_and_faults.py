"""The synthetic generator's determinism and the fault injector's accounting."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from ingestctl.producer import encode_value
from ingestctl.replay.faults import (
    MALFORMED_REASONS,
    DelayDistribution,
    FaultConfig,
    FaultCounts,
    inject,
)
from ingestctl.replay.generator import GeneratedEvents, generate_events
from ingestctl.replay.model import SourceEvent

pytestmark = pytest.mark.unit
START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _stream(seed: int, count: int = 2000) -> list[tuple]:
    return [
        (e.topic, e.key, encode_value(e.to_value()))
        for e in generate_events(count, seed=seed, start=START)
    ]


def test_same_seed_same_stream_other_seed_other_stream() -> None:
    assert _stream(7) == _stream(7)
    assert _stream(7) != _stream(8)


def test_stream_is_in_event_time_order_and_has_every_event_type() -> None:
    events = list(generate_events(20000, seed=1, start=START, rate=100))
    times = [e.event_time for e in events]
    assert times == sorted(times)
    assert times[0] >= START
    assert set(Counter(e.event_type for e in events)) == {
        "customer_activity",
        "order_placed",
        "payment",
        "refund",
    }
    sessions = Counter(
        e.payload.get("session_id") for e in events if e.topic == "customer_activity"
    )
    assert max(sessions.values()) > 1  # activity comes in sessions


def _inject(config: FaultConfig, count: int = 3000):
    counts = FaultCounts()
    events = list(generate_events(count, seed=3, start=START))
    return events, list(inject(events, config, counts)), counts


def test_fault_counts_match_the_messages_produced() -> None:
    config = FaultConfig(
        duplicate_rate=0.05,
        late_rate=0.05,
        out_of_order_rate=0.05,
        malformed_rate=0.09,
        drift_rate=0.04,
        oversize_count=2,
        seed=11,
    )
    events, scheduled, counts = _inject(config)
    tags = Counter(s.message.tag for s in scheduled)
    assert tags["event"] == len(events)  # nothing removed
    assert tags["duplicate"] == counts.duplicates > 0
    assert tags["oversize"] == counts.oversize == 2
    malformed = Counter(t.split(":", 1)[1] for t in tags if t.startswith("malformed:"))
    malformed = Counter({r: tags[f"malformed:{r}"] for r in malformed})
    assert malformed == counts.malformed
    assert set(malformed) == set(MALFORMED_REASONS)  # every quarantine reason is exercised
    assert counts.late > 0
    assert counts.out_of_order > 0
    assert counts.drift_extra_field + counts.drift_missing_optional_field > 0
    sent_ids = [s.message.value["event_id"] for s in scheduled if s.message.tag == "event"]
    assert sorted(sent_ids) == sorted(e.event_id for e in events)
    send_times = [s.send_time for s in scheduled]
    assert send_times == sorted(send_times)


def test_late_events_arrive_after_the_stream_moved_past_their_delay() -> None:
    config = FaultConfig(late_rate=0.05, late_delay=DelayDistribution.parse("fixed:20"), seed=2)
    events, scheduled, counts = _inject(config)
    assert counts.late > 10
    position = {s.message.value["event_id"]: i for i, s in enumerate(scheduled)}
    by_id = {e.event_id: e for e in events}
    late = set(counts.late_event_ids)
    for late_id in late:
        due = by_id[late_id].event_time + timedelta(seconds=20)
        # Held back: every on-time event that happened before its due time was sent first.
        earlier = [e.event_id for e in events if e.event_time < due and e.event_id not in late]
        assert all(position[i] < position[late_id] for i in earlier)
        # ...and it really moved: some event that happened after it was sent before it.
        own = by_id[late_id].event_time
        assert any(
            by_id[s.message.value["event_id"]].event_time > own
            for s in scheduled[: position[late_id]]
        )


def test_malformed_records_are_what_their_reason_says() -> None:
    _, scheduled, _ = _inject(
        FaultConfig(malformed_rate=1.0, seed=4), count=len(MALFORMED_REASONS) * 3
    )
    for item in scheduled:
        tag, value = item.message.tag, encode_value(item.message.value)
        if not tag.startswith("malformed:"):
            continue
        reason = tag.split(":", 1)[1]
        if reason == "invalid_utf8":
            with pytest.raises(UnicodeDecodeError):
                value.decode("utf-8")
        elif reason == "malformed_json":
            with pytest.raises(json.JSONDecodeError):
                json.loads(value)
        elif reason == "not_an_object":
            assert not isinstance(json.loads(value), dict)
        elif reason == "empty_value":
            assert not value
        elif reason == "unsupported_schema_version":
            assert json.loads(value)["schema_version"] == 99


@pytest.mark.parametrize("spec", ["exp", "uniform:5", "fixed:-1", "normal:3:4", "uniform:9:1"])
def test_bad_delay_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="late delay"):
        DelayDistribution.parse(spec)


def test_rates_outside_0_1_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate_rate must be between 0 and 1"):
        FaultConfig(duplicate_rate=1.5)


def test_generated_events_are_the_generators_and_made_as_they_are_read() -> None:
    events = GeneratedEvents(300, seed=5, start=START)
    assert len(events) == 300
    assert list(events) == list(generate_events(300, seed=5, start=START)) == list(events)

    made = 0

    class Counted:
        """A million generated events that count how many were made."""

        def __len__(self) -> int:
            return 1_000_000

        def __iter__(self) -> Iterator[SourceEvent]:
            nonlocal made
            for event in GeneratedEvents(1_000_000, seed=5, start=START):
                made += 1
                yield event

    scheduled = inject(Counted(), FaultConfig(oversize_count=2), FaultCounts())
    first = [next(scheduled) for _ in range(10)]
    assert len(first) == 10
    assert made < 100  # not the million: inject reads a sized source as it goes


def test_oversize_count_is_honoured_even_with_few_events() -> None:
    _, scheduled, counts = _inject(FaultConfig(oversize_count=5), count=2)
    assert counts.oversize == 5
    assert sum(s.message.tag == "oversize" for s in scheduled) == 5


def test_companion_events_give_olist_customers_sessions_and_refunds(olist_path) -> None:
    """Olist has no clickstream and no refunds: the demo adds both for its own customers.
    Checked with pandas against the source events."""
    import pandas as pd

    from ingestctl.replay import olist
    from ingestctl.replay.generator import REFUND_RATE, companion_events

    source = olist.read_events(olist_path)
    made = companion_events(source, seed=7)
    assert made == companion_events(source, seed=7)  # deterministic, ids included
    assert [e.event_time for e in made] == sorted(e.event_time for e in made)
    frame = pd.DataFrame([{"type": e.event_type, "id": e.event_id, **e.payload} for e in made])
    assert set(frame["type"]) == {"customer_activity", "refund"}
    assert frame["id"].is_unique
    orders = pd.DataFrame([e.payload for e in source if e.event_type == "order_placed"])
    payments = pd.DataFrame([e.payload for e in source if e.event_type == "payment"])
    activity = frame[frame["type"] == "customer_activity"]
    # One session per placed order, of that order's customer.
    assert activity["session_id"].nunique() == orders["order_id"].nunique()
    assert set(activity["customer_id"]) <= set(orders["customer_id"])
    refunds = frame[frame["type"] == "refund"]
    authorized = payments[payments["status"] == "authorized"]
    assert refunds["order_id"].is_unique
    assert set(refunds["order_id"]) <= set(authorized["order_id"])
    share = len(refunds) / authorized["order_id"].nunique()
    assert 0.3 * REFUND_RATE < share < 3 * REFUND_RATE
    first_paid = authorized.drop_duplicates("order_id").set_index("order_id")["amount"]
    assert (refunds.set_index("order_id")["amount"] == first_paid[refunds["order_id"]]).all()


def test_late_lot_is_behind_the_stream_and_has_one_changed_duplicate() -> None:
    from ingestctl.demo import LATE_ORDERS, late_lot

    stream = list(generate_events(3000, seed=3, start=START, rate=0.5))  # 100 minutes
    late = late_lot(stream)
    by_id = {e.event_id: e for e in stream}
    (again,) = [e for e in late if e.event_id in by_id]  # the one reused id
    original = by_id[again.event_id]
    assert original.event_type == again.event_type == "payment"
    assert original.event_time == max(e.event_time for e in stream if e.event_type == "payment")
    assert again.payload["amount"] == pytest.approx(original.payload["amount"] + 0.01)
    fresh = [e for e in late if e is not again]
    newest = max(e.event_time for e in stream)
    assert all(newest - e.event_time > timedelta(minutes=30) for e in fresh)
    kinds = Counter(e.event_type for e in fresh)
    assert kinds["order_placed"] == kinds["payment"] == LATE_ORDERS
    assert kinds["customer_activity"] >= LATE_ORDERS  # at least one page view each
    customers = {e.payload["customer_id"] for e in stream}
    assert {e.payload["customer_id"] for e in fresh} <= customers
    orders = {e.payload["order_id"] for e in fresh if e.event_type == "order_placed"}
    assert orders == {e.payload["order_id"] for e in fresh if e.event_type == "payment"}
    assert not orders & {e.payload.get("order_id") for e in stream}
    with pytest.raises(ValueError, match="no paid orders"):
        late_lot([])
