"""silver_refine: ``bronze_events`` (Delta stream) -> one Silver table per event type.

Each micro-batch, in ``foreachBatch``, in one pass (every record is parsed once and decided
once, the decisions are materialised once and one aggregation gives every count; see
:func:`spark_jobs.transforms.silver.parse_batch` and :func:`~spark_jobs.transforms.silver.decide`):

1. parse every record against its topic's contracts (:mod:`spark_jobs.transforms.silver`);
   unusable records go to ``silver_quarantine`` with raw bytes, coordinates, reason, detail;
2. usable events older than their topic's watermark in force at the start of the batch go
   to ``silver_late_events`` with how late they were (watermarks below);
3. on-time events of every type are deduplicated on ``event_id`` by one join with the ids
   kept by earlier batches (``silver_event_ids``, read back to the id horizon: its row
   retention's ``keep`` in the catalog, 30 days, before the watermark) and inside the
   batch; a duplicate whose payload differs from the kept one is recorded in
   ``silver_dedup_conflicts``;
4. sources declaring ``enrich: [customers]`` (orders, payments) are enriched with the
   customers dimension (read fresh each batch);
5. the counts must balance: read = written + quarantined + duplicates + late, else the run
   fails with the numbers; they are recorded in ``silver_reconciliation`` with the watermarks.

Watermarks (see :func:`advance_watermarks`): each Kafka partition of each topic has its
maximum event time kept so far; a *topic's* watermark is the *minimum* over its partitions of
that maximum, minus ``dedup_watermark``, and never moves back; lateness is decided per topic.
So an event far ahead on one partition moves neither the other partitions nor the other
topics (the Flink rule for partitions, Spark's default ``multipleWatermarkPolicy=min`` for
combining): one outlier cannot make everyone else's on-time events late. The single
``watermark`` recorded per batch is the minimum over the topics (what a consumer of all of
Silver may treat as complete). The price of the minimum: a partition that stops receiving
events holds its topic's watermark back, so fewer events count as late (they are refined
into Silver as usual; Gold's own watermarks still decide what is final). Records whose event
time is implausibly far ahead (``event_time_skew``, see
:func:`spark_jobs.transforms.silver.parse_topic`) are quarantined before they can move any
watermark.

Why not ``dropDuplicatesWithinWatermark``: it drops late rows and duplicates silently, so
they could not be written to ``silver_late_events``, conflicts could not be recorded and the
counts could not be reconciled. The same rule is kept explicitly instead, with its state in
Delta (``silver_event_ids``, and the watermark in ``silver_reconciliation``) so that it
carries over restarts and AvailableNow runs. Every write passes ``txnAppId`` (the query id)
and ``txnVersion`` (the batch id), and a batch reads state only from *earlier* batches, so a
batch replayed after a crash makes the same decisions and writes nothing twice.

Run::

    python -m spark_jobs.silver_refine --trigger available-now
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from ingest_core.catalog import Catalog, get_catalog
from ingest_core.contracts import CONTRACTS, TOPICS, get_contracts
from ingest_core.delta_tables import checkpoint_query_id, table_exists
from ingest_core.intervals import parse_interval
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.delta_io import append_idempotent, read_table
from spark_jobs.job_cli import job_parser, parse_job_args, run_job
from spark_jobs.local_frames import local_frame
from spark_jobs.transforms.silver import (
    COORDINATES,
    DUPLICATE,
    KEPT,
    LATE,
    QUARANTINED,
    decide,
    enrich_with_customers,
    parse_batch,
    prepare_parse,
    quarantine_rows,
)
from spark_jobs.triggers import TriggerError, TriggerSpec

JOB_NAME = "silver_refine"
#: The table every batch records its counts and watermarks in, last.
RECONCILIATION = "silver_reconciliation"
#: Its columns (include/pipeline.yaml points here): the job and its query (the
#: ``txnAppId``), the batch, :class:`BatchCounts`, the newest kept event time, the combined
#: watermark, the batch's clock, and :class:`Watermarks` per topic and per partition.
RECONCILIATION_SCHEMA = (
    "job string, query_id string, batch_id long, records_read long, "
    "records_written long, records_quarantined long, duplicates_dropped long, "
    "late_events long, dedup_conflicts long, max_event_time timestamp, "
    "watermark timestamp, batch_time timestamp, "
    "topic_watermarks map<string, timestamp>, partition_max_event_times "
    "array<struct<topic: string, partition: int, max_event_time: timestamp>>"
)
REAL_TIME_REFUSAL = (
    "silver_refine writes Delta tables and keeps deduplication state; Spark 4.2's real-time "
    "mode supports only stateless queries with Kafka, foreach, console or memory sinks"
)


class ReconciliationError(RuntimeError):
    """A micro-batch's counts do not balance; the message has every number."""


