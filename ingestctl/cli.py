"""``ingestctl``: the platform's command line.

Every command reads the current profile's settings (:mod:`ingest_core.settings`); options
override them for one call. Errors are one clear message on stderr and a non-zero exit
status, never a traceback for a known failure.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ingest_core.settings import KafkaSettings, get_settings

if TYPE_CHECKING:
    from ingestctl.replay.faults import FaultConfig
    from ingestctl.replay.runner import ReplaySummary
    from ingestctl.spark_cluster import SparkStandalone

app = typer.Typer(
    name="ingestctl",
    help="Operate the incremental ingestion platform (Kafka -> Spark -> Delta, run by Airflow).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
kafka_app = typer.Typer(
    help="Run the platform's own single-node Kafka broker and create its topics.",
    no_args_is_help=True,
)
app.add_typer(kafka_app, name="kafka")
postgres_app = typer.Typer(
    help="Run the embedded PostgreSQL cluster (the embedded Airflow's metadata database).",
    no_args_is_help=True,
)
app.add_typer(postgres_app, name="postgres")
spark_app = typer.Typer(
    help="Run the embedded Spark standalone cluster (INGEST_PROFILE=local-cluster).",
    no_args_is_help=True,
)
app.add_typer(spark_app, name="spark")

PortOption = Annotated[
    int | None,
    typer.Option("--port", min=1, max=65535, help="Client port (default from settings: 9092)."),
]
ControllerPortOption = Annotated[
    int | None,
    typer.Option("--controller-port", min=1, max=65535, help="KRaft controller port."),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Folder for the broker's data, logs and pid file."),
]


def shared_options(
    factory: Callable[..., Any], keyword: str
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator that gives a command the options ``factory`` declares (its parameters,
    after the command's own, in the signature typer reads) and calls it with what
    ``factory`` builds from them as the keyword argument ``keyword``: options several
    commands share are declared once. Typer's documented way of sharing parameters is a
    callback on a command group, which would move them before the command's name
    (``ingestctl kafka --port N up``); this keeps them after it."""
    shared = inspect.signature(factory, eval_str=True).parameters

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = inspect.signature(command, eval_str=True)

        @functools.wraps(command)
        def with_options(**kwargs: Any) -> None:
            built = factory(**{name: kwargs.pop(name) for name in shared})
            command(**kwargs, **{keyword: built})

        parameters = [p for name, p in own.parameters.items() if name != keyword]
        with_options.__signature__ = own.replace(  # type: ignore[attr-defined]
            parameters=[*parameters, *shared.values()]
        )
        return with_options

    return decorate


def _kafka_settings(
    port: PortOption = None,
    controller_port: ControllerPortOption = None,
    data_dir: DataDirOption = None,
) -> KafkaSettings:
    """The broker's settings with the ``kafka`` commands' options over them."""
    overrides: dict[str, object] = {}
    if port is not None:
        overrides["port"] = port
    if controller_port is not None:
        overrides["controller_port"] = controller_port
    if data_dir is not None:
        overrides["data_dir"] = data_dir.resolve()
    return get_settings().kafka.model_copy(update=overrides)


broker_options = shared_options(_kafka_settings, "kafka")
"""Gives the ``kafka`` commands ``--port``, ``--controller-port`` and ``--data-dir``."""


@app.callback()
def _check_settings(ctx: typer.Context) -> None:
    """Refuse to run on invalid settings, naming the field (e.g. INGEST_KAFKA__PORT=abc).
    ``ingestctl catalog ...`` checks the catalog itself, one line per problem: a broken
    catalog (``INGEST_CATALOG_DIR``) must not stop it with the settings' validation error."""
    from pydantic import ValidationError

    if ctx.invoked_subcommand == "catalog":
        return
    try:
        get_settings()
    except (ValidationError, KeyError) as error:
        raise _fail(
            f"invalid platform settings (include/platform.yaml or INGEST_*): {error}"
        ) from None


def _fail(message: str) -> typer.Exit:
    typer.secho(message, err=True, fg=typer.colors.RED)
    return typer.Exit(code=1)


@kafka_app.command("up")
@broker_options
def kafka_up(*, kafka: KafkaSettings) -> None:
    """Start the broker (format storage on first start) and wait until it answers."""
    from ingestctl.kafka_broker import BrokerError, KafkaBroker

    settings = kafka
    try:
        broker = KafkaBroker(settings)
        if not broker.status().running:
            typer.echo(f"kafka: starting on {settings.bootstrap_servers} ...", err=True)
        status = broker.up()
    except (BrokerError, OSError) as error:
        raise _fail(str(error)) from None
    typer.echo(status.describe())


@kafka_app.command("down")
@broker_options
def kafka_down(*, kafka: KafkaSettings) -> None:
    """Stop the broker this platform started (only that process, by its pid)."""
    from ingestctl.kafka_broker import BrokerError, KafkaBroker

    try:
        stopped = KafkaBroker(kafka).down()
    except (BrokerError, OSError) as error:
        raise _fail(str(error)) from None
    typer.echo("kafka: stopped" if stopped else "kafka: was not running")


