"""The Maven step gives Spark what pyspark lacks, and nothing pyspark already has."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pyspark
import pytest

from ingest_core.settings import PlatformSettings, get_settings
from ingest_core.spark_config import (
    MissingJarsError,
    _application,
    archive_java_options,
    class_data_archive,
    driver_java_options,
    java_options_string,
    spark_conf,
    spark_jar_paths,
)

pytestmark = pytest.mark.unit


def _artifact(jar: Path) -> str:
    return re.sub(r"-\d[^-]*(-[a-z0-9_]+)?\.jar$", "", jar.name)


def test_platform_jars_do_not_duplicate_pysparks() -> None:
    ours = {_artifact(jar) for jar in spark_jar_paths()}
    pysparks = {_artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    assert ours, "no jars fetched"
    assert ours & pysparks == set()


def test_connectors_are_present_and_versions_match_pyspark() -> None:
    names = {jar.name for jar in spark_jar_paths()}
    assert f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar" in names
    assert f"spark-token-provider-kafka-0-10_2.13-{pyspark.__version__}.jar" in names
    assert any(n.startswith("delta-spark_4.2_2.13-4.4.") for n in names)
    assert any(n.startswith("kafka-clients-") for n in names)
    assert any(n.startswith("commons-pool2-") for n in names)


def test_every_profile_commits_delta_with_the_put_if_absent_log_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever the profile and its local file system, ``file:`` Delta commits go through the
    platform's log store (tests/integration/test_delta_log_store.py), and its jar is in
    ``spark.jars`` beside Delta's, whose class loader must find it."""
    for profile in ("local", "compose", "cluster"):
        monkeypatch.setenv("INGEST_PROFILE", profile)
        conf = spark_conf("silver_refine", PlatformSettings())
        assert conf["spark.delta.logStore.file.impl"] == "io.ingest.delta.LocalPutIfAbsentLogStore"
        jars = [Path(jar).name for jar in conf["spark.jars"].split(",")]
        assert "ingest-delta-logstore.jar" in jars, profile


def test_spark_gets_local_files_and_never_downloads() -> None:
    conf = spark_conf("t")
    assert "spark.jars.packages" not in conf
    for path in conf["spark.jars"].split(","):
        assert Path(path).is_file()
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"