@dataclass
class BatchCounts:
    """One micro-batch's reconciliation: ``read == written + quarantined + duplicates + late``."""

    read: int = 0
    written: int = 0
    quarantined: int = 0
    duplicates: int = 0
    late: int = 0
    conflicts: int = 0

    def check(self, batch_id: int) -> None:
        """:raises ReconciliationError: the counts do not balance."""
        accounted = self.written + self.quarantined + self.duplicates + self.late
        if accounted != self.read:
            raise ReconciliationError(
                f"silver_refine batch {batch_id}: read {self.read} records but accounted for "
                f"{accounted} (written {self.written} + quarantined {self.quarantined} + "
                f"duplicates {self.duplicates} + late {self.late})"
            )


#: (contract topic, Kafka partition).
PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class Watermarks:
    """Silver's event-time progress after a batch (see the module docstring).

    Times are as Spark returns them (naive, in the session time zone, UTC here).

    :param partition_max: (contract topic, Kafka partition) -> newest event time kept.
    :param topics: contract topic -> its watermark: events before it are late.
    :param fallback: the single watermark of a batch recorded before watermarks were kept
        per topic (upgrade path): it stands for every topic that has none of its own yet.
    """

    partition_max: dict[PartitionKey, datetime] = field(default_factory=dict)
    topics: dict[str, datetime] = field(default_factory=dict)
    fallback: datetime | None = None

    def for_topic(self, topic: str) -> datetime | None:
        """The watermark that decides lateness on ``topic`` (None: nothing is late)."""
        return self.topics.get(topic, self.fallback)

    @property
    def combined(self) -> datetime | None:
        """The minimum over the topics (policy ``min``): one number for all of Silver."""
        marks = list(self.topics.values()) or ([self.fallback] if self.fallback else [])
        return min(marks) if marks else None

    @property
    def max_event_time(self) -> datetime | None:
        """The newest event time kept on any partition (information, not a watermark)."""
        return max(self.partition_max.values()) if self.partition_max else None


def advance_watermarks(
    previous: Watermarks, batch_max: dict[PartitionKey, datetime], delay: timedelta
) -> Watermarks:
    """Fold one batch's newest kept event time per partition into the watermarks.

    A partition's maximum only grows. A topic's watermark is ``min(partition maxima) -
    delay`` over the partitions that ever had an event kept, and never moves back (a new
    partition with older events does not lower it). Topics the batch did not touch keep
    their watermark.

    :param previous: the state after the earlier batch.
    :param batch_max: (topic, partition) -> newest event time kept in this batch.
    :param delay: ``dedup_watermark``, how far a watermark trails the event times.
    :returns: the new state; ``previous`` is not changed.
    """
    partition_max = dict(previous.partition_max)
    for key, newest in batch_max.items():
        partition_max[key] = max(newest, partition_max.get(key, newest))
    topics: dict[str, datetime] = {}
    for topic in sorted({t for t, _ in partition_max} | set(previous.topics)):
        maxima = [newest for (t, _), newest in partition_max.items() if t == topic]
        candidates = [min(maxima) - delay] if maxima else []
        old = previous.for_topic(topic)
        topics[topic] = max([*candidates, *([old] if old else [])])
    return Watermarks(partition_max, topics, previous.fallback)