@kafka_app.command("clean")
@broker_options
def kafka_clean(*, kafka: KafkaSettings) -> None:
    """Delete the broker's topics, records and logs (its data folder); refused while it runs."""
    from ingestctl.kafka_broker import BrokerError, KafkaBroker

    broker = KafkaBroker(kafka)
    try:
        deleted = broker.clean()
    except (BrokerError, OSError) as error:
        raise _fail(str(error)) from None
    typer.echo(f"kafka: deleted {broker.data_dir}" if deleted else "kafka: no data to delete")


@kafka_app.command("status")
@broker_options
def kafka_status(*, kafka: KafkaSettings) -> None:
    """Say whether the platform's broker runs; exit status 3 when it does not."""
    from ingestctl.kafka_broker import BrokerError, KafkaBroker

    try:
        status = KafkaBroker(kafka).status()
    except (BrokerError, OSError) as error:
        raise _fail(str(error)) from None
    typer.echo(status.describe())
    if not status.running:
        raise typer.Exit(code=3)


@kafka_app.command("consumer-groups")
def kafka_consumer_groups(
    job: Annotated[str, typer.Argument(help="An always-on job, e.g. bronze_ingest.")],
    command_config: Annotated[
        Path | None,
        typer.Option(
            "--command-config",
            exists=True,
            dir_okay=False,
            help="Client properties for a secured broker (SASL/SSL), as Kafka's tools take.",
        ),
    ] = None,
) -> None:
    """Show a job's Kafka lag with Kafka's own ConsumerGroupCommand (what
    kafka-consumer-groups.sh --describe prints): its drivers commit the offsets their
    checkpoint committed to the consumer group <topic prefix><job> after every batch."""
    import subprocess

    from ingest_core.catalog import KafkaSourceSpec, get_catalog
    from ingest_core.consumer_groups import consumer_group
    from ingestctl.kafka_broker import BrokerError, KafkaBroker

    settings = get_settings()
    readers = sorted(
        name
        for name, spec in get_catalog().jobs.items()
        if isinstance(spec.source, KafkaSourceSpec)
    )
    if job not in readers:
        what = "does not read Kafka" if job in get_catalog().jobs else "is not a declared job"
        raise _fail(f"{job!r} {what}; jobs that commit a consumer group: {readers}")
    if (settings.kafka.uses_sasl or settings.kafka.uses_ssl) and command_config is None:
        raise _fail(
            f"the broker uses {settings.kafka.security_protocol}: pass its client properties "
            "with --command-config <file> (security.protocol, sasl.* / ssl.*)"
        )
    args = ["--describe", "--group", consumer_group(job, settings)]
    if command_config is not None:
        args += ["--command-config", str(command_config)]
    try:
        done = KafkaBroker(settings.kafka).consumer_groups(*args)
    except BrokerError as error:
        raise _fail(str(error)) from None
    except subprocess.TimeoutExpired:
        raise _fail(
            f"ConsumerGroupCommand got no answer from {settings.kafka.bootstrap_servers} "
            "within 120 s (is the broker up? `ingestctl kafka status`)"
        ) from None
    typer.echo(done.stdout.strip())
    if done.returncode != 0:
        raise _fail(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")


@kafka_app.command("create-topics")
def kafka_create_topics(
    partitions: Annotated[
        int | None,
        typer.Option(
            "--partitions",
            min=1,
            help="Partitions of created topics (default: replay.partitions in platform.yaml, 3).",
        ),
    ] = None,
) -> None:
    """Create the contract topics the jobs read (every source of the event contracts:
    orders, payments, refunds, customer_activity, reviews, and any you add; with the profile's
    topic prefix) if they are missing."""
    from kafka.errors import KafkaError

    from ingest_core.contracts import TOPICS
    from ingest_core.topics import TopicCollisionError, TopicMismatchError, ensure_topics

    settings = get_settings()
    topics = [settings.kafka.topic(t) for t in TOPICS]
    try:
        counts = ensure_topics(
            settings.kafka.bootstrap_servers,
            topics,
            partitions=partitions or settings.replay.partitions,
            allow_partition_mismatch=True,
            kafka=settings.kafka,
        )
    except (TopicCollisionError, TopicMismatchError) as error:
        raise _fail(str(error)) from None
    except KafkaError as error:
        raise _fail(
            f"Kafka at {settings.kafka.bootstrap_servers} refused or did not answer: {error} "
            "(is the broker up? `ingestctl kafka status`)"
        ) from None
    for topic in topics:
        typer.echo(f"{topic}: {counts[topic]} partition(s)")


PostgresDirOption = Annotated[
    Path | None,
    typer.Option(
        "--dir",
        help="The cluster's folder (default <INGEST_HOME>/postgres; INGEST_AIRFLOW__POSTGRES_DIR).",
    ),
]


def _postgres(folder: Path | None) -> Any:
    from ingestctl.postgres_cluster import EmbeddedPostgres

    return EmbeddedPostgres(folder.resolve() if folder is not None else None)


@postgres_app.command("up")
def postgres_up(folder: PostgresDirOption = None) -> None:
    """Start the cluster (initdb on first start) and create Airflow's databases."""
    from ingestctl.postgres_cluster import PostgresError

    try:
        status = _postgres(folder).up()
    except (PostgresError, OSError) as error:
        raise _fail(str(error)) from None
    typer.echo(status.describe())


@postgres_app.command("down")
def postgres_down(folder: PostgresDirOption = None) -> None:
    """Stop the cluster of this platform's folder (pg_ctl stop -m fast)."""
    from ingestctl.postgres_cluster import PostgresError

    try:
        stopped = _postgres(folder).down()
    except (PostgresError, OSError) as error:
        raise _fail(str(error)) from None
    typer.echo("postgres: stopped" if stopped else "postgres: was not running")


@postgres_app.command("status")
def postgres_status(folder: PostgresDirOption = None) -> None:
    """Say whether the cluster runs (socket, pid, memory); exit status 3 when it does not."""
    status = _postgres(folder).status()
    typer.echo(status.describe())
    if not status.running:
        raise typer.Exit(code=3)


WorkerOption = Annotated[
    int | None,
    typer.Option("--worker", min=0, help="One worker (0-based) instead of the whole cluster."),
]


def _spark_cluster(worker: int | None) -> SparkStandalone:
    from ingestctl.spark_cluster import SparkClusterError, SparkStandalone

    try:
        return SparkStandalone(get_settings(), worker=worker)
    except SparkClusterError as error:
        raise _fail(str(error)) from None


@spark_app.command("up")
def spark_up(worker: WorkerOption = None) -> None:
    """Start the master and the workers (or one worker) and wait until they registered."""
    from ingestctl.kafka_broker import PortInUseError
    from ingestctl.spark_cluster import SparkClusterError

    cluster = _spark_cluster(worker)
    missing = [name for name in cluster.names if name not in cluster.status().pids]
    if missing:
        typer.echo(f"spark: starting {', '.join(missing)} ...", err=True)
    try:
        typer.echo(cluster.up().describe())
    except (SparkClusterError, PortInUseError, OSError) as error:
        raise _fail(str(error)) from None


@spark_app.command("down")
def spark_down(worker: WorkerOption = None) -> None:
    """Stop the workers (with their executors) and the master this platform started."""
    stopped = _spark_cluster(worker).down()
    typer.echo("spark: stopped" if stopped else "spark: was not running")


@spark_app.command("status")
def spark_status(worker: WorkerOption = None) -> None:
    """Say which daemons run and how many workers the master sees; exit status 3 when one
    is down."""
    status = _spark_cluster(worker).status()
    typer.echo(status.describe())
    if not status.running:
        raise typer.Exit(code=3)


@app.command("status")
def status(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Airflow API port.")] = 8080,
) -> None:
    """What runs: the metadata database, the broker (the Spark cluster in the local-cluster
    profile), Airflow and its scheduler's heartbeat (from Airflow's /api/v2/monitor/health).
    Exit status 3 when Airflow is down or its scheduler or database is unhealthy."""
    from ingestctl.airflow_runtime import Standalone, describe_health, metadata_database
    from ingestctl.kafka_broker import KafkaBroker

    database = metadata_database()
    if database == "postgres":
        typer.echo(_postgres(None).status().describe())
    else:
        typer.echo(f"metadata database: {'SQLite' if database == 'sqlite' else 'your own'}")
    typer.echo(KafkaBroker(get_settings().kafka).status().describe())
    if get_settings().spark_cluster.workers:
        typer.echo(_spark_cluster(None).status().describe())
    standalone = Standalone(port)
    pid = standalone.pid()
    typer.echo(f"airflow: running (pid {pid}; {standalone.url})" if pid else "airflow: not running")
    # What the running standalone left out, not what this shell's settings would.
    skipped = standalone.skipped_components()
    healthy, lines = describe_health(standalone.health(), datetime.now(UTC), skipped)
    for line in lines:
        typer.echo(f"  {line}")
    if not (pid and healthy):
        raise typer.Exit(code=3)


@app.command("demo")
def demo(
    events: Annotated[
        int, typer.Option(min=1, max=1_000_000, help="Synthetic events (with --source generate).")
    ] = 2000,
    source: Annotated[
        str,
        typer.Option(help="auto (the Olist sample if ../shared/datasets has it), olist, generate."),
    ] = "auto",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Airflow UI port.")] = 8080,
) -> None:
    """Run the platform under Airflow on embedded defaults (what `make demo` calls)."""
    if source not in ("auto", "olist", "generate"):
        raise _fail(f"--source {source!r} is not auto, olist or generate")
    from ingest_core.spark_config import MissingJarsError
    from ingestctl.airflow_runtime import AirflowError
    from ingestctl.demo import DemoError, run_demo
    from ingestctl.kafka_broker import BrokerError
    from ingestctl.producer import ProduceError

    try:
        run_demo(events, source=source, port=port)
    except (
        BrokerError,
        ProduceError,
        MissingJarsError,
        FileNotFoundError,
        AirflowError,
        DemoError,
    ) as error:
        raise _fail(str(error)) from None


@app.command("soak")
def soak(
    minutes: Annotated[
        float, typer.Option(min=1, max=24 * 60, help="How long the stream runs, in minutes.")
    ] = 20,
    faults: Annotated[int, typer.Option(min=1, max=5000, help="Faults to inject.")] = 40,
    seed: Annotated[int, typer.Option(help="Seed of the fault schedule and the stream.")] = 1,
    rate: Annotated[
        float, typer.Option(min=0.5, max=5000, help="Events per second (wall clock).")
    ] = 8,
    kinds: Annotated[
        str | None,
        typer.Option(help="Comma-separated fault kinds (default: all; see docs/soak.md)."),
    ] = None,
    longest_outage: Annotated[
        float,
        typer.Option(min=10, max=3600, help="Longest broker or database outage, in seconds."),
    ] = 180,
    cadence: Annotated[
        float,
        typer.Option(min=30, max=3600, help="Seconds between triggered medallion runs."),
    ] = 180,
    recovery_timeout: Annotated[
        float,
        typer.Option(
            min=60, max=24 * 3600, help="Seconds after a fault's end before it needed a human."
        ),
    ] = 900,
    home: Annotated[
        Path | None,
        typer.Option(help="The soak's platform home (default <INGEST_HOME>/soak/<run id>)."),
    ] = None,
    keep: Annotated[bool, typer.Option(help="Leave the soak's platform running.")] = False,
) -> None:
    """Run the platform under a steady stream and seeded infrastructure faults, then judge
    it against an independent computation (docs/soak.md). Exit 0 when it passed, 1 when not."""
    from ingestctl.soak.plan import parse_kinds
    from ingestctl.soak.runner import SoakOptions, run_soak

    try:
        settings = get_settings()
        chosen = parse_kinds(kinds, settings.kafka.brokers, settings.spark_cluster.workers)
    except ValueError as error:
        raise _fail(str(error)) from None
    if home is not None and home.exists() and (not home.is_dir() or any(home.iterdir())):
        raise _fail(f"--home {home} is not an empty folder: a soak judges a platform from nothing")
    options = SoakOptions(
        duration_s=minutes * 60,
        faults=faults,
        seed=seed,
        rate=rate,
        kinds=chosen,
        longest_outage_s=longest_outage,
        cadence_s=cadence,
        recovery_timeout_s=recovery_timeout,
        home=home,
        keep=keep,
    )
    result = run_soak(options)
    typer.echo(Path(result.home, "soak", "report.md").read_text())
    raise typer.Exit(code=0 if result.passed else 1)


@app.command(
    "airflow",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def airflow_cli(
    ctx: typer.Context,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo",
            help="Use the running demo's Airflow database (e.g. `backfill create`, which its "
            "scheduler then runs).",
        ),
    ] = False,
) -> None:
    """Run the airflow CLI in the platform's environment, e.g. `ingestctl airflow dags test
    medallion_incremental` or `ingestctl airflow tasks test medallion_incremental gate_silver`.

    Uses its own metadata database (.ingest/airflow-cli, migrated on first use), so that it
    never disturbs a running `make demo` scheduler; tables and checkpoints are the
    platform's (the checkpoint locks keep one driver per checkpoint). With --demo, the
    demo's own database instead (`ingestctl airflow --demo backfill create ...`).
    """
    import os
    import sys

    from ingestctl.airflow_runtime import (
        AirflowError,
        airflow_environment,
        ensure_metadata_database,
        metadata_database,
        private_airflow_home,
    )

    try:
        ensure_metadata_database()
    except AirflowError as error:
        raise _fail(str(error)) from None
    env = {**os.environ, **airflow_environment(cli=not demo)}
    airflow = str(Path(sys.executable).parent / "airflow")
    import subprocess

    # Initialised once per database: a marker per choice (SQLite file, embedded cluster).
    # The demo's database is initialised by its `airflow standalone`.
    marker = private_airflow_home(cli=not demo) / f".initialised-{metadata_database()}"
    if not demo and not marker.exists():
        from ingest_platform.orchestration import pool_command

        for init in (["db", "migrate"], pool_command(), ["dags", "reserialize"]):
            done = subprocess.run(
                [airflow, *init], env=env, check=False, capture_output=True, text=True
            )
            if done.returncode:
                tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
                raise _fail(f"`airflow {' '.join(init)}` failed (exit {done.returncode}):\n{tail}")
        marker.touch()
    raise typer.Exit(subprocess.run([airflow, *ctx.args], env=env, check=False).returncode)


