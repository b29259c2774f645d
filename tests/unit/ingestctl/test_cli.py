"""``ingestctl``'s help texts say what the commands accept; its send commands pass on what
they were given."""

from __future__ import annotations

from typer.testing import CliRunner

from ingestctl.cli import app


def test_replay_help_says_path_is_a_folder_or_one_file() -> None:
    result = CliRunner().invoke(app, ["replay", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "The dataset's folder, or one file of it: a day's CSV of uci-retail" in text
    assert "Dataset folder." not in text


def test_a_failed_airflow_initialisation_says_which_step_and_why(ingest_home, monkeypatch) -> None:
    """The first `ingestctl airflow ...` initialises its metadata database; when that fails,
    the step and Airflow's own last lines are shown (they used to go to /dev/null, leaving a
    bare CalledProcessError), and nothing is marked initialised."""
    monkeypatch.setenv(
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        f"postgresql+psycopg2://airflow:x@/airflow?host={ingest_home}/no-server&port=5432",
    )
    result = CliRunner().invoke(app, ["airflow", "dags", "list"])
    assert result.exit_code == 1
    assert "`airflow db migrate` failed (exit 1)" in result.output
    assert "no-server/.s.PGSQL.5432" in result.output  # Airflow's own error, not a traceback
    assert not list(ingest_home.glob("**/.initialised-*"))


def _capture_send(monkeypatch) -> dict:
    """Replace the producer run (``runner.run``) by one that records its keyword arguments
    and stops; the command then exits 1 with the stand-in's message."""
    from ingestctl.replay import runner

    sent: dict = {}

    def record(source: str, events: object, **kwargs: object) -> None:
        sent.update(kwargs, source=source, events=events)
        raise ValueError("stopped before sending")

    monkeypatch.setattr(runner, "run", record)
    return sent


def test_shared_options_are_declared_once_and_offered_by_each_command() -> None:
    """``replay`` and ``generate`` offer every send option (declared in ``_send_options``),
    the broker commands every broker option (``_kafka_settings``)."""
    import inspect

    from ingestctl import cli

    send = set(inspect.signature(cli._send_options).parameters)
    assert len(send) == 16
    broker = set(inspect.signature(cli._kafka_settings).parameters)
    assert broker == {"port", "controller_port", "data_dir"}
    commands = {
        "options": (cli.replay, cli.generate),
        "kafka": (cli.kafka_up, cli.kafka_down, cli.kafka_clean, cli.kafka_status),
    }
    for keyword, shared in (("options", send), ("kafka", broker)):
        for command in commands[keyword]:
            parameters = inspect.signature(command).parameters
            assert shared <= set(parameters)
            assert keyword not in parameters


def test_the_broker_commands_read_their_options(ingest_home, tmp_path) -> None:
    result = CliRunner().invoke(
        app, ["kafka", "status", "--port", "1", "--data-dir", str(tmp_path / "k")]
    )
    assert result.exit_code == 3  # not running
    assert f"127.0.0.1:1; data {tmp_path / 'k'}" in result.output


def test_generate_passes_its_send_options_to_the_producer(ingest_home, monkeypatch) -> None:
    sent = _capture_send(monkeypatch)
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "--count=5",
            "--duplicate-rate=0.25",
            "--late-delay=fixed:30",
            "--fault-seed=9",
            "--partitions=4",
            "--topic-prefix=t_",
            "--no-progress",
        ],
    )
    assert result.exit_code == 1, result.output
    assert "stopped before sending" in result.output
    assert sent["source"] == "generator"
    assert sent["faults"].duplicate_rate == 0.25
    assert sent["faults"].late_delay.kind == "fixed"
    assert sent["faults"].seed == 9
    assert (sent["partitions"], sent["topic_prefix"], sent["progress"]) == (4, "t_", False)
    assert sent["pace"].speed == 1.0  # generate's default: real time
    assert sent["shift_to_now"] is False


def test_replay_passes_its_send_options_and_its_own(ingest_home, monkeypatch, uci_path) -> None:
    sent = _capture_send(monkeypatch)
    day = uci_path / "2010-12-01.csv"
    result = CliRunner().invoke(
        app, ["replay", "uci-retail", str(day), "--shift-to-now", "--malformed-rate=0.5"]
    )
    assert result.exit_code == 1, result.output
    assert sent["source"] == "uci-retail"
    assert sent["shift_to_now"] is True
    assert sent["faults"].malformed_rate == 0.5
    assert sent["pace"].speed is None  # replay's default: as fast as acknowledged


def test_a_bad_send_option_is_refused_before_anything_is_sent(ingest_home, monkeypatch) -> None:
    sent = _capture_send(monkeypatch)
    bad_delay = CliRunner().invoke(app, ["generate", "--late-delay=soon"])
    assert bad_delay.exit_code == 1
    assert "soon" in bad_delay.output
    both = CliRunner().invoke(app, ["generate", "--speed=2", "--as-fast-as-possible"])
    assert both.exit_code == 1
    assert "exclude each other" in both.output
    assert sent == {}


def test_consumer_groups_tells_an_unknown_job_from_one_that_does_not_read_kafka(
    ingest_home,
) -> None:
    unknown = CliRunner().invoke(app, ["kafka", "consumer-groups", "nope"])
    assert unknown.exit_code != 0
    assert "'nope' is not a declared job" in unknown.output
    silver = CliRunner().invoke(app, ["kafka", "consumer-groups", "silver_refine"])
    assert silver.exit_code != 0
    assert "'silver_refine' does not read Kafka" in silver.output
    assert "bronze_ingest" in silver.output  # the jobs that do


def test_generates_start_is_an_iso_time_in_utc_and_a_bad_one_says_so(
    ingest_home, monkeypatch
) -> None:
    """The fresh-clone walk of stop 64: a bad --start's message began with pydantic's
    "Value error," (typer's own date type). Refused now in the project's words, before
    anything is sent; a time without an offset is UTC."""
    from datetime import UTC, datetime

    sent = _capture_send(monkeypatch)
    bad = CliRunner().invoke(app, ["generate", "--start", "2026-13-01"], env={"COLUMNS": "200"})
    assert bad.exit_code == 2
    assert "'2026-13-01' is not an ISO 8601 time such as 2026-12-07T10:00:00Z" in bad.output
    assert "Value error" not in bad.output
    assert sent == {}
    good = CliRunner().invoke(app, ["generate", "--start", "2026-12-07T10:00:00", "--count=1"])
    assert good.exit_code == 1, good.output  # the stand-in stops it
    assert sent["events"].start == datetime(2026, 12, 7, 10, tzinfo=UTC)
