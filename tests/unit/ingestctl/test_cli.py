"""``ingestctl``'s help texts say what the commands accept."""

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
