"""Produce events to Kafka with kafka-python, checking every send.

No silent loss on the producer side: every send future is resolved, and a record the client
or the broker refuses (too large, unknown topic, ...) is counted with its reason instead of
disappearing in a background thread.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest_core.settings import KafkaSettings

#: One record to send: (topic, key, value). A value is a JSON-serialisable mapping, raw
#: bytes (sent as they are, e.g. a deliberately malformed payload) or None (a tombstone).
Record = tuple[str, str | None, Mapping[str, Any] | bytes | None]

#: Largest record the producer sends: Kafka's default ``max.request.size``, matching the
#: broker's ``message.max.bytes`` (include/kafka/server.properties). A larger record is refused
#: by the client, counted with its reason (MessageSizeTooLargeError) and never batched: left to
#: the broker, one oversize record in a batch fails every record batched with it.
MAX_REQUEST_BYTES = 1024 * 1024
#: A record not acknowledged within this many milliseconds fails with KafkaTimeoutError.
DELIVERY_TIMEOUT_MS = 30_000
#: A producer replaced while the broker is away is tried again every this many seconds, for
#: at most ``REPLACE_WITHIN_S`` (longer than the soak's longest broker outage, 300 s).
REPLACE_EVERY_S = 5.0
REPLACE_WITHIN_S = 600.0


@dataclass(frozen=True)
class Message:
    """A record with a label saying what it is (``event``, ``duplicate``, ``malformed``...).

    :param topic: Kafka topic.
    :param key: Kafka key (UTF-8 encoded when sent) or None.
    :param value: see :data:`Record`.
    :param tag: label for accounting; failures and acknowledgements are counted per tag.
    """

    topic: str
    key: str | None
    value: Mapping[str, Any] | bytes | None
    tag: str = "event"


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
    :param acknowledged: records the broker acknowledged (``acks=all``).
    :param failures: failure reason (kafka-python exception class name) -> records.
    :param acknowledged_by_tag: tag -> acknowledged records.
    :param failed_by_tag: tag -> records that failed.
    :param acknowledged_by_topic: topic -> acknowledged records.
    :param offsets: ``(topic, partition) -> highest acknowledged offset``.
    :param interrupted: the run was stopped (Ctrl-C) before every record was handed over;
        the counts cover what was sent until then.
    """

    attempted: int = 0
    acknowledged: int = 0
    interrupted: bool = False
    failures: Counter[str] = field(default_factory=Counter)
    acknowledged_by_tag: Counter[str] = field(default_factory=Counter)
    failed_by_tag: Counter[str] = field(default_factory=Counter)
    acknowledged_by_topic: Counter[str] = field(default_factory=Counter)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        """Records that were not acknowledged."""
        return self.attempted - self.acknowledged

    def _failure(self, tag: str, error: Exception) -> None:
        self.failures[type(error).__name__] += 1
        self.failed_by_tag[tag] += 1


