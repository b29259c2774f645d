"""The real-time alert path on the real broker: payment_alerts_rt in Spark's real-time mode,
killed with SIGKILL in the middle of its first batch and restarted, then the alerts topic
landed in gold_payment_alerts by payment_alerts' landing query.

Expected alerts are computed here with pandas from the payments the test sent (valid JSON,
amount above the threshold, one alert per distinct event_id, id = SHA-256 of
``amount_above_threshold|<event_id>``), never by the code under test.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ingest_core.checkpoints import backup
from ingest_core.runtime_files import read_json, runtime_files
from ingest_core.settings import get_settings
from ingest_core.waiting import wait_until
from spark_jobs import payment_alerts
from tests.conftest import consume_all
from tests.integration.medallion import AVAILABLE_NOW, Platform, payment

pytestmark = pytest.mark.integration

THRESHOLD = 1000.0
PROJECT = Path(__file__).resolve().parents[2]


def _start_driver(log: Path) -> subprocess.Popen:
    """The real-time driver in a session of its own (a 30 s batch: the kill lands in the
    first one)."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "spark_jobs.payment_alerts_rt", "--trigger", "real-time=30s"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=PROJECT,
        )


def _alert_keys(platform: Platform) -> list[str]:
    records = consume_all(platform.bootstrap, [platform.prefix + "payment_alerts"])
    return [record.key.decode() for record in records]


def _batch(start: int, count: int) -> list[dict]:
    """Payments ``p<start>``..: every third above the threshold, one per customer (no
    velocity alert)."""
    return [
        payment(
            f"p{i}", "2026-01-01T10:00:00Z", 2500.0 if i % 3 == 0 else 10.0, customer_id=f"c{i}"
        )
        for i in range(start, start + count)
    ]


@pytest.mark.slow
@pytest.mark.faults
def test_no_alert_lost_or_duplicated_across_a_kill_9_of_the_real_time_driver(
    platform: Platform, monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("INGEST_ALERTS__AMOUNT_THRESHOLD", str(THRESHOLD))
    get_settings.cache_clear()
    log = tmp_path / "driver.log"
    sent: list[dict] = []

    def send(values: list[dict], extra: list = ()) -> None:
        sent.extend(values)
        platform.send("payments", [*values, *extra])

    driver = _start_driver(log)
    try:
        # A first lot, a retried payment and a record Silver would quarantine.
        send(
            _batch(0, 30),
            extra=[payment("p3", "2026-01-01T10:00:00Z", 2500.0, customer_id="c3"), b"{broken"],
        )
        wait_until(
            lambda: len(set(_alert_keys(platform))) >= 10,
            240,
            1.0,
            what="the real-time driver's first alerts",
        )
        os.killpg(driver.pid, signal.SIGKILL)  # mid-batch: nothing of batch 0 is committed
        driver.wait(30)
        send(_batch(30, 30))  # while it is down
        driver = _start_driver(log)
        send(_batch(60, 30))
        expected_ids = _expected(sent)
        wait_until(
            lambda: set(_alert_keys(platform)) >= expected_ids,
            240,
            1.0,
            what="every alert on the topic after the restart",
        )
        beat = read_json(runtime_files("payment_alerts_rt").heartbeat)
        assert beat["status"] == "running"
        wait_until(
            _committed_batch,
            120,
            1.0,
            what="the restarted driver to commit a real-time batch",
        )
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGTERM)
            driver.wait(60)

    # Its checkpoint backs up like any always-on job's (a Kafka sink: no sink table version).
    info = backup("payment_alerts_rt")
    assert info.manifest["queries"][""]["sink_table"] is None
    assert info.manifest["queries"][""]["last_committed_batch"] >= 0
    keys = _alert_keys(platform)
    # Kafka is at-least-once: the killed batch was replayed, so its alerts went out twice.
    assert len(keys) > len(set(keys)), "the kill did not interrupt an uncommitted batch"
    assert set(keys) == expected_ids
    for query in payment_alerts.start(platform.spark, trigger=AVAILABLE_NOW):
        query.awaitTermination()
    table = platform.read("gold_payment_alerts")
    assert sorted(table.alert_id) == sorted(expected_ids)  # each alert exactly once
    assert set(table.rule) == {"amount_above_threshold"}
    assert set(table.event_id) == {p["event_id"] for p in sent if p["amount"] > THRESHOLD}
    # A second landing run over the same topic adds nothing.
    for query in payment_alerts.start(platform.spark, trigger=AVAILABLE_NOW):
        query.awaitTermination()
    assert sorted(platform.read("gold_payment_alerts").alert_id) == sorted(expected_ids)


