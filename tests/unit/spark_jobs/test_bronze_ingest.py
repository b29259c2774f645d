"""bronze_ingest's pure transform, on a local DataFrame shaped like Spark's Kafka source."""

from __future__ import annotations

from datetime import datetime

import pytest

from spark_jobs.bronze_ingest import parse_args, to_bronze

pytestmark = pytest.mark.unit

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestampType int"
)


def test_bytes_and_coordinates_pass_through_untouched(spark) -> None:
    rows = [
        (b"o1", b'{"event_id":"a"}', "orders", 0, 10, datetime(2026, 1, 1, 10, 0), 0),
        (None, None, "orders", 1, 11, datetime(2026, 1, 1, 10, 1), 0),  # tombstone kept
        (b"k", b"\xff\xfe not utf-8", "payments", 2, 12, datetime(2026, 1, 1, 10, 2), 1),
    ]
    bronze = to_bronze(spark.createDataFrame(rows, KAFKA_SCHEMA))
    assert bronze.columns == [
        "key",
        "value",
        "topic",
        "topic_id",
        "partition",
        "offset",
        "kafka_timestamp",
        "kafka_timestamp_type",
        "ingestion_time",
        "ingestion_date",
    ]
    out = sorted(bronze.collect(), key=lambda r: r.offset)
    assert [(r.key, r.value, r.topic, r.partition, r.offset) for r in out] == [
        (b"o1", b'{"event_id":"a"}', "orders", 0, 10),
        (None, None, "orders", 1, 11),
        (b"k", b"\xff\xfe not utf-8", "payments", 2, 12),
    ]
    assert all(r.ingestion_date == r.ingestion_time.date() for r in out)
    assert {r.topic_id for r in out} == {None}  # no topic ids given


def test_topic_id_is_the_incarnation_of_each_record_topic(spark) -> None:
    rows = [
        (b"k", b"1", "orders", 0, 0, datetime(2026, 1, 1, 10, 0), 0),
        (b"k", b"2", "payments", 0, 0, datetime(2026, 1, 1, 10, 0), 0),
        (b"k", b"3", "refunds", 0, 0, datetime(2026, 1, 1, 10, 0), 0),
    ]
    ids = {"orders": "id-o", "payments": "id-p", "refunds": None}
    bronze = to_bronze(spark.createDataFrame(rows, KAFKA_SCHEMA), ids)
    assert {r.topic: r.topic_id for r in bronze.collect()} == {
        "orders": "id-o",
        "payments": "id-p",
        "refunds": None,
    }


def test_command_line_refuses_real_time_and_bad_limits(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--trigger", "real-time=1s"])
    assert exited.value.code == 2
    assert "real-time mode supports only Kafka" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--max-offsets-per-trigger", "0"])
    assert "positive number of records" in capsys.readouterr().err
    assert str(parse_args(["--trigger", "available-now"]).trigger) == "available-now"
