"""Kafka consumer-group offsets that mirror a streaming checkpoint, for Kafka's own tools.

Spark's Kafka source keeps its positions in the query's checkpoint, never in a consumer
group, so ``kafka-consumer-groups --describe`` knows nothing of a platform job. After each
micro-batch the always-on drivers (:mod:`spark_jobs.streaming_runtime`) commit the offsets
that batch committed to the group :func:`consumer_group` names, and the broker's
``ConsumerGroupCommand`` then shows each partition's lag. The checkpoint stays the source
of truth: nothing ever reads these group offsets back, and a commit that fails (broker
down, the group in use by a real consumer) is logged and retried with the next batch,
never fatal to the job. Imports neither pyspark nor Airflow.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ingest_core.settings import PlatformSettings, get_settings

log = logging.getLogger(__name__)

#: ``{topic: {partition: next offset}}``: Spark's Kafka source offsets (partition as int).
TopicOffsets = dict[str, dict[int, int]]
#: Milliseconds one commit (with the client's bootstrap) may wait for the broker.
COMMIT_TIMEOUT_MS = 10_000
#: The Kafka protocol level kafka-python speaks, given rather than probed: probing happens in
#: ``KafkaConsumer.__init__``, which leaks its IO thread and sockets when the broker does not
#: answer (kafka-python 3.0). Brokers from 2.8 on accept it, 4.x included.
KAFKA_API_VERSION = (2, 8)


def consumer_group(job: str, settings: PlatformSettings | None = None) -> str:
    """The consumer group of ``job``: ``<kafka.topic_prefix><job>`` (``bronze_ingest`` on
    the default profile), so two platforms sharing a broker under different topic prefixes
    do not share groups."""
    settings = settings or get_settings()
    return f"{settings.kafka.topic_prefix}{job}"


def kafka_offsets(sources: Sequence[Any]) -> TopicOffsets:
    """The Kafka positions among a batch's source offsets.

    :param sources: one entry per source of a query, as Spark records them (the
        ``endOffset`` of a progress event or a line of ``offsets/<batch>``, parsed): a
        Kafka source is ``{topic: {partition (str): next offset (int)}}``; anything else
        (a Delta source's ``{"reservoirId": ...}``, None) is ignored.
    :returns: ``{topic: {partition: next offset}}`` over every Kafka source (a topic read by
        two sources keeps the larger offset of each partition).
    """
    merged: TopicOffsets = {}
    for source in sources:
        if not isinstance(source, Mapping) or not source:
            continue
        if not all(isinstance(parts, Mapping) for parts in source.values()):
            continue  # not a Kafka source
        for topic, parts in source.items():
            target = merged.setdefault(str(topic), {})
            for partition, offset in parts.items():
                if isinstance(offset, int) and offset >= 0:
                    key = int(partition)
                    target[key] = max(offset, target.get(key, offset))
    return merged


class GroupOffsetCommitter:
    """Commits a job's Kafka positions to its consumer group from a daemon thread, so a
    listener callback never waits on the broker and a driver's exit never waits on it for
    long. Only the newest offsets of each partition are kept pending: while the broker is
    slow, commits coalesce instead of queueing. A failure is logged once per outage (again
    after a commit succeeded) and retried with the next batch's offsets.

    :param job: the job (see :func:`consumer_group`).
    """

    def __init__(self, job: str, settings: PlatformSettings | None = None) -> None:
        self.settings = settings or get_settings()
        self.group = consumer_group(job, self.settings)
        self._pending: TopicOffsets = {}
        self._changed = threading.Condition()
        self._busy = False
        self._closing = False
        self._failing = False
        self._consumer: Any = None
        self._thread = threading.Thread(target=self._run, name=f"{self.group}-offsets", daemon=True)
        self._thread.start()

    def commit(self, offsets: TopicOffsets) -> None:
        """Queue ``offsets`` (merged with what is pending, newest offset per partition)."""
        if not offsets:
            return
        with self._changed:
            for topic, parts in offsets.items():
                target = self._pending.setdefault(topic, {})
                for partition, offset in parts.items():
                    target[partition] = max(offset, target.get(partition, offset))
            self._changed.notify_all()

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds until nothing is pending or being committed.

        :returns: whether everything queued was attempted within the time.
        """
        with self._changed:
            return self._changed.wait_for(
                lambda: not self._pending and not self._busy, timeout=timeout_s
            )

    def close(self, timeout_s: float = COMMIT_TIMEOUT_MS / 1000 + 5) -> None:
        """Attempt what is pending (waiting at most ``timeout_s`` seconds), then stop. The
        thread is a daemon: a broker that hangs cannot hold the driver's exit."""
        self.flush(timeout_s)
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join(timeout=1)

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending or self._closing)
                if self._closing and not self._pending:
                    break
                offsets, self._pending, self._busy = self._pending, {}, True
            try:
                self._commit(offsets)
            finally:
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()
        with contextlib.suppress(Exception):
            if self._consumer is not None:
                self._consumer.close(autocommit=False)

    def _commit(self, offsets: TopicOffsets) -> None:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        try:
            if self._consumer is None:
                self._consumer = KafkaConsumer(
                    **self.settings.kafka.client_config(),
                    group_id=self.group,
                    enable_auto_commit=False,
                    client_id=f"{self.group}-offsets",
                    api_version=KAFKA_API_VERSION,
                    request_timeout_ms=COMMIT_TIMEOUT_MS,
                )
            self._consumer.commit(
                {
                    TopicPartition(topic, partition): OffsetAndMetadata(offset, "", -1)
                    for topic, parts in offsets.items()
                    for partition, offset in parts.items()
                },
                timeout_ms=COMMIT_TIMEOUT_MS,
            )
            self._failing = False
        except Exception as error:  # never fatal: the checkpoint is the source of truth
            if not self._failing:
                self._failing = True
                log.warning(
                    "could not commit offsets to consumer group %s (%s: %s); Kafka's tools "
                    "show stale lag until a later batch's commit succeeds",
                    self.group,
                    type(error).__name__,
                    error,
                )
            with contextlib.suppress(Exception):
                self._consumer.close(autocommit=False)
            self._consumer = None
