"""``make demo``: the platform's main job on embedded defaults, run by Airflow.

Starts the project's Kafka broker and ``airflow standalone`` (on the embedded PostgreSQL
cluster, LocalExecutor, login kept), replays the Olist sample (or synthetic events), lets
the ``streaming_supervisor`` DAG start the always-on jobs, triggers
``medallion_incremental``, waits for it and prints a short Gold summary with the UI's
address and where the admin password is.
``make demo-down`` (:func:`stop_demo`) stops what it started.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ingest_core.settings import PROJECT_ROOT, PlatformSettings
from ingest_core.waiting import wait_until
from ingestctl.producer import ProduceError
from ingestctl.replay.faults import FaultConfig
from ingestctl.replay.model import SourceEvent

if TYPE_CHECKING:
    from ingestctl.airflow_runtime import AirflowClient

#: Where the shared datasets sit relative to the repository (never copied into it).
OLIST_SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "olist_ecommerce" / "sample"
DAGS = ("streaming_supervisor", "medallion_incremental")
#: Scheduled DAGs whose first run the demo waits for: paused when it starts, unpaused when
#: their turn comes.
SCHEDULED_DAGS = ("medallion_incremental", "table_maintenance")
#: Scheduled maintenance and manual-only DAGs the demo unpauses (a trigger then runs at once).
MANUAL_DAGS = (
    "checkpoint_maintenance",
    "checkpoint_restore",
    "bronze_replay",
    "layer_full_refresh",
)


class DemoError(RuntimeError):
    """A step of the demo failed; the message says which and where its logs are."""


@dataclass(frozen=True)
class DemoResult:
    """What the demo did: events produced, the medallion run's state and rows per table."""

    source: str
    produced: int
    run_state: str
    rows: dict[str, int]


#: The injector's faults in the demo, at modest rates, so that Silver's duplicates,
#: quarantine (every malformed reason in turn) and out-of-order handling have something to
#: show (:class:`ingestctl.replay.faults.FaultConfig`).
DEMO_FAULTS = FaultConfig(duplicate_rate=0.02, malformed_rate=0.01, out_of_order_rate=0.02, seed=7)
#: Tables that stay empty while nothing goes wrong, and why (the summary says so rather
#: than listing them with 0 rows).
EMPTY_WHEN_ALL_WELL = {
    "bronze_kafka_gaps": "Kafka lost no record bronze_ingest had not read",
    "ops_gate_holds": "no gate failed, so no operator quarantined rows",
}
#: Orders re-placed late (with their payment and browsing) by :func:`late_lot`.
LATE_ORDERS = 5


def source_events(
    settings: PlatformSettings, source: str, events: int, echo: Callable[[str], None]
) -> tuple[str, list[SourceEvent]]:
    """The events a demo replays: the Olist sample (its customers dimension written to the
    landing folder) or ``events`` synthetic ones, as is.

    :param source: ``auto``, ``olist`` or ``generate`` (see :func:`run_demo`).
    :returns: ``("olist" | "generator", events in event-time order)``.
    :raises FileNotFoundError: ``source="olist"`` and the sample is not there.
    """
    from ingestctl.replay import olist, runner
    from ingestctl.replay.generator import generate_events

    use_olist = source == "olist" or (source == "auto" and OLIST_SAMPLE.is_dir())
    if use_olist:
        if not OLIST_SAMPLE.is_dir():
            raise FileNotFoundError(f"no Olist sample at {OLIST_SAMPLE}")
        echo(f"replaying the Olist sample from {OLIST_SAMPLE} ...")
        runner.write_dimension(
            olist.read_customers(OLIST_SAMPLE), settings.storage.landing_path / "customers", "olist"
        )
        return "olist", olist.read_events(OLIST_SAMPLE)
    echo(f"generating {events} synthetic events ...")
    # 0.5 events per second of event time: 2,000 events span about an hour, enough for
    # the watermarks to finalise Gold windows.
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return "generator", list(generate_events(events, seed=7, start=start, rate=0.5))


def _produce(
    settings: PlatformSettings, source: str, events: int, echo: Callable[[str], None]
) -> tuple[str, int]:
    """Send :func:`source_events` exactly, no faults (the end-to-end tests compare Gold with
    pandas on the same events). :returns: the source used and the records acknowledged."""
    used, stream = source_events(settings, source, events, echo)
    return used, _send(settings, used, stream, FaultConfig(), echo)