def id_horizon(watermarks: dict[str, datetime | None], keep: timedelta) -> datetime | None:
    """How far back a batch reads the id history: ``keep`` before the lowest watermark of
    the batch's topics, or None (every id) while one of them has no watermark yet.

    An on-time event of a topic is at or after its topic's watermark, and so is the first
    occurrence of an exact re-send; on a topic without a watermark nothing is late, so an
    id of any age must still meet its original there.

    :param watermarks: contract topic of the batch -> its watermark in force (or None).
    :param keep: ``keep`` of ``silver_event_ids``' row retention (the catalog's 30 days).
    """
    marks = [mark for mark in watermarks.values() if mark is not None]
    if not marks or len(marks) < len(watermarks):
        return None
    return min(marks) - keep


class SilverBatchWriter:
    """The ``foreachBatch`` function of silver_refine (see the module docstring)."""

    def __init__(self, spark: SparkSession, catalog: Catalog, settings: PlatformSettings) -> None:
        job = catalog.job(JOB_NAME)
        self.spark = spark
        self.catalog = catalog
        self.settings = settings
        self.checkpoint = job.checkpoint(settings)
        self.delay = parse_interval(job.setting("dedup_watermark"))
        self.max_future_skew = parse_interval(job.setting("max_future_skew"))
        self.event_time_skew = parse_interval(job.setting("event_time_skew"))
        #: Kept ids are read back to this long before the watermark (None: all of them).
        self.id_retention = catalog.table("silver_event_ids").maintenance.keep_rows
        self._app_id: str | None = None

    def path(self, table: str) -> Any:
        """Delta path of a declared table."""
        return self.catalog.table(table).path(self.settings)

    def app_id(self) -> str:
        """``txnAppId`` of every write: the job and its streaming query id (a new checkpoint
        is a new query, whose batch ids restart at 0, so it needs its own application id)."""
        if self._app_id is None:
            self._app_id = f"{JOB_NAME}-{checkpoint_query_id(self.checkpoint)}"
        return self._app_id

    def _append(self, df: DataFrame, table: str, batch_id: int) -> None:
        spec = self.catalog.table(table)
        append_idempotent(
            df,
            self.path(table),
            app_id=self.app_id(),
            version=batch_id,
            partition_by=spec.partition_by,
        )

    def _state(self, batch_id: int) -> Watermarks:
        """The watermarks after this query's newest batch before ``batch_id``.

        Scoped to this query: a new checkpoint (new query, batch ids from 0 again) starts
        without a watermark instead of mixing in another query's batches. A batch recorded
        before watermarks were kept per partition gives its single watermark as fallback.
        """
        recon = read_table(self.spark, self.path(RECONCILIATION))
        if recon is None or "query_id" not in recon.columns:
            return Watermarks()
        per_topic = [
            c for c in ("topic_watermarks", "partition_max_event_times") if c in recon.columns
        ]
        row = (
            recon.where(
                (F.col("job") == JOB_NAME)
                & (F.col("query_id") == self.app_id())
                & (F.col("batch_id") < batch_id)
            )
            .orderBy(F.col("batch_id").desc())
            .select("watermark", *per_topic)
            .first()
        )
        if row is None:
            return Watermarks()
        if len(per_topic) < 2 or row.topic_watermarks is None:
            return Watermarks(fallback=row.watermark)
        return Watermarks(
            {(p.topic, p.partition): p.max_event_time for p in row.partition_max_event_times},
            dict(row.topic_watermarks),
        )

    def _seen(self, batch_id: int, watermarks: dict[str, datetime | None]) -> DataFrame:
        """The ids already kept within the deduplication horizon, except by this query's
        batches from ``batch_id`` on (which a replayed batch must not see: it would take its
        own rows for duplicates).

        The horizon is ``keep`` of ``silver_event_ids``' row retention in the catalog (30
        days) before the lowest watermark of the batch's topics: table maintenance prunes
        ids older than that before the combined watermark (the minimum over all topics,
        measured at its newest, never ahead of these), and reading the same cut here makes
        a batch decide the same whether or not maintenance has run yet. An event that old
        is late on its topic anyway; only an id re-sent with a newer event time more than
        ``keep`` later is taken for a new event (see ``include/pipeline.yaml``). While one
        of the batch's topics has no watermark yet (nothing is late on it), every id is read.

        :param watermarks: contract topic of the batch -> its watermark in force.
        The cut is a filter on ``event_time``, so Delta skips the files of older ids by
        their statistics (batches append them roughly in event-time order). Ids kept by
        earlier queries (before a checkpoint was reset) count too, so re-reading Bronze does
        not write Silver twice.

        :returns: ``event_id`` string, ``payload_hash`` string (possibly several rows per id).
        """
        seen = read_table(self.spark, self.path("silver_event_ids"))
        if seen is None:
            return local_frame(self.spark, [], "event_id string, payload_hash string")
        if "query_id" in seen.columns:
            mine_later = (F.col("query_id") == self.app_id()) & (F.col("batch_id") >= batch_id)
            seen = seen.where(~F.coalesce(mine_later, F.lit(False)))
        horizon = self.id_retention
        if horizon and horizon.time_column in seen.columns:
            cutoff = id_horizon(watermarks, horizon.keep_delta)
            if cutoff is not None:
                after = F.col(horizon.time_column) >= F.lit(cutoff).cast("timestamp")
                seen = seen.where(F.coalesce(after, F.lit(True)))
        return seen.select("event_id", "payload_hash")

    def _customers(self) -> DataFrame:
        customers = read_table(self.spark, self.path("silver_customers"))
        if customers is None:
            return local_frame(
                self.spark, [], "customer_id string, city string, state string, country string"
            )
        return customers

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Process one micro-batch of Bronze rows (schema of ``bronze_events``) in one pass,
        stage by stage: read its topics, parse and decide every record once
        (:meth:`_decide`), count the decisions in one aggregation
        (:func:`count_decisions`), write Silver and the bookkeeping tables from the
        materialised decisions, and record the balanced counts and watermarks last."""
        batch = batch.persist()
        try:
            per_topic = {
                r.topic: (r.n, r.newest)
                for r in batch.groupBy("topic")
                .agg(F.count("*").alias("n"), F.max("ingestion_time").alias("newest"))
                .collect()
            }
            read = sum(n for n, _ in per_topic.values())
            if read == 0:
                return
            # Deterministic "now" for the future-skew rule: a replayed batch decides the same.
            now = max(newest for _, newest in per_topic.values()).replace(tzinfo=UTC)
            state = self._state(batch_id)
            decided, columns = self._decide(batch, batch_id, list(per_topic), state, now)
            batch.unpersist()  # everything below reads `decided`
            summary = (
                decided.groupBy("_contract_topic", "partition", "_decision")
                .agg(
                    F.count("*").alias("n"),
                    F.max("event_time").alias("top"),
                    F.sum(F.col("_conflict").cast("long")).alias("conflicts"),
                )
                .collect()
            )
            counts, batch_max = count_decisions(summary, read)
            for topic in sorted({topic for topic, _ in batch_max}):
                self._write_silver(decided, topic, columns[topic], batch_id)
            self._write_bookkeeping(decided, columns, counts, batch_id)
            counts.check(batch_id)
            new = advance_watermarks(state, batch_max, self.delay)
            # Written last: a batch is recorded only once everything else is in.
            self._append(self._reconciliation(batch_id, counts, new, now), RECONCILIATION, batch_id)
        finally:
            # `decided`'s blocks go when the JVM collects its RDD (Spark's ContextCleaner).
            batch.unpersist()

    def _decide(
        self,
        batch: DataFrame,
        batch_id: int,
        kafka_topics: list[str],
        state: Watermarks,
        now: datetime,
    ) -> tuple[DataFrame, dict[str, list[str]]]:
        """Parse and decide every record of the batch, enrich, and materialise the result.

        :returns: :func:`~spark_jobs.transforms.silver.decide`'s rows (enriched where a
            source asks), materialised with their lineage cut; and each contract topic's
            usable columns (:func:`~spark_jobs.transforms.silver.parse_batch`).
        """
        contract_topics = {
            kafka_topic: topic if topic in TOPICS else None
            for kafka_topic in kafka_topics
            for topic in [self.settings.kafka.contract_topic(kafka_topic)]
        }
        parsed, columns = parse_batch(
            batch,
            contract_topics,
            now=now,
            max_future_skew=self.max_future_skew,
            event_time_skew=self.event_time_skew,
        )
        watermarks = {topic: state.for_topic(topic) for topic in columns}
        decided = decide(parsed, watermarks, self._seen(batch_id, watermarks))
        # Enriched before the counts: a dimension that multiplied rows would unbalance them
        # (ReconciliationError) instead of writing an event twice. Materialised once with its
        # lineage cut (a local checkpoint, MEMORY_AND_DISK): the summary and each write
        # (one per table) planned the whole parse-decide-enrich plan again when it was only
        # persisted (constraint sets, cache lookups by canonical plan); a medallion
        # integration test ran 112-125 s instead of 136 s.
        sources = get_contracts().sources
        if any("customers" in sources[topic].enrich for topic in columns):
            decided = enrich_with_customers(decided, self._customers())
        return decided.localCheckpoint(), columns

    def _write_silver(
        self, decided: DataFrame, topic: str, columns: list[str], batch_id: int
    ) -> None:
        """Append ``topic``'s kept events to its Silver table: ``event_id`` first, then its
        parsed columns, then (sources enriched with customers) the customer's."""
        first = decided.where((F.col("_contract_topic") == topic) & (F.col("_decision") == KEPT))
        fields = ["event_id", *[c for c in columns if c not in _NOT_IN_SILVER]]
        if "customers" in get_contracts().sources[topic].enrich:  # x-ingest-source.enrich
            fields += ["customer_city", "customer_state", "customer_country"]
        table = next(c.silver_table for c in CONTRACTS.values() if c.topic == topic)
        self._append(first.select(*fields), table, batch_id)

    def _write_bookkeeping(
        self,
        decided: DataFrame,
        columns: dict[str, list[str]],
        counts: BatchCounts,
        batch_id: int,
    ) -> None:
        """Append the kept ids, the late events, the conflicts and the quarantined records
        (each only when the batch has some), stamped with the batch and query ids."""
        decision = F.col("_decision")
        payload = F.lit(None).cast("string")
        for topic, topic_columns in sorted(columns.items()):
            fields = [c for c in topic_columns if c not in COORDINATES]
            payload = F.when(
                F.col("_contract_topic") == topic, F.to_json(F.struct(*fields))
            ).otherwise(payload)
        late = [*COORDINATES, "event_time", "watermark", "lateness_seconds"]
        writes: list[tuple[int, str, Callable[[], DataFrame]]] = [
            (
                counts.written,
                "silver_event_ids",
                lambda: decided.where(decision == KEPT).select(
                    "event_id", "payload_hash", "event_time", "event_date"
                ),
            ),
            (
                counts.late,
                "silver_late_events",
                lambda: decided.where(decision == LATE).select(
                    "event_id", "event_type", *late, payload.alias("payload_json")
                ),
            ),
            (
                counts.conflicts,
                "silver_dedup_conflicts",
                lambda: decided.where("_conflict").select(
                    "event_id", *COORDINATES, "payload_hash", "first_payload_hash"
                ),
            ),
            (counts.quarantined, "silver_quarantine", lambda: self._fresh_quarantine(decided)),
        ]
        batch = F.lit(batch_id).cast("long").alias("batch_id")
        query = F.lit(self.app_id()).alias("query_id")
        for rows, table, select in writes:
            if rows:
                self._append(select().select("*", batch, query), table, batch_id)

    def _fresh_quarantine(self, decided: DataFrame) -> DataFrame:
        """The batch's quarantined records that no other query (before a checkpoint reset)
        wrote already: counted either way, written once."""
        fresh = quarantine_rows(decided)
        earlier = read_table(self.spark, self.path("silver_quarantine"))
        if earlier is not None and "query_id" in earlier.columns:
            other = earlier.where(~F.coalesce(F.col("query_id") == self.app_id(), F.lit(False)))
            fresh = fresh.join(
                other.select("topic", "partition", "offset"),
                ["topic", "partition", "offset"],
                "left_anti",
            )
        return fresh

    def _reconciliation(
        self, batch_id: int, counts: BatchCounts, new: Watermarks, now: datetime
    ) -> DataFrame:
        """The batch's ``silver_reconciliation`` row (:data:`RECONCILIATION_SCHEMA`)."""
        partitions = [(t, p, m) for (t, p), m in sorted(new.partition_max.items())]
        row = (
            JOB_NAME,
            self.app_id(),
            batch_id,
            counts.read,
            counts.written,
            counts.quarantined,
            counts.duplicates,
            counts.late,
            counts.conflicts,
            new.max_event_time,
            new.combined,
            now,
            new.topics or None,
            partitions or None,
        )
        return local_frame(self.spark, [row], RECONCILIATION_SCHEMA)


