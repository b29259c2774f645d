"""A Kafka topic deleted and re-created under bronze_ingest (real broker, Spark, Delta).

The new topic numbers its offsets from 0 again. Bronze must read it from its first offset,
keep the old topic's rows, and tell the two apart by Kafka's topic id; ``bronze_replay``
must not take a new record for the old one at the same offset. A topic re-created with
fewer partitions, and a topic that does not exist, are refused in one line."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from ingest_core import kafka_offsets
from ingest_core.time_range import TimeRange
from ingest_core.topics import ensure_topics
from ingest_core.waiting import wait_until
from ingestctl.producer import Message, produce
from spark_jobs import bronze_ingest, bronze_replay
from tests.integration.medallion import AVAILABLE_NOW, Platform, delete_topic

pytestmark = pytest.mark.integration

IDENTITY = ["topic_id", "topic", "partition", "offset"]


def _recreate(platform: Platform, topic: str, partitions: int) -> None:
    """Delete ``topic``, wait until Kafka forgot it, create it again."""
    delete_topic(platform.bootstrap, topic)
    ensure_topics(platform.bootstrap, [topic], partitions=partitions)


def _topic_id(platform: Platform, topic: str) -> str:
    topic_id = kafka_offsets.kafka_topic_ids(platform.bootstrap, [topic])[topic]
    assert topic_id is not None
    return topic_id


def _event_ids(frame: pd.DataFrame) -> list[str]:
    return [json.loads(v)["event_id"] for v in frame.sort_values("offset")["value"]]


def test_recreated_topic_new_records_reach_bronze_once_told_apart_by_topic_id(
    platform: Platform,
) -> None:
    topic = platform.prefix + "refunds"
    platform.send("refunds", [{"event_id": f"old{i}"} for i in range(50)])  # one key: one
    platform.bronze()  # partition, offsets 0-49
    old_id = _topic_id(platform, topic)
    (partition,) = set(platform.read("bronze_events").partition)

    _recreate(platform, topic, partitions=3)
    new_id = _topic_id(platform, topic)
    assert new_id != old_id
    began = datetime.now(UTC) - timedelta(seconds=1)
    platform.send("refunds", [{"event_id": f"new{i}"} for i in range(10)])  # offsets 0-9

    with pytest.raises(kafka_offsets.DataLossError, match=rf"{topic}\[{partition}\] offsets 50"):
        platform.bronze()
    assert len(platform.read("bronze_events")) == 50  # refused: nothing written

    bronze_ingest.start(
        platform.spark, trigger=AVAILABLE_NOW, accept_data_loss=True
    ).awaitTermination()
    bronze = platform.read("bronze_events")
    assert len(bronze) == 60
    assert not bronze[IDENTITY].duplicated().any()
    assert bronze[["topic", "partition", "offset"]].duplicated().sum() == 10  # same coordinates
    old = bronze[bronze.topic_id == old_id]
    new = bronze[bronze.topic_id == new_id]
    assert sorted(old.offset) == list(range(50))
    assert _event_ids(old) == [f"old{i}" for i in range(50)]
    assert sorted(new.offset) == list(range(10))
    assert _event_ids(new) == [f"new{i}" for i in range(10)]

    # One gap per partition of the old topic: what it held past the committed offsets is
    # unknown (gone with it). Nothing of the new topic is skipped.
    gaps = platform.read("bronze_kafka_gaps").sort_values("partition")
    assert list(gaps.partition) == [0, 1, 2]
    assert (gaps.topic == topic).all()
    assert (gaps.topic_id == old_id).all()
    assert gaps.last_missing_offset.isna().all()
    by_partition = {int(g.partition): g for g in gaps.itertuples()}
    assert by_partition[partition].first_missing_offset == 50
    assert by_partition[partition].reason == (
        f"topic recreated (topic id {old_id} -> {new_id}, end offset 10 < next 50): the old "
        "topic's offsets from 50 on are gone; the new topic is read from offset 0"
    )
    for other in {0, 1, 2} - {partition}:
        assert by_partition[other].first_missing_offset == 0
        assert by_partition[other].reason.startswith(f"topic recreated (topic id {old_id} -> ")
    assert not gaps.reason.str.contains("old new|skipped").any()

    # bronze_replay over the new records' time range: nothing to add while Bronze has them...
    everything = TimeRange(start=began, end=datetime.now(UTC) + timedelta(minutes=1))
    topics = bronze_replay.parse_topics("refunds")
    plans = bronze_replay.plan(topics, everything)
    assert {p.topic_id for p in plans} == {new_id}
    assert bronze_replay.replay(platform.spark, plans) == {"read": 10, "inserted": 0}
    # ...and exactly them once they are missing (the old rows at offsets 0-9 do not count).
    from delta.tables import DeltaTable

    DeltaTable.forPath(platform.spark, str(platform.path("bronze_events"))).delete(
        f"topic_id = '{new_id}'"
    )
    assert len(platform.read("bronze_events")) == 50
    result = bronze_replay.replay(platform.spark, bronze_replay.plan(topics, everything))
    assert result == {"read": 10, "inserted": 10}
    replayed = platform.read("bronze_events")
    assert not replayed[IDENTITY].duplicated().any()
    assert _event_ids(replayed[replayed.topic_id == new_id]) == [f"new{i}" for i in range(10)]

    # Later starts need no --accept-data-loss: the checkpoint now follows the new topic.
    platform.send("refunds", [{"event_id": "later"}])
    platform.bronze()
    later = platform.read("bronze_events")
    assert len(later) == 61
    assert _event_ids(later[later.topic_id == new_id])[-2:] == ["new9", "later"]
    assert len(platform.read("bronze_kafka_gaps")) == 3


def test_recreated_topic_is_detected_by_its_id_when_new_offsets_passed_the_old_ones(
    platform: Platform,
) -> None:
    topic = platform.prefix + "refunds"
    platform.send("refunds", [{"event_id": f"old{i}"} for i in range(3)])
    platform.bronze()
    old_id = _topic_id(platform, topic)
    _recreate(platform, topic, partitions=3)
    platform.send("refunds", [{"event_id": f"new{i}"} for i in range(5)])  # ends 5 > next 3

    with pytest.raises(kafka_offsets.DataLossError, match=rf"topic id {old_id} -> "):
        platform.bronze()
    bronze_ingest.start(
        platform.spark, trigger=AVAILABLE_NOW, accept_data_loss=True
    ).awaitTermination()
    bronze = platform.read("bronze_events")
    new = bronze[bronze.topic_id != old_id]
    assert _event_ids(new) == [f"new{i}" for i in range(5)]  # offsets 0-2 included
    assert len(bronze) == 8


def test_topic_recreated_with_fewer_partitions_during_a_run(
    platform: Platform, capsys: pytest.CaptureFixture[str]
) -> None:
    from pyspark.errors import StreamingQueryException

    topic = platform.prefix + "orders"
    produce(
        platform.bootstrap, [Message(topic, f"k{i}", {"event_id": f"o{i}"}) for i in range(300)]
    )
    query = bronze_ingest.start(platform.spark, trigger=AVAILABLE_NOW, max_offsets_per_trigger=5)

    def committed_some() -> bool:  # a part of the backlog is committed
        assert query.isActive
        return bool(query.recentProgress)

    wait_until(committed_some, 120, 0.1, what="a first committed batch")
    _recreate(platform, topic, partitions=1)
    with pytest.raises(StreamingQueryException):  # Spark's own data-loss error
        query.awaitTermination()
    # (awaitAnyTermination in main() would raise it again: this driver is the suite's)
    platform.spark.streams.resetTerminated()
    written = len(platform.read("bronze_events"))
    assert 0 < written < 300
    produce(platform.bootstrap, [Message(topic, f"n{i}", {"event_id": f"n{i}"}) for i in range(7)])
    new_id = _topic_id(platform, topic)
    capsys.readouterr()

    # Without --accept-data-loss: one line naming the vanished partitions, exit 1.
    assert bronze_ingest.main(["--trigger", "available-now"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("bronze_ingest: Kafka lost data bronze_ingest has not read: ")
    for partition in (1, 2):
        assert f"{topic}[{partition}] offsets " in err
    assert "partition no longer exists: the topic has 1 partition(s)" in err
    assert "--accept-data-loss" in err
    assert len(platform.read("bronze_events")) == written

    # With it: the gaps are recorded and the new topic's records arrive.
    assert bronze_ingest.main(["--trigger", "available-now", "--accept-data-loss"]) == 0
    gaps = platform.read("bronze_kafka_gaps")
    assert set(gaps.partition) == {0, 1, 2}
    assert set(gaps[gaps.partition.isin([1, 2])].reason.str.split(":").str[0]) == {
        "partition no longer exists"
    }
    assert gaps[gaps.partition == 0].reason.iloc[0].startswith("topic recreated")
    bronze = platform.read("bronze_events")
    new = bronze[bronze.topic_id == new_id]
    assert sorted(_event_ids(new)) == sorted(f"n{i}" for i in range(7))
    assert sorted(new.offset) == list(range(7))
    assert len(bronze) == written + 7
    assert not bronze[IDENTITY].duplicated().any()


def test_missing_topic_is_one_line_naming_it_and_the_command_that_creates_it(
    platform: Platform, capsys: pytest.CaptureFixture[str]
) -> None:
    from typer.testing import CliRunner

    from ingestctl.cli import app

    topic = platform.prefix + "refunds"
    delete_topic(platform.bootstrap, topic)
    capsys.readouterr()
    assert bronze_ingest.main(["--trigger", "available-now"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "UnknownTopicOrPartition" not in err
    assert err.strip() == (
        f"bronze_ingest: Kafka at {platform.bootstrap} has no topic {topic}; nothing was read. "
        "Create the platform's topics with `ingestctl kafka create-topics` (or send events "
        "with `ingestctl replay` / `ingestctl generate`, which create missing topics)."
    )
    # The command named does create it, and the job runs.
    created = CliRunner().invoke(app, ["kafka", "create-topics"])
    assert created.exit_code == 0, created.output
    assert f"{topic}: 3 partition(s)" in created.output
    platform.send("refunds", [{"event_id": "r1"}])
    assert bronze_ingest.main(["--trigger", "available-now"]) == 0
    assert _event_ids(platform.read("bronze_events")) == ["r1"]
