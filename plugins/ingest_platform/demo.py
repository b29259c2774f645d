"""``make demo``: the platform's main job on embedded defaults.

For now (foundation): start the project's Kafka broker, produce a few hundred sample events
to the four event topics, run bronze_ingest with an AvailableNow trigger into Delta, and
print the table's row count and path. Later issues grow this into the Airflow-run platform.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ingest_platform.producer import Record

_METHODS = ["credit_card", "boleto", "voucher", "debit_card"]
_ACTIVITIES = ["page_view", "page_view", "page_view", "add_to_cart", "checkout"]


def sample_events(count: int, *, seed: int = 7, start: datetime | None = None) -> Iterator[Record]:
    """Yield ``count`` small, valid sample events round-robin over the four event topics.

    Deterministic for a given ``seed`` and ``start``: the same ids and payloads every time.
    Envelope: ``event_id``, ``event_type``, ``event_time`` (ISO-8601 with offset),
    ``schema_version`` 1, then the payload. The Kafka key is the entity id.
    """
    rng = random.Random(seed)
    start = start or datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
    for n in range(count):
        when = (start + timedelta(seconds=15 * n)).isoformat()
        customer = f"c{rng.randint(1, 50):04d}"
        order = f"o{n // 4:06d}"
        event_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        envelope = {"event_id": event_id, "event_time": when, "schema_version": 1}
        kind = n % 4
        if kind == 0:
            price = round(rng.uniform(5, 300), 2)
            yield (
                "orders",
                order,
                envelope
                | {
                    "event_type": "order_placed",
                    "order_id": order,
                    "customer_id": customer,
                    "status": "created",
                    "currency": "BRL",
                    "total": price,
                    "items": [
                        {
                            "product_id": f"p{rng.randint(1, 99)}",
                            "seller_id": "s1",
                            "price": price,
                            "freight": 0.0,
                        }
                    ],
                },
            )
        elif kind == 1:
            yield (
                "payments",
                order,
                envelope
                | {
                    "event_type": "payment",
                    "payment_id": f"pay{n:06d}",
                    "order_id": order,
                    "customer_id": customer,
                    "method": rng.choice(_METHODS),
                    "installments": 1,
                    "amount": round(rng.uniform(5, 300), 2),
                    "currency": "BRL",
                    "status": "authorized" if rng.random() > 0.1 else "failed",
                },
            )
        elif kind == 2:
            yield (
                "refunds",
                order,
                envelope
                | {
                    "event_type": "refund",
                    "refund_id": f"r{n:06d}",
                    "order_id": order,
                    "amount": round(rng.uniform(1, 50), 2),
                    "currency": "BRL",
                    "reason": "damaged",
                },
            )
        else:
            yield (
                "customer_activity",
                customer,
                envelope
                | {
                    "event_type": "customer_activity",
                    "customer_id": customer,
                    "activity": rng.choice(_ACTIVITIES),
                    "url": f"/product/p{rng.randint(1, 99)}",
                },
            )


@dataclass(frozen=True)
class DemoResult:
    """What the demo did: events produced, Bronze rows, table path."""

    produced: int
    bronze_rows: int
    table_path: Path


def run_demo(events: int = 400, *, echo: Callable[[str], None] = print) -> DemoResult:
    """Run the foundation demo end to end on the current profile's settings.

    :param events: sample events to produce (spread over the four topics).
    :param echo: progress output.
    :raises ingest_platform.kafka_broker.BrokerError: the broker could not start.
    :raises ingest_platform.producer.ProduceError: an event was not acknowledged.
    """
    from ingest_platform.kafka_broker import KafkaBroker
    from ingest_platform.producer import produce
    from ingest_platform.topics import ensure_topics
    from spark_jobs import bronze_ingest
    from spark_jobs.catalog import get_catalog
    from spark_jobs.contracts import TOPICS
    from spark_jobs.session import build_spark_session
    from spark_jobs.settings import get_settings
    from spark_jobs.triggers import TriggerSpec

    settings = get_settings()
    catalog = get_catalog()
    job = catalog.job(bronze_ingest.JOB_NAME)
    echo(KafkaBroker(settings.kafka).up().describe())
    topics = list(TOPICS)
    ensure_topics(settings.kafka.bootstrap_servers, topics)
    result = produce(settings.kafka.bootstrap_servers, sample_events(events))
    echo(f"produced {result.acknowledged} events to {', '.join(topics)}")
    echo("running bronze_ingest (trigger: available-now) ...")
    spark = build_spark_session("demo_bronze_ingest")
    query = bronze_ingest.start(spark, trigger=TriggerSpec("available-now"))
    query.awaitTermination()
    table_path = catalog.table(job.sink).path(settings)
    rows = spark.read.format("delta").load(str(table_path)).count()
    spark.stop()
    echo(f"bronze_events: {rows} rows at {table_path}")
    return DemoResult(produced=result.acknowledged, bronze_rows=rows, table_path=table_path)
