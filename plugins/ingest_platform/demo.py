"""``make demo``: the platform's main job on embedded defaults.

Start the project's Kafka broker, send the Olist sample (or synthetic events), run
Bronze -> Silver -> Gold with AvailableNow triggers and the late corrections, and print rows
per table and the newest Gold windows. (The Airflow-run platform comes with the
orchestration issue; until then the layers run in one process here.)
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ingest_platform.producer import ProduceError, Record
from spark_jobs.settings import PROJECT_ROOT

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
    """What the demo did: events produced and rows per table."""

    source: str
    produced: int
    rows: dict[str, int]


#: Where the shared datasets sit relative to the repository (never copied into it).
OLIST_SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "olist_ecommerce" / "sample"


def run_demo(
    events: int = 400, *, source: str = "auto", echo: Callable[[str], None] = print
) -> DemoResult:
    """Run the platform's layers end to end on the current profile's settings.

    Starts the broker, sends events (the Olist sample when ``source`` is ``olist``, or
    ``auto`` and the sample exists; else ``events`` synthetic ones), runs bronze_ingest,
    silver_refine and gold_aggregate with AvailableNow triggers and the late corrections,
    then prints rows per table and the newest Gold windows.

    :param source: ``auto``, ``olist`` or ``generate``.
    :raises ingest_platform.kafka_broker.BrokerError: the broker could not start.
    :raises ingest_platform.producer.ProduceError: an event was not acknowledged.
    :raises FileNotFoundError: ``source="olist"`` and the sample is not there.
    """
    from ingest_platform.kafka_broker import KafkaBroker
    from ingest_platform.replay import olist, runner
    from ingest_platform.replay.faults import FaultConfig
    from ingest_platform.replay.generator import generate_events
    from spark_jobs import bronze_ingest, gold_aggregate, late_corrections, silver_refine
    from spark_jobs.catalog import get_catalog
    from spark_jobs.delta_io import read_table
    from spark_jobs.locks import checkpoint_lock
    from spark_jobs.session import build_spark_session
    from spark_jobs.settings import get_settings
    from spark_jobs.triggers import TriggerSpec

    settings = get_settings()
    echo(KafkaBroker(settings.kafka).up().describe())
    use_olist = source == "olist" or (source == "auto" and OLIST_SAMPLE.is_dir())
    if use_olist:
        if not OLIST_SAMPLE.is_dir():
            raise FileNotFoundError(f"no Olist sample at {OLIST_SAMPLE}")
        echo(f"replaying the Olist sample from {OLIST_SAMPLE} ...")
        stream = olist.read_events(OLIST_SAMPLE)
        runner.write_dimension(olist.read_customers(OLIST_SAMPLE),
                               settings.storage.landing_path / "customers", "olist")  # fmt: skip
    else:
        echo(f"generating {events} synthetic events ...")
        # 0.5 events per second of event time: 2,000 events span about an hour, enough for
        # the watermarks to finalise Gold windows.
        start = datetime(2026, 1, 1, tzinfo=UTC)
        stream = list(generate_events(events, seed=7, start=start, rate=0.5))
    summary = runner.run(
        "olist" if use_olist else "generator", stream,
        bootstrap_servers=settings.kafka.bootstrap_servers, faults=FaultConfig(),
        pace=runner.Pace(None), topic_prefix=settings.kafka.topic_prefix, progress=False,
    )  # fmt: skip
    if summary.produce.failed:
        raise ProduceError(summary.produce)
    echo(f"produced {summary.produce.acknowledged} events")
    catalog = get_catalog()
    spark = build_spark_session("demo")
    now = TriggerSpec("available-now")
    for name, step in (
        ("bronze_ingest", lambda: bronze_ingest.start(spark, trigger=now).awaitTermination()),
        ("silver_refine", lambda: silver_refine.run(spark, trigger=now)),
        ("gold_aggregate", lambda: gold_aggregate.run(spark, trigger=now)),
        ("late_corrections", lambda: late_corrections.correct(spark)),
    ):
        echo(f"running {name}" + (" (batch)" if name == "late_corrections" else
                                  " (trigger: available-now)") + " ...")  # fmt: skip
        if name in catalog.jobs:  # one driver per checkpoint, as with spark-submit
            with checkpoint_lock(catalog.job(name).checkpoint(settings)):
                step()
        else:
            step()
    rows: dict[str, int] = {}
    for table in catalog.tables:
        frame = read_table(spark, catalog.table(table).path(settings))
        rows[table] = frame.count() if frame is not None else 0
    width = max(len(t) for t in rows)
    for table, count in rows.items():
        echo(f"  {table:<{width}}  {count:>8} rows  {catalog.table(table).path(settings)}")
    totals = read_table(spark, catalog.table("gold_payment_totals_5m").path(settings))
    if totals is not None:
        echo("newest gold_payment_totals_5m windows:")
        for row in totals.orderBy(totals.window_start.desc()).limit(5).collect():
            echo(f"  {row.window_start} {row.currency} payments={row.payment_count} "
                 f"amount={row.amount_total}")  # fmt: skip
    spark.stop()
    return DemoResult(
        source="olist" if use_olist else "generator",
        produced=summary.produce.acknowledged,
        rows=rows,
    )
