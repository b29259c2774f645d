"""A throw-away platform for medallion tests: its own INGEST_HOME (tables, checkpoints), its
own topic prefix on the real broker, and helpers to send events and run the jobs."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
from deltalake import DeltaTable

from ingest_core.catalog import get_catalog
from ingest_core.contracts import TOPICS
from ingest_core.delta_tables import table_exists
from ingest_core.settings import get_settings
from ingest_core.topics import ensure_topics
from ingest_core.waiting import wait_until
from ingestctl.producer import Message, produce
from spark_jobs import bronze_ingest, silver_refine
from spark_jobs.gold import gold_aggregate, late_corrections
from spark_jobs.triggers import TriggerSpec

AVAILABLE_NOW = TriggerSpec("available-now")


def bronze_driver(*extra: str) -> list[str]:
    """The command that runs a bronze_ingest driver on a 1-second trigger (as the supervisor
    would start it), with ``extra`` arguments."""
    import sys

    return [
        sys.executable,
        "-m",
        "spark_jobs.bronze_ingest",
        "--trigger",
        "processing-time=1 second",
        *extra,
    ]


GAP = timedelta(minutes=10)  # gold_aggregate's session_gap (include/pipeline.yaml)


def delete_topic(bootstrap: str, topic: str, timeout_s: float = 60) -> None:
    """Delete ``topic`` and wait until Kafka no longer lists it.

    :raises TimeoutError: still listed after ``timeout_s`` seconds.
    """
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics([topic])
        wait_until(lambda: topic not in admin.list_topics(), timeout_s, 0.3, f"{topic} deleted")
    finally:
        admin.close()


def payment(event_id: str, when: str, amount: float = 10.0, **extra: Any) -> dict[str, Any]:
    """A valid payment event at ``when`` (ISO-8601 with offset)."""
    return {
        "event_id": event_id,
        "event_type": "payment",
        "event_time": when,
        "schema_version": 1,
        "payment_id": f"p-{event_id}",
        "order_id": f"o-{event_id}",
        "customer_id": "c1",
        "method": "credit_card",
        "installments": 1,
        "amount": amount,
        "currency": "BRL",
        "status": "authorized",
    } | extra


def activity(event_id: str, when: str, customer: str, kind: str = "page_view") -> dict[str, Any]:
    """A valid customer activity event."""
    return {
        "event_id": event_id,
        "event_type": "customer_activity",
        "event_time": when,
        "schema_version": 1,
        "customer_id": customer,
        "activity": kind,
    }


@dataclass
class Platform:
    """Handles on one isolated platform instance."""

    spark: Any
    bootstrap: str
    prefix: str
    home: Path

    def send(self, topic: str, values: list[Any], key: str = "k") -> None:
        """Produce values (dicts as JSON, bytes raw, None tombstones) to a contract topic."""
        produce(self.bootstrap, [Message(self.prefix + topic, key, v) for v in values])

    def bronze(self) -> None:
        query = bronze_ingest.start(self.spark, trigger=AVAILABLE_NOW)
        query.awaitTermination()

    def silver(self) -> None:
        silver_refine.run(self.spark, trigger=AVAILABLE_NOW)

    def gold(self) -> None:
        gold_aggregate.run(self.spark, trigger=AVAILABLE_NOW)

    def all_layers(self) -> None:
        self.bronze()
        self.silver()
        self.gold()

    def correct_late(self) -> dict[str, int]:
        return late_corrections.correct(self.spark)

    def path(self, table: str) -> Path:
        return get_catalog().table(table).path(get_settings())

    def read(self, table: str) -> pd.DataFrame:
        """The table through delta-rs, an independent reader (empty frame if absent)."""
        path = self.path(table)
        return DeltaTable(str(path)).to_pandas() if table_exists(path) else pd.DataFrame()

    def version(self, table: str) -> int:
        return DeltaTable(str(self.path(table))).version()


def make_platform(spark: Any, bootstrap: str, tmp_path: Path, monkeypatch: Any) -> Platform:
    host, port = bootstrap.rsplit(":", 1)
    prefix = f"m{uuid.uuid4().hex[:8]}."
    home = tmp_path / "home"
    monkeypatch.setenv("INGEST_HOME", str(home))
    monkeypatch.setenv("INGEST_KAFKA__HOST", host)
    monkeypatch.setenv("INGEST_KAFKA__PORT", port)
    monkeypatch.setenv("INGEST_KAFKA__TOPIC_PREFIX", prefix)
    get_settings.cache_clear()
    ensure_topics(bootstrap, [prefix + t for t in TOPICS], partitions=3)
    return Platform(spark=spark, bootstrap=bootstrap, prefix=prefix, home=home)


def windows(frame: pd.DataFrame, key: str = "currency") -> dict[tuple[str, str], tuple[int, float]]:
    """{(window start HH:MM, key): (count, total)} of a payment totals table."""
    return {
        (row.window_start.strftime("%H:%M"), getattr(row, key)): (
            int(row.payment_count),
            float(row.amount_total),
        )
        for row in frame.itertuples()
    }


def values_of(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [json.loads(v) for v in frame["value"]]


def naive_utc(column: pd.Series) -> pd.Series:
    """Timestamps (ISO-8601 strings with offsets, or datetimes) as naive UTC, nanosecond
    precision (Spark's and pandas' agree then)."""
    utc = pd.to_datetime(column, utc=True, format="ISO8601")
    return utc.dt.tz_convert(None).astype("datetime64[ns]")


def expected_sessions(events: list[dict], watermark: datetime) -> set[tuple]:
    """Independent sessionisation (:func:`ingestctl.soak.verdict.expected_sessions`: per
    customer, an event more than ``GAP`` after the previous one starts a new session) of
    the distinct ``events``; only sessions the stream has finalised (end at or before
    ``watermark``)."""
    from ingestctl.soak.verdict import expected_sessions as by_hand

    frame = pd.DataFrame(events).drop_duplicates("event_id", keep="first")
    return by_hand(frame.assign(event_time=naive_utc(frame.event_time)), GAP, watermark)


def actual_sessions(platform: Platform) -> set[tuple]:
    """``gold_customer_sessions`` as :func:`expected_sessions` tuples (every row there is
    final: appended once the watermark passed its end, or corrected when final)."""
    from ingestctl.soak.verdict import actual_sessions as as_tuples

    return as_tuples(platform.read("gold_customer_sessions"))