def _produce_demo(
    settings: PlatformSettings, source: str, events: int, echo: Callable[[str], None]
) -> tuple[str, int, list[SourceEvent]]:
    """What the demo sends: :func:`source_events`, with generated customer activity and
    refunds for Olist's customers (Olist has neither), and :data:`DEMO_FAULTS` injected.

    :returns: the source used, the records acknowledged and the events before faults.
    """
    from ingestctl.replay.generator import companion_events

    used, stream = source_events(settings, source, events, echo)
    if used == "olist":
        companions = companion_events(stream, seed=7)
        echo(f"  with {len(companions)} generated customer activity and refund events")
        stream = sorted([*stream, *companions], key=lambda e: e.event_time)
    return used, _send(settings, used, stream, DEMO_FAULTS, echo), stream


def _send(
    settings: PlatformSettings,
    source: str,
    stream: list[SourceEvent],
    faults: FaultConfig,
    echo: Callable[[str], None],
) -> int:
    """Send ``stream`` with ``faults`` injected; :returns: records acknowledged.

    :raises ProduceError: a record was not acknowledged.
    """
    from ingestctl.replay import runner

    summary = runner.run(
        source,
        stream,
        bootstrap_servers=settings.kafka.bootstrap_servers,
        faults=faults,
        pace=runner.Pace(None),
        topic_prefix=settings.kafka.topic_prefix,
        progress=False,
        kafka=settings.kafka,
    )
    if summary.produce.failed:
        raise ProduceError(summary.produce)
    counts = summary.faults.as_dict()
    echo(
        f"produced {summary.produce.acknowledged} records (duplicates {counts['duplicates']}, "
        f"malformed {counts['malformed_total']}, out of order {counts['out_of_order']})"
    )
    return summary.produce.acknowledged


def late_lot(stream: list[SourceEvent], orders: int = LATE_ORDERS) -> list[SourceEvent]:
    """What the demo sends after its first medallion run, to show late events and
    deduplication conflicts:

    * for ``orders`` orders from the middle of ``stream``'s event time (long behind every
      watermark Silver keeps), a copy placed by the same customer under a new order id, with
      its payment and the browsing session before it: late activity, a late payment and a
      late order, which ``late_corrections`` applies to sessions, payment windows and
      customer metrics (its ledger, ``gold_late_corrections``);
    * the newest payment of ``stream`` again, same ``event_id``, a cent more: an on-time
      duplicate whose payload differs (``silver_dedup_conflicts``).

    New events get ``late:<n>`` source references (new ids).

    :raises ValueError: ``stream`` has no paid orders.
    """
    import random
    from datetime import timedelta

    from ingestctl.replay.generator import browse

    payments = {e.payload["order_id"]: e for e in stream if e.event_type == "payment"}
    placed = [
        e for e in stream if e.event_type == "order_placed" and e.payload["order_id"] in payments
    ]
    if not placed:
        raise ValueError("the stream has no paid orders to send late copies of")
    rng = random.Random(11)
    made: list[SourceEvent] = []

    def push(when: datetime, event_type: str, payload: dict[str, object]) -> None:
        made.append(SourceEvent(when, event_type, dict(payload), f"late:{len(made)}"))

    middle = len(placed) // 2
    for n, order in enumerate(placed[middle : middle + orders]):
        paid = payments[order.payload["order_id"]]
        order_id = f"{order.payload['order_id']}-late{n}"
        customer = str(order.payload["customer_id"])
        browse(rng, push, customer, f"late-{n}", order.event_time - timedelta(minutes=8))
        push(order.event_time, "order_placed", order.payload | {"order_id": order_id})
        push(
            paid.event_time,
            "payment",
            paid.payload | {"order_id": order_id, "payment_id": f"{order_id}-1"},
        )
    newest = max((e for e in stream if e.event_type == "payment"), key=lambda e: e.event_time)
    changed = newest.payload | {"amount": round(float(newest.payload["amount"]) + 0.01, 2)}
    made.append(SourceEvent(newest.event_time, "payment", changed, newest.source_ref))
    return made


