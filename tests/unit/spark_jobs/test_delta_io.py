"""Table properties from the catalog (``spark_jobs.delta_io.ensure_table_properties``), on
real Delta tables in a temporary folder."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from ingest_core.catalog import get_catalog
from spark_jobs.bronze_ingest import to_bronze
from spark_jobs.delta_io import ensure_table_properties

pytestmark = pytest.mark.unit

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestampType int"
)
INTERVAL = {"delta.checkpointInterval": "100"}


def _bronze_rows(spark, offset: int = 0):
    rows = [(b"k", b"{}", "orders", 0, offset, datetime(2026, 1, 1, 10, 0), 0)]
    return to_bronze(spark.createDataFrame(rows, KAFKA_SCHEMA))


def _detail(spark, path: Path):
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, str(path)).detail().first()


def test_bronze_events_declares_a_longer_checkpoint_interval() -> None:
    assert get_catalog().table("bronze_events").delta_properties == INTERVAL
    assert get_catalog().table("silver_orders").delta_properties == {}


def test_a_new_table_is_created_with_the_properties_schema_and_partitions(spark, tmp_path) -> None:
    path = tmp_path / "bronze_events"
    rows = _bronze_rows(spark)
    done = ensure_table_properties(
        spark, path, INTERVAL, schema=rows.schema, partition_by=["ingestion_date"]
    )
    assert done == INTERVAL
    detail = _detail(spark, path)
    assert detail.properties["delta.checkpointInterval"] == "100"
    # The session's defaults still apply (the gates read the change data feed).
    assert detail.properties["delta.enableChangeDataFeed"] == "true"
    assert list(detail.partitionColumns) == ["ingestion_date"]
    rows.write.format("delta").mode("append").partitionBy("ingestion_date").save(str(path))
    assert spark.read.format("delta").load(str(path)).count() == 1


def test_an_existing_table_is_altered_once_and_then_checkpoints_less_often(spark, tmp_path) -> None:
    path = tmp_path / "bronze_events"
    _bronze_rows(spark).write.format("delta").save(str(path))  # Delta's default interval
    schema = _bronze_rows(spark).schema
    assert ensure_table_properties(spark, path, INTERVAL, schema=schema) == INTERVAL
    assert _detail(spark, path).properties["delta.checkpointInterval"] == "100"
    assert ensure_table_properties(spark, path, INTERVAL, schema=schema) == {}
    log = path / "_delta_log"
    assert len(list(log.glob("*.json"))) == 2  # the creation and one ALTER, not two
    for offset in range(1, 12):  # past version 10, where Delta's default would checkpoint
        _bronze_rows(spark, offset).write.format("delta").mode("append").save(str(path))
    assert not list(log.glob("*.checkpoint*.parquet"))
    assert spark.read.format("delta").load(str(path)).count() == 12


def test_no_properties_touches_nothing(spark, tmp_path) -> None:
    path = tmp_path / "t"
    assert ensure_table_properties(spark, path, {}, schema=_bronze_rows(spark).schema) == {}
    assert not path.exists()
