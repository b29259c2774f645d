"""Kafka topic administration with kafka-python: create what is missing, check what exists."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest_core.settings import KafkaSettings


class TopicMismatchError(RuntimeError):
    """An existing topic has a different partition count than the platform expects."""


class TopicCollisionError(ValueError):
    """A topic to create differs from an existing one only by ``.`` against ``_``: Kafka
    refuses it (its metric names treat both alike; ``Topic.hasCollision``)."""


def ensure_topics(
    bootstrap_servers: str,
    topics: Iterable[str],
    *,
    partitions: int = 3,
    allow_partition_mismatch: bool = False,
    kafka: KafkaSettings | None = None,
) -> dict[str, int]:
    """Create missing topics and return ``{topic: partition count}`` for all of them.

    :param bootstrap_servers: Kafka ``host:port`` list.
    :param topics: topic names (validated by the broker).
    :param partitions: partition count for topics this call creates.
    :param allow_partition_mismatch: accept existing topics with another partition count.
    :param kafka: the security settings (SASL, TLS), ``replication_factor`` (1 for the
        single-node embedded broker) and ``min_insync_replicas`` (a topic setting when more
        than 1) to use; the current profile's when ``None``.
    :raises TopicMismatchError: an existing topic has another partition count and
        ``allow_partition_mismatch`` is false; the message names topic and both counts.
    :raises TopicCollisionError: a missing topic collides with an existing one (``.`` and
        ``_`` alike); the message names both. Nothing is created.
    :raises kafka.errors.KafkaError: the broker refused (invalid name, not reachable).
    """
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    from ingest_core.settings import get_settings, topic_collision_key

    kafka = kafka or get_settings().kafka
    wanted = list(dict.fromkeys(topics))
    admin = KafkaAdminClient(**kafka.client_config(bootstrap_servers), client_id="ingestctl-topics")
    try:
        existing = set(admin.list_topics())
        missing = [name for name in wanted if name not in existing]
        collisions = {
            name: other
            for name in missing
            for other in existing
            if topic_collision_key(other) == topic_collision_key(name)
        }
        if collisions:
            detail = ", ".join(
                f"{name!r} with existing {other!r}" for name, other in sorted(collisions.items())
            )
            raise TopicCollisionError(
                f"Kafka treats '.' and '_' in topic names alike, so these topics cannot be "
                f"created: {detail}; choose another topic prefix (or alerts topic)"
            )
        if missing:
            # Created concurrently by another producer: its partitions are checked below.
            factor = kafka.replication_factor
            configs = (
                {"min.insync.replicas": str(kafka.min_insync_replicas)}
                if kafka.min_insync_replicas > 1
                else {}
            )
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(
                    [
                        NewTopic(
                            name,
                            num_partitions=partitions,
                            replication_factor=factor,
                            topic_configs=configs,
                        )
                        for name in missing
                    ]
                )
        counts = _partition_counts(admin, wanted)
    finally:
        admin.close()
    wrong = {t: n for t, n in counts.items() if n != partitions}
    if wrong and not allow_partition_mismatch:
        detail = ", ".join(f"{t} has {n}" for t, n in sorted(wrong.items()))
        raise TopicMismatchError(
            f"topics exist with a partition count other than {partitions}: {detail}"
        )
    return counts


def topic_ready(meta: dict[str, Any]) -> bool:
    """Whether one topic's ``describe_topics`` metadata says it can take records now: the
    topic has no error, has partitions, and every partition has no error and a leader.

    :param meta: one entry of kafka-python's ``KafkaAdminClient.describe_topics``:
        ``{"name", "error_code", "partitions": [{"partition_index", "leader_id", "error_code"},
        ...]}`` (Kafka's ``MetadataResponse``; ``leader_id`` is -1 while none is elected).

    A topic is listed with its partitions before their leaders are elected: a producer that
    sent then got ``NotLeaderForPartitionError`` for every record on a loaded machine (CI of
    stop 63, a topic created a moment before).
    """
    partitions = meta.get("partitions") or []
    return (
        meta.get("error_code") == 0
        and bool(partitions)
        and all(p.get("error_code", 0) == 0 and p.get("leader_id", -1) >= 0 for p in partitions)
    )


def _partition_counts(admin: Any, topics: list[str], timeout_s: float = 30.0) -> dict[str, int]:
    """Describe ``topics`` until each is ready (:func:`topic_ready`: a new topic takes a
    moment to appear and to elect its partitions' leaders)."""
    from kafka.errors import KafkaTimeoutError

    from ingest_core.waiting import wait_until

    described: list[dict[str, Any]] = []

    def described_all() -> bool:
        described[:] = admin.describe_topics(topics)
        return all(topic_ready(meta) for meta in described)

    try:
        wait_until(described_all, timeout_s, 0.2, what=f"leaders of topics {topics}")
    except TimeoutError:
        pending = [meta["name"] for meta in described if not topic_ready(meta)]
        raise KafkaTimeoutError(
            f"no metadata or no leader for topics {pending} after {timeout_s:.0f} s"
        ) from None
    return {meta["name"]: len(meta["partitions"]) for meta in described}


def broker_problem(kafka: KafkaSettings | None = None, timeout_s: float = 5.0) -> str | None:
    """Whether the Kafka cluster answers: None when it bootstraps and lists its topics
    within ``timeout_s`` seconds, else one line naming the bootstrap servers and
    kafka-python's error.

    The streaming supervisor asks this before it restarts an always-on job: a job that died
    because the broker is down would only die again (``ingest_platform.supervisor``).

    The probe is a ``KafkaConsumer`` given its protocol level
    (:data:`ingest_core.consumer_groups.KAFKA_API_VERSION`), so that its constructor does not
    bootstrap, listing topics in a daemon thread and closed after ``timeout_s`` whatever
    happens (its close stops its IO thread): kafka-python 3.0's ``KafkaAdminClient``
    bootstraps inside ``__init__`` after starting its IO thread, and a failed bootstrap
    leaves that thread running with no object to close (soak run 6: 477 threads in the soak
    process after a 2-hour run of broker outages).

    :param kafka: the connection and security settings; the current profile's when None.
    """
    import threading

    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    from ingest_core.consumer_groups import KAFKA_API_VERSION
    from ingest_core.settings import get_settings

    kafka = kafka or get_settings().kafka
    outcome: dict[str, Any] = {}
    try:
        consumer = KafkaConsumer(
            **kafka.client_config(),
            client_id="ingest-supervisor-probe",
            enable_auto_commit=False,
            api_version=KAFKA_API_VERSION,
            request_timeout_ms=max(round(timeout_s * 1000), 1000),
        )
    except (KafkaError, OSError) as refused:
        outcome["error"] = refused
    else:

        def list_topics() -> None:
            try:
                outcome["topics"] = consumer.topics()
            except Exception as failed:
                outcome["error"] = failed

        # kafka-python's metadata calls wait for ever on a broker that is down; closing the
        # consumer after the deadline stops its IO thread and ends the call.
        reader = threading.Thread(target=list_topics, name="broker-probe", daemon=True)
        reader.start()
        reader.join(timeout_s)
        consumer.close(autocommit=False, timeout_ms=1000)
        reader.join(5)
    if "topics" in outcome:
        return None
    error = outcome.get("error")
    if error is not None and not isinstance(error, KafkaError | OSError):
        raise error
    if error is None or "Event loop stopped" in str(error):  # cut off by our close
        reason = f"no answer within {timeout_s:g} s"
    else:
        reason = str(error)
        if not reason.startswith(type(error).__name__):
            reason = f"{type(error).__name__}: {reason}"
    return f"Kafka at {kafka.bootstrap_servers} ({reason})"
