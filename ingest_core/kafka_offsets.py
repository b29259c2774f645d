"""Kafka positions of a streaming checkpoint against what Kafka holds now.

Which offsets a checkpoint still needs that Kafka lost (retention, a re-created topic,
vanished partitions), the Kafka topic ids recorded beside Spark's files, and the rewrite of
the checkpoint's offsets after an accepted loss. Used by ``bronze_ingest`` before it starts
and by checkpoint recovery; imports neither pyspark nor Airflow.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest_core.settings import KafkaSettings, get_settings

#: Kafka clients of these checks are named after the job that reads the topics.
JOB_NAME = "bronze_ingest"


class MissingTopicError(RuntimeError):
    """Topics the job subscribes to do not exist in Kafka (the broker creates no topics on
    demand: ``auto.create.topics.enable=false``). The message names them and the command
    that creates them."""

    def __init__(self, topics: Sequence[str], bootstrap_servers: str) -> None:
        self.topics = list(topics)
        super().__init__(
            f"Kafka at {bootstrap_servers} has no topic {', '.join(self.topics)}; nothing was "
            "read. Create the platform's topics with `ingestctl kafka create-topics` (or send "
            "events with `ingestctl replay` / `ingestctl generate`, which create missing topics)."
        )


class DataLossError(RuntimeError):
    """Kafka no longer holds offsets the checkpoint needs (retention, recreated topic,
    vanished partitions).

    :param gaps: one dict per partition: ``topic``, ``partition``, ``first_missing_offset``,
        ``last_missing_offset`` (None when unknown), ``reason``, ``topic_id`` (the Kafka topic
        id the missing offsets belonged to, None when unknown).
    """

    def __init__(self, gaps: list[dict[str, Any]]) -> None:
        self.gaps = gaps
        lines = "; ".join(
            f"{g['topic']}[{g['partition']}] offsets {g['first_missing_offset']}.."
            f"{'?' if g['last_missing_offset'] is None else g['last_missing_offset']} "
            f"({g['reason']})"
            for g in gaps
        )
        super().__init__(
            f"Kafka lost data bronze_ingest has not read: {lines}. Nothing was written. To "
            "accept the loss and record it in bronze_kafka_gaps, run with --accept-data-loss; "
            "or restore the topic's data."
        )


#: Beside Spark's files in the checkpoint (and backed up with them): the Kafka topic id of
#: each topic when the query last started, ``{"topic": "uuid"}``. A topic whose id changed
#: was deleted and re-created, even if its new offsets already passed the old ones.
TOPIC_IDS_FILE = "kafka_topic_ids.json"

Partition = tuple[str, int]


@dataclass
class KafkaInspection:
    """What the checkpoint needs against what Kafka holds (:func:`inspect_kafka`).

    :param gaps: see :class:`DataLossError`.
    :param topic_ids: ``{topic: Kafka topic id}`` now (None for a broker without ids).
    :param restart_at: recreated partitions: the new topic's first offset, where reading
        must resume (Spark's Kafka source would resume at the new *end*: it takes a
        shrunken partition's end as its next start).
    :param floor: aged-out partitions: the earliest offset Kafka still holds.
    :param vanished: partitions the checkpoint has that the topic no longer has.
    """

    gaps: list[dict[str, Any]] = field(default_factory=list)
    topic_ids: dict[str, str | None] = field(default_factory=dict)
    restart_at: dict[Partition, int] = field(default_factory=dict)
    floor: dict[Partition, int] = field(default_factory=dict)
    vanished: set[Partition] = field(default_factory=set)


def kafka_topic_ids(
    bootstrap_servers: str, topics: Sequence[str], kafka: KafkaSettings | None = None
) -> dict[str, str | None]:
    """``{topic: Kafka topic id}`` of the existing ones of ``topics`` (admin metadata).

    A topic id (a UUID, KIP-516) is given when a topic is created; re-creating a topic gives
    a new one. None for a broker that has no topic ids.
    """
    from kafka import KafkaAdminClient

    config = (kafka or get_settings().kafka).client_config(bootstrap_servers)
    admin = KafkaAdminClient(**config, client_id=f"{JOB_NAME}-check")
    try:
        described = admin.describe_topics(list(topics))
    finally:
        admin.close()
    return {
        meta["name"]: _topic_id(meta)
        for meta in described
        if meta["error_code"] == 0 and meta["partitions"]
    }


def _topic_id(meta: Mapping[str, Any]) -> str | None:
    raw = meta.get("topic_id")  # all zeros from a broker without topic ids
    return str(raw) if raw is not None and str(raw).strip("0-") else None


def _describe(
    bootstrap_servers: str, topics: Sequence[str], kafka: KafkaSettings
) -> tuple[
    list[str],
    dict[str, str | None],
    dict[str, set[int]],
    dict[Partition, int],
    dict[Partition, int],
]:
    """Which of ``topics`` are missing, and the others' topic ids, partitions, earliest and
    end offsets."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    config = kafka.client_config(bootstrap_servers)
    admin = KafkaAdminClient(**config, client_id=f"{JOB_NAME}-check")
    try:
        described = {meta["name"]: meta for meta in admin.describe_topics(list(topics))}
    finally:
        admin.close()
    found = {t: m for t, m in described.items() if m["error_code"] == 0 and m["partitions"]}
    missing = [t for t in topics if t not in found]
    ids: dict[str, str | None] = {}
    partitions: dict[str, set[int]] = {}
    for topic, meta in found.items():
        ids[topic] = _topic_id(meta)
        partitions[topic] = {int(p["partition_index"]) for p in meta["partitions"]}
    wanted = [TopicPartition(t, p) for t in found for p in sorted(partitions[t])]
    consumer = KafkaConsumer(**config, enable_auto_commit=False)
    try:
        earliest = consumer.beginning_offsets(wanted) if wanted else {}
        latest = consumer.end_offsets(wanted) if wanted else {}
    finally:
        consumer.close()
    return (
        missing,
        ids,
        partitions,
        {(tp.topic, tp.partition): int(o) for tp, o in earliest.items()},
        {(tp.topic, tp.partition): int(o) for tp, o in latest.items()},
    )


def recorded_topic_ids(checkpoint: Path) -> dict[str, str]:
    """The topic ids recorded in ``checkpoint`` when the query last started (empty if none)."""
    path = Path(checkpoint) / TOPIC_IDS_FILE
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(t): str(i) for t, i in recorded.items() if i} if isinstance(recorded, dict) else {}


