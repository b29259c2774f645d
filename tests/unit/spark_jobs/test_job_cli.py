"""Every ``spark_jobs`` entry point treats ``--help`` as help: usage on stdout, exit 0, and
no Spark session, no lock, no job run."""

from __future__ import annotations

import re
import runpy
import sys
from collections.abc import Iterator
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


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv("INGEST_HOME", str(tmp_path / "home"))
    get_settings.cache_clear()
    yield tmp_path / "home"
    get_settings.cache_clear()


def test_run_job_holds_the_jobs_lock_and_builds_spark_only_when_asked(home: Path) -> None:
    """The body runs under the job's checkpoint lock (a second driver is refused meanwhile)
    and gets a session builder it may never call: a job refusing early starts no JVM."""
    from ingest_core.catalog import get_catalog
    from ingest_core.locks import CheckpointBusyError, checkpoint_lock
    from spark_jobs.job_cli import run_job

    built: list[tuple[str, dict]] = []

    def builder(job: str, **options: Any) -> Any:
        built.append((job, options))
        return "session"

    def body(session: Any) -> int:
        checkpoint = get_catalog().job("silver_refine").checkpoint()
        with pytest.raises(CheckpointBusyError), checkpoint_lock(checkpoint):
            pass
        return 7

    assert run_job("silver_refine", body, session_builder=builder) == 7
    assert built == []

    def asks(session: Any) -> None:
        session(master="local[1]")

    assert run_job("silver_refine", asks, session_builder=builder) == 0
    assert built == [("silver_refine", {"master": "local[1]"})]
    # Free again afterwards.
    with checkpoint_lock(get_catalog().job("silver_refine").checkpoint()):
        pass


def test_run_job_turns_what_an_operator_can_act_on_into_one_line_and_exit_1(
    home: Path, capsys: pytest.CaptureFixture
) -> None:
    from ingest_core.catalog import get_catalog
    from ingest_core.locks import checkpoint_lock
    from spark_jobs.job_cli import JobRefusedError, run_job

    def refuse(error: Exception) -> Any:
        def body(session: Any) -> None:
            raise error

        return body

    assert run_job("late_corrections", refuse(JobRefusedError("broker down")), lock=None) == 1
    assert capsys.readouterr().err == "late_corrections: broker down\n"
    assert (
        run_job("layer_refresh", refuse(LookupError("x")), lock=None, refusals=(LookupError,)) == 1
    )
    assert capsys.readouterr().err == "layer_refresh: x\n"
    with pytest.raises(RuntimeError, match="unbalanced"):  # anything else keeps its trace
        run_job("late_corrections", refuse(RuntimeError("unbalanced")), lock=None)
    # Another job's lock: late_corrections never writes Gold beside gold_aggregate's driver.
    with checkpoint_lock(get_catalog().job("gold_aggregate").checkpoint()):
        ran: list[int] = []
        code = run_job("late_corrections", lambda s: ran.append(1), lock="gold_aggregate")
    assert (code, ran) == (1, [])
    assert "late_corrections: checkpoint" in capsys.readouterr().err
