"""bronze_ingest: Kafka topics -> ``bronze_events`` (Delta), every record exactly as it arrived.

Bronze never parses and never drops: key and value bytes stay untouched, so that every later
layer can be rebuilt from it. Exactly-once comes from the Delta streaming sink, which commits
each micro-batch once per (query id, batch id) recorded in the checkpoint.

Run with spark-submit (or ``python -m spark_jobs.bronze_ingest``)::

    spark-submit spark_jobs/bronze_ingest.py --trigger available-now
    spark-submit spark_jobs/bronze_ingest.py --trigger processing-time=10s
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.catalog import KafkaSourceSpec, get_catalog
from spark_jobs.job_cli import job_parser, operator_errors, owned_checkpoint, parse_job_args
from spark_jobs.settings import KafkaSettings, get_settings
from spark_jobs.triggers import TriggerError, TriggerSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

JOB_NAME = "bronze_ingest"
#: Spark 4.2's real-time mode cannot write Delta.
REAL_TIME_REFUSAL = "bronze_ingest writes a Delta table; real-time mode supports only Kafka, "
REAL_TIME_REFUSAL += "foreach, console and memory sinks (Spark 4.2)"


def to_bronze(
    kafka_records: DataFrame, topic_ids: Mapping[str, str | None] | None = None
) -> DataFrame:
    """Shape Kafka source records into Bronze rows. Pure: no I/O, no parsing.

    :param kafka_records: rows of Spark's Kafka source: ``key`` binary, ``value`` binary,
        ``topic`` string, ``partition`` int, ``offset`` bigint, ``timestamp`` timestamp,
        ``timestampType`` int.
    :param topic_ids: ``{topic name: Kafka topic id}`` of the topics being read (the UUID
        Kafka gives a topic when it is created; a deleted and re-created topic gets a new
        one). Spark's Kafka source does not expose it, so the caller looks it up when the
        query starts. ``None``, or a topic not in the mapping: ``topic_id`` is null.
    :returns: ``key`` binary, ``value`` binary, ``topic`` string, ``topic_id`` string (the
        topic's incarnation; ``(topic_id, topic, partition, offset)`` identifies a record
        across re-creations of a topic), ``partition`` int, ``offset`` bigint,
        ``kafka_timestamp`` timestamp, ``kafka_timestamp_type`` int (0 create time,
        1 log-append time), ``ingestion_time`` timestamp (the micro-batch's start, UTC),
        ``ingestion_date`` date (partition column, from ``ingestion_time``).
    """
    from pyspark.sql import functions as F

    ids = {t: i for t, i in (topic_ids or {}).items() if i}
    topic_id = (
        F.create_map(*[F.lit(x) for pair in sorted(ids.items()) for x in pair])[F.col("topic")]
        if ids
        else F.lit(None).cast("string")
    )
    return kafka_records.select(
        F.col("key"),
        F.col("value"),
        F.col("topic"),
        topic_id.alias("topic_id"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("timestampType").alias("kafka_timestamp_type"),
        F.current_timestamp().alias("ingestion_time"),
    ).withColumn("ingestion_date", F.to_date("ingestion_time"))


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
    from spark_jobs.delta_io import committed_offsets

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
    from spark_jobs.delta_io import last_committed_batch

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


def record_gaps(spark: SparkSession, gaps: list[dict[str, Any]], path: Path) -> None:
    """Append accepted gaps (with the time they were accepted) to ``bronze_kafka_gaps``.

    ``topic_id`` (the incarnation the missing offsets belonged to) joined the table later:
    older tables gain the column (schema merge)."""
    from datetime import UTC, datetime

    rows = [{"topic_id": None} | g | {"accepted_at": datetime.now(UTC)} for g in gaps]
    spark.createDataFrame(
        rows,
        "topic string, partition int, first_missing_offset long, last_missing_offset long, "
        "reason string, topic_id string, accepted_at timestamp",
    ).write.format("delta").mode("append").option("mergeSchema", "true").save(str(path))


def start(
    spark: SparkSession,
    *,
    trigger: TriggerSpec,
    topics: Sequence[str] | None = None,
    table_path: Path | None = None,
    checkpoint: Path | None = None,
    bootstrap_servers: str | None = None,
    max_offsets_per_trigger: int | None = None,
    starting_offsets: str = "earliest",
    accept_data_loss: bool = False,
) -> StreamingQuery:
    """Start the bronze_ingest streaming query and return it (the caller waits or stops it).

    Defaults come from ``include/pipeline.yaml`` and the platform settings; tests pass their
    own topics, table path and checkpoint.

    :param trigger: see :mod:`spark_jobs.triggers`.
    :param topics: Kafka topics to subscribe to.
    :param table_path: Delta table to append to (``bronze_events``'s path by default).
    :param checkpoint: the query's checkpoint folder (the job's own by default).
    :param bootstrap_servers: Kafka ``host:port`` list.
    :param max_offsets_per_trigger: records per micro-batch at most (AvailableNow honours it).
    :param starting_offsets: where a *new* checkpoint starts: ``earliest`` or ``latest``;
        ignored once the checkpoint has offsets.
    :param accept_data_loss: when Kafka no longer holds offsets the checkpoint needs, record
        the gaps in ``bronze_kafka_gaps`` and go on from the earliest available offset (a
        re-created topic from its first offset; vanished partitions are dropped), instead of
        failing.
    :raises TriggerError: a real-time trigger (this job writes Delta).
    :raises MissingTopicError: a subscribed topic does not exist; names it and the command
        that creates it.
    :raises DataLossError: Kafka lost data the checkpoint needs and ``accept_data_loss`` is
        false; the message names topic, partition and missing offsets.
    """
    if trigger.kind == "real-time":
        raise TriggerError(REAL_TIME_REFUSAL)
    catalog = get_catalog()
    job = catalog.job(JOB_NAME)
    table = catalog.table(job.sink)
    settings = get_settings()
    assert isinstance(job.source, KafkaSourceSpec)
    bootstrap = bootstrap_servers or settings.kafka.bootstrap_servers
    subscribed = list(topics or [settings.kafka.topic(t) for t in job.source.topics])
    checkpoint_path = checkpoint or job.checkpoint(settings)
    found = inspect_kafka(checkpoint_path, bootstrap, subscribed, settings.kafka)
    if found.gaps and not accept_data_loss:
        raise DataLossError(found.gaps)
    if found.gaps:
        record_gaps(spark, found.gaps, catalog.table("bronze_kafka_gaps").path(settings))
        resume_after_gaps(checkpoint_path, found)
    # Every row carries the id of the topic incarnation it was read from, looked up now. A
    # topic re-created while the query runs fails it when offsets shrink or partitions vanish
    # (failOnDataLoss), and the next start sees the new id; a new topic that overtakes the
    # old end between two micro-batches is not seen (Spark's Kafka source has no topic ids).
    record_topic_ids(checkpoint_path, found.topic_ids)
    reader = (
        spark.readStream.format("kafka")
        # bootstrap servers and the security settings (SASL, TLS) of the profile
        .options(**settings.kafka.spark_options(bootstrap))
        .option("subscribe", ",".join(subscribed))
        .option("startingOffsets", starting_offsets)
        # Lost data fails the query loudly. Accepted gaps were recorded above and the
        # checkpoint's positions moved past them, so Spark finds no loss to skip silently.
        .option("failOnDataLoss", "true")
    )
    limit = max_offsets_per_trigger or job.max_offsets_per_trigger
    if limit:
        reader = reader.option("maxOffsetsPerTrigger", str(limit))
    writer = (
        to_bronze(reader.load(), found.topic_ids)
        .writeStream.format("delta")
        .outputMode("append")
        .partitionBy(*table.partition_by)
        # a Bronze table from before topic_id existed gains the column (null in old rows)
        .option("mergeSchema", "true")
        .option("checkpointLocation", str(checkpoint_path))
        .queryName(JOB_NAME)
    )
    return trigger.apply(writer).start(str(table_path or table.path(settings)))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the job's command line; a bad value exits 2 with a message saying what is wrong."""
    parser = job_parser(JOB_NAME, __doc__.splitlines()[0])
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument(
        "--accept-data-loss",
        action="store_true",
        help="if Kafka lost offsets this job needs, record the gaps and go on",
    )
    args = parse_job_args(parser, argv, REAL_TIME_REFUSAL)
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        parser.error("--max-offsets-per-trigger must be a positive number of records")
    return args


@operator_errors
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for spark-submit: run until the trigger ends (AvailableNow), a stop is
    requested (:mod:`spark_jobs.streaming_runtime`), or the query fails."""
    from spark_jobs.session import build_spark_session
    from spark_jobs.streaming_runtime import run_supervised

    args = parse_args(argv)
    with owned_checkpoint(JOB_NAME):
        spark = build_spark_session(JOB_NAME)
        try:
            return run_supervised(
                spark,
                JOB_NAME,
                lambda: [
                    start(
                        spark,
                        trigger=args.trigger,
                        max_offsets_per_trigger=args.max_offsets_per_trigger,
                        accept_data_loss=args.accept_data_loss,
                    )
                ],
            )
        except (DataLossError, MissingTopicError) as error:
            print(f"bronze_ingest: {error}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