@app.command("demo-down")
def demo_down() -> None:
    """Stop what `make demo` started: Airflow, the always-on jobs, the broker, then the
    embedded PostgreSQL (last: Airflow needs it to shut down)."""
    from ingestctl.demo import stop_demo

    stop_demo()


class ReplaySource(StrEnum):
    """Datasets ``ingestctl replay`` knows."""

    olist = "olist"
    uci_retail = "uci-retail"


_Rate = Annotated[float, typer.Option(min=0.0, max=1.0)]
SpeedOption = Annotated[
    float | None,
    typer.Option("--speed", min=0.0, help="N source seconds per wall second (time compression)."),
]
FastOption = Annotated[
    bool,
    typer.Option(
        "--as-fast-as-possible",
        help="Ignore event times: send as fast as the broker acknowledges (replay's default; "
        "generate sends in real time unless told).",
    ),
]
ShiftOption = Annotated[
    bool, typer.Option("--shift-to-now", help="Move the first event to now (UTC).")
]
DuplicateOption = Annotated[
    float,
    typer.Option(
        "--duplicate-rate",
        min=0.0,
        max=1.0,
        help="Resend this share of events (same id and payload).",
    ),
]
LateOption = Annotated[
    float,
    typer.Option(
        "--late-rate", min=0.0, max=1.0, help="Hold this share of events back by --late-delay."
    ),
]
LateDelayOption = Annotated[
    str,
    typer.Option(
        "--late-delay", help="Delay distribution (s): exp:MEAN | uniform:LOW:HIGH | fixed:S."
    ),
]
OutOfOrderOption = Annotated[
    float,
    typer.Option(
        "--out-of-order-rate",
        min=0.0,
        max=1.0,
        help="Send this share of events after their successor.",
    ),
]
MalformedOption = Annotated[
    float,
    typer.Option(
        "--malformed-rate",
        min=0.0,
        max=1.0,
        help="Add a malformed record (each quarantine reason in turn).",
    ),
]
DriftOption = Annotated[
    float,
    typer.Option(
        "--drift-rate",
        min=0.0,
        max=1.0,
        help="Change the schema: an extra field / a missing optional field.",
    ),
]
OversizeOption = Annotated[
    int,
    typer.Option(
        "--oversize-count", min=0, help="Add this many 2 MB messages (the broker rejects them)."
    ),
]
FaultSeedOption = Annotated[int, typer.Option("--fault-seed", help="Seed of the fault injection.")]
PartitionsOption = Annotated[
    int | None, typer.Option("--partitions", min=1, help="Partitions of created topics.")
]
MismatchOption = Annotated[
    bool,
    typer.Option(
        "--allow-partition-mismatch", help="Write to existing topics with another partition count."
    ),
]
PrefixOption = Annotated[
    str | None,
    typer.Option(
        "--topic-prefix",
        help="Prefix of every topic name (default: the platform's, INGEST_KAFKA__TOPIC_PREFIX).",
    ),
]
AllowFailuresOption = Annotated[
    bool, typer.Option("--allow-failures", help="Exit 0 even if the broker refused some messages.")
]
SummaryOption = Annotated[
    Path | None, typer.Option("--summary-json", help="Write the summary here.")
]
ProgressOption = Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bar.")]


