"""A new event source landed by configuration only (issue 53): a contract file, a Silver
table and a declared Gold aggregate in a catalog folder of its own (``INGEST_CATALOG_DIR``),
no Python. Real broker, the real Bronze, Silver and Gold drivers (``python -m``, fresh
processes that read the folder), Delta tables read back with delta-rs and compared with
pandas over the sent events."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from deltalake import DeltaTable

from ingest_core.contracts import TOPICS
from ingest_core.settings import INCLUDE_DIR, PROJECT_ROOT
from ingest_core.topics import ensure_topics
from ingestctl.producer import Message, produce

pytestmark = pytest.mark.integration

#: A store's own reviews as an event (score 1-5; free text with newlines and accents): the
#: repository's catalog already has Olist's reviews, so the new source takes another name.
REVIEWS = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "store_reviews.yaml",
    "title": "Review events",
    "type": "object",
    "allOf": [{"$ref": "envelope.yaml"}],
    "x-ingest-source": {
        "topic": "store_reviews",
        "key": "order_id",
        "event_types": ["store_review_submitted"],
        "silver_table": "silver_store_reviews",
    },
    "required": ["review_id", "order_id", "score"],
    "properties": {
        "review_id": {"type": "string", "x-ingest-id": True},
        "order_id": {"type": "string", "x-ingest-id": True},
        "score": {"type": "integer", "minimum": 1, "maximum": 5},
        "title": {"type": ["string", "null"]},
        "message": {"type": ["string", "null"]},
    },
}


#: The batch jobs that rewrite windowed Gold tables (their outputs list each one).
GOLD_BATCH_JOBS = ("late_corrections", "gold_backfill", "layer_refresh")


def _catalog(folder: Path) -> Path:
    """The repository's catalog plus the reviews source: the whole change a user makes."""
    shutil.copytree(INCLUDE_DIR / "contracts", folder / "contracts")
    (folder / "contracts" / "store_reviews.yaml").write_text(
        yaml.safe_dump(REVIEWS, sort_keys=False)
    )
    pipeline = yaml.safe_load((INCLUDE_DIR / "pipeline.yaml").read_text())
    pipeline["tables"]["silver_store_reviews"] = {
        "layer": "silver",
        "schema_from": "contract",
        "description": "Order reviews, parsed and deduplicated.",
        "partition_by": ["event_date"],
        "keys": ["event_id"],
    }
    pipeline["tables"]["gold_store_reviews_daily"] = {
        "layer": "gold",
        "schema_from": "window",
        "description": "Reviews per UTC day: count, mean score, scores of at most 2.",
        "keys": ["window_start"],
        "window": {
            "kind": "tumbling",
            "source": "silver_store_reviews",
            "duration": "1 day",
            "measures": {
                "review_count": "count",
                "average_score": {"avg": "score"},
                "low_scores": {"count_if": {"column": "score", "at_most": 2}},
            },
            "watermark": "store_reviews_watermark",
        },
    }
    jobs = pipeline["jobs"]
    jobs["bronze_ingest"]["source"]["topics"].append("store_reviews")
    pipeline["batch_jobs"]["bronze_replay"]["topics"].append("store_reviews")
    jobs["silver_refine"]["outputs"].append("silver_store_reviews")
    # Every list the new Silver table goes in (docs/add-a-source.md; catalog check refuses
    # each one left out).
    for job, roles in (
        (jobs["gold_aggregate"], ("inputs", "work_from")),
        (pipeline["batch_jobs"]["late_corrections"], ("inputs",)),
        (pipeline["batch_jobs"]["gold_backfill"], ("inputs",)),
        (pipeline["batch_jobs"]["layer_refresh"], ("outputs",)),
        (pipeline["batch_jobs"]["quality_gate"], ("inputs",)),
    ):
        for role in roles:
            job[role].append("silver_store_reviews")
    jobs["gold_aggregate"]["settings"]["store_reviews_watermark"] = "1 hour"
    for job in (jobs["gold_aggregate"], *(pipeline["batch_jobs"][j] for j in GOLD_BATCH_JOBS)):
        job["outputs"].append("gold_store_reviews_daily")
    pipeline["batch_jobs"]["quality_gate"]["inputs"].append("gold_store_reviews_daily")
    (folder / "pipeline.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False))
    return folder


def _review(n: int, score: Any = 4, **changes: Any) -> dict[str, Any]:
    value = {
        "event_id": f"rev-{n}",
        "event_type": "store_review_submitted",
        "event_time": f"2026-03-01T10:{n:02d}:00-03:00",
        "schema_version": 1,
        "review_id": f"r{n}",
        "order_id": f"o{n}",
        "score": score,
        "title": "Ótimo" if n % 2 else None,
        "message": f"Chegou antes do prazo.\nRecomendo, nº {n}",
    }
    for key, new in changes.items():
        if new is None:
            value.pop(key)
        else:
            value[key] = new
    return value


def _environment(catalog: Path, home: Path, bootstrap: str, prefix: str) -> dict[str, str]:
    """The jobs' environment: the user's catalog folder, a home and topic prefix of the
    test's own, the test broker."""
    host, port = bootstrap.rsplit(":", 1)
    return {
        **os.environ,
        "INGEST_CATALOG_DIR": str(catalog),
        "INGEST_HOME": str(home),
        "INGEST_KAFKA__HOST": host,
        "INGEST_KAFKA__PORT": port,
        "INGEST_KAFKA__TOPIC_PREFIX": prefix,
    }


def _run(module: str, env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--trigger", "available-now"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"{module}: {done.stderr[-3000:]}"


def test_a_new_source_lands_in_bronze_and_silver_by_configuration_only(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    from ingest_core.catalog_check import check

    catalog = _catalog(tmp_path / "catalog")
    assert check(catalog) == []  # what `ingestctl catalog check` says of the user's folder
    prefix = f"o{uuid.uuid4().hex[:8]}."
    env = _environment(catalog, tmp_path / "home", kafka_bootstrap, prefix)
    topics = [*TOPICS, "store_reviews"]
    ensure_topics(kafka_bootstrap, [prefix + t for t in topics], partitions=2)
    valid = [_review(n, score=1 + n % 5) for n in range(12)]
    # 23:30 in Sao Paulo is 02:30 UTC the next day: Gold's watermark (1 hour behind it)
    # closes the first day's window, while its own day stays open.
    valid.append(_review(12, score=2, event_time="2026-03-01T23:30:00-03:00"))
    bad = {
        "invalid_value": _review(20, score=7),
        "missing_required_field": _review(21, order_id=None),
        "type_mismatch": _review(22, score="five"),
    }
    sent = [*valid, valid[3], *bad.values()]  # valid[3] twice: one Silver row
    produce(
        kafka_bootstrap,
        [Message(prefix + "store_reviews", str(v.get("order_id")), v) for v in sent],
    )

    _run("spark_jobs.bronze_ingest", env)
    _run("spark_jobs.silver_refine", env)
    _run("spark_jobs.gold.gold_aggregate", env)

    home = tmp_path / "home"

    def read(table: str) -> pd.DataFrame:
        found = list(home.rglob(f"{table}/_delta_log"))
        assert len(found) == 1, f"{table}: {found}"
        return DeltaTable(str(found[0].parent)).to_pandas()

    bronze = read("bronze_events")
    assert len(bronze[bronze.topic == prefix + "store_reviews"]) == len(sent)

    expected = pd.DataFrame(valid).drop_duplicates("event_id")  # the independent computation
    silver = read("silver_store_reviews").sort_values("event_id").reset_index(drop=True)
    expected = expected.sort_values("event_id").reset_index(drop=True)
    columns = ["event_id", "review_id", "order_id", "score", "title", "message"]
    assert silver[columns].astype(object).where(silver[columns].notna(), None).to_dict(
        "records"
    ) == expected[columns].astype(object).where(expected[columns].notna(), None).to_dict("records")

    def naive_utc(column: pd.Series) -> list[pd.Timestamp]:
        return list(pd.to_datetime(column, utc=True, format="ISO8601").dt.tz_convert(None))

    assert naive_utc(silver.event_time) == naive_utc(expected.event_time)  # -03:00 -> UTC

    quarantine = read("silver_quarantine")
    quarantine = quarantine[quarantine.topic == prefix + "store_reviews"]
    reasons = {
        json.loads(v)["event_id"]: r
        for v, r in zip(quarantine.value, quarantine.reason, strict=True)
    }
    assert reasons == {value["event_id"]: reason for reason, value in bad.items()}
    detail = quarantine[quarantine.reason == "invalid_value"].detail.iloc[0]
    assert "score above 5" in detail

    # Gold: the declared aggregate, against pandas over the valid events (one per event_id),
    # only the windows Gold's watermark closed (the last event's time minus 1 hour).
    events = pd.DataFrame(valid).drop_duplicates("event_id")
    events["time"] = pd.to_datetime(events.event_time, utc=True, format="ISO8601")
    watermark = events.time.max() - pd.Timedelta(hours=1)
    events["window_start"] = events.time.dt.floor("D")
    closed = events[events.window_start + pd.Timedelta(days=1) <= watermark]
    expected_gold = {
        start.tz_convert(None): (len(day), day.score.mean(), int((day.score <= 2).sum()))
        for start, day in closed.groupby("window_start")
    }
    assert len(expected_gold) == 1  # the first day; the second is still open
    gold = read("gold_store_reviews_daily")
    assert list(gold.columns) == [
        "window_start",
        "window_end",
        "review_count",
        "average_score",
        "low_scores",
    ]
    actual_gold = {
        row.window_start.tz_localize(None) if row.window_start.tzinfo else row.window_start: (
            row.review_count,
            row.average_score,
            row.low_scores,
        )
        for row in gold.itertuples()
    }
    assert actual_gold.keys() == expected_gold.keys()
    for start, (count, mean, low) in expected_gold.items():
        assert actual_gold[start][0] == count
        assert actual_gold[start][1] == pytest.approx(mean)
        assert actual_gold[start][2] == low


def test_a_contract_evolves_under_a_running_checkpoint_by_the_documented_rules(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Issue 53, schema evolution: a new optional field reaches Silver without a refresh
    (the table gains the column, older rows read null; checked against the sent events), and
    an incompatible change (a field's type) is refused at the job's start, before Spark,
    saying what changed and what to do; ``ingestctl catalog check`` says the same."""
    catalog = _catalog(tmp_path / "catalog")
    prefix = f"e{uuid.uuid4().hex[:8]}."
    env = _environment(catalog, tmp_path / "home", kafka_bootstrap, prefix)
    ensure_topics(kafka_bootstrap, [prefix + t for t in [*TOPICS, "store_reviews"]], partitions=1)
    topic = prefix + "store_reviews"
    before = [_review(n) for n in range(3)]
    produce(kafka_bootstrap, [Message(topic, v["order_id"], v) for v in before])
    _run("spark_jobs.bronze_ingest", env)
    _run("spark_jobs.silver_refine", env)

    contract = catalog / "contracts" / "store_reviews.yaml"
    declared = yaml.safe_load(contract.read_text())
    declared["properties"]["language"] = {"type": ["string", "null"]}  # new, optional
    contract.write_text(yaml.safe_dump(declared, sort_keys=False))
    after = [_review(n, language="pt-BR") for n in range(3, 5)]
    produce(kafka_bootstrap, [Message(topic, v["order_id"], v) for v in after])
    _run("spark_jobs.bronze_ingest", env)
    _run("spark_jobs.silver_refine", env)  # accepted: a compatible change

    found = list((tmp_path / "home").rglob("silver_store_reviews/_delta_log"))
    silver = DeltaTable(str(found[0].parent)).to_pandas().sort_values("event_id")
    expected = pd.DataFrame([*before, *after]).sort_values("event_id")  # no language: NaN
    assert list(silver.event_id) == list(expected.event_id)
    assert [v if isinstance(v, str) else None for v in silver.language] == [
        v if isinstance(v, str) else None for v in expected.language
    ]

    declared["properties"]["language"] = {"type": ["integer", "null"]}  # incompatible
    contract.write_text(yaml.safe_dump(declared, sort_keys=False))
    refused = subprocess.run(
        [sys.executable, "-m", "spark_jobs.silver_refine", "--trigger", "available-now"],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert refused.returncode == 1, refused.stderr[-2000:]
    assert "store_reviews.language: type string -> int" in refused.stderr
    assert "layer_full_refresh with layer=silver" in refused.stderr
    assert "SparkContext" not in refused.stderr  # refused before Spark started
    ingestctl = Path(sys.executable).parent / "ingestctl"
    checked = subprocess.run(
        [str(ingestctl), "catalog", "check", "--include", str(catalog)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert checked.returncode == 1
    assert "silver_refine: incompatible contract change: store_reviews.language" in checked.stderr
