"""docker-compose.yaml, validated without a Docker engine: against the Compose
specification's JSON schema, then for the facts the platform relies on.

Why the schema and not Debian's ``docker-compose config``: Debian ships Compose v1
(1.29.2), end-of-life since 2023 and frozen before the current Compose specification; it
refuses this file's top-level ``name`` (tried: "'name' does not match any of the regexes:
'^x-'"). check-jsonschema vendors the specification's own schema (``compose-spec.json``) and
refreshes its vendored schemas with its releases, so the schema is the one kept current.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from ingest_core.settings import PlatformSettings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yaml"
AIRFLOW_SERVICES = {
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}
#: Where the platform's shared state lives in every container (INGEST_HOME=/opt/ingest).
BROKERS = ("kafka-1", "kafka-2", "kafka-3")
SHARED_MOUNTS = {
    "/opt/ingest/data",
    "/opt/ingest/checkpoints",
    "/opt/ingest/checkpoint_backups",
    "/opt/ingest/state",
}
SECRET_NAME = re.compile(r"PASSWORD|SECRET|FERNET|TOKEN|_KEY$", re.IGNORECASE)
REQUIRED_VAR = re.compile(r"^\$\{[A-Z][A-Z0-9_]*:\?[^}]+\}$")


def compose_schema() -> dict[str, Any]:
    vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    return dict(json.loads((vendor / "compose-spec.json").read_text()))


def validate(document: dict[str, Any]) -> list[str]:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(document)]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    # safe_load resolves the anchors and merge keys, as Compose does.
    return dict(yaml.safe_load(COMPOSE.read_text()))


def locked_version(package: str) -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    return next(p["version"] for p in lock["package"] if p["name"] == package)


def test_compose_file_matches_the_compose_specification(compose) -> None:
    assert validate(compose) == []


def test_the_schema_refuses_what_compose_refuses(compose) -> None:
    """The validation can fail: a misspelt key and a wrong type are reported."""
    broken = json.loads(json.dumps(compose))
    broken["services"]["kafka-1"]["healthchek"] = broken["services"]["kafka-1"].pop("healthcheck")
    broken["services"]["postgres"]["ports"] = "5432"
    errors = validate(broken)
    assert any("healthchek" in e for e in errors), errors
    assert any("ports" in e for e in errors), errors


def test_images_are_the_pinned_versions(compose) -> None:
    services = compose["services"]
    pom = (ROOT / "include" / "maven" / "pom.xml").read_text()
    broker = re.search(r"<kafka.broker.version>([^<]+)<", pom)
    assert broker is not None
    for name in BROKERS:
        assert services[name]["image"] == f"apache/kafka:{broker.group(1)}"
    spark = f"apache/spark:{locked_version('pyspark')}-scala2.13-java17-ubuntu"
    assert services["spark-master"]["image"] == services["spark-worker"]["image"] == spark
    for name in AIRFLOW_SERVICES | {"airflow-init"}:
        assert services[name]["build"] == "."  # the Dockerfile's image


def test_kafka_runs_three_replicated_kraft_brokers(compose) -> None:
    """As the tested local-cluster profile: every node a broker and a voter, one cluster id,
    replication factor 3 with two in sync, so that one broker may be down."""
    services = compose["services"]
    voters = "1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"
    for number, name in enumerate(BROKERS, start=1):
        env = services[name]["environment"]
        assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
        assert "zookeeper" not in json.dumps(env).lower()
        assert env["KAFKA_NODE_ID"] == str(number)
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == voters
        # the listener the compose profile's clients use
        assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{name}:9092"
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3"
        assert f"{name}-data:/var/lib/kafka/data" in services[name]["volumes"]
        assert name in services["airflow-scheduler"]["depends_on"]
    assert len({services[n]["environment"]["CLUSTER_ID"] for n in BROKERS}) == 1


def test_spark_master_and_workers(compose) -> None:
    services = compose["services"]
    assert "org.apache.spark.deploy.master.Master" in services["spark-master"]["command"]
    worker = services["spark-worker"]["command"]
    assert "org.apache.spark.deploy.worker.Worker" in worker
    assert worker[-1] == "spark://spark-master:7077"
    assert str(services["spark-worker"]["deploy"]["replicas"]).endswith(":-2}")  # two, as tested


def test_airflow_runs_on_postgres_with_every_component(compose) -> None:
    services = compose["services"]
    commands = {services[name]["command"] for name in AIRFLOW_SERVICES}
    assert commands == {"api-server", "scheduler", "dag-processor", "triggerer"}
    for name in AIRFLOW_SERVICES | {"airflow-init"}:
        env = services[name]["environment"]
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith(
            "postgresql+psycopg2://airflow:"
        )
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("@postgres:5432/airflow")
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in AIRFLOW_SERVICES:
        assert services[name]["depends_on"]["airflow-init"]["condition"] == (
            "service_completed_successfully"
        )
    assert services["airflow-init"]["environment"]["_AIRFLOW_DB_MIGRATE"] == "true"
    # the pools the DAGs' tasks need (ingest_platform.orchestration imports POOLS_FILE)
    assert "python -m ingest_platform.orchestration" in services["airflow-init"]["command"][-1]


def test_airflow_keeps_its_login(compose) -> None:
    services = compose["services"]
    for name in AIRFLOW_SERVICES:
        manager = services[name]["environment"]["AIRFLOW__CORE__AUTH_MANAGER"]
        assert manager.startswith("airflow.providers.fab.")
    locked_version("apache-airflow-providers-fab")  # installed in the image from the lock
    init = services["airflow-init"]["environment"]
    assert init["_AIRFLOW_WWW_USER_CREATE"] == "true"
    assert REQUIRED_VAR.match(init["_AIRFLOW_WWW_USER_PASSWORD"])
    # the UI and the Spark UI listen on the host's loopback only
    for name in ("airflow-apiserver", "spark-master"):
        assert all(port.startswith("127.0.0.1:") for port in services[name]["ports"])


def test_long_running_services_have_healthchecks(compose) -> None:
    for name, service in compose["services"].items():
        if service.get("restart") == "no":  # one-shot: airflow-init, the ingestctl tool
            continue
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_drivers_and_executors_share_the_platform_volumes(compose) -> None:
    def mounts(service: dict[str, Any]) -> dict[str, str]:
        return {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", [])}

    services = compose["services"]
    expected = {path: mounts(services["airflow-scheduler"])[path] for path in SHARED_MOUNTS}
    for name in AIRFLOW_SERVICES | {"spark-worker", "airflow-init"}:
        found = mounts(services[name])
        assert {p: found.get(p) for p in SHARED_MOUNTS} == expected, name
    # named volumes, not host folders: shared by every container, whatever host runs it
    assert set(expected.values()) <= set(compose["volumes"])
    for name in AIRFLOW_SERVICES:
        assert services[name]["environment"]["INGEST_HOME"] == "/opt/ingest"
    # the worker writes as the Airflow uid, so drivers and executors share the files
    assert services["spark-worker"]["user"] == services["airflow-scheduler"]["user"]


def test_connections_and_profile_come_from_the_environment(compose) -> None:
    services = compose["services"]
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        assert env["INGEST_PROFILE"] == "compose"
        spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert (spark["conn_type"], spark["host"], spark["port"]) == (
            "spark",
            "spark://spark-master",
            7077,
        )
    # The executors reach the drivers (LocalExecutor: in the scheduler) by its name.
    scheduler = services["airflow-scheduler"]
    assert scheduler["environment"]["INGEST_SPARK__DRIVER_HOST"] == scheduler["hostname"]


def test_compose_profile_names_the_compose_services(
    compose, monkeypatch: pytest.MonkeyPatch
) -> None:
    sections = ("INGEST_KAFKA__", "INGEST_SPARK__", "INGEST_SPARK_CLUSTER__")
    for name in [n for n in os.environ if n.startswith(sections)]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("INGEST_PROFILE", "compose")
    settings = PlatformSettings()
    brokers = [address.split(":") for address in settings.kafka.bootstrap_servers.split(",")]
    assert [host for host, _ in brokers] == list(BROKERS)
    assert {port for _, port in brokers} == {"9092"}
    assert settings.spark.master == "spark://spark-master:7077"
    assert settings.kafka.replication_factor == 3  # three brokers in the stack
    assert settings.kafka.min_insync_replicas == 2


def _secret_values(node: Any, path: str = "") -> list[tuple[str, str]]:
    """(path, value) of every environment entry whose name says it holds a secret."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}"
            if isinstance(value, str) and SECRET_NAME.search(str(key)):
                found.append((here, value))
            found += _secret_values(value, here)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _secret_values(value, f"{path}[{i}]")
    return found


def test_no_secret_is_written_in_the_file(compose) -> None:
    secrets = _secret_values(compose["services"])
    assert len(secrets) >= 5  # the database, Fernet, JWT, API and admin secrets were found
    for where, value in secrets:
        assert REQUIRED_VAR.match(value), f"{where} must be a required ${{VAR:?...}}: {value}"
    for name, service in compose["services"].items():
        url = service.get("environment", {}).get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
        if url:
            password = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
            assert REQUIRED_VAR.match(password), f"{name}: database password inline"
