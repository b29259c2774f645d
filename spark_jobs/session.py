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
import sys
import time
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyspark
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from ingest_core.settings import PlatformSettings

# Spark's configuration lives in the Spark-free core (the Airflow side needs it too); these
# names stay importable from here for the jobs and the tests.
from ingest_core.spark_config import (
    DELTA_LOG_STORE,
    MissingJarsError,
    driver_java_options,
    java_options_string,
    local_file_system_jar,
    spark_conf,
    spark_jar_paths,
    spark_jars_dir,
    spark_submit_conf,
)

__all__ = [
    "DELTA_LOG_STORE",
    "PYSPARK_TESTING_UTILS",
    "MissingJarsError",
    "build_spark_session",
    "defer_pyspark_testing_utils",
    "driver_java_options",
    "java_options_string",
    "launched_by_spark_submit",
    "local_file_system_jar",
    "spark_conf",
    "spark_jar_paths",
    "spark_jars_dir",
    "spark_submit_conf",
    "submitted_master",
]


def launched_by_spark_submit() -> bool:
    """Whether this Python process is a driver started by ``spark-submit`` (which hands it a
    running JVM gateway, already configured by ``--master`` and ``--conf``)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def submitted_master() -> str | None:
    """The ``--master`` spark-submit gave this driver (the JVM's ``spark.master`` property),
    read before any SparkContext exists; None outside spark-submit."""
    if not launched_by_spark_submit():
        return None

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
