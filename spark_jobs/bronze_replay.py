"""bronze_replay: re-read a time range of Kafka topics in batch and write what Bronze lacks.

For rebuilding Bronze after an accident (a deleted partition of ``bronze_events``, a restore
from an old backup, a range skipped with ``--accept-data-loss`` that Kafka still had):

1. **Plan** (kafka-python, before Spark starts): for each partition of each topic, the
   offsets whose Kafka timestamps fall in ``[from, to)`` (Kafka's offsets-by-timestamp
   lookup, ``offsets_for_times``). A range Kafka no longer holds entirely (retention
   deleted records the range may have had: the partition's log start is above 0 and its
   earliest remaining record is newer than ``from``) is **refused**, naming the partition
   and the earliest time still available. The plan ends at the offsets ``bronze_ingest``
   has committed: later records are the always-on job's to write, and writing them here
   would duplicate them when it gets there.
2. **Read** those offsets with Spark's Kafka batch source (``startingOffsets`` /
   ``endingOffsets``), shaped exactly like the streaming job's rows
   (:func:`spark_jobs.bronze_ingest.to_bronze`).
3. **Write** by MERGE on Bronze's identity ``(topic_id, topic, partition, offset)``,
   inserting only rows Bronze lacks: a range already in Bronze adds nothing, and running
   the replay twice adds nothing. ``topic_id`` is Kafka's id of the topic's incarnation: a
   deleted and re-created topic numbers its offsets from 0 again, and its records are not
   the old topic's records at the same offsets. Rows Bronze wrote before it recorded topic
   ids (null ``topic_id``) match any incarnation, so a replay never duplicates them.

Run::

    python -m spark_jobs.bronze_replay --topics payments,orders \\
        --from 2026-11-29T10:00:00Z --to 2026-11-29T11:00:00Z
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from ingest_core.catalog import get_catalog
from ingest_core.replay_plan import (
    MAX_RANGE,
    PartitionPlan,
    RangeNotInKafkaError,
    parse_topics,
    plan,
)
from ingest_core.settings import PlatformSettings, get_settings
from ingest_core.time_range import TimeRange, TimeRangeError
from spark_jobs.job_cli import run_job

JOB_NAME = "bronze_replay"


def replay(
    spark: SparkSession, plans: Sequence[PartitionPlan], settings: PlatformSettings | None = None
) -> dict[str, int]:
    """Read the planned offsets and insert the rows Bronze lacks.

    :returns: ``{"read": rows read from Kafka, "inserted": rows added to Bronze}``.
    """

    from ingest_core.delta_tables import table_exists
    from spark_jobs.bronze_ingest import to_bronze
    from spark_jobs.delta_io import ensure_table_properties

    settings = settings or get_settings()
    todo = [p for p in plans if p.records]
    if not todo:
        return {"read": 0, "inserted": 0}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for p in todo:
        starting.setdefault(p.topic, {})[str(p.partition)] = p.start
        ending.setdefault(p.topic, {})[str(p.partition)] = p.end
    topic_ids = {p.topic: p.topic_id for p in todo}
    rows = to_bronze(
        spark.read.format("kafka")
        .options(**settings.kafka.spark_options())
        .option("assign", json.dumps({t: [int(p) for p in parts] for t, parts in starting.items()}))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("failOnDataLoss", "true")
        .load(),
        topic_ids,
    ).localCheckpoint()  # read Kafka once: counted, then merged
    read = rows.count()
    table = get_catalog().table("bronze_events")
    path = str(table.path(settings))
    if not table_exists(path):
        # Created as bronze_ingest creates it, with the catalog's table properties. On an
        # existing table they are bronze_ingest's to set: an ALTER from here, beside its
        # commits, could fail one of them.
        ensure_table_properties(
            spark,
            table.path(settings),
            table.delta_properties,
            schema=rows.schema,
            partition_by=table.partition_by,
        )
        rows.write.format("delta").mode("append").partitionBy(*table.partition_by).save(path)
        return {"read": read, "inserted": read}
    topics = ", ".join(f"'{t}'" for t in starting)
    target = DeltaTable.forPath(spark, path)
    identity = (
        f"t.topic IN ({topics}) AND t.topic = s.topic AND t.partition = s.partition "
        "AND t.offset = s.offset"
    )
    if "topic_id" in target.toDF().columns:
        # Another incarnation's record at the same offset is a different record; a row
        # written before topic ids were recorded (null) may be any incarnation's.
        identity += " AND (t.topic_id IS NULL OR t.topic_id <=> s.topic_id)"
    metrics = (
        target.alias("t")
        .merge(rows.alias("s"), identity)
        .withSchemaEvolution()  # a Bronze table from before topic_id gains the column
        .whenNotMatchedInsertAll()
        .execute()  # one row of counts (num_inserted_rows, ...); no commit when none
    ).collect()
    inserted = int(metrics[0]["num_inserted_rows"]) if metrics else 0
    return {"read": read, "inserted": inserted}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``--topics``, ``--from``, ``--to``; a bad value exits 2 saying what is wrong."""
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__.splitlines()[0])
    parser.add_argument("--topics", required=True, help="contract topics, comma-separated")
    parser.add_argument("--from", dest="start", required=True, help="e.g. 2026-11-29T10:00Z")
    parser.add_argument("--to", dest="end", required=True, help="end of the range (excluded)")
    args = parser.parse_args(argv)
    try:
        args.range = TimeRange.parse(args.start, args.end, MAX_RANGE)
        args.kafka_topics = parse_topics(args.topics)
    except (TimeRangeError, ValueError) as error:
        parser.error(str(error))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: prints the plan and the counts as JSON lines; a range
    Kafka no longer holds exits 1 with the earliest available time, before Spark starts."""
    args = parse_args(argv)

    def body(session: Callable[..., SparkSession]) -> None:
        plans = plan(args.kafka_topics, args.range)  # before Spark: a refusal starts no JVM
        summary: dict[str, Any] = {"range": str(args.range)}
        for p in plans:
            extra = {"records": p.records, "left_to_stream": p.left_to_stream}
            print(json.dumps(asdict(p) | extra))
        counts = {"read": 0, "inserted": 0}
        print(
            json.dumps(
                summary | (replay(session(), plans) if any(p.records for p in plans) else counts)
            )
        )

    return run_job(JOB_NAME, body, lock=None, refusals=(RangeNotInKafkaError,))


if __name__ == "__main__":
    sys.exit(main())
