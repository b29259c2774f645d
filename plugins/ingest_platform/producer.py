"""Produce JSON events to Kafka with kafka-python, checking every send.

No silent loss on the producer side: every send future is resolved, and a failed send is
reported with its reason instead of disappearing in a background thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: One record to send: (topic, key, value). A value is a JSON-serialisable mapping, raw
#: bytes (sent as they are, e.g. a deliberately malformed payload) or None (a tombstone).
Record = tuple[str, str | None, Mapping[str, Any] | bytes | None]


class ProduceError(RuntimeError):
    """Some records were not acknowledged by the broker; :attr:`result` says which and why."""

    def __init__(self, result: ProduceResult) -> None:
        self.result = result
        reasons = ", ".join(f"{r}: {n}" for r, n in sorted(result.failures.items()))
        super().__init__(f"{result.failed} of {result.attempted} records failed ({reasons})")


@dataclass
class ProduceResult:
    """Counts of one produce call.

    :param attempted: records handed to the producer.
    :param acknowledged: records the broker acknowledged (acks=all).
    :param failures: failure reason (exception class name) -> record count.
    :param offsets: ``(topic, partition) -> highest acknowledged offset``.
    """

    attempted: int = 0
    acknowledged: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        """Records that were not acknowledged."""
        return self.attempted - self.acknowledged


def encode_value(value: Mapping[str, Any] | bytes | None) -> bytes | None:
    """Serialise a value: mappings as compact UTF-8 JSON, bytes unchanged, None as tombstone."""
    if value is None or isinstance(value, bytes):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def produce(
    bootstrap_servers: str,
    records: Iterable[Record],
    *,
    raise_on_failure: bool = True,
    batch_flush: int = 5000,
    **producer_config: Any,
) -> ProduceResult:
    """Send ``records`` and wait for every acknowledgement.

    :param bootstrap_servers: Kafka ``host:port`` list.
    :param records: ``(topic, key, value)`` tuples; see :data:`Record`.
    :param raise_on_failure: raise :class:`ProduceError` if any record failed.
    :param batch_flush: resolve pending futures every this many records (bounds memory).
    :param producer_config: extra ``KafkaProducer`` settings (e.g. ``linger_ms``).
    :raises ProduceError: see ``raise_on_failure``.
    """
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    config: dict[str, Any] = {"acks": "all", "linger_ms": 5, "retries": 5}
    config.update(producer_config)
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, **config)
    result = ProduceResult()
    pending: list[Any] = []

    def resolve() -> None:
        for future in pending:
            try:
                metadata = future.get(timeout=60)
            except KafkaError as error:
                reason = type(error).__name__
                result.failures[reason] = result.failures.get(reason, 0) + 1
                continue
            result.acknowledged += 1
            key = (metadata.topic, metadata.partition)
            result.offsets[key] = max(result.offsets.get(key, -1), metadata.offset)
        pending.clear()

    try:
        for topic, key, value in records:
            result.attempted += 1
            try:
                pending.append(
                    producer.send(
                        topic,
                        key=key.encode("utf-8") if key is not None else None,
                        value=encode_value(value),
                    )
                )
            except KafkaError as error:  # refused before sending, e.g. record too large
                reason = type(error).__name__
                result.failures[reason] = result.failures.get(reason, 0) + 1
            if len(pending) >= batch_flush:
                producer.flush()
                resolve()
        producer.flush()
        resolve()
    finally:
        producer.close()
    if result.failed and raise_on_failure:
        raise ProduceError(result)
    return result
