"""Bronze replay from Kafka by time range (``spark_jobs.bronze_replay``) on the real broker,
Spark and Delta: a range already in Bronze adds nothing, a range lost from Bronze comes back
exactly, and a range Kafka no longer holds is refused with the earliest available time."""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime, timedelta

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from ingest_core.catalog import get_catalog
from ingest_core.replay_plan import RangeNotInKafkaError
from ingest_core.time_range import TimeRange
from spark_jobs import bronze_replay
from tests.integration.medallion import Platform, payment

pytestmark = pytest.mark.integration


def _coordinates(platform: Platform) -> set[tuple[str, int, int, bytes]]:
    bronze = platform.read("bronze_events")
    assert not bronze[["topic", "partition", "offset"]].duplicated().any()
    return {(r.topic, int(r.partition), int(r.offset), bytes(r.value)) for r in bronze.itertuples()}


def test_replay_adds_nothing_present_restores_a_lost_range_and_refuses_deleted_data(
    platform: Platform,
) -> None:
    began = datetime.now(UTC) - timedelta(seconds=1)
    events = [payment(f"r{i}", f"2026-05-01T10:{i % 60:02d}:00Z") for i in range(120)]
    for i in range(0, 120, 40):  # three keys: three partitions get records
        platform.send("payments", events[i : i + 40], key=f"k{i}")
    time.sleep(1.5)
    platform.send("orders", [{"not": "an order"}] * 5)  # Bronze keeps anything, as is
    platform.bronze()
    original = _coordinates(platform)
    assert len(original) == 125
    # the end leaves room for a slow machine: part 3 sends a record minutes later
    everything = TimeRange(start=began, end=datetime.now(UTC) + timedelta(minutes=30))
    topics = bronze_replay.parse_topics("payments,orders")

    # 1. A range Bronze already holds: everything is read, nothing is added.
    plans = bronze_replay.plan(topics, everything)
    assert sum(p.records for p in plans) == 125
    assert bronze_replay.replay(platform.spark, plans) == {"read": 125, "inserted": 0}
    assert _coordinates(platform) == original

    # 2. Bronze loses the payments of one partition; the replay restores exactly them.
    from delta.tables import DeltaTable

    lost_partition = next(p.partition for p in plans if p.topic.endswith("payments") and p.records)
    DeltaTable.forPath(platform.spark, str(platform.path("bronze_events"))).delete(
        f"topic = '{platform.prefix}payments' AND partition = {lost_partition}"
    )
    lost = {c for c in original if c[0].endswith("payments") and c[1] == lost_partition}
    assert _coordinates(platform) == original - lost
    result = bronze_replay.replay(platform.spark, bronze_replay.plan(topics, everything))
    assert result == {"read": 125, "inserted": len(lost)}
    assert _coordinates(platform) == original
    again = bronze_replay.replay(platform.spark, bronze_replay.plan(topics, everything))
    assert again["inserted"] == 0

    # 2b. Bronze is gone entirely: the replay creates it as bronze_ingest would, with the
    # catalog's table properties (its log checkpoint interval).
    bronze_dir = platform.path("bronze_events")
    shutil.move(bronze_dir, bronze_dir.with_name("bronze_events.gone"))
    result = bronze_replay.replay(platform.spark, bronze_replay.plan(topics, everything))
    assert result == {"read": 125, "inserted": 125}
    assert _coordinates(platform) == original
    detail = DeltaTable.forPath(platform.spark, str(bronze_dir)).detail().first()
    spec = get_catalog().table("bronze_events")
    assert spec.delta_properties  # else this step checks nothing
    assert spec.delta_properties.items() <= detail.properties.items()
    assert detail.partitionColumns == spec.partition_by

    # 3. Records past bronze_ingest's committed offsets are the stream's, not the replay's.
    platform.send("payments", [payment("after", "2026-05-01T11:00:00Z")])
    after = bronze_replay.plan(topics, everything)
    assert sum(p.left_to_stream for p in after) == 1
    assert sum(p.records for p in after) == 125

    # 4. Retention deletes the first 10 payments of a partition: a range from before is refused.
    admin = KafkaAdminClient(bootstrap_servers=platform.bootstrap)
    try:
        admin.delete_records({TopicPartition(f"{platform.prefix}payments", lost_partition): 10})
    finally:
        admin.close()
    with pytest.raises(RangeNotInKafkaError, match="earliest available time") as refused:
        bronze_replay.plan(topics, everything)
    assert f"payments[{lost_partition}]" in str(refused.value)
    assert _coordinates(platform) == original  # nothing written


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--topics", "paymentz", "--from", "2026-05-01T10:00Z", "--to", "2026-05-01T11:00Z"],
            "unknown topic",
        ),
        (
            ["--topics", "payments", "--from", "2026-05-01T10:00", "--to", "2026-05-01T11:00Z"],
            "no UTC offset",
        ),
        (
            ["--topics", ",", "--from", "2026-05-01T10:00Z", "--to", "2026-05-01T11:00Z"],
            "no topic given",
        ),
    ],
)
def test_replay_refuses_bad_parameters_before_spark(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        bronze_replay.parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