@dataclass(frozen=True)
class SendOptions:
    """What `replay` and `generate` share, by name (their options of the same names).

    :param speed: source seconds per wall second (None: the command's default).
    :param faults: the data faults to inject (:class:`ingestctl.replay.faults.FaultConfig`).
    :param partitions: partitions of topics the run creates (None: ``replay.partitions``).
    :param topic_prefix: None: ``kafka.topic_prefix``.
    """

    speed: float | None
    as_fast_as_possible: bool
    faults: FaultConfig
    partitions: int | None
    allow_partition_mismatch: bool
    topic_prefix: str | None
    allow_failures: bool
    summary_json: Path | None
    progress: bool
    shift_to_now: bool = False


def _send_options(
    speed: SpeedOption = None,
    as_fast_as_possible: FastOption = False,
    duplicate_rate: DuplicateOption = 0.0,
    late_rate: LateOption = 0.0,
    late_delay: LateDelayOption = "exp:600",
    out_of_order_rate: OutOfOrderOption = 0.0,
    malformed_rate: MalformedOption = 0.0,
    drift_rate: DriftOption = 0.0,
    oversize_count: OversizeOption = 0,
    fault_seed: FaultSeedOption = 0,
    partitions: PartitionsOption = None,
    allow_partition_mismatch: MismatchOption = False,
    topic_prefix: PrefixOption = None,
    allow_failures: AllowFailuresOption = False,
    summary_json: SummaryOption = None,
    progress: ProgressOption = True,
) -> SendOptions:
    """The options `replay` and `generate` share, declared once (:data:`send_options` adds
    them to both commands), as a :class:`SendOptions`; a bad fault option exits 1 with the
    reason."""
    from ingestctl.replay.faults import DelayDistribution, FaultConfig

    try:
        faults = FaultConfig(
            duplicate_rate=duplicate_rate,
            late_rate=late_rate,
            late_delay=DelayDistribution.parse(late_delay),
            out_of_order_rate=out_of_order_rate,
            malformed_rate=malformed_rate,
            drift_rate=drift_rate,
            oversize_count=oversize_count,
            seed=fault_seed,
        )
    except ValueError as error:
        raise _fail(str(error)) from None
    return SendOptions(
        speed=speed,
        as_fast_as_possible=as_fast_as_possible,
        faults=faults,
        partitions=partitions,
        allow_partition_mismatch=allow_partition_mismatch,
        topic_prefix=topic_prefix,
        allow_failures=allow_failures,
        summary_json=summary_json,
        progress=progress,
    )


