"""The platform's own Kafka broker: start, idempotence, refusal of foreign ports, clean stop."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ingest_core.settings import get_settings
from ingestctl.kafka_broker import BrokerError, BrokerStartError, KafkaBroker, PortInUseError
from tests.conftest import free_port

pytestmark = pytest.mark.integration


def _broker(tmp_path: Path) -> KafkaBroker:
    settings = get_settings().kafka.model_copy(
        update={"port": free_port(), "controller_port": free_port(), "data_dir": tmp_path / "k"}
    )
    return KafkaBroker(settings)


def test_up_is_idempotent_and_down_stops_it(tmp_path: Path) -> None:
    from kafka import KafkaAdminClient

    broker = _broker(tmp_path)
    first = broker.up()
    try:
        assert first.running
        assert not first.already_running
        assert (broker.storage_dir / "meta.properties").exists()  # formatted on first start
        admin = KafkaAdminClient(bootstrap_servers=first.bootstrap_servers)
        assert admin.describe_cluster()["brokers"][0]["port"] == broker.settings.port
        admin.close()
        second = broker.up()
        assert second.already_running
        assert second.pid == first.pid
    finally:
        assert broker.down() is True
    assert not psutil.pid_exists(first.pid) or psutil.Process(first.pid).status() == "zombie"
    assert broker.status().running is False
    assert broker.down() is False


def test_clean_is_refused_while_the_broker_runs_then_deletes_its_data(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    broker.up()
    try:
        with pytest.raises(BrokerError, match=r"is running \(pid \d+\): stop it first"):
            broker.clean()
        assert (broker.storage_dir / "meta.properties").exists()
    finally:
        broker.down()
    assert broker.clean() is True
    assert not broker.data_dir.exists()
    assert broker.clean() is False


def test_restart_reuses_formatted_storage(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    broker.up()
    meta = (broker.storage_dir / "meta.properties").read_text()
    broker.down()
    broker.up()
    try:
        assert (broker.storage_dir / "meta.properties").read_text() == meta
    finally:
        broker.down()


def test_port_held_by_another_process_is_refused_naming_the_port(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", broker.settings.port))
        squatter.listen()
        with pytest.raises(PortInUseError, match=f"port {broker.settings.port} on 127.0.0.1"):
            broker.up()
    assert not broker.pid_path.exists()


def test_down_never_stops_a_process_it_did_not_start(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    broker.data_dir.mkdir(parents=True)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        broker.pid_path.write_text(f"{stranger.pid}\n")  # e.g. a pid reused after a crash
        assert broker.status().running is False
        assert broker.down() is False
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_failed_start_exits_nonzero_with_the_broker_log(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    broker.up()
    broker.down()
    meta = broker.storage_dir / "meta.properties"
    meta.write_text(meta.read_text().replace("node.id=1", "node.id=7"))  # a damaged store
    with pytest.raises(BrokerStartError, match=r"exited during start-up with status [1-9]"):
        broker.up()
    env = os.environ | {
        "INGEST_KAFKA__PORT": str(broker.settings.port),
        "INGEST_KAFKA__CONTROLLER_PORT": str(broker.settings.controller_port),
        "INGEST_KAFKA__DATA_DIR": str(broker.data_dir),
    }
    cli = Path(sys.executable).parent / "ingestctl"
    result = subprocess.run([str(cli), "kafka", "up"], env=env, capture_output=True, text=True)
    assert result.returncode == 1
    assert "server.log" in result.stderr
    assert "Stored node id 7" in result.stderr  # the cause, not just a stack trace
    assert broker.status().running is False


def test_cluster_id_starting_with_a_dash_still_formats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """About one random cluster id in 64 starts with '-' (a past bug: the formatter took it
    for an option and the first start failed)."""
    import base64
    import uuid

    import ingestctl.kafka_broker as module

    dash_id = uuid.UUID(bytes=base64.urlsafe_b64decode("-AAAAAAAAAAAAAAAAAAAAA=="))
    monkeypatch.setattr(module.uuid, "uuid4", lambda: dash_id)
    broker = _broker(tmp_path)
    broker.up()
    try:
        assert (
            "cluster.id=-AAAAAAAAAAAAAAAAAAAAA"
            in (broker.storage_dir / "meta.properties").read_text()
        )
    finally:
        broker.down()


def test_status_reports_the_running_port_and_up_refuses_another(tmp_path: Path) -> None:
    from ingestctl.kafka_broker import PortMismatchError

    broker = _broker(tmp_path)
    broker.up()
    try:
        moved = KafkaBroker(broker.settings.model_copy(update={"port": free_port()}))
        status = moved.status()
        assert status.running
        assert status.bootstrap_servers == broker.settings.bootstrap_servers
        with pytest.raises(PortMismatchError, match="stop it first"):
            moved.up()
    finally:
        broker.down()


def test_down_on_a_fresh_folder_says_not_running(tmp_path: Path) -> None:
    env = os.environ | {"INGEST_KAFKA__DATA_DIR": str(tmp_path / "never-started")}
    cli = Path(sys.executable).parent / "ingestctl"
    result = subprocess.run([str(cli), "kafka", "down"], env=env, capture_output=True, text=True)
    assert result.returncode == 0
    assert "was not running" in result.stdout
