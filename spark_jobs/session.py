"""The one SparkSession builder used by every job and by the tests.

Jars come from the Maven step at set-up (``make jars`` -> ``.ingest/jars/spark``) and reach
Spark as local files through ``spark.jars``; nothing downloads at run time (no
Maven coordinates resolved at session start, no Ivy).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import shlex
import sys
import time
import types
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest_core.settings import (
    INCLUDE_DIR,
    PlatformSettings,
    get_settings,
    ingest_home,
    jars_dir,
)
from spark_jobs.class_data_archive import archive_java_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest_core.catalog import BatchJobSpec, JobSpec


#: The platform's Delta log store for ``file:`` paths (``include/maven/logstore``, built by
#: ``make jars`` into the Spark jars' folder): each commit an atomic put-if-absent. Delta's
#: default there (``HDFSLogStore``) checks that ``_delta_log/<version>.json`` is absent, then
#: renames over it: a writer paused between the two silently replaces another writer's commit
#: (tests/integration/test_delta_log_store.py). Other schemes keep Delta's own log stores.
DELTA_LOG_STORE = {"spark.delta.logStore.file.impl": "io.ingest.delta.LocalPutIfAbsentLogStore"}
DELTA_LOG_STORE_JAR = "ingest-delta-logstore"


class MissingJarsError(RuntimeError):
    """The Maven-fetched jars are not where the platform expects them."""


def spark_jars_dir() -> Path:
    """Return the folder holding the jars Spark needs beyond pyspark's own (Kafka, Delta)."""
    return jars_dir() / "spark"


def spark_jar_paths() -> list[Path]:
    """Return the local jar files for ``spark.jars`` (or ``spark-submit --jars``), sorted.

    :raises MissingJarsError: the folder is missing or lacks the Kafka or Delta connector;
        the message says to run ``make jars``.
    """
    folder = spark_jars_dir()
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    names = " ".join(jar.name for jar in jars)
    for needed in ("spark-sql-kafka-0-10_", "delta-spark_", DELTA_LOG_STORE_JAR):
        if needed not in names:
            raise MissingJarsError(
                f"no {needed}*.jar in {folder}: run `make jars` "
                "(mvn -f include/maven/pom.xml package) once to fetch the JVM jars"
            )
    return jars


#: ``spark.hadoop.*`` settings that put ``file:`` paths on the platform's ``java.nio`` classes
#: (``include/maven/localfs``) for both of Hadoop's APIs: ``FileSystem`` (Delta, Parquet) and
#: ``FileContext`` (Spark's checkpoint file manager).
NIO_LOCAL_FILE_SYSTEM = {
    "spark.hadoop.fs.file.impl": "io.ingest.hadoop.NioLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "io.ingest.hadoop.NioLocalFs",
}


#: The platform's java.nio local file system jar, below :func:`jars_dir` (``make jars``).
LOCAL_FS_JAR = Path("localfs") / "ingest-local-fs.jar"


def local_file_system_jar() -> Path:
    """Return the jar of the platform's ``java.nio`` local file system
    (``<jars_dir>/localfs/ingest-local-fs.jar``, built by ``make jars``).

    :raises MissingJarsError: it was not built; the message says to run ``make jars``.
    """
    jar = jars_dir() / LOCAL_FS_JAR
    if not jar.is_file():
        raise MissingJarsError(
            f"no {jar}: run `make jars` (mvn -f include/maven/pom.xml package) to build it, "
            "or set INGEST_SPARK__LOCAL_FILE_SYSTEM=hadoop"
        )
    return jar


def _application(app_name: str) -> JobSpec | BatchJobSpec | None:
    """The catalog application behind ``app_name``: a gate's application is
    ``quality_gate.<layer>``, the catalog's ``quality_gate``; None for names not in it."""
    from ingest_core.catalog import get_catalog

    return get_catalog().applications.get(app_name.split(".")[0])


def java_options_string(options: list[str]) -> str:
    """``options`` as one ``spark.driver.extraJavaOptions`` value: Spark splits it the way a
    shell would (``CommandBuilderUtils.parseOptionString``), so an option with a space (a
    path) is quoted and stays one JVM argument."""
    return " ".join(shlex.quote(option) for option in options)