send_options = shared_options(_send_options, "options")
"""Gives ``replay`` and ``generate`` the send options of :func:`_send_options`."""


def _send(source: str, events: Any, options: SendOptions) -> ReplaySummary:
    """Shared tail of `replay` and `generate`: validate, send, summarise, set the exit code."""
    from kafka.errors import KafkaError

    from ingest_core.topics import TopicMismatchError
    from ingestctl.replay import runner
    from ingestctl.replay.model import SourceError

    speed, as_fast_as_possible = options.speed, options.as_fast_as_possible
    summary_json = options.summary_json

    if speed is not None and as_fast_as_possible:
        raise _fail("--speed and --as-fast-as-possible exclude each other")
    if summary_json is not None:
        _check_writable(summary_json)
    try:
        pace = runner.Pace(None if as_fast_as_possible else speed)
        settings = get_settings()
        summary = runner.run(
            source,
            events,
            bootstrap_servers=settings.kafka.bootstrap_servers,
            faults=options.faults,
            pace=pace,
            shift_to_now=options.shift_to_now,
            partitions=options.partitions or settings.replay.partitions,
            allow_partition_mismatch=options.allow_partition_mismatch,
            topic_prefix=(
                settings.kafka.topic_prefix
                if options.topic_prefix is None
                else options.topic_prefix
            ),
            progress=options.progress,
            kafka=settings.kafka,
        )
    except (ValueError, SourceError, TopicMismatchError, OverflowError) as error:
        raise _fail(str(error)) from None
    except KafkaError as error:
        raise _fail(
            f"Kafka at {get_settings().kafka.bootstrap_servers} refused or did not answer: "
            f"{error} (is the broker up? `ingestctl kafka status`)"
        ) from None
    typer.echo(summary.as_text())
    if summary_json:
        runner.write_summary_json(summary, summary_json)
        typer.echo(f"summary written to {summary_json}")
    if summary.produce.interrupted:
        typer.secho("interrupted: the counts above cover what was sent", err=True)
        raise typer.Exit(code=130)
    if summary.produce.failed and not options.allow_failures:
        raise _fail(
            f"{summary.produce.failed} messages were not acknowledged (see above); "
            "--allow-failures accepts that"
        )
    return summary