def test_the_profile_chooses_the_local_file_system(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``nio`` (the local profile's) puts the platform's jar on the driver's class path and in
    ``spark.jars`` and names its classes for both Hadoop APIs; ``hadoop`` names none and keeps
    the jar on the class path only (the class-data archive's class path), when it was built;
    ``nio`` without the jar is refused with the command that builds it."""
    nio = PlatformSettings.model_validate({"spark": {"local_file_system": "nio"}})
    hadoop = PlatformSettings.model_validate({"spark": {"local_file_system": "hadoop"}})
    assert get_settings().spark.local_file_system == "nio"  # include/platform.yaml, local
    for profile, chosen in {"compose": "nio", "cluster": "hadoop"}.items():
        monkeypatch.setenv("INGEST_PROFILE", profile)
        assert PlatformSettings().spark.local_file_system == chosen, profile
    monkeypatch.delenv("INGEST_PROFILE")
    conf = spark_conf("silver_refine", nio)
    jar = conf["spark.driver.extraClassPath"]
    assert Path(jar).is_file()
    assert jar.endswith("localfs/ingest-local-fs.jar")
    assert jar in conf["spark.jars"].split(",")
    assert conf["spark.hadoop.fs.file.impl"] == "io.ingest.hadoop.NioLocalFileSystem"
    assert conf["spark.hadoop.fs.AbstractFileSystem.file.impl"] == "io.ingest.hadoop.NioLocalFs"
    plain = spark_conf("silver_refine", hadoop)
    assert not {key for key in plain if key.startswith("spark.hadoop.") and ".file.impl" in key}
    assert jar not in plain["spark.jars"]
    # The same class path either way: the class-data archive maps into both.
    assert plain["spark.driver.extraClassPath"] == jar
    assert spark_conf("bronze_ingest", nio)["spark.driver.extraClassPath"] == jar  # always-on

    without = tmp_path / "jars"  # the Kafka and Delta jars, not the platform's own
    without.mkdir()
    (without / "spark").symlink_to(Path(jar).parent.parent / "spark")
    monkeypatch.setenv("INGEST_JARS_DIR", str(without))
    with pytest.raises(MissingJarsError, match=r"ingest-local-fs\.jar: run `make jars`"):
        spark_conf("silver_refine", nio)
    assert "spark.driver.extraClassPath" not in spark_conf("silver_refine", hadoop)  # not built


def _java_options(app_name: str) -> list[str]:
    """The driver JVM options after the platform's log4j one, before the class-data
    archive's (when ``make setup`` built it and the job is not always-on)."""
    options = spark_conf(app_name)["spark.driver.extraJavaOptions"].split()[1:]
    archive = archive_java_options()
    if archive and options[-len(archive) :] == archive:
        return options[: -len(archive)]
    return options


def test_a_catalog_application_brings_its_driver_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ingest_core.catalog import get_catalog

    bronze = get_catalog().job("bronze_ingest")
    monkeypatch.setattr(bronze, "driver_memory", "768m")
    conf = spark_conf("bronze_ingest")
    assert conf["spark.driver.memory"] == "768m"
    options = conf["spark.driver.extraJavaOptions"].split()
    assert options[0].startswith("-Dlog4j2.configurationFile=")
    # The profile's options (local: the serial GC from a small heap) come first.
    platform = get_settings().spark.driver_java_options
    assert platform == ["-XX:+UseSerialGC", "-Xms64m"]
    # Then the application's own: every always-on driver's heap shrinks back after a full
    # collection (include/pipeline.yaml).
    always_on = ["-XX:MinHeapFreeRatio=10", "-XX:MaxHeapFreeRatio=30"]
    for job in ("bronze_ingest", "payment_alerts", "payment_alerts_rt"):
        assert _java_options(job) == [*platform, *always_on]
    assert _java_options("silver_refine") == platform
    monkeypatch.setattr(bronze, "driver_java_options", ["-XX:MaxHeapFreeRatio=50"])
    assert _java_options("bronze_ingest") == [*platform, "-XX:MaxHeapFreeRatio=50"]
    gate = get_catalog().application("quality_gate")
    monkeypatch.setattr(gate, "driver_java_options", ["-Xms32m"])
    assert _java_options("quality_gate.silver") == [*platform, "-Xms32m"]  # a gate's
    assert _java_options("tests") == platform  # not in the catalog: the platform's only
    assert spark_conf("tests")["spark.driver.memory"] == "1g"


def test_drivers_map_the_class_data_archive_once_it_is_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest_core.catalog import get_catalog

    monkeypatch.setenv("INGEST_JARS_DIR", str(tmp_path))
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    silver = [
        *get_settings().spark.driver_java_options,
        *get_catalog().job("silver_refine").driver_java_options,
    ]
    assert archive_java_options() == []  # not built: the drivers start as before
    assert driver_java_options("silver_refine")[1:] == silver
    archive = class_data_archive()
    assert archive.is_relative_to(tmp_path)  # it belongs with the jars it was made from
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"recorded")
    assert archive_java_options() == []  # no manifest: a recording that did not finish
    manifest = archive.with_name(archive.name + ".json")
    manifest.write_text(json.dumps({"bytes": 100}))
    assert archive_java_options() == []  # truncated: HotSpot would map it and crash
    manifest.write_text("{")
    assert archive_java_options() == []
    manifest.write_text(json.dumps({"bytes": len(b"recorded")}))
    options = driver_java_options("silver_refine")
    # After the job's own options; HotSpot checks the archive's CRCs before it maps it, and
    # its warnings about an archive it cannot map are off.
    assert options[1:] == [*silver, f"-XX:SharedArchiveFile={archive}", *options[-3:]]
    assert options[-3:] == ["-XX:+VerifySharedSpaces", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    assert archive_java_options() == options[-4:]
    # spark-class puts SPARK_CONF_DIR first on the JVM's class path: HotSpot cannot record
    # an archive with a folder of files on it, and maps none recorded without it.
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert archive_java_options() == []
    # spark-submit's load-spark-env.sh exports the default, <SPARK_HOME>/conf, into every
    # driver it starts (the recording's class path had it too): a driver that rebuilds its
    # configuration still names the archive it mapped.
    import pyspark

    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(Path(pyspark.__file__).parent / "conf"))
    assert archive_java_options() == options[-4:]
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    assert archive_java_options() == []  # not the default of this SPARK_HOME
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "spark" / "conf"))
    assert archive_java_options() == options[-4:]
    monkeypatch.delenv("SPARK_CONF_DIR")
    for scheduled in ("gold_backfill", "quality_gate.silver", "tests"):
        assert driver_java_options(scheduled)[-4:] == options[-4:]
    # The run that records the archive must not map the one it replaces.
    assert driver_java_options("silver_refine", class_data=False)[1:] == silver
    # An always-on driver starts once and lives for days: its memory, not its start, counts.
    bronze = get_catalog().job("bronze_ingest")
    assert bronze.mode == "always_on"
    assert driver_java_options("bronze_ingest")[1:] == [
        *get_settings().spark.driver_java_options,
        *bronze.driver_java_options,
    ]


