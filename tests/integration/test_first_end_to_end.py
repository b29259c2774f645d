"""First end-to-end proof: kafka-python -> real broker -> Structured Streaming (AvailableNow)
-> Delta, checked with an independent reader (delta-rs), then again on the same checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from ingest_core.catalog import get_catalog
from ingestctl.producer import produce
from spark_jobs import bronze_ingest
from spark_jobs.triggers import TriggerSpec

pytestmark = pytest.mark.integration


def _events(start: int, count: int, topic: str) -> list[tuple[str, str, dict]]:
    return [
        (topic, f"order-{n % 37}", {"event_id": f"e{n:05d}", "event_type": "order_placed", "n": n})
        for n in range(start, start + count)
    ]


def _run_available_now(spark, topic: str, table: Path, checkpoint: Path, bootstrap: str) -> None:
    query = bronze_ingest.start(
        spark,
        trigger=TriggerSpec("available-now"),
        topics=[topic],
        table_path=table,
        checkpoint=checkpoint,
        bootstrap_servers=bootstrap,
        max_offsets_per_trigger=400,  # several micro-batches per run
    )
    query.awaitTermination()
    assert query.exception() is None


def _read_independently(table: Path):
    return DeltaTable(str(table)).to_pandas(
        columns=["topic", "partition", "offset", "key", "value"]
    )


def test_kafka_to_delta_available_now_exactly_once(
    spark, kafka_bootstrap: str, kafka_topic, delta_dir: Path
) -> None:
    topic = kafka_topic(partitions=3)
    table, checkpoint = delta_dir / "bronze_events", delta_dir / "_checkpoints" / "bronze"

    sent = produce(kafka_bootstrap, _events(0, 1000, topic))  # raises unless every send acked
    assert (sent.acknowledged, sent.failed) == (1000, 0)
    assert {partition for _, partition in sent.offsets} == {0, 1, 2}

    _run_available_now(spark, topic, table, checkpoint, kafka_bootstrap)
    first = _read_independently(table)
    assert len(first) == 1000
    assert not first.duplicated(["topic", "partition", "offset"]).any()
    # Every offset the broker acknowledged is there, with nothing in between missing.
    for (_, partition), last in sent.offsets.items():
        offsets = sorted(first.loc[first.partition == partition, "offset"])
        assert offsets == list(range(last + 1))
    # Spark's own view of the table agrees with delta-rs, value bytes untouched.
    spark_rows = spark.read.format("delta").load(str(table)).select("value").collect()
    assert sorted(bytes(r.value) for r in spark_rows) == sorted(first["value"].map(bytes))
    assert {json.loads(v)["n"] for v in first["value"]} == set(range(1000))

    # A micro-batch of three Kafka partitions is written by the catalog's fewer tasks.
    files = get_catalog().job("bronze_ingest").output_files_per_batch
    assert files is not None
    assert files < 3
    added = [
        int(commit["operationMetrics"]["numAddedFiles"])
        for commit in DeltaTable(str(table)).history()
        if commit.get("operation") == "STREAMING UPDATE"
    ]
    assert len(added) >= 3
    # One file per task and ingestion_date; a batch has one ingestion_time (its start).
    assert max(added) <= files

    produce(kafka_bootstrap, _events(1000, 500, topic))
    _run_available_now(spark, topic, table, checkpoint, kafka_bootstrap)
    second = _read_independently(table)
    assert len(second) == 1500
    assert not second.duplicated(["topic", "partition", "offset"]).any()
    assert {json.loads(v)["n"] for v in second["value"]} == set(range(1500))


def test_rerun_with_nothing_new_adds_nothing(
    spark, kafka_bootstrap: str, kafka_topic, delta_dir: Path
) -> None:
    topic = kafka_topic(partitions=3)
    table, checkpoint = delta_dir / "t", delta_dir / "cp"
    produce(kafka_bootstrap, _events(0, 50, topic))
    _run_available_now(spark, topic, table, checkpoint, kafka_bootstrap)
    version = DeltaTable(str(table)).version()
    _run_available_now(spark, topic, table, checkpoint, kafka_bootstrap)
    assert DeltaTable(str(table)).version() == version
    assert len(_read_independently(table)) == 50