def _check_writable(path: Path) -> None:
    """Refuse a --summary-json path that cannot be written, before anything is sent."""
    if path.is_dir():
        raise _fail(f"--summary-json {path} is a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a"):
            pass
    except OSError as error:
        raise _fail(f"--summary-json {path} cannot be written: {error}") from None


@app.command("replay")
@send_options
def replay(
    source: Annotated[ReplaySource, typer.Argument(help="Which dataset PATH holds.")],
    path: Annotated[
        Path,
        typer.Argument(
            exists=True,
            readable=True,
            help="The dataset's folder, or one file of it: a day's CSV of uci-retail "
            "(e.g. 2010-12-01.csv); olist needs its folder (or its sample/ subfolder).",
        ),
    ],
    timezone: Annotated[
        str | None,
        typer.Option(
            help="IANA zone of the dataset's offset-less times (default: America/Sao_Paulo for "
            "olist, Europe/London for uci-retail)."
        ),
    ] = None,
    shift_to_now: ShiftOption = False,
    dimension: Annotated[
        bool,
        typer.Option(
            "--dimension/--no-dimension",
            help="After a complete send, write the customers file to the landing folder.",
        ),
    ] = True,
    *,
    options: SendOptions,
) -> None:
    """Replay a real dataset into Kafka as contract events; load its customers dimension."""
    from ingestctl.replay import olist, runner, uci_retail
    from ingestctl.replay.model import SourceError

    module = olist if source is ReplaySource.olist else uci_retail
    try:
        events = module.read_events(path, timezone or module.DEFAULT_TIMEZONE)
        customers = module.read_customers(path)
    except SourceError as error:
        raise _fail(str(error)) from None
    _send(source.value, events, dataclasses.replace(options, shift_to_now=shift_to_now))
    if dimension:
        # _send returned: every event was acknowledged, or --allow-failures accepted the
        # failures. A run that failed (exit 1) or was interrupted leaves the dimension as
        # it was. The rows are upserted by customer id, so replaying one file after another
        # keeps every customer any of them had.
        landing = get_settings().storage.landing_path / "customers"
        written, total = runner.write_dimension(customers, landing, source.value.replace("-", "_"))
        typer.echo(
            f"customers dimension: {len(customers)} rows upserted -> {written} ({total} customers)"
        )


