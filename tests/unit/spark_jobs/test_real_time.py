"""Real-time mode's guard rails (spark_jobs.real_time) and the real-time alert job's plan.

The plans are built on Spark's ``rate`` source and on the job's own Kafka reader: building a
streaming DataFrame contacts no broker, so these need the local SparkSession only.
"""

from __future__ import annotations

import pytest

from ingest_core.settings import get_settings
from spark_jobs import payment_alerts_rt
from spark_jobs.real_time import (
    RealTimeRefusedError,
    check_plan,
    check_task_slots,
    local_master_for,
    local_threads,
    stateful_operators,
    task_slots,
)
from spark_jobs.triggers import TriggerSpec

pytestmark = pytest.mark.unit


@pytest.fixture
def stream(spark):
    """A streaming DataFrame: ``timestamp``, ``value`` bigint."""
    return spark.readStream.format("rate").option("rowsPerSecond", 1).load()


def test_a_stateless_plan_passes(stream) -> None:
    from pyspark.sql import functions as F

    stateless = stream.where(F.col("value") > 3).select((F.col("value") * 2).alias("v"))
    assert stateful_operators(stateless) == []
    check_plan("job", stateless, "kafka")


def test_a_stream_static_join_keeps_no_state(spark, stream) -> None:
    static = spark.createDataFrame([(1, "a")], "value long, name string")
    assert stateful_operators(stream.join(static, "value")) == []


@pytest.mark.parametrize(
    ("build", "operator"),
    [
        (lambda s: s.groupBy("value").count(), "Aggregate"),
        (lambda s: s.dropDuplicates(["value"]), "Deduplicate"),
        (lambda s: s.join(s.withColumnRenamed("timestamp", "t2"), "value"), "Join"),
    ],
)
def test_a_stateful_plan_is_refused_naming_the_operator(stream, build, operator: str) -> None:
    with pytest.raises(RealTimeRefusedError) as refused:
        check_plan("velocity", build(stream), "kafka")
    message = str(refused.value)
    assert message.startswith("velocity: real-time mode refused:")
    assert f"stateful operator {operator};" in message
    assert "\n" not in message


def test_a_delta_sink_is_refused_naming_the_sink(stream) -> None:
    with pytest.raises(RealTimeRefusedError, match=r"its sink is 'delta'.*micro-batch"):
        check_plan("bronze", stream, "delta")


def test_the_alert_jobs_real_time_plan_is_stateless_and_the_velocity_rule_is_not(spark) -> None:
    from spark_jobs.payment_alerts import parse_payments
    from spark_jobs.transforms.alerts import velocity_alerts
    from spark_jobs.transforms.silver import usable_rows

    settings = get_settings()
    check_plan("payment_alerts_rt", payment_alerts_rt.alert_stream(spark, settings), "kafka")
    velocity = velocity_alerts(
        usable_rows(parse_payments(spark, settings, "payment_alerts")),
        window="5 minutes",
        watermark="10 minutes",
        max_payments=3,
    )
    assert stateful_operators(velocity) == ["Aggregate"]


def test_too_few_task_slots_is_refused_with_the_numbers() -> None:
    with pytest.raises(RealTimeRefusedError) as refused:
        check_task_slots("rt", {"payments": 3, "refunds": 2}, "spark://h:7077", 4)
    message = str(refused.value)
    assert "needs 5 task slots" in message
    assert "payments: 3, refunds: 2" in message
    assert "spark://h:7077 offers 4" in message
    check_task_slots("rt", {"payments": 3}, "local[3]", 3)  # enough: no error


def test_the_job_refuses_before_starting_when_the_session_has_too_few_slots(spark) -> None:
    slots = task_slots(spark)
    assert slots == 2  # the suite's session is local[2]
    with pytest.raises(RealTimeRefusedError, match=f"needs {slots + 1} task slots"):
        payment_alerts_rt.start(
            spark,
            trigger=TriggerSpec("real-time", "1 minute"),
            partitions={"payments": slots + 1},
        )
    assert not spark.streams.active


@pytest.mark.parametrize(
    ("master", "cores", "threads"),
    [("local", 8, 1), ("local[*]", 2, 2), ("local[4]", 2, 4), ("local[4, 2]", 2, 4)],
)
def test_local_threads(master: str, cores: int, threads: int) -> None:
    assert local_threads(master, cores) == threads


def test_cluster_masters_have_no_local_threads() -> None:
    assert local_threads("spark://host:7077", 2) is None


def test_a_local_master_is_sized_to_the_partitions(monkeypatch) -> None:
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert local_master_for("local[*]", 3) == "local[3]"
    assert local_master_for("local[*]", 2) == "local[*]"
    # An explicit thread count and a cluster are the operator's choice (then checked).
    assert local_master_for("local[2]", 3) == "local[2]"
    assert local_master_for("spark://h:7077", 3) == "spark://h:7077"


def test_a_real_time_batch_as_long_as_half_the_heartbeat_timeout_is_refused(capsys) -> None:
    """The heartbeat is written once per real-time batch: 90 s (half of the default 180 s
    timeout) would let the supervisor restart a healthy job."""
    assert payment_alerts_rt.parse_args(["--trigger", "real-time=89s"]).trigger.interval
    with pytest.raises(SystemExit) as exited:
        payment_alerts_rt.parse_args(["--trigger", "real-time=90s"])
    assert exited.value.code == 2
    assert "shorter than half supervisor.heartbeat_timeout_s (90 s)" in capsys.readouterr().err
    # The default (include/pipeline.yaml): offsets committed every 5 s (issue 50).
    assert payment_alerts_rt.parse_args([]).trigger == TriggerSpec("real-time", "5 seconds")