def driver_java_options(
    app_name: str, *, class_data: bool = True, settings: PlatformSettings | None = None
) -> list[str]:
    """The driver JVM's options for ``app_name``: the platform's log4j configuration, the
    profile's ``spark.driver_java_options`` (``include/platform.yaml``: the serial GC and a
    64 MB initial heap on one machine), the catalog application's ``driver_java_options``,
    and the class-data archive's (:func:`spark_jobs.class_data_archive.archive_java_options`)
    unless ``class_data`` is false, it was not built, or the application is always-on. A
    mapped archive saves a driver ~6 s of its start but holds ~20-30 MB more of its resident
    memory (its pages are relocated and checked: a small Delta job's driver, serial GC,
    561 MB without it, 580 MB mapped, 591 MB mapped and CRC-checked): worth it for the
    scheduled jobs, which start every cycle, not for the always-on ones, which start once and
    live for days.

    :param app_name: a catalog application's name, or ``<name>.<part>`` (a gate's
        ``quality_gate.<layer>``); other names get the platform's options only.
    :param settings: platform settings; the current profile's when ``None``.
    """
    settings = settings or get_settings()
    application = _application(app_name)
    options = [f"-Dlog4j2.configurationFile={INCLUDE_DIR / 'spark' / 'log4j2.properties'}"]
    options += settings.spark.driver_java_options
    if application is not None:
        options += application.driver_java_options
    if class_data and (application is None or application.mode != "always_on"):
        options += archive_java_options()
    return options


