"""Always-on jobs on the real broker: payment alerts (rules, deterministic ids, Kafka and
Delta, no duplicates on rerun) and the heartbeat/graceful-stop runtime."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from ingest_core.runtime_files import read_json, runtime_files
from ingest_core.settings import get_settings
from ingest_core.waiting import wait_until
from ingest_platform import supervisor
from spark_jobs import bronze_ingest, payment_alerts, payment_alerts_rt
from spark_jobs.streaming_runtime import run_supervised
from spark_jobs.triggers import TriggerSpec
from tests.conftest import consume_all
from tests.integration.medallion import AVAILABLE_NOW, Platform, bronze_driver, payment

pytestmark = pytest.mark.integration


def _alerts_run(platform: Platform) -> None:
    """Both alert jobs on AvailableNow: the stateless rules (the real-time job's query), then
    the velocity rule and the landing of the alerts topic."""
    payment_alerts_rt.start(platform.spark, trigger=AVAILABLE_NOW).awaitTermination()
    for query in payment_alerts.start(platform.spark, trigger=AVAILABLE_NOW):
        query.awaitTermination()


def test_payment_alerts_rules_ids_and_no_duplicates(platform: Platform, monkeypatch) -> None:
    monkeypatch.setenv("INGEST_ALERTS__AMOUNT_THRESHOLD", "1000")
    monkeypatch.setenv("INGEST_ALERTS__MAX_PAYMENTS_PER_WINDOW", "3")
    get_settings.cache_clear()
    burst = [
        payment(f"a{i}", f"2026-01-01T10:0{i}:10Z", 5.0, customer_id="fast") for i in range(4)
    ]  # 4 payments in 10:00-10:05 > 3
    calm = [payment(f"b{i}", f"2026-01-01T10:0{i}:20Z", 5.0, customer_id="calm") for i in range(3)]
    whale = [payment("big", "2026-01-01T10:02:00Z", 2500.0, customer_id="whale")]
    late_flood = [
        payment(f"c{i}", "2026-01-01T11:00:00Z", 5.0, customer_id="fast") for i in range(2)
    ]
    # One payment re-sent six times (producer retries) is one payment, not a burst.
    retried = [payment("dup", "2026-01-01T10:01:00Z", 5.0, customer_id="retry")] * 6
    platform.send("payments", burst + calm + whale + late_flood + retried + [b"not json"])
    _alerts_run(platform)
    table = platform.read("gold_payment_alerts")
    by_rule = {rule: sorted(group.customer_id) for rule, group in table.groupby("rule")}
    assert by_rule == {"amount_above_threshold": ["whale"], "payment_velocity": ["fast"]}
    velocity = table[table.rule == "payment_velocity"].iloc[0]
    assert velocity.payment_count == 4
    assert table[table.rule == "amount_above_threshold"].iloc[0].event_id == "big"
    # Rerun on the same data and more of the same burst window: nothing new.
    platform.send("payments", [payment("a9", "2026-01-01T10:04:00Z", 5.0, customer_id="fast")])
    _alerts_run(platform)
    again = platform.read("gold_payment_alerts")
    assert sorted(again.alert_id) == sorted(table.alert_id)
    sent = consume_all(platform.bootstrap, [platform.prefix + "payment_alerts"])
    keys = {record.key.decode() for record in sent}
    assert keys == set(table.alert_id)
    assert {json.loads(record.value)["rule"] for record in sent} == set(by_rule)


def _supervised_bronze(platform: Platform) -> tuple[threading.Thread, dict[str, object]]:
    """bronze_ingest on a 1 s trigger under :func:`run_supervised`, in a thread of this
    process (stop it with its stop request); the dict gets ``rc`` when it returns."""
    trigger = TriggerSpec("processing-time", "1 second")
    outcome: dict[str, object] = {}

    def run() -> None:
        start = lambda: [bronze_ingest.start(platform.spark, trigger=trigger)]  # noqa: E731
        try:
            outcome["rc"] = run_supervised(platform.spark, "bronze_ingest", start, poll_s=0.5)
        except Exception as error:
            outcome["error"] = error
            raise

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _running(thread: threading.Thread, outcome: dict[str, object]) -> None:
    """Fail at once, with why, when the supervised driver of :func:`_supervised_bronze` has
    ended (instead of waiting out a timeout for what will never come)."""
    if not thread.is_alive():
        raise AssertionError(f"the supervised bronze_ingest ended: {outcome}")


def _a_failed_query(spark: Any) -> None:
    """A query of the same session that failed before the job started (an earlier test's,
    a notebook's)."""
    from pyspark.errors import StreamingQueryException

    def fail(batch: Any, batch_id: int) -> None:
        raise ValueError("an earlier query's failure")

    query = spark.readStream.format("rate").load().writeStream.foreachBatch(fail).start()
    with pytest.raises(StreamingQueryException, match="an earlier query's failure"):
        query.awaitTermination()


def test_heartbeat_and_graceful_stop(platform: Platform) -> None:
    """The supervised driver beats, stops on request, and ignores a query of its session
    that failed before it started (found in CI: ``awaitAnyTermination`` re-raised such a
    failure, the job died at once and left its own query running unsupervised)."""
    platform.send("payments", [payment("h1", "2026-01-01T10:00:00Z")])
    files = runtime_files("bronze_ingest")
    _a_failed_query(platform.spark)
    thread, outcome = _supervised_bronze(platform)

    def first_batch() -> dict | None:
        _running(thread, outcome)
        beat = read_json(files.heartbeat)
        progress = (beat or {}).get("queries", {}).get("bronze_ingest", {}).get("last_progress")
        return beat if progress and progress["input_rows"] >= 1 else None

    beat = wait_until(first_batch, 120, 0.5, what="a first batch in the heartbeat")
    assert beat["status"] == "running"
    progress = beat["queries"]["bronze_ingest"]["last_progress"]
    assert progress["batch_id"] >= 0
    assert progress["end_offsets"]
    first = beat["updated_at_epoch_s"]
    # Idle triggers keep the heartbeat fresh (Spark posts an idle event at most every
    # spark.sql.streaming.noDataProgressEventInterval, 10 s by default).
    wait_until(
        lambda: read_json(files.heartbeat)["updated_at_epoch_s"] != first,
        30,
        0.5,
        what="a heartbeat while idle",
    )
    assert read_json(files.heartbeat)["queries"]["bronze_ingest"]["status"] in ("idle", "active")
    files.stop_request.touch()
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert outcome["rc"] == 0
    assert read_json(files.heartbeat)["status"] == "stopped"
    assert not files.stop_request.exists()
    bronze = platform.read("bronze_events")
    assert list(bronze.value.map(lambda v: json.loads(v)["event_id"])) == ["h1"]


def test_sigterm_stops_an_always_on_driver_and_its_heartbeat_says_stopped(
    platform: Platform,
) -> None:
    """``kill <pid>`` (SIGTERM) is a stop request: the driver stops its query, releases the
    checkpoint lock, exits, and its heartbeat ends ``stopped`` instead of ``running``."""
    platform.send("payments", [payment("term1", "2026-01-01T11:00:00Z")])
    files = runtime_files("bronze_ingest")
    command = bronze_driver()
    pid = supervisor.start("bronze_ingest", command, wait_s=180)
    try:

        def read_its_event() -> bool:
            beat = read_json(files.heartbeat) or {}
            progress = beat.get("queries", {}).get("bronze_ingest", {}).get("last_progress")
            return bool(beat.get("pid") == pid and progress and progress["input_rows"] >= 1)

        wait_until(read_its_event, 180, 0.5, what="the driver's first batch")
        assert read_json(files.heartbeat)["status"] == "running"
        os.kill(pid, signal.SIGTERM)
        wait_until(
            lambda: supervisor.driver_pid("bronze_ingest") is None,
            90,
            0.5,
            what="the driver to exit after SIGTERM",
        )
    finally:
        if supervisor.driver_pid("bronze_ingest") is not None:
            supervisor.stop("bronze_ingest")
    beat = read_json(files.heartbeat)
    assert beat["pid"] == pid
    assert beat["status"] == "stopped"
    assert beat["queries"]["bronze_ingest"]["status"] == "terminated"
    assert beat["queries"]["bronze_ingest"]["exception"] is None
    ids = list(platform.read("bronze_events").value.map(lambda v: json.loads(v)["event_id"]))
    assert ids.count("term1") == 1


def test_payment_alerts_with_the_broker_down_is_one_line_and_a_failed_heartbeat(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.conftest import free_port

    dead = free_port()
    monkeypatch.setenv("INGEST_KAFKA__PORT", str(dead))
    get_settings.cache_clear()
    try:
        code = payment_alerts.main(["--trigger", "available-now"])
        err = capsys.readouterr().err
        beat = read_json(runtime_files("payment_alerts").heartbeat)
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert code == 1
    assert f"payment_alerts: Kafka at 127.0.0.1:{dead} refused or did not answer" in err
    assert "Traceback" not in err
    assert beat is not None
    assert beat["status"] == "failed"


def test_sigterm_while_a_driver_is_still_starting_stops_it_at_once(platform: Platform) -> None:
    """A driver blocked before its queries run (here: kafka-python waiting for a broker that
    is down) stops on SIGTERM at once (exit 143) and its heartbeat ends ``stopped``: the
    supervisor's 20 s grace would otherwise end in SIGKILL and a heartbeat left ``running``."""
    from tests.conftest import cli_env, free_port

    files = runtime_files("payment_alerts")
    env = cli_env(f"127.0.0.1:{free_port()}")  # nothing listens there
    driver = subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.payment_alerts"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def heartbeat_written() -> bool:
            assert driver.poll() is None, driver.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            return (read_json(files.heartbeat) or {}).get("pid") == driver.pid

        wait_until(heartbeat_written, 120, 0.2, what="the driver's heartbeat")
        assert read_json(files.heartbeat)["status"] == "running"
        time.sleep(1)  # inside ensure_topics, waiting for the broker (30 s before giving up)
        sent = time.monotonic()
        driver.send_signal(signal.SIGTERM)
        code = driver.wait(timeout=60)
        waited = time.monotonic() - sent
    finally:
        if driver.poll() is None:
            driver.kill()
    assert code == 143
    assert waited < 15, f"exited {waited:.0f} s after SIGTERM"
    assert read_json(files.heartbeat)["status"] == "stopped"


def _group_lag(platform: Platform) -> dict[tuple[str, int], int | None]:
    """``kafka-consumer-groups --describe`` of bronze_ingest's group, run by Kafka's own
    ConsumerGroupCommand from the broker's jars: ``(topic, partition) -> lag`` (None for a
    partition without a committed offset); {} while the group does not exist."""
    from ingest_core.consumer_groups import consumer_group
    from ingestctl.kafka_broker import KafkaBroker

    group = consumer_group("bronze_ingest")
    done = KafkaBroker(get_settings().kafka).consumer_groups("--describe", "--group", group)
    lags: dict[tuple[str, int], int | None] = {}
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[0] == group:
            lags[(fields[1], int(fields[2]))] = None if fields[5] == "-" else int(fields[5])
    return lags


def test_kafka_tools_show_the_lag_the_checkpoint_has(platform: Platform) -> None:
    """After every batch the driver commits the offsets its checkpoint committed to the
    consumer group ``<prefix>bronze_ingest``: Kafka's ConsumerGroupCommand then shows lag 0
    once the job drained its topics, and the records sent while it is stopped as lag, on
    the partitions they went to. The Streaming page's lag (checkpoint against the broker's
    end offsets) says the same."""
    from ingest_platform.streaming_status import kafka_lag

    platform.send("payments", [payment(f"g{i}", "2026-01-01T10:00:00Z") for i in range(5)])
    thread, outcome = _supervised_bronze(platform)
    topics = {platform.prefix + t for t in ("orders", "payments", "refunds", "customer_activity")}

    def drained() -> dict | None:
        _running(thread, outcome)
        lags = _group_lag(platform)
        mine = {k: v for k, v in lags.items() if k[0] in topics}
        return mine if len(mine) == 12 and all(v == 0 for v in mine.values()) else None

    try:
        wait_until(drained, 180, 2, what="lag 0 in the job's consumer group")
    finally:
        runtime_files("bronze_ingest").stop_request.touch()
        thread.join(timeout=120)
    assert outcome["rc"] == 0
    later = [payment(f"h{i}", "2026-01-01T10:00:00Z") for i in range(4)]
    platform.send("payments", later, key="one-key")  # one key: one partition
    lags = _group_lag(platform)
    behind = {k: v for k, v in lags.items() if v}
    assert list(behind.values()) == [4], lags
    ((topic, partition),) = behind
    assert topic == platform.prefix + "payments"
    page = kafka_lag(get_settings(), time.time())
    rows = [r for r in page["partitions"] if r["job"] == "bronze_ingest" and r["lag"]]
    assert [(r["topic"], r["partition"], r["lag"]) for r in rows] == [(topic, partition, 4)]
    (total,) = [j["total"] for j in page["jobs"] if j["job"] == "bronze_ingest"]
    assert total == 4