def count_decisions(
    summary: Sequence[Any], read: int
) -> tuple[BatchCounts, dict[PartitionKey, datetime]]:
    """Fold the per-(topic, partition, decision) summary of a batch into its counts and the
    newest kept event time per partition (what the watermarks advance by).

    :param summary: rows with ``_contract_topic``, ``partition``, ``_decision`` (one of
        ``spark_jobs.transforms.silver``'s ``KEPT``, ``DUPLICATE``, ``LATE``,
        ``QUARANTINED``), ``n`` (records), ``top`` (newest event time) and ``conflicts``.
    :param read: the batch's records.
    :returns: ``(counts, batch_max)``; ``batch_max``'s topics are those with kept events.
    """
    counts = BatchCounts(read=read)
    batch_max: dict[PartitionKey, datetime] = {}
    for r in summary:
        if r._decision == KEPT:
            batch_max[(r._contract_topic, r.partition)] = r.top
            counts.written += r.n
        elif r._decision == DUPLICATE:
            counts.duplicates += r.n
            counts.conflicts += r.conflicts
        elif r._decision == LATE:
            counts.late += r.n
        elif r._decision == QUARANTINED:
            counts.quarantined += r.n
    return counts, batch_max


#: Parsed columns that are bookkeeping, not Silver data (``payload_hash`` goes to
#: ``silver_event_ids``; ``event_id`` is placed first).
_NOT_IN_SILVER = ("event_id", "payload_hash")


