"""Rows held back by an operator after a failed gate (``ops_gate_holds``).

Gold reads Silver through :func:`without_held`, so a held row never reaches Gold, while it
stays in Silver (nothing is rewritten) and its raw record sits in ``silver_quarantine`` with
the failed expectation as its reason.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ingest_core.catalog import get_catalog
from ingest_core.quality.state import HOLDS_TABLE
from ingest_core.settings import PlatformSettings, get_settings
from spark_jobs.delta_io import read_table

#: ``ops_gate_holds`` schema.
HOLDS_SCHEMA = (
    "table string, event_id string, reason string, run_id string, held_by string, held_at timestamp"
)


def held_event_ids(
    spark: SparkSession, table: str, settings: PlatformSettings | None = None
) -> DataFrame | None:
    """``event_id`` (string) of the held rows of Silver ``table``; None when nothing is held
    anywhere (no holds table yet)."""

    holds = read_table(spark, get_catalog().table(HOLDS_TABLE).path(settings or get_settings()))
    if holds is None:
        return None
    return holds.where(F.col("table") == table).select("event_id").distinct()


def without_held(
    spark: SparkSession, rows: DataFrame, table: str, settings: PlatformSettings | None = None
) -> DataFrame:
    """``rows`` of Silver ``table`` (batch or stream, with ``event_id``) minus held rows.

    For a stream this is a stream-static anti join; the holds are read when the query
    starts, which for the AvailableNow Gold runs is after any remedy.
    """
    held = held_event_ids(spark, table, settings)
    if held is None:
        return rows

    return rows.join(F.broadcast(held), "event_id", "left_anti")
