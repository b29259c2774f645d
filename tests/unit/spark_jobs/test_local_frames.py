"""local_frame: the same rows, names and types as pyspark's createDataFrame (the reference),
without the pickled-RDD scan that needs Spark's Python workers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spark_jobs.local_frames import local_frame

pytestmark = pytest.mark.unit

#: Silver's reconciliation record: scalars, a map and an array of structs.
RECORD = (
    "job string, batch_id long, records_read long, max_event_time timestamp, "
    "topic_watermarks map<string, timestamp>, "
    "partition_max_event_times array<struct<topic: string, partition: int, "
    "max_event_time: timestamp>>"
)


def _plan(frame: object) -> str:
    return str(frame._jdf.queryExecution().executedPlan().toString())  # type: ignore[attr-defined]


def test_rows_match_create_data_frame_without_a_python_scan(spark) -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678000)
    rows = [
        ("silver", 3, 10, at, {"orders": at}, [("orders", 1, at), ("payments", 0, None)]),
        ("silver", 4, 0, None, None, None),  # nulls everywhere a value may be missing
        ("silver", 5, 2, datetime(2026, 1, 2, 4, tzinfo=UTC), {}, []),  # aware; empty ones
    ]
    built = local_frame(spark, rows, RECORD)
    reference = spark.createDataFrame(rows, RECORD)
    assert built.columns == reference.columns
    assert [f.dataType for f in built.schema.fields] == [
        f.dataType for f in reference.schema.fields
    ]
    assert sorted(built.collect(), key=repr) == sorted(reference.collect(), key=repr)
    # What the reference scans is a pickled Python RDD (Spark's Python workers unpickle
    # it); local_frame's plan holds the rows as literals.
    assert "ExistingRDD" in _plan(reference)
    assert "ExistingRDD" not in _plan(built)


def test_mappings_empty_frames_and_bad_rows(spark, tmp_path) -> None:
    by_name = local_frame(spark, [{"job": "x", "batch_id": 1}], RECORD).collect()
    assert by_name[0].asDict() == {
        "job": "x",
        "batch_id": 1,
        "records_read": None,
        "max_event_time": None,
        "topic_watermarks": None,
        "partition_max_event_times": None,
    }
    empty = local_frame(spark, [], RECORD)
    assert empty.count() == 0
    assert empty.schema == spark.createDataFrame([], RECORD).schema
    # A Delta table created from it has the schema's (nullable) columns, as from
    # createDataFrame.
    local_frame(spark, [("a", 1, 1, None, None, None)], RECORD).write.format("delta").save(
        str(tmp_path / "t")
    )
    written = spark.read.format("delta").load(str(tmp_path / "t")).schema
    assert written == spark.createDataFrame([], RECORD).schema
    with pytest.raises(ValueError, match="2 values for 6 fields"):
        local_frame(spark, [("a", 1)], RECORD)


def test_no_job_builds_frames_from_pickled_rows() -> None:
    """A single ``createDataFrame`` of local rows in a job starts Spark's Python worker daemon
    in its driver for the driver's lifetime (~150 MB; it sat under payment_alerts' always-on
    driver): the jobs use local_frame."""
    from pathlib import Path

    import spark_jobs

    root = Path(spark_jobs.__file__).parent
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "createDataFrame(" in path.read_text() and path.name != "local_frames.py"
    ]
    assert offenders == []