def test_an_option_with_a_space_stays_one_jvm_argument() -> None:
    options = ["-XX:SharedArchiveFile=/srv/my jars/cds/a.jsa", "-Xms64m", "-Dq='x y'"]
    assert shlex.split(java_options_string(options)) == options
    assert java_options_string(["-Xms64m", "-XX:+UseSerialGC"]) == "-Xms64m -XX:+UseSerialGC"


def test_the_profile_chooses_every_drivers_gc(monkeypatch: pytest.MonkeyPatch) -> None:
    """``spark.driver_java_options`` of the profile reaches every driver, scheduled or
    always-on; the environment overrides it, and a bad option is refused by name."""
    g1 = PlatformSettings.model_validate({"spark": {"driver_java_options": ["-XX:+UseG1GC"]}})
    for app in ("silver_refine", "bronze_ingest", "quality_gate.gold", "tests"):
        own = _application(app).driver_java_options if _application(app) else []
        assert driver_java_options(app, class_data=False, settings=g1)[1:] == [
            "-XX:+UseG1GC",
            *own,
        ]
        assert "-XX:+UseG1GC" in spark_conf(app, g1)["spark.driver.extraJavaOptions"]
    monkeypatch.setenv("INGEST_SPARK__DRIVER_JAVA_OPTIONS", '["-XX:+UseParallelGC"]')
    get_settings.cache_clear()
    try:
        assert get_settings().spark.driver_java_options == ["-XX:+UseParallelGC"]
        monkeypatch.setenv("INGEST_SPARK__DRIVER_JAVA_OPTIONS", '["-Xmx4g"]')
        get_settings.cache_clear()
        with pytest.raises(ValueError, match="'-Xmx4g': the heap's maximum is driver_memory"):
            get_settings()
    finally:
        monkeypatch.delenv("INGEST_SPARK__DRIVER_JAVA_OPTIONS")
        get_settings.cache_clear()