def inspect_kafka(
    checkpoint: Path,
    bootstrap_servers: str,
    topics: Sequence[str],
    kafka: KafkaSettings | None = None,
    *,
    missing_topics_are_gaps: bool = False,
) -> KafkaInspection:
    """Compare the checkpoint's committed offsets (and recorded topic ids) with Kafka.

    A committed partition is a gap when its next offset is no longer available:

    * its topic was re-created: the topic id changed, or the end offset is below the next
      offset; the new topic must be read from its first offset (``restart_at``);
    * the partition no longer exists (a topic re-created with fewer partitions: ``vanished``);
    * retention deleted it: the earliest offset is above the next offset (``floor``).

    :param missing_topics_are_gaps: report the checkpoint's partitions of a topic Kafka does
        not have as gaps, instead of raising.
    :raises MissingTopicError: a subscribed topic does not exist.
    """
    from ingest_core.delta_tables import committed_offsets

    kafka = kafka or get_settings().kafka
    missing, ids, partitions, earliest, latest = _describe(bootstrap_servers, topics, kafka)
    if missing and not missing_topics_are_gaps:
        raise MissingTopicError(missing, bootstrap_servers)
    found = KafkaInspection(topic_ids=ids)
    committed = committed_offsets(checkpoint)
    if committed is None or not committed["sources"] or committed["sources"][0] is None:
        return found
    offsets: dict[str, dict[str, int]] = committed["sources"][0]
    recorded = recorded_topic_ids(checkpoint)
    for topic in (t for t in offsets if t in topics):
        old_id, new_id = recorded.get(topic), ids.get(topic)
        id_changed = old_id is not None and new_id is not None and old_id != new_id
        now = partitions.get(topic, set())
        for partition in sorted(offsets[topic], key=int):
            tp, next_offset = (topic, int(partition)), int(offsets[topic][partition])
            last: int | None = None
            if tp[1] not in now:
                found.vanished.add(tp)
                reason = (
                    "topic no longer exists"
                    if topic in missing
                    else f"partition no longer exists: the topic has {len(now)} partition(s)"
                    f"{', it was re-created' if id_changed else ''}"
                )
            elif id_changed or latest[tp] < next_offset:
                why = [f"topic id {old_id} -> {new_id}"] if id_changed else []
                if latest[tp] < next_offset:
                    why.append(f"end offset {latest[tp]} < next {next_offset}")
                found.restart_at[tp] = earliest[tp]
                reason = (
                    f"topic recreated ({', '.join(why)}): the old topic's offsets from "
                    f"{next_offset} on are gone; the new topic is read from offset "
                    f"{earliest[tp]}"
                )
            elif earliest[tp] > next_offset:
                found.floor[tp] = earliest[tp]
                last, reason = earliest[tp] - 1, f"aged out: earliest offset is now {earliest[tp]}"
            else:
                continue
            found.gaps.append(_gap(tp, next_offset, last, old_id, reason))
    return found


