"""The ``local-cluster`` profile under the faults a cluster adds (issue 54): three replicated
KRaft brokers and a Spark standalone master with two workers, all started by the platform's
own ``start_engines`` on ports of this test's own.

The always-on Bronze runs on the Spark cluster (its executor on a worker) while the soak's
stream (``acks=all``, the demo's data faults) writes; mid-stream one broker (a partition
leader) and the worker running Bronze's executor are killed with ``kill -9`` and started
again 10 s later. Then a medallion cycle (Silver, Gold, late corrections) runs on the cluster,
and the worker running its executor is killed mid-cycle. The verdict is the soak's own, an
independent pandas computation over what the stream logged and Kafka holds: every
acknowledged record in Bronze exactly once, Silver and Gold equal to the computation.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_core.contracts import TOPICS
from ingest_core.settings import PlatformSettings, get_settings
from ingest_core.topics import ensure_topics
from ingest_core.waiting import wait_until
from ingest_platform import supervisor
from ingestctl.demo import start_engines
from ingestctl.kafka_broker import KafkaBroker, free_port_block
from ingestctl.soak.faults import partition_leader
from ingestctl.soak.stream import SoakStream, read_log
from ingestctl.soak.verdict import judge_data, read_table
from ingestctl.spark_cluster import SparkStandalone, app_id_of
from tests.conftest import free_port
from tests.integration.medallion import bronze_driver

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

#: One medallion cycle in one driver on the cluster: what medallion_incremental's Spark tasks
#: run (refine_silver, aggregate_gold, correct_late), without Airflow.
MEDALLION_CYCLE = """
from spark_jobs import silver_refine
from spark_jobs.gold import gold_aggregate, late_corrections
from spark_jobs.session import build_spark_session
from spark_jobs.triggers import TriggerSpec

