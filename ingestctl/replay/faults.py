"""Fault injection: duplicates, late and out-of-order arrival, malformed records, schema drift
and oversize messages, each counted so that tests can reconcile the tables against them.

Faults never remove a source event: a late or out-of-order event is *moved* in the send
order, a duplicate is an extra copy (same ``event_id``, same payload, as a producer retry
would send), and malformed and oversize records are *extra* messages. Schema drift changes
an event in place (an extra field, or a missing optional field) and it stays a valid event.
"""

from __future__ import annotations

import heapq
import json
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sized
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ingest_core.contracts import contract_for
from ingestctl.producer import Message
from ingestctl.replay.model import SourceEvent

#: Quarantine reasons of the Silver job, in the order malformed records cycle through them.
#: Each record is one that Silver quarantines with exactly that reason (first match in
#: :mod:`spark_jobs.transforms.silver`'s order), whatever the replay's time shift or pace.
MALFORMED_REASONS = (
    "invalid_utf8",
    "malformed_json",
    "not_an_object",
    "empty_value",
    "missing_required_field",
    "type_mismatch",
    "unknown_event_type",
    "unsupported_schema_version",
    "invalid_value",
    "duplicate_json_key",
    "control_character",
    "event_time_skew",
)
#: How far ahead of its source event an ``event_time_skew`` record is.
SKEW_AHEAD = timedelta(days=3)
#: An optional field per topic, removed by "missing optional field" drift.
_OPTIONAL_BY_TOPIC = {
    "orders": "items",
    "payments": "installments",
    "refunds": "reason",
    "customer_activity": "url",
}
#: Size of an oversize message: above the broker's 1 MB ``message.max.bytes``.
OVERSIZE_BYTES = 2 * 1024 * 1024
_DELAY = re.compile(r"^(exp|uniform|fixed):(\d+(?:\.\d+)?)(?::(\d+(?:\.\d+)?))?$")


@dataclass(frozen=True)
class DelayDistribution:
    """How late a late event is, in seconds of source time.

    Spec strings: ``exp:MEAN`` (exponential), ``uniform:LOW:HIGH``, ``fixed:SECONDS``.
    """

    kind: str
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, spec: str) -> DelayDistribution:
        """:raises ValueError: a malformed spec, with the accepted forms in the message."""
        match = _DELAY.match(spec.strip())
        if not match or (match.group(1) == "uniform") != (match.group(3) is not None):
            raise ValueError(
                f"late delay {spec!r} is not exp:MEAN, uniform:LOW:HIGH or fixed:SECONDS "
                "(seconds, e.g. exp:600)"
            )
        low, high = float(match.group(2)), float(match.group(3) or 0)
        if match.group(1) == "uniform" and high < low:
            raise ValueError(f"late delay {spec!r}: HIGH must be >= LOW")
        return cls(match.group(1), low, high)

    def sample(self, rng: random.Random) -> float:
        """One delay in seconds."""
        if self.kind == "exp":
            return rng.expovariate(1 / self.a) if self.a > 0 else 0.0
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b)
        return self.a


