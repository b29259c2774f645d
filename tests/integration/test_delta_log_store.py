"""No Delta commit can be overwritten, whichever engine writes: the platform's log store for
``file:`` paths (``include/maven/logstore``) makes each ``_delta_log/<version>.json`` an atomic
put-if-absent, where Delta's default ``HDFSLogStore`` checks and then renames over it.

Issue 50: Spark and delta-rs appending to one table at once, with Spark's rename delayed as a
GC pause would delay it, lost delta-rs commits that delta-rs had reported as successful. The
first test shows that window on the stock store and its absence on the platform's, at the log
store itself; the second races real Spark and delta-rs appends through the suite's driver
(configured as every job's) and counts every acknowledged row.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.commit_race import COMMIT_PAUSE_KEY, RENAME_PAUSE_KEY, race
from spark_jobs.session import DELTA_LOG_STORE

pytestmark = pytest.mark.integration

PLATFORM_STORE = DELTA_LOG_STORE["spark.delta.logStore.file.impl"]
STOCK_STORE = "io.delta.storage.HDFSLogStore"
#: Hadoop keys of the test pauses (include/maven: LocalPutIfAbsentLogStore.PAUSE_KEY for the
#: platform's store, NioRawLocalFileSystem.RENAME_PAUSE_KEY for the rename HDFSLogStore makes).
PAUSE_KEYS = {PLATFORM_STORE: COMMIT_PAUSE_KEY, STOCK_STORE: RENAME_PAUSE_KEY}


def test_the_suite_driver_uses_the_platform_log_store(spark: Any) -> None:
    assert spark.sparkContext.getConf().get("spark.delta.logStore.file.impl") == PLATFORM_STORE


@pytest.mark.parametrize("store", [PLATFORM_STORE, STOCK_STORE])
def test_a_paused_commit_never_replaces_another_writers(
    spark: Any, tmp_path: Path, store: str
) -> None:
    """Spark's commit of version 1 pauses before its atomic step; meanwhile another writer
    (delta-rs: an exclusive create) commits version 1. The stock store then renames over it
    (the other commit is gone, no error); the platform's refuses with
    FileAlreadyExistsException, which makes Delta retry at the next version."""
    jvm = spark._jvm
    log = tmp_path / "_delta_log"
    log.mkdir()
    target = log / f"{1:020d}.json"
    conf = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
    conf.set(PAUSE_KEYS[store], "1500")
    # Spark's class loader, which has spark.jars (Delta and the platform's store).
    gateway = spark.sparkContext._gateway
    parameter_types = gateway.new_array(jvm.java.lang.Class, 1)
    parameter_types[0] = conf.getClass()
    arguments = gateway.new_array(jvm.java.lang.Object, 1)
    arguments[0] = conf
    log_store = (
        jvm.org.apache.spark.util.Utils.classForName(store, True, False)
        .getConstructor(parameter_types)
        .newInstance(arguments)
    )
    actions = jvm.java.util.ArrayList()
    actions.add('{"commitInfo":{"writer":"spark"}}')
    errors: list[str] = []

    def spark_commit() -> None:
        try:
            log_store.write(
                jvm.org.apache.hadoop.fs.Path(target.as_uri()), actions.iterator(), False, conf
            )
        except Exception as error:  # Py4JJavaError: the Java exception's class is the verdict
            errors.append(error.java_exception.getClass().getName())  # type: ignore[attr-defined]

    writer = threading.Thread(target=spark_commit)
    writer.start()
    time.sleep(0.5)  # Spark is in its pause, its existence check (if any) behind it
    with open(target, "x") as other:  # delta-rs's put-if-absent of the same version
        other.write('{"commitInfo":{"writer":"delta-rs"}}\n')
    writer.join(timeout=30)
    assert not writer.is_alive()

    if store == STOCK_STORE:
        # The hazard the platform's store removes: delta-rs's acknowledged commit replaced.
        assert errors == []
        assert "spark" in target.read_text()
    else:
        assert errors == ["java.nio.file.FileAlreadyExistsException"]
        assert target.read_text() == '{"commitInfo":{"writer":"delta-rs"}}\n'
        assert sorted(p.name for p in log.iterdir()) == [target.name], "a temporary file left"


def test_spark_and_delta_rs_appending_at_once_lose_no_acknowledged_commit(
    spark: Any, tmp_path: Path
) -> None:
    """Each engine appends one-row commits to one table at once, Spark's commits paused 50 ms
    before their atomic step; every append an engine acknowledged is in the table once
    (spark_jobs.commit_race, which the soak's concurrent_commits fault runs too)."""
    rounds = 12
    result = race(spark, tmp_path / "ops_table", rounds=rounds, pause_ms=50)
    assert result.failures == []
    expected = sorted([w, n] for w, ns in result.acknowledged.items() for n in ns)
    assert result.landed == expected
    assert len(expected) == 2 * rounds
    assert result.lost == []
    assert result.duplicated == 0
    # One commit per acknowledged append after the first, versions without a gap.
    assert result.versions == list(range(2 * rounds + 1))
    assert result.ok