def _event_time(value: str) -> datetime:
    """``--start``'s parser: an ISO 8601 date and time (``datetime.fromisoformat``), in UTC
    when it has no offset.

    :raises typer.BadParameter: not such a time (typer's own date type prefixed its message
        with pydantic's "Value error,").
    """
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not an ISO 8601 time such as 2026-12-07T10:00:00Z"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@app.command("generate")
@send_options
def generate(
    count: Annotated[int, typer.Option(min=0, help="Events to generate.")] = 10_000,
    rate: Annotated[float, typer.Option(min=0.001, help="Target events per second.")] = 100.0,
    seed: Annotated[int, typer.Option(help="Same seed and --start: same stream.")] = 42,
    start: Annotated[
        datetime | None,
        typer.Option(
            parser=_event_time,
            metavar="TIME",
            help="Event time of the first event, ISO 8601 such as 2026-12-07T10:00:00Z "
            "(UTC if no offset; default: now).",
        ),
    ] = None,
    *,
    options: SendOptions,
) -> None:
    """Produce a synthetic stream of all four event types at a target rate.

    Sent in real time at --rate events per second (event times follow the wall clock), unless
    --as-fast-as-possible or --speed says otherwise.
    """
    from ingestctl.replay.generator import GeneratedEvents

    begin = start or datetime.now(UTC)
    events = GeneratedEvents(count, seed=seed, start=begin, rate=rate)
    # Real time by default: one source second per wall second, i.e. --rate events/s.
    if options.speed is None and not options.as_fast_as_possible:
        options = dataclasses.replace(options, speed=1.0)
    _send("generator", events, options)


catalog_app = typer.Typer(
    help="Check the catalog (include/pipeline.yaml) and the event contracts.", no_args_is_help=True
)
app.add_typer(catalog_app, name="catalog")


@catalog_app.command("check")
def catalog_check(
    include: Annotated[
        Path | None,
        typer.Option(
            "--include",
            exists=True,
            file_okay=False,
            help="The folder holding pipeline.yaml and contracts/ (default: INGEST_CATALOG_DIR, "
            "else the repository's include/).",
        ),
    ] = None,
) -> None:
    """Check pipeline.yaml and every contract in contracts/ before anything runs: one line
    per problem, naming the file and the key or field; exit 1 when there is any."""
    from ingest_core.catalog_check import check
    from ingest_core.settings import catalog_dir

    folder = include or catalog_dir()
    problems = check(folder)
    if not problems:
        problems = _contract_drift(folder)
    for problem in problems:
        typer.echo(problem, err=True)
    if problems:
        raise typer.Exit(1)
    sources = len([p for p in (folder / "contracts").glob("*.yaml") if p.name != "envelope.yaml"])
    typer.echo(f"{folder}: pipeline.yaml and {sources} event contracts: no problem found")


def _contract_drift(folder: Path) -> list[str]:
    """Incompatible contract changes against the running platform's checkpoints, as
    problems; compatible ones are printed as notes (ingest_core.schema_evolution)."""
    from ingest_core.checkpoint_health import contract_drift
    from ingest_core.contracts import load_contracts
    from ingest_core.schema_evolution import incompatible_advice

    problems = []
    for job, compatible, incompatible in contract_drift(load_contracts(folder / "contracts")):
        for change in compatible:
            typer.echo(f"{job}: compatible contract change, accepted at its next start: {change}")
        problems += [f"{job}: incompatible contract change: {change}" for change in incompatible]
    if problems:
        problems.append(incompatible_advice())
    return problems


@catalog_app.command("rules")
def catalog_rules(
    topic: Annotated[
        str | None,
        typer.Argument(help="A contract topic (default: every topic of include/contracts/)."),
    ] = None,
) -> None:
    """Print the quarantine rules Silver judges a topic's records by, in the order they are
    checked (the first that matches is recorded), with what the topic's contract adds:
    required fields, ids, event types, value checks (ingest_core/quarantine.py)."""
    from ingest_core.contracts import get_contracts
    from ingest_core.quarantine import rule_specifics

    contracts = get_contracts()
    if topic is not None and topic not in contracts.sources:
        known = ", ".join(contracts.sources)
        raise typer.BadParameter(f"no contract for topic {topic!r}; contracts: {known}")
    for name in [topic] if topic else list(contracts.sources):
        typer.echo(f"{name} ({contracts.sources[name].path.name}):")
        for number, (rule, specifics) in enumerate(rule_specifics(contracts, name), start=1):
            typer.echo(f"  {number:2d}. {rule.reason:<27} {rule.origin:<8} {rule.applies}")
            if specifics:
                typer.echo(f"      {'':<27} {'':<8} {specifics}")


