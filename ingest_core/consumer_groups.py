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
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ingest_core.settings import PlatformSettings, get_settings

log = logging.getLogger(__name__)

#: ``{topic: {partition: next offset}}``: Spark's Kafka source offsets (partition as int).
TopicOffsets = dict[str, dict[int, int]]
#: Milliseconds one commit (with the client's bootstrap) may wait for the broker.
COMMIT_TIMEOUT_MS = 10_000


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
    """Commits a job's Kafka positions to its consumer group from a background thread, so a
    listener callback never waits on the broker. Commits are ordered (one worker) and a
    failure is logged once per kind of error, then retried by the next batch's commit.

    :param job: the job (see :func:`consumer_group`).
    """

    def __init__(self, job: str, settings: PlatformSettings | None = None) -> None:
        self.settings = settings or get_settings()
        self.group = consumer_group(job, self.settings)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{job}-group")
        self._consumer: Any = None
        self._errors_seen: set[str] = set()
        self._lock = threading.Lock()

    def commit(self, offsets: TopicOffsets) -> Future[bool] | None:
        """Queue a commit of ``offsets`` (nothing when empty).

        :returns: a future that is True once the broker accepted the commit (tests wait on
            it), False when it failed; None when there was nothing to commit.
        """
        if not offsets:
            return None
        return self._executor.submit(self._commit, offsets)

    def _commit(self, offsets: TopicOffsets) -> bool:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        try:
            with self._lock:
                if self._consumer is None:
                    self._consumer = KafkaConsumer(
                        **self.settings.kafka.client_config(),
                        group_id=self.group,
                        enable_auto_commit=False,
                        client_id=f"{self.group}-offsets",
                        bootstrap_timeout_ms=COMMIT_TIMEOUT_MS,
                    )
                self._consumer.commit(
                    {
                        TopicPartition(topic, partition): OffsetAndMetadata(offset, "", -1)
                        for topic, parts in offsets.items()
                        for partition, offset in parts.items()
                    },
                    timeout_ms=COMMIT_TIMEOUT_MS,
                )
            return True
        except Exception as error:  # never fatal: the checkpoint is the source of truth
            kind = type(error).__name__
            if kind not in self._errors_seen:
                self._errors_seen.add(kind)
                log.warning(
                    "could not commit offsets to consumer group %s (%s: %s); Kafka's tools "
                    "show stale lag until a later batch's commit succeeds",
                    self.group,
                    kind,
                    error,
                )
            with self._lock:
                self._close_consumer()
            return False

    def _close_consumer(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(Exception):  # closing a broken client
                self._consumer.close(autocommit=False)
            self._consumer = None

    def close(self) -> None:
        """Finish the queued commits, then close the client."""
        self._executor.shutdown(wait=True, cancel_futures=False)
        with self._lock:
            self._close_consumer()
