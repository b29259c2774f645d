"""``ingestctl``: the platform's command line.

Every command reads the current profile's settings (:mod:`spark_jobs.settings`); options
override them for one call. Errors are one clear message on stderr and a non-zero exit
status, never a traceback for a known failure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spark_jobs.settings import KafkaSettings, get_settings

app = typer.Typer(
    name="ingestctl",
    help="Operate the incremental ingestion platform (Kafka -> Spark -> Delta, run by Airflow).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
kafka_app = typer.Typer(
    help="Run the platform's own single-node Kafka broker.", no_args_is_help=True
)
app.add_typer(kafka_app, name="kafka")

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


def _kafka_settings(
    port: int | None, controller_port: int | None, data_dir: Path | None
) -> KafkaSettings:
    overrides: dict[str, object] = {}
    if port is not None:
        overrides["port"] = port
    if controller_port is not None:
        overrides["controller_port"] = controller_port
    if data_dir is not None:
        overrides["data_dir"] = data_dir.resolve()
    return get_settings().kafka.model_copy(update=overrides)


def _fail(message: str) -> typer.Exit:
    typer.secho(message, err=True, fg=typer.colors.RED)
    return typer.Exit(code=1)


@kafka_app.command("up")
def kafka_up(
    port: PortOption = None,
    controller_port: ControllerPortOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Start the broker (format storage on first start) and wait until it answers."""
    from ingest_platform.kafka_broker import BrokerError, KafkaBroker

    settings = _kafka_settings(port, controller_port, data_dir)
    try:
        broker = KafkaBroker(settings)
        typer.echo(f"kafka: starting on {settings.bootstrap_servers} ...", err=True)
        status = broker.up()
    except BrokerError as error:
        raise _fail(str(error)) from None
    typer.echo(status.describe())


@kafka_app.command("down")
def kafka_down(
    port: PortOption = None,
    controller_port: ControllerPortOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Stop the broker this platform started (only that process, by its pid)."""
    from ingest_platform.kafka_broker import BrokerError, KafkaBroker

    try:
        stopped = KafkaBroker(_kafka_settings(port, controller_port, data_dir)).down()
    except BrokerError as error:
        raise _fail(str(error)) from None
    typer.echo("kafka: stopped" if stopped else "kafka: was not running")


@kafka_app.command("status")
def kafka_status(
    port: PortOption = None,
    controller_port: ControllerPortOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Say whether the platform's broker runs; exit status 3 when it does not."""
    from ingest_platform.kafka_broker import BrokerError, KafkaBroker

    try:
        status = KafkaBroker(_kafka_settings(port, controller_port, data_dir)).status()
    except BrokerError as error:
        raise _fail(str(error)) from None
    typer.echo(status.describe())
    if not status.running:
        raise typer.Exit(code=3)


@app.command("demo")
def demo(
    events: Annotated[
        int, typer.Option(min=1, max=1_000_000, help="Sample events to produce.")
    ] = 400,
) -> None:
    """Run the platform's main job on embedded defaults (what `make demo` calls)."""
    from ingest_platform.demo import run_demo
    from ingest_platform.kafka_broker import BrokerError
    from ingest_platform.producer import ProduceError
    from spark_jobs.session import MissingJarsError

    try:
        run_demo(events)
    except (BrokerError, ProduceError, MissingJarsError) as error:
        raise _fail(str(error)) from None
