"""What a gate validates, read with Spark: the rows a gated table gained in a range of Delta
versions (its *increment*) through Delta's change data feed (:func:`increment`; the delta-rs
read and the pending increments are in :mod:`ingest_core.quality.increments`). Part of the
gate job (:mod:`spark_jobs.quality.gate`)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ingest_core.catalog import get_catalog
from ingest_core.quality.increments import CDF_COLUMNS
from ingest_core.quality.rules import ALREADY_IN_TABLE, TableRules
from ingest_core.quality.state import Increment
from ingest_core.settings import PlatformSettings
from spark_jobs.quality.holds import held_event_ids


def increment(
    spark: SparkSession,
    rules: TableRules,
    inc: Increment,
    settings: PlatformSettings,
) -> DataFrame:
    """The rows ``rules.table`` gained in versions ``inc.from_version..inc.to_version``.

    :returns: the table's columns (inserted rows and post-images of updated rows; for
        ``latest_image`` tables, each key's newest image), without held rows, plus
        ``_already_in_table`` boolean for ``unique_in_table`` tables (key present at
        ``from_version - 1``).
    """

    path = str(get_catalog().table(rules.table).path(settings))
    rows = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", inc.from_version)
        .option("endingVersion", inc.to_version)
        .load(path)
        .where(F.col("_change_type").isin("insert", "update_postimage"))
    )
    if rules.latest_image:
        newest = Window.partitionBy(*rules.keys).orderBy(F.col("_commit_version").desc())
        rows = rows.withColumn("_rank", F.row_number().over(newest)).where("_rank = 1")
        rows = rows.drop("_rank")
    rows = rows.drop(*CDF_COLUMNS)
    if "event_id" in rows.columns:
        held = held_event_ids(spark, rules.table, settings)
        if held is not None:
            rows = rows.join(F.broadcast(held), "event_id", "left_anti")
    if rules.unique_in_table:
        key = rules.keys[0]
        if inc.from_version > 0:
            before = spark.read.format("delta").option("versionAsOf", inc.from_version - 1)
            earlier = before.load(path).select(F.col(key).alias("_earlier")).distinct()
            rows = rows.join(earlier, rows[key] == earlier["_earlier"], "left")
            rows = rows.withColumn(ALREADY_IN_TABLE, F.col("_earlier").isNotNull())
            rows = rows.drop("_earlier")
        else:
            rows = rows.withColumn(ALREADY_IN_TABLE, F.lit(False))
    return rows