def _committed_batch() -> bool:
    beat = read_json(runtime_files("payment_alerts_rt").heartbeat) or {}
    return any("last_progress" in q for q in (beat.get("queries") or {}).values())


def _expected(sent: list[dict]) -> set[str]:
    """Alert ids of the payments above the threshold, computed with pandas."""
    frame = pd.DataFrame(sent).drop_duplicates("event_id")
    above = frame[frame.amount > THRESHOLD]
    return {
        hashlib.sha256(f"amount_above_threshold|{e}".encode()).hexdigest()[:32]
        for e in above.event_id
    }


def test_the_driver_refuses_too_few_task_slots_with_one_line_and_a_failed_heartbeat(
    platform: Platform, monkeypatch, tmp_path: Path
) -> None:
    """An explicit local[1] against the 3-partition payments topic: refused before the query
    starts (exit 1, the numbers on stderr), not a query whose partitions wait for a slot."""
    monkeypatch.setenv("INGEST_SPARK__MASTER", "local[1]")
    result = subprocess.run(
        [sys.executable, "-m", "spark_jobs.payment_alerts_rt", "--trigger", "real-time=30s"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert (
        "payment_alerts_rt: real-time mode refused: it needs 3 task slots "
        f"(one per Kafka partition; {platform.prefix}payments: 3) but the Spark master "
        "local[1] offers 1"
    ) in result.stderr
    beat = read_json(runtime_files("payment_alerts_rt").heartbeat)
    assert beat["status"] == "failed"
    assert "needs 3 task slots" in json.dumps(beat)


def test_restoring_an_older_real_time_checkpoint_re_sends_and_lands_every_alert_once(
    platform: Platform, monkeypatch
) -> None:
    """The real-time job's live checkpoint is lost and its backup from after the first lot
    restored: the query re-plans the second lot and sends its alerts again (Kafka keeps
    them twice); gold_payment_alerts still holds every alert exactly once."""
    import shutil

    from ingest_core.catalog import get_catalog
    from ingest_core.recovery import restore
    from spark_jobs import payment_alerts_rt

    monkeypatch.setenv("INGEST_ALERTS__AMOUNT_THRESHOLD", str(THRESHOLD))
    get_settings.cache_clear()

    def run_both() -> None:
        payment_alerts_rt.start(platform.spark, trigger=AVAILABLE_NOW).awaitTermination()
        for query in payment_alerts.start(platform.spark, trigger=AVAILABLE_NOW):
            query.awaitTermination()

    first, second = _batch(0, 30), _batch(30, 30)
    platform.send("payments", first)
    run_both()
    backup_id = backup("payment_alerts_rt").backup_id
    platform.send("payments", second)
    run_both()
    sent_before = _alert_keys(platform)
    shutil.rmtree(get_catalog().job("payment_alerts_rt").checkpoint())
    restore("payment_alerts_rt", backup_id)
    run_both()  # the real-time query resumes after the first lot
    keys = _alert_keys(platform)
    resent = len(keys) - len(sent_before)
    assert resent == len(_expected(second))  # the second lot's alerts went out again
    expected_ids = _expected(first + second)
    assert set(keys) == expected_ids
    table = platform.read("gold_payment_alerts")
    assert sorted(table.alert_id) == sorted(expected_ids)
