"""When a topic can take records: its metadata, not only its name, says so."""

from __future__ import annotations

from typing import Any

import pytest

from ingest_core.topics import topic_ready

pytestmark = pytest.mark.unit


def _topic(*leaders: int, error_code: int = 0, partition_error: int = 0) -> dict[str, Any]:
    partitions = [
        {"partition_index": n, "leader_id": leader, "error_code": partition_error}
        for n, leader in enumerate(leaders)
    ]
    return {"name": "orders", "error_code": error_code, "partitions": partitions}


def test_a_topic_is_ready_only_when_every_partition_has_a_leader() -> None:
    # CI of stop 63: a topic listed with its partitions but leaders not yet elected failed
    # every record sent to it (NotLeaderForPartitionError).
    assert topic_ready(_topic(1, 1))
    assert not topic_ready(_topic(1, -1))
    assert not topic_ready(_topic(-1, -1))


def test_a_topic_with_an_error_or_no_partitions_is_not_ready() -> None:
    assert not topic_ready(_topic(1, error_code=3))  # UNKNOWN_TOPIC_OR_PARTITION
    assert not topic_ready(_topic(1, partition_error=5))  # LEADER_NOT_AVAILABLE
    assert not topic_ready(_topic())