def encode_value(value: Mapping[str, Any] | bytes | None) -> bytes | None:
    """Serialise a value: mappings as compact UTF-8 JSON, bytes unchanged, None as tombstone."""
    if value is None or isinstance(value, bytes):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def produce(
    bootstrap_servers: str,
    records: Iterable[Record | Message],
    *,
    raise_on_failure: bool = True,
    batch_flush: int = 2000,
    on_resolved: Callable[[ProduceResult], None] | None = None,
    on_acknowledged: Callable[[Message, Any], None] | None = None,
    kafka: KafkaSettings | None = None,
    **producer_config: Any,
) -> ProduceResult:
    """Send ``records`` and wait for every acknowledgement.

    :param bootstrap_servers: Kafka ``host:port`` list.
    :param records: ``(topic, key, value)`` tuples or :class:`Message` objects.
    :param raise_on_failure: raise :class:`ProduceError` if any record failed.
    :param batch_flush: resolve pending futures every this many records (bounds memory). A
        group's records not acknowledged within ``DELIVERY_TIMEOUT_MS`` + 30 s in all are
        counted as failed (``KafkaTimeoutError``), and a producer with requests that never
        ended is replaced by a new one before the next record.
    :param on_resolved: called with the running result after each group of futures resolves
        (progress bars).
    :param on_acknowledged: called with each acknowledged message and kafka-python's
        ``RecordMetadata`` (``topic``, ``partition``, ``offset``), in send order within a group
        (the soak's log of what Kafka holds).
    :param kafka: the security settings (SASL, TLS) to connect with; the current profile's
        when ``None``.
    :param producer_config: extra ``KafkaProducer`` settings (e.g. ``linger_ms``).
    :raises ProduceError: see ``raise_on_failure``.
    """
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    from ingest_core.settings import get_settings

    config: dict[str, Any] = {
        "acks": "all",
        "linger_ms": 5,
        # Retried until the delivery timeout, as Java's producer does (kafka-python's default
        # too): 5 retries 100 ms apart gave up on a topic whose leader was being elected.
        "max_request_size": MAX_REQUEST_BYTES,
        # Bounded waits: if the broker dies mid-run, every pending record fails within
        # DELIVERY_TIMEOUT_MS (all at once) instead of each waiting in turn.
        "delivery_timeout_ms": DELIVERY_TIMEOUT_MS,
        "request_timeout_ms": 10_000,
        "max_block_ms": DELIVERY_TIMEOUT_MS,
    }
    config.update(producer_config)
    kafka = kafka or get_settings().kafka
    settings = kafka.client_config(bootstrap_servers) | config
    producer = KafkaProducer(**settings)
    result = ProduceResult()
    pending: list[tuple[Message, Any]] = []

    def resolve() -> None:
        nonlocal producer
        # One deadline for the whole group, not one per record: after a kill -9 of the
        # broker, kafka-python kept in-flight requests waiting past their timeouts, and a
        # wait per record (50 x 60 s) stalled the soak's stream (issue 50).
        deadline = time.monotonic() + DELIVERY_TIMEOUT_MS / 1000 + 30
        stuck = 0
        for message, future in pending:
            tag = message.tag
            try:
                metadata = future.get(timeout=max(0.0, deadline - time.monotonic()))
            except KafkaError as error:
                stuck += not future.is_done
                result._failure(tag, error)
                continue
            if on_acknowledged is not None:
                on_acknowledged(message, metadata)
            result.acknowledged += 1
            result.acknowledged_by_tag[tag] += 1
            result.acknowledged_by_topic[metadata.topic] += 1
            key = (metadata.topic, metadata.partition)
            result.offsets[key] = max(result.offsets.get(key, -1), metadata.offset)
        pending.clear()
        if stuck:  # a producer whose requests never end would wedge every later send too
            with contextlib.suppress(Exception):
                producer.close(timeout=0)
            producer = replacement()
        if on_resolved:
            on_resolved(result)

    def replacement() -> Any:
        """A new producer, tried every few seconds while the broker does not answer: its
        constructor bootstraps, and raised while the broker was down, which ended the
        soak's stream (runs 6 and 7, at 62 and 85 minutes: a stuck group during a broker
        outage, then no producer to go on with). Gives up after ``REPLACE_WITHIN_S``."""
        from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_fixed

        make = retry(
            retry=retry_if_exception_type(KafkaError),
            wait=wait_fixed(REPLACE_EVERY_S),
            stop=stop_after_delay(REPLACE_WITHIN_S),
            reraise=True,
        )(lambda: KafkaProducer(**settings))
        return make()

    def flush() -> None:
        # A flush that times out (the broker away longer than the delivery timeout) leaves
        # its futures to resolve(), which counts each failed record with its reason; raising
        # here lost the run (the soak's stream died in an outage).
        with contextlib.suppress(KafkaError):
            producer.flush(timeout=DELIVERY_TIMEOUT_MS / 1000 + 30)

    def send_all() -> None:
        for record in records:
            message = record if isinstance(record, Message) else Message(*record)
            result.attempted += 1
            try:
                future = producer.send(
                    message.topic,
                    key=message.key.encode("utf-8") if message.key is not None else None,
                    value=encode_value(message.value),
                )
            except KafkaError as error:  # refused before sending, e.g. record too large
                result._failure(message.tag, error)
                continue
            pending.append((message, future))
            if len(pending) >= batch_flush:
                flush()
                resolve()

    try:
        try:
            send_all()
        except KeyboardInterrupt:
            result.interrupted = True  # report what was sent; the caller exits 130
        flush()
        resolve()
    finally:
        # kafka-python's close flushes, and raises KafkaTimeoutError when records are stuck
        # (a broker away): that must neither mask an error from the sends nor end a stream
        # whose records are all accounted for (soak run 6's stream died of it at 62 minutes).
        with contextlib.suppress(KafkaError):
            producer.close(timeout=10)
    if result.failed and raise_on_failure:
        raise ProduceError(result)
    return result