spark = build_spark_session("medallion_cycle")
silver_refine.run(spark, trigger=TriggerSpec("available-now"))
gold_aggregate.run(spark, trigger=TriggerSpec("available-now"))
late_corrections.correct(spark)
"""


@pytest.fixture
def local_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PlatformSettings]:
    """The ``local-cluster`` profile in ``tmp_path``: its brokers and Spark cluster started,
    the contract topics created (replication factor 3, ``min.insync.replicas`` 2)."""
    kafka = free_port_block(6)
    environment = {
        "INGEST_PROFILE": "local-cluster",
        "INGEST_HOME": str(tmp_path / "home"),
        "INGEST_KAFKA__PORT": str(kafka),
        "INGEST_KAFKA__CONTROLLER_PORT": str(kafka + 3),
        "INGEST_KAFKA__HEAP": "256m",
        "INGEST_SPARK__MASTER": f"spark://127.0.0.1:{free_port()}",
        "INGEST_SPARK_CLUSTER__MASTER_UI_PORT": str(free_port()),
        "INGEST_SPARK_CLUSTER__WORKER_UI_PORT": str(free_port_block(2)),
        "INGEST_SPARK_CLUSTER__WORKER_CORES": "2",
        "INGEST_SPARK_CLUSTER__WORKER_MEMORY": "2g",
    }
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    settings = get_settings()
    try:
        start_engines(settings)
        ensure_topics(
            settings.kafka.bootstrap_servers,
            [settings.kafka.topic(t) for t in TOPICS],
            kafka=settings.kafka,
        )
        yield settings
    finally:
        if supervisor.driver_pid("bronze_ingest") is not None:
            supervisor.stop("bronze_ingest")
        SparkStandalone(settings).down(grace_s=10)
        KafkaBroker(settings.kafka).down(timeout_s=10)


def _worker_running(cluster: SparkStandalone, app_name: str) -> int | None:
    """The worker (0-based) whose executor serves the active application ``app_name``."""
    ids = {a["id"] for a in cluster.state().get("activeapps", []) if a.get("name") == app_name}
    for worker in range(2):
        if any(app_id_of(executor) in ids for executor in cluster.executors(worker)):
            return worker
    return None


def _kill_and_restart(settings: PlatformSettings, worker: int, pause_s: float) -> int:
    """kill -9 Spark worker ``worker``; start it again ``pause_s`` later; its old pid."""
    node = SparkStandalone(settings, worker=worker)
    pid = node.pid(f"worker-{worker}")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    time.sleep(pause_s)
    node.up()
    return pid


def test_bronze_and_a_medallion_cycle_lose_nothing_when_a_broker_and_a_worker_die(
    local_cluster: PlatformSettings, tmp_path: Path
) -> None:
    settings = local_cluster
    cluster = SparkStandalone(settings)
    assert cluster.status().alive_workers == 2
    assert supervisor.start("bronze_ingest", bronze_driver(), wait_s=240) is not None
    wait_until(
        lambda: _worker_running(cluster, "bronze_ingest") is not None,
        180,
        1,
        what="Bronze's executor on a worker",
    )

    log = tmp_path / "sent.jsonl"
    stream = SoakStream(
        bootstrap=settings.kafka.bootstrap_servers,
        prefix=settings.kafka.topic_prefix,
        log_path=log,
        rate=20,
        speed=60,  # an hour of event time in a minute: Gold's windows close
        duration_s=60,
        seed=54,
    )
    stream.start()
    time.sleep(20)
    # Mid-stream, mid-batch (a batch a second): a partition leader and Bronze's worker.
    leader = partition_leader(settings.kafka)
    assert leader is not None
    broker = KafkaBroker(settings.kafka, node=leader)
    broker_pid = broker.status().pid
    assert broker_pid is not None
    os.kill(broker_pid, signal.SIGKILL)
    bronze_worker = _worker_running(cluster, "bronze_ingest")
    assert bronze_worker is not None
    _kill_and_restart(settings, bronze_worker, pause_s=10)
    broker.up()
    stream.join(timeout=180)
    assert stream.stats.finished, stream.stats
    assert stream.stats.error is None, stream.stats
    sent = read_log(log)
    # acks=all with one broker of three down: every record sent is acknowledged (the
    # stream's minute ends earlier than its 1,200 events while the producer waits a leader).
    assert stream.stats.failed == 0, stream.stats
    assert len(sent.acknowledged) == stream.stats.sent > 500, stream.stats

    # Bronze catches up on the cluster: the master gave it an executor again.
    wait_until(
        lambda: len(read_table(settings, "bronze_events")) >= len(sent.acknowledged),
        300,
        2,
        what="Bronze to hold every acknowledged record",
    )
    supervisor.stop("bronze_ingest")
    assert supervisor.driver_pid("bronze_ingest") is None
    assert cluster.status().alive_workers == 2

    # A medallion cycle on the cluster; the worker running its executor dies mid-cycle.
    cycle = subprocess.Popen([sys.executable, "-c", MEDALLION_CYCLE], env=os.environ.copy())
    try:
        wait_until(
            lambda: _worker_running(cluster, "medallion_cycle") is not None,
            180,
            0.5,
            what="the medallion cycle's executor on a worker",
        )
        time.sleep(5)
        worker = _worker_running(cluster, "medallion_cycle")
        assert worker is not None, "the cycle ended before its worker could be killed"
        _kill_and_restart(settings, worker, pause_s=5)
        assert cycle.wait(timeout=900) == 0
    finally:
        if cycle.poll() is None:
            cycle.kill()
    apps = {a["name"] for a in cluster.applications()}
    assert {"bronze_ingest", "medallion_cycle"} <= apps

    verdict = judge_data(settings, sent)
    checks = [c for c in verdict.checks if not c.name.startswith("alerts")]  # no alert job
    failed = [c for c in checks if not c.ok]
    assert not failed, "\n".join(f"{c.name}: {c.failures} ({c.examples})" for c in failed)
    checked = {c.name: c.checked for c in checks}
    assert checked["bronze: every acknowledged record is in Kafka and in Bronze"] == len(
        sent.acknowledged
    )
    # Not vacuous: Gold's closed windows were compared row by row.
    assert checked["gold: gold_payment_totals_5m equals pandas"] > 0
    assert checked["gold: gold_customer_sessions equals pandas"] > 0
    # An ended application's executors exit within seconds of it (the worker kills them).
    assert cluster.stray_executors(grace_s=60) == []
