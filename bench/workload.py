"""Events for the benchmarks, made by the project's own generator and producer.

* :func:`produce_backlog`: ``count`` synthetic events (``ingestctl.replay.generator``,
  all four event types; about 280 bytes of JSON each) sent as fast as the project's
  kafka-python producer goes (``replay.runner.run``: ``acks=all``, every send checked).
  The generator's steady-state mix needs an event-time rate well below the session length:
  50 events per second of event time (1M events span about 5.5 hours, so Gold finalises
  windows); the wall-clock send rate is whatever the producer reaches, and is measured.
* :func:`produce_steady`: a constant wall-clock rate (5,000 events/s for the freshness
  benchmark) through the same producer, paced in 10 ms slots; the achieved rate is measured
  and reported, since a Python producer on a shared 2-core machine may fall short of it.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

#: Event-time rate of the backlog (events per second of event time), see the module doc.
BACKLOG_EVENT_RATE = 50.0


@dataclass
class Produced:
    """Outcome of one produce call: messages acknowledged, wall seconds, mean value size."""

    acknowledged: int
    failed: int
    wall_s: float
    mean_bytes: float

    @property
    def rate(self) -> float:
        return self.acknowledged / self.wall_s if self.wall_s else 0.0


def _events(count: int, seed: int, rate: float, start: datetime) -> list[Any]:
    from ingestctl.replay.generator import generate_events

    return list(generate_events(count, seed=seed, start=start, rate=rate))


def produce_backlog(
    bootstrap: str,
    count: int,
    *,
    seed: int = 9,
    topic_prefix: str = "",
    start: datetime | None = None,
    events: list[Any] | None = None,
) -> Produced:
    """Send ``count`` generated events to the contract topics (created with 3 partitions).

    :param events: the events to send (``ingestctl.replay.generator`` ``SourceEvent``s),
        instead of ``count`` made from ``seed`` and ``start`` at :data:`BACKLOG_EVENT_RATE`
        (``count`` is then not used).
    :raises RuntimeError: a message was not acknowledged.
    """
    from ingestctl.producer import encode_value
    from ingestctl.replay import runner
    from ingestctl.replay.faults import FaultConfig

    if events is None:
        events = _events(count, seed, BACKLOG_EVENT_RATE, start or datetime(2026, 1, 1, tzinfo=UTC))
    sample = events[:: max(1, len(events) // 2000)]
    # The size the producer sends: the event with its contract envelope (as the runner maps
    # it); the envelope adds event_id, event_type, event_time, schema_version.
    from ingestctl.replay.faults import FaultCounts, inject

    scheduled = inject(sample, FaultConfig(), FaultCounts(), timedelta(0))
    mean = statistics.fmean(len(encode_value(s.message.value) or b"") for s in scheduled)
    summary = runner.run(
        "generator",
        events,
        bootstrap_servers=bootstrap,
        faults=FaultConfig(),
        pace=runner.Pace(None),
        topic_prefix=topic_prefix,
        progress=False,
    )
    if summary.produce.failed:
        reasons = dict(summary.produce.failures) or "no error reported: not flushed"
        raise RuntimeError(
            f"{summary.produce.failed} of {len(events)} messages not acknowledged ({reasons})"
        )
    return Produced(summary.produce.acknowledged, summary.produce.failed, summary.wall_time_s, mean)


class SteadyProducer(threading.Thread):
    """Send pre-encoded generated events (or ``messages``: producer messages of the
    caller's) at ``rate`` per second for ``duration_s`` seconds.

    The Kafka timestamp of each record is its send time (CreateTime set by the client), the
    start of the freshness clock. ``result`` holds the produce result once done.
    """

    def __init__(
        self,
        bootstrap: str,
        rate: float,
        duration_s: float,
        *,
        topic_prefix: str = "",
        seed: int = 11,
        messages: list[Any] | None = None,
    ) -> None:
        super().__init__(name="steady-producer", daemon=True)
        from ingestctl.producer import Message, encode_value
        from ingestctl.replay.faults import FaultConfig, FaultCounts, inject

        self.bootstrap, self.rate, self.duration_s = bootstrap, rate, duration_s
        total = int(rate * duration_s) + 1
        if messages is None:
            events = _events(total, seed, BACKLOG_EVENT_RATE, datetime.now(UTC))
            messages = [
                Message(
                    topic_prefix + s.message.topic, s.message.key, encode_value(s.message.value)
                )
                for s in inject(events, FaultConfig(), FaultCounts(), timedelta(0))
            ]
        self.messages = messages
        self.result: Any = None
        self.started_at = self.ended_at = 0.0
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def _paced(self) -> Iterator[Any]:
        slot = 0.01
        per_slot = self.rate * slot
        begin = time.monotonic()
        for index, message in enumerate(self.messages):
            if self._stop_event.is_set():
                return
            due = begin + (index // per_slot) * slot
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            yield message

    def run(self) -> None:
        from ingestctl.producer import produce

        self.started_at = time.time()
        try:
            # Small flush groups: a group waits for its acknowledgements, which would
            # otherwise stall the pace for up to a whole group's worth of records.
            self.result = produce(
                self.bootstrap, self._paced(), raise_on_failure=False, batch_flush=500, linger_ms=5
            )
        except BaseException as error:  # reported by the caller
            self.error = error
        self.ended_at = time.time()

    @property
    def achieved_rate(self) -> float:
        if not self.result or self.ended_at <= self.started_at:
            return 0.0
        return float(self.result.acknowledged) / (self.ended_at - self.started_at)
