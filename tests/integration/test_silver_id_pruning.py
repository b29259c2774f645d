"""Pruning the deduplication id history changes no Silver decision (issue 17).

The same Bronze micro-batches, spanning three months of event time, go through
silver_refine's ``foreachBatch`` function twice, on real Spark and real Delta tables, each
time in a platform of its own; in the second, table maintenance prunes ``silver_event_ids``
(ids more than 30 days before the watermark) between the batches. Every Silver table is then
read with delta-rs and compared, and the decisions are checked against what the rules say.
No Kafka: the writer is given the batches Spark's Delta source would give it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from deltalake import DeltaTable

from ingest_core.catalog import get_catalog
from ingest_core.settings import get_settings
from tests.integration import medallion

pytestmark = pytest.mark.integration

BRONZE = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "kafka_timestamp timestamp, kafka_timestamp_type int, ingestion_time timestamp, "
    "ingestion_date date"
)
JAN = datetime(2026, 1, 1, 12, 0)
MAR = datetime(2026, 3, 15, 12, 0)
COMPARED = (
    "silver_orders",
    "silver_payments",
    "silver_quarantine",
    "silver_late_events",
    "silver_dedup_conflicts",
    "silver_reconciliation",
)


def payment(event_id: str, when: datetime, amount: float = 10.0) -> dict:
    return medallion.payment(event_id, when.isoformat() + "Z", amount)


def order(event_id: str, when: datetime) -> dict:
    return {
        "event_id": event_id,
        "event_type": "order_placed",
        "event_time": when.isoformat() + "Z",
        "schema_version": 1,
        "order_id": f"o-{event_id}",
        "customer_id": "c1",
        "status": "created",
        "items": [{"product_id": "p", "price": 5.0, "quantity": 2}],
        "total": 10.0,
        "currency": "BRL",
    }


def batches() -> list[list[tuple[str, object]]]:
    """Three micro-batches: January, then March (the watermark jumps 73 days), then re-sends."""
    january = [("payments", payment(f"jan{i}", JAN + timedelta(minutes=i))) for i in range(6)]
    january += [("orders", order("ord-jan", JAN))]
    march = [("payments", payment(f"mar{i}", MAR + timedelta(minutes=i))) for i in range(6)]
    march += [("orders", order("ord-mar", MAR))]
    resends = [
        ("payments", payment("jan0", JAN)),  # as sent in January: late
        ("payments", payment("jan1", MAR + timedelta(hours=2))),  # re-sent with a new time
        ("payments", payment("mar2", MAR + timedelta(minutes=2), amount=99.0)),  # conflict
        ("payments", payment("mar3", MAR + timedelta(minutes=3))),  # exact duplicate
        ("payments", payment("new0", MAR + timedelta(hours=3))),
        ("payments", b'{"event_id": "bad", '),  # malformed
        ("orders", order("ord-jan", JAN)),  # late
    ]
    return [january, march, resends]


def bronze_frame(spark, records: list[tuple[str, object]], batch: int):
    arrival = MAR + timedelta(days=batch)  # Kafka time: the replay sends everything now
    rows, offsets = [], {}
    for i, (topic, value) in enumerate(records):
        raw = value if isinstance(value, bytes) else json.dumps(value).encode()
        offset = offsets.get(topic, batch * 100)
        offsets[topic] = offset + 1
        when = arrival + timedelta(seconds=i)
        rows.append((b"k", raw, topic, 0, offset, when, 0, arrival, arrival.date()))
    return spark.createDataFrame(rows, BRONZE)


def run_silver(spark, home: Path, monkeypatch, *, prune: bool) -> dict[str, int]:
    """Feed the batches to silver_refine's writer in a platform at ``home``.

    :returns: rows removed from ``silver_event_ids`` by each maintenance run.
    """
    from ingest_core.table_maintenance import maintain_table
    from spark_jobs.silver_refine import SilverBatchWriter

    monkeypatch.setenv("INGEST_HOME", str(home))
    get_settings.cache_clear()
    settings = get_settings()
    checkpoint = get_catalog().job("silver_refine").checkpoint(settings)
    checkpoint.mkdir(parents=True)
    # The query id Spark records on a query's first start (the writers' txnAppId).
    (checkpoint / "metadata").write_text(json.dumps({"id": "0f0f0f0f-equivalence"}))
    writer = SilverBatchWriter(spark, get_catalog(), settings)
    removed = {}
    for batch_id, records in enumerate(batches()):
        writer(bronze_frame(spark, records, batch_id), batch_id)
        if prune and batch_id == 1:
            report = maintain_table("silver_event_ids", settings=settings)
            removed[f"after batch {batch_id}"] = report.rows_removed
    get_settings.cache_clear()
    return removed


def read(home: Path, name: str) -> pd.DataFrame:
    layer = get_catalog().table(name).layer
    return DeltaTable(str(home / "data" / layer / name)).to_pandas()


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    """Every value as text (arrays, structs and maps included), rows in a stable order."""
    text = frame.map(lambda v: v if isinstance(v, str) else json.dumps(v, default=str))
    return text.sort_values(sorted(text.columns)).reset_index(drop=True)


def test_pruning_the_id_history_changes_no_silver_table(spark, tmp_path: Path, monkeypatch) -> None:
    kept, pruned = tmp_path / "kept", tmp_path / "pruned"
    assert run_silver(spark, kept, monkeypatch, prune=False) == {}
    removed = run_silver(spark, pruned, monkeypatch, prune=True)
    # January's 7 ids are more than 30 days before March's watermark: maintenance drops them.
    assert removed == {"after batch 1": 7}

    for name in COMPARED:
        pd.testing.assert_frame_equal(
            comparable(read(kept, name)), comparable(read(pruned, name)), obj=name
        )

    # The decisions are the rules', not merely equal.
    payments = read(kept, "silver_payments")
    expected = [f"jan{i}" for i in range(6)] + [f"mar{i}" for i in range(6)] + ["new0", "jan1"]
    # jan1, re-sent 73 days later with a new event time, is a new event on both sides: the
    # horizon is the same whether or not maintenance has pruned the ids yet.
    assert sorted(payments["event_id"]) == sorted(expected)
    # Columns as the per-topic code wrote them: event_id first, the customer's last.
    assert list(payments.columns[:3]) == ["event_id", "topic", "partition"]
    assert list(payments.columns[-3:]) == ["customer_city", "customer_state", "customer_country"]
    assert sorted(read(kept, "silver_late_events")["event_id"]) == ["jan0", "ord-jan"]
    assert list(read(kept, "silver_dedup_conflicts")["event_id"]) == ["mar2"]
    recon = read(kept, "silver_reconciliation").sort_values("batch_id")
    columns = [
        "records_read",
        "records_written",
        "records_quarantined",
        "duplicates_dropped",
        "late_events",
        "dedup_conflicts",
    ]
    assert recon[columns].values.tolist() == [
        [7, 7, 0, 0, 0, 0],
        [7, 7, 0, 0, 0, 0],
        [7, 2, 1, 2, 2, 1],
    ]
    # What pruning removed is exactly the ids older than the horizon after batch 1.
    horizon = pd.Timestamp(MAR - timedelta(minutes=30) - timedelta(days=30), tz=UTC)
    ids_kept = read(kept, "silver_event_ids")
    young = ids_kept[(ids_kept["batch_id"] == 2) | (ids_kept["event_time"] >= horizon)]
    pd.testing.assert_frame_equal(comparable(young), comparable(read(pruned, "silver_event_ids")))
