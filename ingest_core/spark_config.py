"""Spark's configuration for the platform's drivers, without Spark: the jars (fetched by
``make jars``), the ``--conf`` settings of a spark-submit (what Airflow's hooks pass), the
driver JVM's options and its class-data archive. The Airflow side and the CLI import this;
:mod:`spark_jobs.session` builds the session from it.

The archive is built by ``python -m spark_jobs.class_data_archive`` (which starts Spark);
what a driver needs to map it is here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from ingest_core.settings import (
    INCLUDE_DIR,
    PlatformSettings,
    get_settings,
    ingest_home,
    jars_dir,
)

if TYPE_CHECKING:
    from ingest_core.catalog import BatchJobSpec, JobSpec


#: HotSpot's warnings about an archive it cannot map (another JDK or class path) would repeat
#: at every start: off.
_QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def class_data_archive() -> Path:
    """The archive's path: ``<jars_dir>/cds/spark-driver.jsa`` (it belongs with the jars it
    was made from; ``make jars`` removes both together)."""
    return jars_dir() / "cds" / "spark-driver.jsa"


def archive_manifest(archive: Path) -> Path:
    """What a complete recording wrote beside the archive: its size in bytes (JSON)."""
    return archive.with_name(archive.name + ".json")


def spark_home() -> Path | None:
    """Spark's installation: ``SPARK_HOME``, else pyspark's own folder (which ships
    ``bin/spark-submit``, ``bin/spark-class`` and every Spark jar), located without importing
    pyspark; None when neither is there."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home)
    spec = importlib.util.find_spec("pyspark")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def own_spark_conf_dir() -> bool:
    """Whether ``SPARK_CONF_DIR`` names a folder other than Spark's default
    ``<SPARK_HOME>/conf`` (``SPARK_HOME`` defaults to pyspark's own folder).

    spark-class puts the configuration folder first on the driver's class path: HotSpot
    (JDK 17) archives no class path with a non-empty folder ("non-empty directory") and maps
    an archive only into a JVM whose class path starts as the recording's did, which had the
    default one. The default is what spark-submit's ``load-spark-env.sh`` exports into every
    driver it starts, so a driver rebuilding its own configuration still sees its archive.
    """
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        return False
    home = spark_home()
    if home is None:
        return True
    return Path(conf_dir).resolve() != (home / "conf").resolve()


def archive_java_options() -> list[str]:
    """The driver JVM options that map the archive, or ``[]`` when there is none to map or
    ``SPARK_CONF_DIR`` names a folder of its own (with it, no driver can use one; see
    :func:`own_spark_conf_dir`).

    The archive is mapped only when it has the size its recording wrote in its manifest:
    HotSpot maps a truncated archive and the JVM dies on a ``SIGBUS``. ``-XX:+VerifySharedSpaces``
    makes it check the archive's CRCs before use: a corrupted archive is then refused (the
    JVM starts without it) instead of crashing it. Each option is one JVM argument (a path
    with spaces stays one).
    """
    if own_spark_conf_dir():
        return []
    archive = class_data_archive()
    try:
        recorded = json.loads(archive_manifest(archive).read_text())["bytes"]
        complete = archive.is_file() and archive.stat().st_size == recorded
    except (OSError, ValueError, KeyError, TypeError):
        complete = False
    if not complete:
        return []
    return [f"-XX:SharedArchiveFile={archive}", "-XX:+VerifySharedSpaces", *_QUIET]


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
        # Standalone clusters: several applications (always-on and scheduled) share it; an
        # application that needs more (a real-time query: a slot per Kafka partition) says so
        # in the catalog.
        conf["spark.cores.max"] = str((application and application.cores_max) or spark.cores_max)
    if spark.executor_java_options:
        conf["spark.executor.extraJavaOptions"] = java_options_string(spark.executor_java_options)
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