def spark_conf(app_name: str, settings: PlatformSettings | None = None) -> dict[str, str]:
    """Return the Spark configuration the platform uses, as ``spark.*`` key/value strings.

    Shared by :func:`build_spark_session` and by Airflow's SparkSubmitOperator tasks, so that
    a job behaves the same whether it starts from Python or from ``spark-submit``.

    :param app_name: ``spark.app.name``; a catalog application's name (or
        ``<name>.<part>``) brings its ``driver_memory`` and ``driver_java_options``.
    :param settings: platform settings; the current profile's when ``None``.
    :raises MissingJarsError: see :func:`spark_jar_paths` and :func:`local_file_system_jar`.
    """
    settings = settings or get_settings()
    spark = settings.spark
    application = _application(app_name)
    conf = {
        "spark.app.name": app_name,
        "spark.master": spark.master,
        "spark.jars": ",".join(str(jar) for jar in spark_jar_paths()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        **DELTA_LOG_STORE,
        "spark.sql.shuffle.partitions": str(spark.shuffle_partitions),
        "spark.default.parallelism": str(spark.shuffle_partitions),
        # Delta rebuilds a table's snapshot with 50 tasks by default; on a small machine each
        # task costs more than the work it does (SparkSettings.snapshot_partitions).
        "spark.databricks.delta.snapshotPartitions": str(
            spark.snapshot_partitions or spark.shuffle_partitions
        ),
        "spark.driver.memory": (application and application.driver_memory) or spark.driver_memory,
        "spark.executor.memory": spark.executor_memory,
        "spark.ui.enabled": str(spark.ui_enabled).lower(),
        "spark.ui.showConsoleProgress": "false",
        # Applied when the driver JVM starts (pyspark launch or spark-submit --conf).
        "spark.driver.extraJavaOptions": java_options_string(
            driver_java_options(app_name, settings=settings)
        ),
        # Data from outside must not crash a job: ANSI stays on (Spark 4's default) and the
        # jobs parse with try_cast/permissive functions instead.
        "spark.sql.ansi.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        # Tables are addressed by path: no Hive metastore (a Derby folder in the cwd).
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": str(ingest_home() / "spark-warehouse"),
        # The quality gates read exactly the rows a layer added between two table versions
        # (Delta's change data feed); appends cost nothing extra with it on.
        "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "true",
        # Constraint propagation (inferring IsNotNull and equality filters from every
        # projection) grows with the number of aliased CASE WHEN columns, and Silver's
        # decision plans have many: a JFR profile of a Silver micro-batch spent 28 % of its
        # planning thread in `getAllValidConstraints`; a medallion integration test took 157 s
        # without it, 168-190 s with it (bench/results/REFERENCE.md). The jobs filter
        # explicitly where a filter matters.
        "spark.sql.constraintPropagation.enabled": "false",
    }
    # The jar is on the driver JVM's own class path, not only in spark.jars: spark-submit
    # opens the `file:` file system (resolving the jars) before it adds spark.jars. It is
    # there whenever it was built, whichever local_file_system is chosen, so that every
    # driver has the class path the class-data archive was recorded with (HotSpot refuses
    # the archive to a JVM with another one) and switching needs no new archive.
    jar = jars_dir() / LOCAL_FS_JAR
    if spark.local_file_system == "nio":
        jar = local_file_system_jar()  # refuses a missing jar
        conf["spark.jars"] += f",{jar}"  # a cluster's executors load it from there
        conf.update(NIO_LOCAL_FILE_SYSTEM)
    if jar.is_file():
        conf["spark.driver.extraClassPath"] = str(jar)
    if spark.cores_max is not None:
        # Standalone clusters: several applications (always-on and scheduled) share it.
        conf["spark.cores.max"] = str(spark.cores_max)
    if spark.driver_host is not None:
        # Executors on other hosts (containers) connect back to the driver: advertise a name
        # they resolve, listen on every interface.
        conf["spark.driver.host"] = spark.driver_host
        conf["spark.driver.bindAddress"] = "0.0.0.0"
    return conf


def spark_submit_conf(app_name: str, settings: PlatformSettings | None = None) -> dict[str, str]:
    """The ``--conf`` settings for ``spark-submit`` of a platform job: :func:`spark_conf`
    without ``spark.master``, which comes from the ``spark_default`` Airflow connection
    (``--master``), so that pointing that connection at a cluster is the only change.

    :raises MissingJarsError: see :func:`spark_jar_paths`.
    """
    conf = spark_conf(app_name, settings)
    del conf["spark.master"]
    return conf


def launched_by_spark_submit() -> bool:
    """Whether this Python process is a driver started by ``spark-submit`` (which hands it a
    running JVM gateway, already configured by ``--master`` and ``--conf``)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def submitted_master() -> str | None:
    """The ``--master`` spark-submit gave this driver (the JVM's ``spark.master`` property),
    read before any SparkContext exists; None outside spark-submit."""
    if not launched_by_spark_submit():
        return None
    from pyspark import SparkConf, SparkContext

    defer_pyspark_testing_utils()  # this may be the driver's first JVM call
    # A SparkConf made before the gateway is up has no JVM behind it and reads nothing.
    SparkContext._ensure_initialized()
    return SparkConf().get("spark.master", None)


#: The module pyspark asks whether NumPy is installed (``have_numpy``).
PYSPARK_TESTING_UTILS = "pyspark.testing.utils"


class _TestingUtilsUntilNeeded(types.ModuleType):
    """Stands in for ``pyspark.testing.utils`` in ``sys.modules`` until something asks it for
    more than ``have_numpy``; then the real module is imported and answers.

    pyspark 4.2 imports that module to learn whether NumPy is installed, in ``F.lit``
    (``pyspark/sql/functions/builtin.py``) and in its NumPy converters for py4j
    (``pyspark/sql/types.py``), and the module imports pandas and pyarrow to check their
    versions: every driver loaded them (~90 MB) on its first ``lit`` or JVM call and held them
    for its life. ``have_numpy`` is the same ``importlib.util.find_spec("numpy") is not
    None`` the real module computes once; every other name (``have_pandas``,
    ``assertDataFrameEqual``, ``__all__``, ...) comes from the real module.

    The stand-in carries the real module's spec (``importlib.util.find_spec`` works on it)
    and lists the real module's names (``dir``, ``help``: they import it). Its parent package
    is not imported (``pyspark.testing`` imports the real module):
    :func:`defer_pyspark_testing_utils` lets ``pyspark`` import it when first asked for
    ``pyspark.testing``, so that ``import pyspark.testing.utils`` followed by
    ``pyspark.testing.utils.<name>`` works as without the stand-in. ``importlib.reload`` needs
    that parent imported, as for any submodule. A reference taken before the real module
    replaced the stand-in keeps answering through it.
    """

    def __dir__(self) -> list[str]:
        return dir(_real_testing_utils(self))

    def __getattr__(self, name: str) -> Any:
        if name == "have_numpy":  # once: F.lit asks it for every literal
            self.have_numpy = importlib.util.find_spec("numpy") is not None
            return self.have_numpy
        if name.startswith("__") and name != "__all__":
            raise AttributeError(name)
        return getattr(_real_testing_utils(self), name)


def _real_testing_utils(stand_in: types.ModuleType) -> types.ModuleType:
    """The real ``pyspark.testing.utils``, imported in the stand-in's place."""
    if sys.modules.get(PYSPARK_TESTING_UTILS) is stand_in:
        del sys.modules[PYSPARK_TESTING_UTILS]
    return importlib.import_module(PYSPARK_TESTING_UTILS)


def _import_pyspark_testing_when_asked(name: str) -> types.ModuleType:
    """``pyspark``'s module ``__getattr__`` (PEP 562) while the stand-in is in place:
    ``pyspark.testing`` is imported on first use, as ``import pyspark.testing.utils`` would
    have done."""
    if name == "testing":
        return importlib.import_module("pyspark.testing")
    raise AttributeError(f"module 'pyspark' has no attribute {name!r}")


def defer_pyspark_testing_utils() -> None:
    """Put :class:`_TestingUtilsUntilNeeded` in ``sys.modules`` unless the real
    ``pyspark.testing.utils`` is already imported (then nothing is saved, nothing changes)."""
    if PYSPARK_TESTING_UTILS in sys.modules:
        return
    import pyspark

    stand_in = _TestingUtilsUntilNeeded(PYSPARK_TESTING_UTILS)
    folder = Path(pyspark.__file__).parent / "testing"
    spec = importlib.machinery.PathFinder.find_spec(PYSPARK_TESTING_UTILS, [str(folder)])
    if spec is not None:  # the real module's: where it is, how it loads
        stand_in.__spec__ = spec
        stand_in.__loader__ = spec.loader
        stand_in.__file__ = spec.origin
        stand_in.__package__ = spec.parent
    if "pyspark.testing" not in sys.modules and not hasattr(pyspark, "__getattr__"):
        pyspark.__getattr__ = _import_pyspark_testing_when_asked  # type: ignore[method-assign]
    sys.modules[PYSPARK_TESTING_UTILS] = stand_in


def build_spark_session(
    app_name: str,
    *,
    settings: PlatformSettings | None = None,
    extra_conf: Mapping[str, str] | None = None,
    master: str | None = None,
) -> SparkSession:
    """Build (or return the running) SparkSession with Delta and the Kafka connector.

    :param app_name: ``spark.app.name``, shown in the Spark UI and logs.
    :param settings: platform settings; the current profile's when ``None``.
    :param extra_conf: more ``spark.*`` settings; they win over the platform's.
    :param master: a master that wins over the profile's and spark-submit's (the real-time
        job sizes a local master to its partitions: :func:`spark_jobs.real_time.
        local_master_for`).
    :returns: a SparkSession whose master comes from ``settings.spark.master`` (default
        ``local[*]``; under ``spark-submit``, from its ``--master``), with the Delta SQL
        extension and catalog and the local Kafka/Delta jars.
    :raises MissingJarsError: see :func:`spark_jar_paths`.

    Example::

        spark = build_spark_session("bronze_ingest")
        spark.read.format("delta").load(path).count()
    """
    from pyspark.sql import SparkSession

    defer_pyspark_testing_utils()
    # Spark hands timestamps to Python as naive local times: make "local" UTC, the session
    # time zone, so that driver-side datetimes and Spark agree.
    os.environ["TZ"] = "UTC"
    time.tzset()
    # Python workers must run the interpreter that has this project installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The platform runs on loopback; without this Spark warns that the hostname resolves
    # to a loopback address and guesses an interface.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = spark_conf(app_name, settings)
    if launched_by_spark_submit():
        # spark-submit's --master (from the Airflow connection) wins over the profile's.
        del conf["spark.master"]
    conf.update(extra_conf or {})
    if master is not None:
        conf["spark.master"] = master
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