def kafka_backlog(settings: PlatformSettings) -> int:
    """Records in the contract topics (sum of end offsets; the topics start at offset 0)."""
    from kafka import KafkaConsumer, TopicPartition

    from ingest_core.contracts import TOPICS

    consumer = KafkaConsumer(**settings.kafka.client_config())
    try:
        partitions = [
            TopicPartition(topic, p)
            for topic in (settings.kafka.topic(t) for t in TOPICS)
            for p in sorted(consumer.partitions_for_topic(topic) or [])
        ]
        return sum(consumer.end_offsets(partitions).values()) if partitions else 0
    finally:
        consumer.close()


def table_rows(settings: PlatformSettings) -> dict[str, int]:
    """Rows per declared table (0 when it does not exist yet), read with delta-rs."""
    from deltalake import DeltaTable

    from ingest_core.catalog import get_catalog
    from ingest_core.delta_tables import table_exists

    rows = {}
    for name, table in get_catalog().tables.items():
        path = table.path(settings)
        rows[name] = DeltaTable(str(path)).count() if table_exists(path) else 0
    return rows


def wait_for_bronze(
    settings: PlatformSettings,
    expected: int,
    timeout_s: float = 600,
    echo: Callable[[str], None] = print,
) -> int:
    """Wait until ``bronze_events`` holds ``expected`` records; :returns: its row count.

    :raises DemoError: not there within ``timeout_s`` (bronze_ingest's driver log named).
    """
    have = 0

    def landed() -> bool:
        nonlocal have
        have = table_rows(settings)["bronze_events"]
        return have >= expected

    with contextlib.suppress(TimeoutError):
        wait_until(landed, timeout_s, 5, what=f"{expected} records in bronze_events")
        return have
    log = settings.storage.state_path / "jobs" / "bronze_ingest" / "driver.log"
    raise DemoError(
        f"bronze_events holds {have} of {expected} records after {timeout_s:.0f} s; see {log}"
    )