checkpoints_app = typer.Typer(
    help="Back up, restore, check and repair streaming checkpoints.", no_args_is_help=True
)
app.add_typer(checkpoints_app, name="checkpoints")
JobArgument = Annotated[str, typer.Argument(help="A job of include/pipeline.yaml.")]


@checkpoints_app.command("backup")
def checkpoints_backup(job: JobArgument) -> None:
    """Take a consistent, verified backup of JOB's checkpoint (safe while it runs)."""
    from ingest_core.checkpoints import BackupError, backup

    try:
        info = backup(job)
    except (KeyError, BackupError) as error:
        raise _fail(str(error).strip("'\"")) from None
    typer.echo(f"backup {info.backup_id} -> {info.path}")
    typer.echo(info.describe())


@checkpoints_app.command("list")
def checkpoints_list(job: JobArgument) -> None:
    """List JOB's backups, newest first: batch id, Delta version, offsets, age."""
    from ingest_core.checkpoints import list_backups

    try:
        found = list_backups(job)
    except KeyError as error:
        raise _fail(str(error).strip("'\"")) from None
    if not found:
        typer.echo(f"{job}: no backups")
    for info in found:
        typer.echo(info.describe())


@checkpoints_app.command("restore")
def checkpoints_restore(
    job: JobArgument,
    backup_id: Annotated[str, typer.Argument(help="A backup id from `checkpoints list JOB`.")],
    accept_data_loss: Annotated[
        bool, typer.Option("--accept-data-loss", help="Restore although Kafka lost offsets.")
    ] = False,
) -> None:
    """Restore BACKUP_ID into JOB's checkpoint (the live one is moved aside, never deleted)."""
    from ingest_core.recovery import RestoreRefusedError, restore

    try:
        result = restore(job, backup_id, accept_data_loss=accept_data_loss)
    except (KeyError, RestoreRefusedError) as error:
        raise _fail(str(error).strip("'\"")) from None
    typer.echo(
        f"restored {job} from {backup_id}: backup batches {result.restored_batch}; "
        f"resumes after {result.resumes_after} (intact later batches kept)"
    )
    if result.moved_aside:
        typer.echo(f"the previous checkpoint is kept at {result.moved_aside}")


@checkpoints_app.command("check")
def checkpoints_check(job: JobArgument) -> None:
    """Check JOB's checkpoint for damaged files (exit 1 and name them if any); while JOB
    runs, its tasks' temporary files are not damage."""
    from ingest_core.catalog import get_catalog
    from ingest_core.checkpoint_health import find_damage
    from ingest_core.locks import lock_holder

    try:
        checkpoint = get_catalog().job(job).checkpoint()
    except KeyError as error:
        raise _fail(str(error).strip("'\"")) from None
    damage = find_damage(checkpoint)
    if lock_holder(checkpoint) is not None:
        # A running driver's tasks write through temporary files: not a crash's leftovers.
        damage = [item for item in damage if item.kind != "unfinished"]
    for item in damage:
        typer.echo(item.describe())
    if damage:
        raise _fail(f"{job}: {len(damage)} damaged file(s); `ingestctl checkpoints recover {job}`")
    typer.echo(f"{job}: checkpoint {checkpoint} is intact")


@checkpoints_app.command("recover")
def checkpoints_recover(job: JobArgument) -> None:
    """Repair JOB's damaged checkpoint by the least destructive safe means (audited)."""
    from ingest_core.recovery import RestoreRefusedError, recover

    try:
        actions = recover(job)
    except (KeyError, RestoreRefusedError) as error:
        raise _fail(str(error).strip("'\"")) from None
    for action in actions or [f"{job}: nothing damaged, nothing done"]:
        typer.echo(action)


@checkpoints_app.command("reset")
def checkpoints_reset(job: JobArgument) -> None:
    """Move JOB's checkpoint aside so that it starts anew from its starting offsets."""
    from ingest_core.recovery import RestoreRefusedError, reset

    try:
        aside = reset(job)
    except (KeyError, RestoreRefusedError) as error:
        raise _fail(str(error).strip("'\"")) from None
    typer.echo(f"{job}: checkpoint moved to {aside}; the next start begins a new one")


@checkpoints_app.command("prune")
def checkpoints_prune(job: JobArgument) -> None:
    """Apply the retention policy (checkpoints.keep_last / keep_days) to JOB's backups."""
    from ingest_core.recovery import prune

    try:
        removed = prune(job)
    except KeyError as error:
        raise _fail(str(error).strip("'\"")) from None
    typer.echo(f"{job}: removed {len(removed)} backup(s) {removed}")