def _union(frames: list[DataFrame]) -> DataFrame:
    result = frames[0]
    for more in frames[1:]:
        result = result.unionByName(more, allowMissingColumns=True)
    return result


def load_customers(spark: SparkSession, settings: PlatformSettings | None = None) -> int:
    """Load the customers dimension from ``<landing_dir>/customers/*.parquet`` (written by
    ``ingestctl replay``) into ``silver_customers`` by MERGE on ``customer_id``.

    Idempotent: loading the same files twice changes nothing. A customer in several files
    takes the values of the file loaded last (files in name order).

    :returns: rows in the landing files (0 when there are none).
    """
    settings = settings or get_settings()
    files = sorted((settings.storage.landing_path / "customers").glob("*.parquet"))
    if not files:
        return 0
    columns = [
        "customer_id",
        "customer_unique_id",
        "zip_code_prefix",
        "city",
        "state",
        "country",
        "source",
    ]
    frames = []
    for order, file in enumerate(files):
        df = spark.read.parquet(str(file))
        for column in columns:
            if column not in df.columns:
                df = df.withColumn(column, F.lit(None).cast("string"))
        frames.append(df.select(*columns).withColumn("_order", F.lit(order)))
    incoming = _union(frames)
    latest = Window.partitionBy("customer_id").orderBy(F.col("_order").desc())
    incoming = (
        incoming.where(F.col("customer_id").isNotNull())
        .withColumn("_rank", F.row_number().over(latest))
        .where("_rank = 1")
        .drop("_rank", "_order")
    )
    path = get_catalog().table("silver_customers").path(settings)
    if not table_exists(path):
        incoming.limit(0).write.format("delta").save(str(path))
    # Only new or changed customers: a MERGE with nothing to change still commits a table
    # version, and a run with no new data must leave every table as it was.
    current = spark.read.format("delta").load(str(path)).select(*columns)
    incoming = incoming.select(*columns).exceptAll(current)
    if incoming.isEmpty():
        return sum(spark.read.parquet(str(f)).count() for f in files)
    changed = " OR ".join(f"NOT (t.{c} <=> s.{c})" for c in columns[1:])
    (
        DeltaTable.forPath(spark, str(path))
        .alias("t")
        .merge(incoming.alias("s"), "t.customer_id = s.customer_id")
        .whenMatchedUpdateAll(condition=changed)
        .whenNotMatchedInsertAll()
        .execute()
    )
    return sum(spark.read.parquet(str(f)).count() for f in files)


