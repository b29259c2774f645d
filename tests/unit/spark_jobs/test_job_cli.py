"""Every ``spark_jobs`` entry point treats ``--help`` as help: usage on stdout, exit 0, and
no Spark session, no lock, no job run."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest

import spark_jobs
from ingest_core.settings import get_settings

_PACKAGE = Path(spark_jobs.__file__).parent
_MAIN_GUARD = re.compile(r'^if __name__ == "__main__":', re.MULTILINE)


def entry_points() -> list[str]:
    """Every module of ``spark_jobs`` runnable as ``python -m`` (it has a ``__main__`` guard),
    found in the source so that a new entry point is covered without editing this test."""
    modules = []
    for path in sorted(_PACKAGE.rglob("*.py")):
        if _MAIN_GUARD.search(path.read_text()):
            relative = path.relative_to(_PACKAGE.parent).with_suffix("")
            modules.append(".".join(relative.parts))
    return modules


def test_the_entry_points_are_found() -> None:
    found = entry_points()
    assert "spark_jobs.gold.late_corrections" in found
    assert "spark_jobs.silver_refine" in found
    assert "spark_jobs.quality.gate" in found
    assert len(found) >= 9


@pytest.mark.parametrize("module", entry_points())
def test_help_prints_usage_and_exits_0_without_starting_spark(
    module: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``python -m <module> --help``, run in-process (as ``__main__``, ``sys.argv`` as the
    interpreter would set it) with Spark's session builder replaced by a tripwire."""
    import spark_jobs.session

    def no_spark(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"{module} --help started Spark")

    monkeypatch.setattr(spark_jobs.session, "build_spark_session", no_spark)
    monkeypatch.setenv("INGEST_HOME", str(tmp_path / "home"))  # anything written lands here
    get_settings.cache_clear()
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    try:
        with pytest.raises(SystemExit) as exit_info:
            runpy.run_module(module, run_name="__main__", alter_sys=False)
    finally:
        get_settings.cache_clear()
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: "), out
    assert "--help" in out
    assert not (tmp_path / "home").exists()  # no lock, checkpoint or table was touched