@dataclass(frozen=True)
class FaultConfig:
    """Rates are probabilities per source event, in [0, 1].

    :param duplicate_rate: resend an event (same id and payload) a little later.
    :param late_rate: hold an event back by a delay drawn from ``late_delay``.
    :param out_of_order_rate: send an event after the one that follows it.
    :param malformed_rate: add a malformed record next to the event (reasons cycle through
        :data:`MALFORMED_REASONS`).
    :param drift_rate: change the event's schema: an extra field, or a missing optional field
        (alternating).
    :param oversize_count: extra messages of :data:`OVERSIZE_BYTES` (the broker rejects them).
    :param seed: random seed of the injection.
    """

    duplicate_rate: float = 0.0
    late_rate: float = 0.0
    late_delay: DelayDistribution = DelayDistribution("exp", 600.0)
    out_of_order_rate: float = 0.0
    malformed_rate: float = 0.0
    drift_rate: float = 0.0
    oversize_count: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in (
            "duplicate_rate",
            "late_rate",
            "out_of_order_rate",
            "malformed_rate",
            "drift_rate",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        if self.oversize_count < 0:
            raise ValueError(f"oversize_count must be >= 0, got {self.oversize_count}")


@dataclass
class FaultCounts:
    """What was injected: source events and each kind of fault."""

    source_events: Counter[str] = field(default_factory=Counter)  # by event type
    duplicates: int = 0
    late: int = 0
    out_of_order: int = 0
    malformed: Counter[str] = field(default_factory=Counter)  # by quarantine reason
    drift_extra_field: int = 0
    drift_missing_optional_field: int = 0
    oversize: int = 0
    late_event_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready view (late ids left out: they are for tests, not summaries)."""
        return {
            "source_events": dict(self.source_events),
            "source_events_total": sum(self.source_events.values()),
            "duplicates": self.duplicates,
            "late": self.late,
            "out_of_order": self.out_of_order,
            "malformed": dict(self.malformed),
            "malformed_total": sum(self.malformed.values()),
            "drift_extra_field": self.drift_extra_field,
            "drift_missing_optional_field": self.drift_missing_optional_field,
            "oversize": self.oversize,
        }


@dataclass(order=True, frozen=True)
class Scheduled:
    """A message and the source time at which it is sent (pacing follows this time)."""

    send_time: datetime
    seq: int
    message: Message = field(compare=False)


def malformed_record(reason: str, value: dict[str, Any], n: int) -> bytes | dict[str, Any] | None:
    """A record that the Silver job must quarantine with ``reason``.

    :param reason: one of :data:`MALFORMED_REASONS`.
    :param value: the source event's value (a valid event).
    :param n: the record's number (event id suffix ``-malformed-<n>``; varies the shape).
    :returns: the record's value: JSON-ready dict, raw bytes or None (a tombstone).

    It is sent with its source event's key and send time, so it lands in the same
    partition, right after the event: ``event_time_skew`` (event time :data:`SKEW_AHEAD`
    after the source event's) is then ahead of the rest of its partition even in a replay
    of old data, whose Kafka timestamps are years after the event times.
    """
    bad = dict(value, event_id=f"{value['event_id']}-malformed-{n}")
    money = contract_for(value["event_type"]).money_fields
    if reason == "invalid_utf8":
        return b"\xff\xfe" + json.dumps(bad).encode()
    if reason == "malformed_json":
        return json.dumps(bad).encode()[:-7]
    if reason == "not_an_object":
        return (b"[1, 2, 3]", b"42", b"null")[n % 3]
    if reason == "empty_value":
        return None if n % 2 else b""
    if reason == "missing_required_field":
        del bad[contract_for(value["event_type"]).required[0]]
        return bad
    if reason == "type_mismatch":
        if money:
            return bad | {money[0]: "twelve"}
        return bad | {"schema_version": "one"}
    if reason == "unknown_event_type":
        return bad | {"event_type": "order_teleported"}
    if reason == "unsupported_schema_version":
        return bad | {"schema_version": 99}
    if reason == "duplicate_json_key":
        # The same key twice at the top level: valid JSON syntax, ambiguous meaning. The
        # event_type key is repeated (with its own value), so a lenient reader sees an event.
        text = json.dumps(bad, separators=(",", ":"), ensure_ascii=False)
        return (
            text[:-1] + "," + json.dumps("event_type") + ":" + json.dumps(bad["event_type"]) + "}"
        ).encode("utf-8")
    if reason == "control_character":
        # An escaped NUL: valid JSON, which puts a real NUL character into the id.
        field = "customer_id" if "customer_id" in bad else "event_id"
        return bad | {field: f"{bad.get(field) or 'c'}\u0000{n}"}
    if reason == "event_time_skew":
        future = datetime.fromisoformat(value["event_time"]) + SKEW_AHEAD
        return bad | {"event_time": future.isoformat()}
    # invalid_value: a negative amount where there is money, else an event time without its
    # offset (impossible to place in time): neither depends on the clock or the neighbours.
    if money:
        return bad | {money[0]: -abs(float(value.get(money[0]) or 1))}
    local = datetime.fromisoformat(value["event_time"]).replace(tzinfo=None)
    return bad | {"event_time": local.isoformat()}


def inject(
    events: Iterable[SourceEvent],
    config: FaultConfig,
    counts: FaultCounts,
    shift: timedelta = timedelta(0),
) -> Iterator[Scheduled]:
    """Turn source events (in event-time order) into scheduled messages with faults injected.

    :param events: source events sorted by event time; iterated once, and held in memory
        only when they do not tell their number (``len``) beforehand.
    :param config: what to inject.
    :param counts: filled in as messages are scheduled.
    :param shift: added to every event time (``--shift-to-now``).
    :returns: messages in send order; ``send_time`` never decreases.
    """
    rng = random.Random(config.seed)
    held: list[Scheduled] = []  # late events and duplicates, released when their time comes
    seq = 0
    swap: Scheduled | None = None
    malformed_n = 0
    drift_n = 0
    now: datetime | None = None
    oversize_every = 0

    def schedule(when: datetime, message: Message) -> Scheduled:
        nonlocal seq
        seq += 1
        return Scheduled(when, seq, message)

    def release(until: datetime | None) -> Iterator[Scheduled]:
        while held and (until is None or held[0].send_time <= until):
            item = heapq.heappop(held)
            # Sent now, not earlier: keep send_time monotonic for pacing.
            yield Scheduled(max(item.send_time, now or item.send_time), item.seq, item.message)

    counted = events if isinstance(events, Sized) else list(events)
    if config.oversize_count:
        oversize_every = max(1, len(counted) // (config.oversize_count + 1))
    last: SourceEvent | None = None
    for index, event in enumerate(counted):
        last = event
        when = event.event_time + shift
        now = when
        counts.source_events[event.event_type] += 1
        value = event.to_value(shift)
        if rng.random() < config.drift_rate:
            drift_n += 1
            if drift_n % 2:
                value["x_promo_code"] = f"PROMO{drift_n % 7}"
                counts.drift_extra_field += 1
            else:
                value.pop(_OPTIONAL_BY_TOPIC[event.topic], None)
                counts.drift_missing_optional_field += 1
        message = Message(event.topic, event.key, value, "event")
        yield from release(when)
        if swap is not None:
            yield schedule(when, message)
            yield Scheduled(when, swap.seq, swap.message)
            swap = None
        elif rng.random() < config.late_rate:
            delay = timedelta(seconds=config.late_delay.sample(rng))
            heapq.heappush(held, schedule(when + delay, message))
            counts.late += 1
            counts.late_event_ids.append(event.event_id)
        elif rng.random() < config.out_of_order_rate:
            swap = schedule(when, message)
            counts.out_of_order += 1
        else:
            yield schedule(when, message)
        if rng.random() < config.duplicate_rate:
            again = timedelta(seconds=rng.uniform(0, 300))
            heapq.heappush(
                held, schedule(when + again, Message(event.topic, event.key, value, "duplicate"))
            )
            counts.duplicates += 1
        if rng.random() < config.malformed_rate:
            reason = MALFORMED_REASONS[malformed_n % len(MALFORMED_REASONS)]
            malformed_n += 1
            bad = malformed_record(reason, value, malformed_n)
            yield schedule(when, Message(event.topic, event.key, bad, f"malformed:{reason}"))
            counts.malformed[reason] += 1
        if (
            oversize_every
            and counts.oversize < config.oversize_count
            and ((index + 1) % oversize_every == 0)
        ):
            blob = value | {"x_blob": "x" * OVERSIZE_BYTES}
            yield schedule(when, Message(event.topic, event.key, blob, "oversize"))
            counts.oversize += 1
    if swap is not None:
        yield swap
    yield from release(None)
    # Fewer events than oversize messages asked for: send the rest at the end.
    if last is not None and counts.oversize < config.oversize_count:
        blob = last.to_value(shift) | {"x_blob": "x" * OVERSIZE_BYTES}
        for _ in range(config.oversize_count - counts.oversize):
            yield schedule(now or last.event_time, Message(last.topic, last.key, blob, "oversize"))
            counts.oversize += 1
