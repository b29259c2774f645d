"""``make demo``: the platform's main job on embedded defaults.

Start the project's Kafka broker, send the Olist sample (or synthetic events), run
Bronze -> Silver -> Gold with AvailableNow triggers and the late corrections, and print rows
per table and the newest Gold windows. (The Airflow-run platform comes with the
orchestration issue; until then the layers run in one process here.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from ingest_platform.producer import ProduceError
from spark_jobs.settings import PROJECT_ROOT


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
