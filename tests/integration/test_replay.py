"""ingestctl replay / generate against the real broker: what a consumer reads back matches
the datasets and the run's own summary."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from ingest_core.contracts import TOPICS
from ingest_core.replay_mappings import replay_mappings
from ingest_core.topics import ensure_topics
from tests.conftest import cli_env, consume_all
from tests.integration.medallion import Platform

pytestmark = pytest.mark.integration
CLI = str(Path(sys.executable).parent / "ingestctl")


def _run(args: list[str], bootstrap: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = cli_env(bootstrap, INGEST_STORAGE__LANDING_DIR=str(tmp_path / "landing"))
    return subprocess.run([CLI, *args, "--no-progress"], env=env, capture_output=True, text=True)


def _prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}."


def _values(bootstrap: str, prefix: str) -> list:
    return consume_all(bootstrap, [prefix + t for t in TOPICS])


def test_olist_replay_sends_exactly_the_expected_events_twice_with_same_ids(
    kafka_bootstrap: str, olist_path: Path, tmp_path: Path
) -> None:
    prefix = _prefix()
    orders = pd.read_csv(olist_path / "olist_orders_dataset.csv", dtype=str)
    payments = pd.read_csv(olist_path / "olist_order_payments_dataset.csv", dtype=str)
    expected = Counter(
        {
            "order_placed": len(orders),
            "payment": len(payments),
            "order_canceled": int(orders.order_status.isin(["canceled", "unavailable"]).sum()),
        }
    )
    for _, mapping in replay_mappings("olist"):  # files contracts map: one event per row
        expected[mapping.event_type] += len(pd.read_csv(olist_path / mapping.file, dtype=str))
    first = _run(
        ["replay", "olist", str(olist_path), "--topic-prefix", prefix], kafka_bootstrap, tmp_path
    )
    assert first.returncode == 0, first.stderr
    records = _values(kafka_bootstrap, prefix)
    values = [json.loads(r.value) for r in records]
    assert Counter(v["event_type"] for v in values) == expected
    assert len({v["event_id"] for v in values}) == len(values)
    # Keys are entity ids: every payment (and review) of an order lands in its partition.
    assert all(r.key.decode() == json.loads(r.value)["order_id"] for r in records)
    dimension = pd.read_parquet(tmp_path / "landing" / "customers" / "olist.parquet")
    assert len(dimension) == len(pd.read_csv(olist_path / "olist_customers_dataset.csv"))

    second = _run(
        ["replay", "olist", str(olist_path), "--topic-prefix", prefix], kafka_bootstrap, tmp_path
    )
    assert second.returncode == 0, second.stderr
    ids = Counter(json.loads(r.value)["event_id"] for r in _values(kafka_bootstrap, prefix))
    assert set(ids.values()) == {2}  # every id re-sent once, none new
    assert len(ids) == sum(expected.values())


def _classify(value: bytes | None) -> str:
    """An independent reading of a record, the way a consumer would see it."""
    if not value:
        return "empty_value"
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid_utf8"
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return "malformed_json"
    if not isinstance(parsed, dict):
        return "not_an_object"
    if "-malformed-" in str(parsed.get("event_id")):
        return "other_malformed"
    return "event"


def test_fault_injection_counts_match_what_a_consumer_reads(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = _prefix()
    summary_path = tmp_path / "summary.json"
    args = [
        "generate",
        "--count",
        "3000",
        "--seed",
        "5",
        "--start",
        "2026-01-01T10:00:00",
        "--as-fast-as-possible",
        "--duplicate-rate",
        "0.04",
        "--late-rate",
        "0.03",
        "--out-of-order-rate",
        "0.03",
        "--malformed-rate",
        "0.09",
        "--drift-rate",
        "0.05",
        "--fault-seed",
        "9",
        "--topic-prefix",
        prefix,
        "--summary-json",
        str(summary_path),
    ]
    result = _run(args, kafka_bootstrap, tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(summary_path.read_text())
    records = _values(kafka_bootstrap, prefix)
    assert len(records) == summary["messages_acknowledged"] == summary["messages_attempted"]
    kinds = Counter(_classify(r.value) for r in records)
    malformed = summary["malformed"]
    for reason in ("empty_value", "invalid_utf8", "malformed_json", "not_an_object"):
        assert kinds[reason] == malformed[reason], reason
    assert kinds["other_malformed"] == sum(
        n
        for r, n in malformed.items()
        if r not in ("empty_value", "invalid_utf8", "malformed_json", "not_an_object")
    )
    events = [json.loads(r.value) for r in records if _classify(r.value) == "event"]
    ids = Counter(e["event_id"] for e in events)
    assert len(ids) == summary["source_events_total"]
    assert sum(n - 1 for n in ids.values()) == summary["duplicates"]
    assert sum("x_promo_code" in e for e in events) >= summary["drift_extra_field"]


def test_a_2mb_message_is_reported_rejected_not_lost(kafka_bootstrap: str, tmp_path: Path) -> None:
    prefix = _prefix()
    summary_path = tmp_path / "summary.json"
    args = [
        "generate",
        "--count",
        "200",
        "--as-fast-as-possible",
        "--oversize-count",
        "1",
        "--topic-prefix",
        prefix,
        "--summary-json",
        str(summary_path),
    ]
    result = _run(args, kafka_bootstrap, tmp_path)
    assert result.returncode == 1
    assert "1 messages were not acknowledged" in result.stderr
    summary = json.loads(summary_path.read_text())
    assert summary["failures_by_reason"] == {"MessageSizeTooLargeError": 1}
    assert summary["failed_by_kind"] == {"oversize": 1}
    assert len(_values(kafka_bootstrap, prefix)) == 200  # every normal message arrived

    allowed = _run([*args, "--allow-failures"], kafka_bootstrap, tmp_path)
    assert allowed.returncode == 0


def test_topic_with_other_partition_count_is_refused_unless_allowed(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = _prefix()
    ensure_topics(kafka_bootstrap, [f"{prefix}orders"], partitions=2, allow_partition_mismatch=True)
    args = ["generate", "--count", "10", "--as-fast-as-possible", "--topic-prefix", prefix]
    refused = _run(args, kafka_bootstrap, tmp_path)
    assert refused.returncode == 1
    assert f"{prefix}orders has 2" in refused.stderr
    assert _values(kafka_bootstrap, prefix) == []
    allowed = _run([*args, "--allow-partition-mismatch"], kafka_bootstrap, tmp_path)
    assert allowed.returncode == 0, allowed.stderr


def test_topic_colliding_with_an_existing_one_is_refused_and_nothing_is_created(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    from kafka import KafkaAdminClient

    stem = _prefix().rstrip(".")
    ensure_topics(kafka_bootstrap, [f"{stem}_orders"], partitions=3)
    # "<stem>.orders" differs from "<stem>_orders" only by "." against "_".
    args = ["generate", "--count", "10", "--as-fast-as-possible", "--topic-prefix", f"{stem}."]
    refused = _run(args, kafka_bootstrap, tmp_path)
    assert refused.returncode == 1
    assert f"'{stem}.orders' with existing '{stem}_orders'" in refused.stderr
    assert "Traceback" not in refused.stderr
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        assert not [t for t in admin.list_topics() if t.startswith(f"{stem}.")]
    finally:
        admin.close()


def test_shift_to_now_moves_the_first_event_to_the_present(
    kafka_bootstrap: str, uci_path: Path, tmp_path: Path
) -> None:
    prefix = _prefix()
    before = datetime.now(UTC)
    args = ["replay", "uci-retail", str(uci_path), "--shift-to-now", "--topic-prefix", prefix]
    assert _run(args, kafka_bootstrap, tmp_path).returncode == 0
    times = [
        datetime.fromisoformat(json.loads(r.value)["event_time"])
        for r in _values(kafka_bootstrap, prefix)
    ]
    assert before - timedelta(seconds=5) <= min(times) <= datetime.now(UTC)
    # Nine trading days stay nine days apart.
    assert max(times) - min(times) > timedelta(days=8)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["generate", "--speed", "5", "--as-fast-as-possible"], "exclude each other"),
        (["generate", "--late-delay", "soon"], "late delay 'soon'"),
        (["generate", "--duplicate-rate", "2"], "duplicate-rate"),
        (["generate", "--topic-prefix", "bad prefix!"], "topic prefix"),
        # 240 + len("customer_activity") > 249: refused before any topic is created.
        (["generate", "--topic-prefix", "p" * 240], "257 characters, Kafka allows at most 249"),
        (["replay", "olist", "/nonexistent"], "does not exist"),
    ],
)
def test_bad_parameters_are_refused_with_what_is_wrong(
    kafka_bootstrap: str, tmp_path: Path, args: list[str], message: str
) -> None:
    result = _run(
        [*args, "--count", "1"] if args[0] == "generate" else args, kafka_bootstrap, tmp_path
    )
    assert result.returncode != 0
    assert message in result.stderr


def test_broker_down_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    from tests.conftest import free_port

    dead = f"127.0.0.1:{free_port()}"
    result = _run(["generate", "--count", "5", "--as-fast-as-possible"], dead, tmp_path)
    assert result.returncode == 1
    assert f"Kafka at {dead} refused or did not answer" in result.stderr
    assert "Traceback" not in result.stderr


def test_topic_prefix_defaults_to_the_platform_setting(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Without --topic-prefix, events go to the topics the platform's jobs read
    (INGEST_KAFKA__TOPIC_PREFIX); an explicit --topic-prefix still wins."""
    env_prefix, flag_prefix = _prefix(), _prefix()
    env = cli_env(
        kafka_bootstrap,
        INGEST_KAFKA__TOPIC_PREFIX=env_prefix,
        INGEST_STORAGE__LANDING_DIR=str(tmp_path / "landing"),
    )
    args = [CLI, "generate", "--count", "7", "--as-fast-as-possible", "--no-progress"]
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(_values(kafka_bootstrap, env_prefix)) == 7
    done = subprocess.run(
        [*args, "--topic-prefix", flag_prefix], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert len(_values(kafka_bootstrap, flag_prefix)) == 7
    assert len(_values(kafka_bootstrap, env_prefix)) == 7


def test_unwritable_summary_path_is_refused_before_sending(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = _prefix()
    args = [
        "generate",
        "--count",
        "5",
        "--as-fast-as-possible",
        "--topic-prefix",
        prefix,
        "--summary-json",
        str(tmp_path),
    ]
    result = _run(args, kafka_bootstrap, tmp_path)
    assert result.returncode == 1
    assert "is a directory" in result.stderr
    assert _values(kafka_bootstrap, prefix) == []


def test_failed_replay_leaves_the_customers_dimension_alone(
    kafka_bootstrap: str, uci_path: Path, tmp_path: Path
) -> None:
    args = ["replay", "uci-retail", str(uci_path), "--topic-prefix", _prefix()]
    assert _run(args, kafka_bootstrap, tmp_path).returncode == 0
    dimension = tmp_path / "landing" / "customers" / "uci_retail.parquet"
    before = dimension.read_bytes()
    refused = _run(
        [
            *args[:2],
            str(uci_path / "2010-12-01.csv"),
            "--oversize-count",
            "1",
            "--topic-prefix",
            _prefix(),
        ],
        kafka_bootstrap,
        tmp_path,
    )
    assert refused.returncode == 1
    assert dimension.read_bytes() == before


def _expected_customers(files: list[Path]) -> dict[str, str]:
    """Independent computation of the customers dimension after replaying ``files`` one at a
    time: per file, each customer's first country (the replay's rule), the id mapped with
    the replay's own ``customer_id`` ("17850.0" -> "17850", empty -> none); across files,
    the file replayed last wins."""
    from ingestctl.replay.uci_retail import customer_id

    frames = []
    for file in files:
        lines = pd.read_csv(file, dtype=str, keep_default_na=False)
        lines = lines.assign(customer_id=lines.CustomerID.map(customer_id))
        frames.append(lines[lines.customer_id.notna()].drop_duplicates("customer_id"))
    latest = pd.concat(frames).drop_duplicates("customer_id", keep="last")
    return dict(zip(latest.customer_id, latest.Country, strict=True))


def test_replaying_day_files_one_at_a_time_keeps_every_customer(
    platform: Platform, uci_path: Path, tmp_path: Path
) -> None:
    """Issue 15 case 5: each replay upserts its customers into the landing file, so Silver
    ends with every customer any replay saw, with the latest replay's values, and every
    order with a customer gets a country. A replay whose broker failures were accepted
    with --allow-failures lands its customers too."""
    days = [uci_path / f"2010-12-0{d}.csv" for d in (1, 2, 3)]
    moved = tmp_path / "2010-12-04-moved.csv"  # a customer of 12-01 moves to France
    moved.write_text(
        "InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country\n"
        "T900001,85123A,TEST,1,2010-12-04 10:00:00,2.55,17850.0,France\n"
    )
    env = cli_env(platform.bootstrap)  # the platform's INGEST_HOME and topic prefix
    for file in [*days, moved]:
        args = [CLI, "replay", "uci-retail", str(file), "--no-progress"]
        if file == days[1]:
            args += ["--oversize-count", "1", "--allow-failures"]  # 1 message refused
        done = subprocess.run(args, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "customers dimension" in done.stdout
    platform.bronze()
    platform.silver()

    expected = _expected_customers([*days, moved])
    assert len(expected) == 255  # 98 + 117 + 55 per day, fewer with repeat customers
    assert expected["17850"] == "France"
    customers = platform.read("silver_customers")
    assert dict(zip(customers.customer_id, customers.country, strict=True)) == expected
    orders = platform.read("silver_orders")
    with_customer = orders[orders.customer_id.notna()]
    assert len(with_customer) > 0
    assert with_customer.customer_country.isna().sum() == 0
    assert set(with_customer.customer_id) <= set(expected)
