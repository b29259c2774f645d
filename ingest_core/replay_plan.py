"""A Bronze replay's plan, without Spark: which offsets of which partitions hold a time range,
refused when Kafka no longer holds all of it, ending where ``bronze_ingest`` has committed
(step 1 of :mod:`spark_jobs.bronze_replay`, whose docstring tells the whole story). The
``bronze_replay`` DAG checks a range with it before Spark starts; the job plans again, with
the offsets of that moment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ingest_core.catalog import get_catalog
from ingest_core.settings import PlatformSettings, get_settings
from ingest_core.time_range import TimeRange

#: Longest range one replay may cover (Kafka's default retention is 7 days).
MAX_RANGE = timedelta(days=31)


class RangeNotInKafkaError(RuntimeError):
    """Kafka no longer holds (all of) the requested range; nothing was written."""


@dataclass(frozen=True)
class PartitionPlan:
    """Offsets ``[start, end)`` of one partition to re-read.

    :param in_range_end: end of the time range's offsets before clamping to the always-on
        job's committed position; ``left_to_stream = in_range_end - end`` records are after
        it (``bronze_ingest`` will write them).
    :param topic_id: Kafka's id of the topic incarnation the offsets belong to (None from a
        broker without topic ids).
    """

    topic: str
    partition: int
    start: int
    end: int
    in_range_end: int
    topic_id: str | None = None

    @property
    def records(self) -> int:
        """Records to re-read."""
        return max(0, self.end - self.start)

    @property
    def left_to_stream(self) -> int:
        """Records of the range beyond ``bronze_ingest``'s committed offsets."""
        return max(0, self.in_range_end - max(self.end, self.start))


def parse_topics(text: str | Sequence[str], settings: PlatformSettings | None = None) -> list[str]:
    """Contract topic names (``payments,orders`` or a list) -> Kafka topic names.

    :raises ValueError: empty, or a name that is not a contract topic; lists the known ones.
    """
    from ingest_core.contracts import TOPICS

    settings = settings or get_settings()
    names = [t.strip() for t in (text.split(",") if isinstance(text, str) else text)]
    names = [t for t in names if t]
    if not names:
        raise ValueError(f"no topic given; known: {', '.join(TOPICS)}")
    unknown = [t for t in names if t not in TOPICS]
    if unknown:
        raise ValueError(f"unknown topic(s) {unknown}; known: {', '.join(TOPICS)}")
    return [settings.kafka.topic(t) for t in dict.fromkeys(names)]


def _stream_position(settings: PlatformSettings) -> dict[tuple[str, int], int]:
    """``bronze_ingest``'s committed next offset per (topic, partition); empty if none."""
    from ingest_core.delta_tables import committed_offsets

    committed = committed_offsets(get_catalog().job("bronze_ingest").checkpoint(settings))
    if committed is None or not committed["sources"] or committed["sources"][0] is None:
        return {}
    return {
        (topic, int(p)): int(offset)
        for topic, parts in committed["sources"][0].items()
        for p, offset in parts.items()
    }


def plan(
    topics: Sequence[str], time_range: TimeRange, settings: PlatformSettings | None = None
) -> list[PartitionPlan]:
    """Offsets of ``time_range`` on every partition of ``topics`` (Kafka names).

    :raises RangeNotInKafkaError: a topic does not exist, or retention deleted records the
        range may have held; the message names the partition and the earliest time left.
    """
    from kafka import KafkaConsumer, TopicPartition

    from ingest_core.kafka_offsets import kafka_topic_ids

    settings = settings or get_settings()
    from_ms, to_ms = time_range.millis()
    stream = _stream_position(settings)
    topic_ids = kafka_topic_ids(settings.kafka.bootstrap_servers, topics, settings.kafka)
    consumer = KafkaConsumer(**settings.kafka.client_config(), enable_auto_commit=False)
    try:
        missing = [t for t in topics if consumer.partitions_for_topic(t) is None]
        if missing:
            raise RangeNotInKafkaError(f"Kafka has no topic {missing}; nothing was written")
        partitions = [
            TopicPartition(t, p)
            for t in topics
            for p in sorted(consumer.partitions_for_topic(t) or ())
        ]
        first = consumer.beginning_offsets(partitions)
        last = consumer.end_offsets(partitions)
        at_from = consumer.offsets_for_times({tp: from_ms for tp in partitions})
        at_to = consumer.offsets_for_times({tp: to_ms for tp in partitions})
        earliest = consumer.offsets_for_times({tp: 0 for tp in partitions})
    finally:
        consumer.close()
    plans, lost = [], []
    for tp in partitions:
        oldest = earliest[tp]  # the first record still held, with its timestamp
        if first[tp] > 0 and (oldest is None or oldest.timestamp > from_ms):
            held = (
                "none: every record was deleted"
                if oldest is None
                else datetime.fromtimestamp(oldest.timestamp / 1000, UTC).isoformat()
            )
            lost.append(
                f"{tp.topic}[{tp.partition}] (offsets below {first[tp]} deleted; "
                f"earliest available time {held})"
            )
            continue
        start = at_from[tp].offset if at_from[tp] is not None else last[tp]
        end = at_to[tp].offset if at_to[tp] is not None else last[tp]
        clamped = min(end, stream.get((tp.topic, tp.partition), 0))
        plans.append(
            PartitionPlan(
                tp.topic, tp.partition, start, max(start, clamped), end, topic_ids.get(tp.topic)
            )
        )
    if lost:
        raise RangeNotInKafkaError(
            f"Kafka no longer holds all of {time_range}: {'; '.join(lost)}. Nothing was "
            "written; choose --from at or after the earliest available time."
        )
    return plans
