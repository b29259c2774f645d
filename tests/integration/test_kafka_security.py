"""Kafka security from configuration, end to end: a real broker that demands SASL
(SASL_PLAINTEXT, PLAIN, user names and passwords in its own JAAS configuration), and the
platform configured only through ``INGEST_KAFKA__*`` environment variables. The replay tool
produces through it, Spark's Kafka source reads it (bronze_ingest), and Spark's Kafka sink
writes to it (payment_alerts_rt, payment_alerts); the same client settings with a wrong
password are refused."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pydantic import SecretStr

from ingest_core.catalog import get_catalog
from ingest_core.settings import KafkaSettings, get_settings
from ingestctl.kafka_broker import KafkaBroker
from ingestctl.producer import Message, produce
from spark_jobs import bronze_ingest, payment_alerts, payment_alerts_rt
from spark_jobs.triggers import TriggerSpec
from tests.conftest import free_port
from tests.integration.medallion import payment

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AVAILABLE_NOW = TriggerSpec("available-now")
INGESTCTL = str(Path(sys.executable).parent / "ingestctl")


class SaslBroker(KafkaBroker):
    """The platform's broker with a second listener that requires SASL/PLAIN.

    The PLAINTEXT listener stays for the broker's own traffic and its readiness probe; the
    clients under test only get the SASL one."""

    def __init__(self, settings: KafkaSettings, sasl_port: int, users: dict[str, str]) -> None:
        super().__init__(settings)
        self.sasl_port = sasl_port
        self.users = users

    def _render_config(self, node: int) -> None:
        super()._render_config(node)
        host, sasl = self.settings.host, f"SASL_PLAINTEXT://{self.settings.host}:{self.sasl_port}"
        lines = []
        for line in self.config_path.read_text().splitlines():
            if line.startswith(("listeners=", "advertised.listeners=")):
                line = (
                    f"{line},{sasl}"
                    if line.startswith("advertised")
                    else line.replace(
                        f"PLAINTEXT://{host}:{self.settings.port}",
                        f"PLAINTEXT://{host}:{self.settings.port},{sasl}",
                    )
                )
            elif line.startswith("listener.security.protocol.map="):
                line += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            lines.append(line)
        accounts = " ".join(f'user_{name}="{password}"' for name, password in self.users.items())
        lines += [
            "sasl.enabled.mechanisms=PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config="
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="broker" password="{secrets.token_hex(8)}" {accounts};',
        ]
        self.config_path.write_text("\n".join(lines) + "\n")


@dataclass
class SecuredKafka:
    bootstrap: str
    user: str
    password: str


@pytest.fixture(scope="module")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    password = secrets.token_urlsafe(16)
    settings = KafkaSettings(
        port=free_port(),
        controller_port=free_port(),
        data_dir=tmp_path_factory.mktemp("kafka-sasl"),
    )
    broker = SaslBroker(settings, sasl_port=free_port(), users={"ingest": password})
    broker.up()
    try:
        yield SecuredKafka(f"127.0.0.1:{broker.sasl_port}", "ingest", password)
    finally:
        broker.down()


def _generate(env: dict[str, str], summary: Path) -> subprocess.CompletedProcess:
    # (--topic-prefix: the command's option does not default to INGEST_KAFKA__TOPIC_PREFIX)
    args = [
        INGESTCTL,
        "generate",
        "--count",
        "80",
        "--as-fast-as-possible",
        "--seed",
        "5",
        "--no-progress",
        "--topic-prefix",
        env["INGEST_KAFKA__TOPIC_PREFIX"],
        "--summary-json",
        str(summary),
    ]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)


def test_sasl_settings_reach_replay_spark_source_and_sink(
    secured_kafka: SecuredKafka, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"s{tmp_path.name[-6:]}."
    config = {
        "INGEST_HOME": str(tmp_path / "home"),
        "INGEST_KAFKA__BOOTSTRAP": secured_kafka.bootstrap,
        "INGEST_KAFKA__TOPIC_PREFIX": prefix,
        "INGEST_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "INGEST_KAFKA__SASL_MECHANISM": "PLAIN",
        "INGEST_KAFKA__SASL_USERNAME": secured_kafka.user,
        "INGEST_KAFKA__SASL_PASSWORD": secured_kafka.password,
    }
    for name, value in config.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()

    # The broker really authenticates: the supervisor's probe with a wrong password finds
    # the cluster down, with the right one up; neither leaves a client thread behind (the
    # admin client's failed bootstrap used to leak its IO thread, soak run 6).
    import threading

    from ingest_core.topics import broker_problem

    kafka = get_settings().kafka
    wrong = kafka.model_copy(update={"sasl_password": SecretStr("wrong")})
    threads = threading.active_count()
    problem = broker_problem(wrong, timeout_s=3)
    assert problem is not None
    assert problem.startswith(f"Kafka at {secured_kafka.bootstrap} (")
    assert broker_problem(kafka, timeout_s=10) is None
    assert threading.active_count() == threads

    # The replay tool produces through SASL.
    summary = tmp_path / "summary.json"
    sent = _generate(dict(os.environ), summary)
    assert sent.returncode == 0, sent.stdout[-2000:] + sent.stderr[-2000:]
    acknowledged = json.loads(summary.read_text())["messages_acknowledged"]
    assert acknowledged >= 80

    # Spark's Kafka source (bronze_ingest) reads through SASL.
    bronze_ingest.start(spark, trigger=AVAILABLE_NOW).awaitTermination()
    bronze = get_catalog().table("bronze_events").path(get_settings())
    assert len(DeltaTable(str(bronze)).to_pandas()) == acknowledged

    # Spark's Kafka sink (payment_alerts_rt) writes through SASL, and payment_alerts' landing
    # reads it back: one payment above the threshold.
    produce(
        secured_kafka.bootstrap,
        [
            Message(
                prefix + "payments",
                "c1",
                payment("big-1", "2026-03-01T10:00:00+00:00", amount=9000.0),
            )
        ],
    )
    payment_alerts_rt.start(spark, trigger=AVAILABLE_NOW).awaitTermination()
    for query in payment_alerts.start(spark, trigger=AVAILABLE_NOW):
        query.awaitTermination()
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        prefix + get_settings().alerts.topic,
        **get_settings().kafka.client_config(),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    try:
        alerts = [json.loads(record.value) for record in consumer]
    finally:
        consumer.close()
    big = [a for a in alerts if a.get("event_id") == "big-1"]
    assert big, alerts
    assert big[0]["rule"] == "amount_above_threshold"
    landed = get_catalog().table("gold_payment_alerts").path(get_settings())
    assert list(DeltaTable(str(landed)).to_pandas().event_id) == ["big-1"]