def start(
    spark: SparkSession, *, trigger: TriggerSpec, settings: PlatformSettings | None = None
) -> StreamingQuery:
    """Load the customers dimension, then start the silver_refine query and return it.

    :raises TriggerError: a real-time trigger.
    :raises FileNotFoundError: ``bronze_events`` does not exist yet (run bronze_ingest).
    """
    if trigger.kind == "real-time":
        raise TriggerError(REAL_TIME_REFUSAL)
    settings = settings or get_settings()
    catalog = get_catalog()
    job = catalog.job(JOB_NAME)
    bronze = catalog.table("bronze_events").path(settings)
    if not table_exists(bronze):
        raise FileNotFoundError(f"no bronze_events table at {bronze}: run bronze_ingest first")
    load_customers(spark, settings)
    writer = SilverBatchWriter(spark, catalog, settings)
    # Building the parse expressions takes seconds of py4j calls: do it while the query
    # starts (Delta's latestOffset), not in the first micro-batch.
    threading.Thread(
        target=prepare_parse,
        args=(TOPICS, writer.event_time_skew),
        name="silver-parse-plans",
        daemon=True,
    ).start()
    # Bronze is append-only by contract: a commit that removes files (an accidental DELETE,
    # later repaired by bronze_replay, whose MERGE only appends) is skipped, not fatal.
    stream = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", 200)
        .option("skipChangeCommits", "true")
        .load(str(bronze))
    )
    query = (
        stream.writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(job.checkpoint(settings)))
        .queryName(JOB_NAME)
    )
    return trigger.apply(query).start()


def run(
    spark: SparkSession, *, trigger: TriggerSpec, settings: PlatformSettings | None = None
) -> None:
    """Start the query and wait for it; re-raise its failure (e.g. ReconciliationError)."""
    query = start(spark, trigger=trigger, settings=settings)
    query.awaitTermination()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; a bad value exits 2 with a message saying what is wrong."""
    parser = job_parser(JOB_NAME, __doc__.splitlines()[0])
    return parse_job_args(parser, argv, REAL_TIME_REFUSAL)


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point (:func:`spark_jobs.job_cli.run_job`)."""
    args = parse_args(argv)
    return run_job(JOB_NAME, lambda session: run(session(), trigger=args.trigger))


if __name__ == "__main__":
    sys.exit(main())