def test_a_driver_loads_neither_pandas_nor_pyarrow_until_it_uses_them() -> None:
    """pyspark imported ``pyspark.testing.utils`` (and with it pandas and pyarrow, ~90 MB) on
    a driver's first ``F.lit`` or JVM call, only to learn whether NumPy is installed. A child
    interpreter builds the platform's session and runs queries with a literal and a list;
    NumPy values still reach the JVM, and pyspark's testing helpers still import."""
    import subprocess
    import sys

    code = """
import sys
from pyspark.sql import functions as F
from spark_jobs.session import build_spark_session

spark = build_spark_session("lazy_testing_utils", extra_conf={"spark.master": "local[1]"})
print(spark.range(10).where(F.col("id").isin([1, 2, 3]) | (F.col("id") == F.lit(7))).count())
print(sorted(m for m in ("pandas", "pyarrow") if m in sys.modules))
import numpy as np
print(spark.range(10).where(F.col("id") == F.lit(np.int64(4))).count())
print(spark.range(10).where(F.array_contains(F.lit(np.array([1, 2, 7])), F.col("id"))).count())
from pyspark.testing import assertDataFrameEqual
from pyspark.testing.utils import have_pandas
assertDataFrameEqual(spark.range(2), spark.range(2))
print(have_pandas, "pandas" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:5] == ["4", "[]", "1", "3", "True True"]


def test_the_stand_in_answers_have_numpy_as_pyspark_does(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import sys

    from spark_jobs.session import PYSPARK_TESTING_UTILS, defer_pyspark_testing_utils

    monkeypatch.delitem(sys.modules, PYSPARK_TESTING_UTILS, raising=False)
    defer_pyspark_testing_utils()
    stand_in = sys.modules[PYSPARK_TESTING_UTILS]
    assert stand_in.have_numpy is (importlib.util.find_spec("numpy") is not None)
    assert sys.modules[PYSPARK_TESTING_UTILS] is stand_in  # have_numpy loads nothing
    with monkeypatch.context() as patched:  # computed once, as the real module does
        patched.setattr(importlib.util, "find_spec", lambda name: None)
        assert stand_in.have_numpy is True
        monkeypatch.delitem(sys.modules, PYSPARK_TESTING_UTILS)
        defer_pyspark_testing_utils()
        assert sys.modules[PYSPARK_TESTING_UTILS].have_numpy is False
    monkeypatch.setitem(sys.modules, PYSPARK_TESTING_UTILS, stand_in)
    # Any other name comes from the real module, which then takes the stand-in's place.
    helper = stand_in.assertDataFrameEqual
    loaded = sys.modules[PYSPARK_TESTING_UTILS]
    assert loaded is not stand_in
    assert loaded.assertDataFrameEqual is helper
    defer_pyspark_testing_utils()  # the real one is imported: left as it is
    assert sys.modules[PYSPARK_TESTING_UTILS] is loaded


@pytest.mark.parametrize(
    "code",
    [
        # The plain form reaches the module through its parent package.
        "import pyspark.testing.utils\nassert pyspark.testing.utils.assertDataFrameEqual",
        "import pyspark.testing.utils as u\nassert u.have_numpy and u.assertSchemaEqual",
        "from pyspark.testing.utils import *\nassert assertDataFrameEqual",
        "from pyspark.testing import assertDataFrameEqual\nassert assertDataFrameEqual",
        # The real spec, found without loading anything.
        "import importlib.util\n"
        "assert importlib.util.find_spec('pyspark.testing.utils').origin.endswith('utils.py')\n"
        "assert 'pandas' not in sys.modules",
        "import importlib, pyspark.testing.utils as u\n"
        "assert importlib.reload(sys.modules['pyspark.testing.utils']).have_pandas",
        "assert 'assertDataFrameEqual' in dir(sys.modules['pyspark.testing.utils'])",
    ],
)
def test_every_way_of_importing_testing_utils_works_with_the_stand_in(code: str) -> None:
    import subprocess
    import sys

    prologue = "import sys\nfrom spark_jobs.session import defer_pyspark_testing_utils\n"
    prologue += "defer_pyspark_testing_utils()\n"
    done = subprocess.run(
        [sys.executable, "-c", prologue + code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_delta_rebuilds_snapshots_with_the_profiles_task_count() -> None:
    """``spark.snapshot_partitions`` sets Delta's ``snapshotPartitions``; unset, the shuffle's
    partitions; the local profile asks for one task (an idempotent write's state rebuild)."""
    key = "spark.databricks.delta.snapshotPartitions"
    assert get_settings().spark.snapshot_partitions == 1
    assert spark_conf("bronze_ingest")[key] == "1"
    unset = PlatformSettings.model_validate({"spark": {"snapshot_partitions": None}})
    assert spark_conf("silver_refine", unset)[key] == str(unset.spark.shuffle_partitions)
    two = PlatformSettings.model_validate({"spark": {"snapshot_partitions": 2}})
    assert spark_conf("silver_refine", two)[key] == "2"
    with pytest.raises(ValueError, match="snapshot_partitions"):
        PlatformSettings.model_validate({"spark": {"snapshot_partitions": 0}})