def run_demo(
    events: int = 2000,
    *,
    source: str = "auto",
    port: int = 8080,
    echo: Callable[[str], None] = print,
) -> DemoResult:
    """Run the platform under Airflow on the current profile's settings (module docstring).

    :param source: ``auto`` (the Olist sample when ``../shared/datasets`` has it), ``olist``
        or ``generate`` (``events`` synthetic events).
    :param port: the Airflow UI's port.
    :raises ingestctl.kafka_broker.BrokerError: the broker could not start.
    :raises ingestctl.airflow_runtime.AirflowError: Airflow did not start or answer.
    :raises ingestctl.producer.ProduceError: an event was not acknowledged.
    :raises DemoError: the always-on jobs or the medallion run failed.
    :raises FileNotFoundError: ``source="olist"`` and the sample is not there.
    """
    from ingest_core.settings import get_settings
    from ingest_core.spark_config import spark_jar_paths
    from ingest_platform import supervisor
    from ingestctl.airflow_runtime import Standalone, lineage_environment

    settings = get_settings()
    spark_jar_paths()  # refuse early, with the fix, when `make jars` has not run
    start_engines(settings, echo)
    standalone = Standalone(port)
    echo(f"starting Airflow (airflow standalone, log {standalone.log_file}) ...")
    standalone.up()
    client = standalone.client()
    for dag_id in dict.fromkeys((*DAGS, *SCHEDULED_DAGS)):
        client.wait_for_dag(dag_id)
    # A demo run again in the same home finds the DAGs as the last one left them, unpaused:
    # paused first, the scheduler runs nothing before Bronze holds this demo's records.
    for dag_id in SCHEDULED_DAGS:
        client.pause(dag_id)
    used, produced, stream = _produce_demo(settings, source, events, echo)
    client.unpause("streaming_supervisor")
    run_id = client.trigger("streaming_supervisor")
    echo(
        "streaming_supervisor: starting the always-on jobs "
        f"({', '.join(supervisor.always_on_jobs())}) ..."
    )
    if client.wait_for_run("streaming_supervisor", run_id, timeout_s=600) != "success":
        jobs = settings.storage.state_path / "jobs"
        raise DemoError(
            f"streaming_supervisor run {run_id} failed: see its task logs in the "
            f"UI ({standalone.url}) or the driver logs in {jobs}"
        )
    backlog = kafka_backlog(settings)
    echo(f"waiting for bronze_ingest to land {backlog} records ...")
    wait_for_bronze(settings, backlog, echo=echo)
    for dag_id in MANUAL_DAGS:  # never scheduled: unpaused so that a trigger runs at once
        client.unpause(dag_id)
    # Unpausing schedules the newest complete 15-minute interval at once (no catch-up):
    # that run refines what Bronze holds.
    medallion_run = _unpause_for_a_new_run(client, "medallion_incremental", 60)
    echo(f"medallion_incremental: run {medallion_run} ...")
    state = client.wait_for_run(
        "medallion_incremental",
        medallion_run,
        on_change=lambda tasks: echo("  " + ", ".join(f"{t}={s}" for t, s in tasks.items())),
    )
    if state == "success":
        # Events that arrive after Silver's watermark passed them: a second run shows them
        # in silver_late_events (the 15-minute schedule would, a little later).
        echo(
            f"sending {LATE_ORDERS} late orders (with their payments and browsing) and a "
            "changed duplicate of the newest payment ..."
        )
        produced += _send(settings, used, late_lot(stream), FaultConfig(), echo)
        wait_for_bronze(settings, kafka_backlog(settings), echo=echo)
        medallion_run = client.trigger("medallion_incremental")
        echo(f"medallion_incremental: run {medallion_run} ...")
        state = client.wait_for_run(
            "medallion_incremental",
            medallion_run,
            on_change=lambda tasks: echo("  " + ", ".join(f"{t}={s}" for t, s in tasks.items())),
        )
    rows = table_rows(settings)
    _summary(settings, rows, echo)
    if state == "success":
        _maintain_tables(client, echo)
    echo(f"Airflow UI: {standalone.url}  (user admin; password in {standalone.password_file})")
    echo(
        f"Streaming page: {standalone.url}/plugin/streaming  (jobs, Kafka lag, tables, gates; "
        f"Prometheus metrics at {standalone.url}/streaming/metrics)"
    )
    if "AIRFLOW__OPENLINEAGE__TRANSPORT" in lineage_environment():  # the embedded default
        from ingest_core.lineage import lineage_file

        echo(f"OpenLineage events of every task run: {lineage_file()}  (docs/lineage.md)")
    echo("stop everything with `make demo-down`")
    if state != "success":
        raise DemoError(
            f"medallion_incremental run {medallion_run} {state}: see the failed "
            f"task's log in the UI ({standalone.url})"
        )
    return DemoResult(source=used, produced=produced, run_state=state, rows=rows)


def _summary(settings: PlatformSettings, rows: dict[str, int], echo: Callable[[str], None]) -> None:
    from ingest_core.catalog import get_catalog
    from ingest_core.delta_tables import read_pandas

    catalog = get_catalog()
    width = max(len(t) for t in rows)
    for table, count in rows.items():
        if table in EMPTY_WHEN_ALL_WELL and not count:
            continue
        spec = catalog.table(table)
        echo(f"  {table:<{width}}  {count:>8} rows  {spec.path(settings)}")
        retention = spec.maintenance.keep_rows
        if retention is not None:
            # A bookkeeping table shrinks when table_maintenance runs: say so where its count
            # is, or a second look (after maintenance) reads like lost rows.
            since = "silver_refine's watermark" if retention.measured_from != "now" else "now"
            kept = (
                f"; the newest {retention.keep_newest} per "
                f"{', '.join(retention.newest_per) or 'table'} stay"
                if retention.keep_newest
                else ""
            )
            echo(
                f"  {'':<{width}}  (bookkeeping: table_maintenance drops rows whose "
                f"{retention.time_column} is more than {retention.keep} before {since}{kept})"
            )
    for table, why in EMPTY_WHEN_ALL_WELL.items():
        if not rows.get(table):
            echo(f"  {table:<{width}}  empty: {why}")
    if rows.get("gold_payment_totals_5m"):
        path = catalog.table("gold_payment_totals_5m").path(settings)
        totals = read_pandas(path).sort_values("window_start").tail(5)
        echo("newest gold_payment_totals_5m windows:")
        for row in totals.itertuples():
            echo(
                f"  {_utc_minute(row.window_start)} {row.currency} "
                f"payments={row.payment_count} amount={row.amount_total}"
            )


