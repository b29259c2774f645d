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
