"""The producer's bookkeeping when the broker never answers (issue 50: after a kill -9 of the
broker, kafka-python kept in-flight sends waiting past their timeouts, and a wait per record
stalled the soak's stream for 50 x 60 s). kafka-python's producer is replaced by a stand-in
whose futures never complete: what is under test is ``produce``'s deadline, not Kafka."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import pytest

from ingestctl import producer as producer_module
from ingestctl.producer import Message, produce

pytestmark = pytest.mark.unit


class _Metadata:
    def __init__(self, topic: str, offset: int) -> None:
        self.topic, self.partition, self.offset = topic, 0, offset


class _Future:
    """kafka-python's ``FutureRecordMetadata`` surface: ``get(timeout)`` and ``is_done``."""

    def __init__(self, metadata: _Metadata | None) -> None:
        self.metadata = metadata
        self.is_done = metadata is not None

    def get(self, timeout: float | None = None) -> _Metadata:
        from kafka.errors import KafkaTimeoutError

        if self.metadata is None:
            time.sleep(timeout or 0)
            raise KafkaTimeoutError(f"no acknowledgement within {timeout} s")
        return self.metadata


class _WedgedThenHealthy:
    """The first producer never acknowledges; the ones made after it do."""

    made: ClassVar[list[_WedgedThenHealthy]] = []

    def __init__(self, **config: Any) -> None:
        self.wedged = not _WedgedThenHealthy.made
        self.closed = False
        self.sent = 0
        _WedgedThenHealthy.made.append(self)

    def send(self, topic: str, key: Any = None, value: Any = None) -> _Future:
        self.sent += 1
        return _Future(None if self.wedged else _Metadata(topic, self.sent))

    def flush(self, timeout: float | None = None) -> None:
        return None

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


def test_a_group_that_is_never_acknowledged_fails_within_one_deadline_and_the_producer_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kafka

    _WedgedThenHealthy.made = []
    monkeypatch.setattr(kafka, "KafkaProducer", _WedgedThenHealthy)
    monkeypatch.setattr(producer_module, "DELIVERY_TIMEOUT_MS", -29_000)  # a 1 s deadline
    messages = [Message("t", str(i), {"i": i}, "ok") for i in range(20)]
    started = time.monotonic()
    result = produce("127.0.0.1:1", messages, raise_on_failure=False, batch_flush=10)
    # Ten records that never got an answer cost one deadline (1 s), not ten.
    assert time.monotonic() - started < 5
    assert result.failed == 10
    assert result.failures == {"KafkaTimeoutError": 10}
    assert result.acknowledged == 10
    first, second = _WedgedThenHealthy.made
    assert first.closed
    assert second.closed  # closed at the end, as always
    assert (first.sent, second.sent) == (10, 10)


class _StuckOnClose(_WedgedThenHealthy):
    """Acknowledges every send, then raises on close as kafka-python's does when records are
    stuck (its close flushes: "Timeout waiting for future")."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.wedged = False

    def close(self, timeout: float | None = None) -> None:
        from kafka.errors import KafkaTimeoutError

        raise KafkaTimeoutError("Timeout waiting for future")


def test_a_close_that_times_out_does_not_end_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Soak run 6: the stream died at 62 minutes of KafkaTimeoutError raised by close."""
    import kafka

    _WedgedThenHealthy.made = []
    monkeypatch.setattr(kafka, "KafkaProducer", _StuckOnClose)
    result = produce("127.0.0.1:1", [Message("t", "k", {"i": 1}, "ok")], raise_on_failure=False)
    assert result.acknowledged == 1


class _DownThenUp(_WedgedThenHealthy):
    """The first producer never acknowledges; the next two cannot even be made (the broker is
    away: kafka-python's constructor bootstraps), the fourth works."""

    def __init__(self, **config: Any) -> None:
        from kafka.errors import KafkaTimeoutError

        if len(_WedgedThenHealthy.made) in (1, 2):
            _WedgedThenHealthy.made.append(self)
            raise KafkaTimeoutError("Unable to bootstrap from 127.0.0.1:1")
        super().__init__(**config)


def test_a_producer_replaced_while_the_broker_is_away_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Soak runs 6 and 7: a stuck group during a broker outage replaced the producer, whose
    constructor raised KafkaTimeoutError ("Unable to bootstrap"), and the stream ended (at
    62 and 85 minutes)."""
    import kafka

    _WedgedThenHealthy.made = []
    monkeypatch.setattr(kafka, "KafkaProducer", _DownThenUp)
    monkeypatch.setattr(producer_module, "DELIVERY_TIMEOUT_MS", -29_000)  # a 1 s deadline
    monkeypatch.setattr(producer_module, "REPLACE_EVERY_S", 0.1)
    messages = [Message("t", str(i), {"i": i}, "ok") for i in range(20)]
    result = produce("127.0.0.1:1", messages, raise_on_failure=False, batch_flush=10)
    assert (result.failed, result.acknowledged) == (10, 10)
    assert len(_WedgedThenHealthy.made) == 4  # two attempts refused, the third made it