def _utc_minute(value: Any) -> str:
    """``value`` (a timestamp, naive meaning UTC or tz-aware, as pandas reads Delta
    timestamps with or without a zone) as ``YYYY-MM-DD HH:MM UTC``."""
    import pandas as pd

    stamp = pd.Timestamp(value)
    stamp = stamp.tz_convert("UTC") if stamp.tzinfo else stamp.tz_localize("UTC")
    return stamp.strftime("%Y-%m-%d %H:%M UTC")


def _unpause_for_a_new_run(client: AirflowClient, dag_id: str, wait_s: float) -> str:
    """Unpause ``dag_id``; :returns: the id of the run the scheduler then creates (waited
    for up to ``wait_s`` seconds), else of a triggered one. Never a run from before: Airflow's
    database keeps an earlier demo's runs, and the newest interval may already have one."""
    before = client.latest_run(dag_id)
    client.unpause(dag_id)

    def new_run() -> str | None:
        run = client.latest_run(dag_id)
        return run if run != before else None

    scheduled = None
    with contextlib.suppress(TimeoutError):
        scheduled = wait_until(new_run, wait_s, 3, what="a new run")
    return scheduled or client.trigger(dag_id)


def _maintain_tables(client: AirflowClient, echo: Callable[[str], None]) -> None:
    """Unpause ``table_maintenance`` (daily at 03:30 UTC) at the end, out of the way of the
    medallion runs, and wait for one run: the one unpausing schedules (Airflow 3 runs the
    newest missed cron time once), else a triggered one. The demo's data is younger than the
    7-day floor, so it compacts and reports but removes nothing. A failure is reported, not
    raised: maintenance is not what the demo is waiting for."""
    from ingestctl.airflow_runtime import AirflowError

    run_id = _unpause_for_a_new_run(client, "table_maintenance", 30)
    echo(f"table_maintenance: run {run_id} (compaction, VACUUM, log and row retention) ...")
    try:
        state = client.wait_for_run("table_maintenance", run_id, timeout_s=900)
    except AirflowError as error:
        state = f"not finished ({error})"
    echo(f"table_maintenance: {state}; each task's log has its table's report")


def start_engines(settings: PlatformSettings, echo: Callable[[str], None] = print) -> None:
    """Start the Kafka broker (or the ``local-cluster`` profile's three) and, when the profile
    has one (``spark_cluster.workers``), the embedded Spark standalone cluster; idempotent.

    :raises ingestctl.kafka_broker.BrokerError: a broker could not start.
    :raises ingestctl.spark_cluster.SparkClusterError: the Spark cluster could not start.
    """
    from ingestctl.kafka_broker import KafkaBroker

    echo(KafkaBroker(settings.kafka).up().describe())
    if settings.spark_cluster.workers:
        from ingestctl.spark_cluster import SparkStandalone

        echo(SparkStandalone(settings).up().describe())


def stop_demo(echo: Callable[[str], None] = print) -> None:
    """Stop what ``make demo`` started: Airflow first (so that nothing restarts the jobs),
    then the always-on jobs (gracefully, between micro-batches), then the Spark cluster of
    ``local-cluster``, then the broker, and the
    embedded PostgreSQL last (Airflow and the jobs' tasks need it until they are gone)."""
    from ingest_core.settings import get_settings
    from ingest_platform import supervisor
    from ingestctl.airflow_runtime import Standalone
    from ingestctl.kafka_broker import KafkaBroker
    from ingestctl.postgres_cluster import EmbeddedPostgres

    echo("airflow standalone: " + ("stopped" if Standalone().down() else "not running"))
    for job in supervisor.always_on_jobs():
        echo(supervisor.stop(job, disable=False))
    settings = get_settings()
    if settings.spark_cluster.workers:  # the drivers are gone: their executors with them
        from ingestctl.spark_cluster import SparkStandalone

        stopped = SparkStandalone(settings).down()
        echo("spark cluster: " + ("stopped" if stopped else "not running"))
    echo("kafka: " + ("stopped" if KafkaBroker(settings.kafka).down() else "not running"))
    echo("postgres: " + ("stopped" if EmbeddedPostgres().down() else "not running"))
