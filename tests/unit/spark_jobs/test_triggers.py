"""The --trigger option shared by every job."""

from __future__ import annotations

import pytest

from spark_jobs.triggers import TriggerError, TriggerSpec, parse_trigger

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("available-now", TriggerSpec("available-now")),
        ("processing-time=10s", TriggerSpec("processing-time", "10 seconds")),
        ("processing-time=10 seconds", TriggerSpec("processing-time", "10 seconds")),
        ("Processing-Time=500ms", TriggerSpec("processing-time", "500 milliseconds")),
        ("real-time=5 min", TriggerSpec("real-time", "5 minutes")),
        ("real-time=1m", TriggerSpec("real-time", "1 minute")),
        ("processing-time=1s", TriggerSpec("processing-time", "1 second")),
    ],
)
def test_valid_triggers_parse(text: str, expected: TriggerSpec) -> None:
    assert parse_trigger(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("once", "is not one of"),
        ("processing-time", "needs an interval"),
        ("processing-time=0s", "positive number"),
        ("processing-time=10 fortnights", "unit ms, s, m or h"),
        ("available-now=10s", "takes no interval"),
    ],
)
def test_malformed_triggers_are_refused_with_reason(text: str, message: str) -> None:
    with pytest.raises(TriggerError, match=message):
        parse_trigger(text)


def test_real_time_refused_with_the_jobs_reason() -> None:
    with pytest.raises(TriggerError, match="writes a Delta table"):
        parse_trigger("real-time=1s", real_time_refusal="writes a Delta table")


@pytest.mark.parametrize("module", ["bronze_ingest", "silver_refine", "gold.gold_aggregate"])
def test_every_job_refuses_real_time_naming_the_reason(module: str, capsys) -> None:
    import importlib

    job = importlib.import_module(f"spark_jobs.{module}")
    with pytest.raises(SystemExit) as exited:
        job.parse_args(["--trigger", "real-time=1s"])
    assert exited.value.code == 2
    assert "real-time mode supports only" in capsys.readouterr().err
    assert job.parse_args([]).trigger == parse_trigger(
        job.get_catalog().job(job.JOB_NAME).default_trigger
    )
