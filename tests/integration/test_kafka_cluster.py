"""The embedded Kafka cluster of the ``local-cluster`` profile (issue 54): three KRaft nodes on
loopback, topics with replication factor 3 and ``min.insync.replicas`` 2, and a partition
leader lost while a producer writes with ``acks=all``: nothing acknowledged is lost, and the
killed node comes back into the quorum by itself."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import psutil
import pytest

from ingest_core.settings import KafkaSettings
from ingest_core.topics import ensure_topics
from ingest_core.waiting import wait_until
from ingestctl.kafka_broker import KafkaBroker, free_port_block
from ingestctl.producer import Message, produce

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]


def _cluster_settings(tmp_path: Path) -> KafkaSettings:
    """The ``local-cluster`` profile's Kafka settings on ports of this test's own."""
    base = free_port_block(6)
    return KafkaSettings(
        port=base,
        controller_port=base + 3,
        brokers=3,
        replication_factor=3,
        min_insync_replicas=2,
        heap="256m",
        start_timeout_s=180,
        data_dir=tmp_path / "kafka",
    )


def _partitions(settings: KafkaSettings, topic: str) -> list[dict]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(**settings.client_config(settings.bootstrap_servers))
    try:
        (described,) = admin.describe_topics([topic])
        return sorted(described["partitions"], key=lambda p: p["partition_index"])
    finally:
        admin.close()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _read_all(settings: KafkaSettings, topic: str, expected: int) -> list[bytes]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        **settings.client_config(settings.bootstrap_servers),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=20000,
    )
    values: list[bytes] = []
    try:
        for record in consumer:
            values.append(record.value)
            if len(values) >= expected:
                break
    finally:
        consumer.close()
    return values


def test_a_replicated_topic_loses_nothing_acknowledged_when_a_leader_is_killed(
    tmp_path: Path,
) -> None:
    settings = _cluster_settings(tmp_path)
    cluster = KafkaBroker(settings)
    started = cluster.up()
    try:
        assert len(started.pids) == 3, started.describe()
        assert started.bootstrap_servers == settings.bootstrap_servers
        assert cluster.quorum_leader() in (0, 1, 2)  # the soak's "controller" fault target
        topic = f"cluster_{uuid.uuid4().hex[:8]}"
        ensure_topics(settings.bootstrap_servers, [topic], partitions=3, kafka=settings)
        for partition in _partitions(settings, topic):  # on every broker, all in sync
            assert sorted(partition["replica_nodes"]) == [1, 2, 3]
            assert sorted(partition["isr_nodes"]) == [1, 2, 3]

        first = [Message(topic, f"k{n}", {"n": n}) for n in range(300)]
        assert produce(settings.bootstrap_servers, first, kafka=settings).acknowledged == 300
        leader = _partitions(settings, topic)[0]["leader_id"]
        victim = KafkaBroker(settings, node=leader - 1)  # node.id is node + 1
        pid = victim.status().pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: _gone(pid), 30, 0.2, what="the killed leader to exit")
        # Two replicas of three are in sync: acks=all writes go on, and nothing is lost.
        second = [Message(topic, f"k{n}", {"n": n}) for n in range(300, 600)]
        assert produce(settings.bootstrap_servers, second, kafka=settings).acknowledged == 300
        new_leader = _partitions(settings, topic)[0]["leader_id"]
        assert new_leader != leader
        assert cluster.status().running is False  # one node down: not the whole cluster

        victim.up()  # the node rejoins the quorum and catches up its replicas
        assert cluster.status().running is True
        wait_until(
            lambda: all(sorted(p["isr_nodes"]) == [1, 2, 3] for p in _partitions(settings, topic)),
            120,
            1.0,
            what="the restarted broker back in every partition's ISR",
        )
        values = _read_all(settings, topic, 600)
        assert sorted(json.loads(v)["n"] for v in values) == list(range(600))
    finally:
        assert cluster.down() is True
    assert cluster.status().pids == ()