def find_gaps(
    checkpoint: Path,
    bootstrap_servers: str,
    topics: Sequence[str],
    kafka: KafkaSettings | None = None,
) -> list[dict[str, Any]]:
    """The gaps of :func:`inspect_kafka`: offsets the checkpoint needs that Kafka lost.

    The clients connect to ``bootstrap_servers`` with the security settings (SASL, TLS) of
    ``kafka`` (the current profile's when ``None``).

    :returns: one gap per partition (see :class:`DataLossError`); the checkpoint's
        partitions of a topic Kafka no longer has are gaps too.
    """
    return inspect_kafka(
        checkpoint, bootstrap_servers, topics, kafka, missing_topics_are_gaps=True
    ).gaps


def _gap(
    tp: Partition, first: int, last: int | None, topic_id: str | None, reason: str
) -> dict[str, Any]:
    return {
        "topic": tp[0],
        "partition": tp[1],
        "first_missing_offset": first,
        "last_missing_offset": last,
        "reason": reason,
        "topic_id": topic_id,
    }


def resume_after_gaps(checkpoint: Path, found: KafkaInspection) -> list[int]:
    """Move the checkpoint's Kafka positions to where Kafka's data now is, so that Spark
    reads every record Kafka still holds and nothing it lost (accepted gaps only).

    Rewrites the offsets files Spark reads on restart: the newest committed batch's (where
    the next batch starts) and any later, uncommitted one (a batch Spark will re-run: its
    end offsets were planned against the old topic). Recreated partitions go to the new
    topic's first offset (in the uncommitted batch too, so it reads nothing of them and the
    next batch reads the new topic from its start); aged-out partitions at least to Kafka's
    earliest; vanished partitions are dropped. Each file is replaced atomically and its
    ``.N.crc`` checksum removed (Hadoop reads a file without one unchecked).

    :returns: the batch ids whose offsets file was rewritten.
    """
    from ingest_core.delta_tables import last_committed_batch

    if not (found.restart_at or found.floor or found.vanished):
        return []
    committed = last_committed_batch(checkpoint)
    folder = Path(checkpoint) / "offsets"
    if committed is None or not folder.is_dir():
        return []
    rewritten = []
    for batch in sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()):
        if batch < committed:
            continue
        path = folder / str(batch)
        lines = path.read_text().splitlines()
        if len(lines) < 3 or lines[2].strip() in ("", "-"):
            continue
        source: dict[str, dict[str, int]] = json.loads(lines[2])
        for topic, parts in source.items():
            for partition in list(parts):
                tp = (topic, int(partition))
                if tp in found.vanished:
                    del parts[partition]
                elif tp in found.restart_at:
                    parts[partition] = found.restart_at[tp]
                elif tp in found.floor:
                    parts[partition] = max(int(parts[partition]), found.floor[tp])
        lines[2] = json.dumps(source, separators=(",", ":"))
        temporary = path.with_name(f".{batch}.rewrite.tmp")
        temporary.write_text("\n".join(lines))
        (folder / f".{batch}.crc").unlink(missing_ok=True)
        os.replace(temporary, path)
        rewritten.append(batch)
    return rewritten


def record_topic_ids(checkpoint: Path, topic_ids: Mapping[str, str | None]) -> None:
    """Record the topic ids this start reads (see :data:`TOPIC_IDS_FILE`), atomically."""
    known = {t: i for t, i in topic_ids.items() if i}
    if not known:
        return
    folder = Path(checkpoint)
    folder.mkdir(parents=True, exist_ok=True)
    recorded = recorded_topic_ids(folder)
    if all(recorded.get(t) == i for t, i in known.items()):
        return
    temporary = folder / f".{TOPIC_IDS_FILE}.tmp"
    temporary.write_text(json.dumps(recorded | known, indent=1, sort_keys=True))
    os.replace(temporary, folder / TOPIC_IDS_FILE)
