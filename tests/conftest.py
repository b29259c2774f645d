"""Shared fixtures: one SparkSession, one real Kafka broker, fresh topics, temporary Delta folders.

The broker is the real one (:mod:`ingestctl.kafka_broker`): the project's own if it is
already running (``make kafka-up``), else a private one on free ports in a temporary folder,
stopped when the session ends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Airflow reads its configuration at import: isolate it before any test imports Airflow.
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="ingest-test-airflow-"))
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")

# The JVMs the tests start as subprocesses (every spark-submit of an Airflow task, jobs run
# with `python -m`) live for seconds on small inputs: C1 alone compiles enough, and C2's
# compilation was ~40 % of such a JVM's CPU (tests/integration/test_spark_submit.py: 21 s of
# user CPU with C2, 12 s without). spark-class passes SPARK_SUBMIT_OPTS to the driver JVM. The
# suite's own long-lived driver (the `spark` fixture) keeps C2.
SHORT_JVM_OPTS = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("SPARK_SUBMIT_OPTS", SHORT_JVM_OPTS)

# py4j logs from __del__ after pytest closed its streams: keep it to warnings.
logging.getLogger("py4j").setLevel(logging.WARNING)

PROJECT_ROOT = Path(__file__).resolve().parents[1]


#: Tests ``make test`` leaves out, by marker: the option that runs them, and what the skip says.
#: Soaks and long fault proofs belong in commands, not in the suite (docs/tests.md); each
#: ``faults`` test's rule is also tested at a cheaper layer in the suite, and the soak makes
#: the same proof under load (docs/tests.md).
OPT_IN = {
    "soak": ("--run-soak", "a soak: run it with `make soak-smoke` (pytest --run-soak)"),
    "faults": (
        "--run-faults",
        "a long fault proof: run it with `make test-faults` (pytest --run-faults)",
    ),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-soak",
        action="store_true",
        help="also run the tests marked soak (make soak-smoke; make test leaves them out)",
    )
    parser.addoption(
        "--run-faults",
        action="store_true",
        help="also run the tests marked faults (make test-faults; make test leaves them out)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soaks and long fault proofs are commands, not suite members (docs/tests.md): tests
    marked ``soak`` or ``faults`` are skipped, saying how to run them, unless their option
    (``--run-soak``, ``--run-faults``) is given."""
    for marker, (option, reason) in OPT_IN.items():
        if config.getoption(option):
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> tuple[int, ...]:
    """Return ``count`` distinct TCP ports on 127.0.0.1 that nothing listens on right now
    (all probes are held open together, so the kernel cannot hand the same port twice)."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return tuple(int(probe.getsockname()[1]) for probe in probes)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local SparkSession for the whole suite, built by the platform's own builder."""
    from spark_jobs.session import build_spark_session

    with pytest.MonkeyPatch.context() as patch:
        if os.environ.get("SPARK_SUBMIT_OPTS") == SHORT_JVM_OPTS:
            patch.delenv("SPARK_SUBMIT_OPTS")  # this driver lives for the whole session
        session = build_spark_session(
            "tests",
            # The suite's one driver runs hundreds of queries on hundreds of tables (Delta
            # keeps their logs cached): with the jobs' 1g heap, G1 spent a third of its CPU
            # collecting.
            extra_conf={
                "spark.master": "local[2]",
                "spark.sql.shuffle.partitions": "2",
                "spark.driver.memory": "3g",
                # Tests run thousands of small queries, each on a few rows: compiling
                # projections with Janino (and formatting the generated source first) cost
                # more than evaluating them. A JFR profile of a medallion integration test
                # spent ~20 % of the driver's CPU there; interpreted projections took the
                # test from 157 s to 135 s. Same results by Spark's contract; the jobs that
                # spark-submit runs (Airflow tasks, e2e) keep Spark's default (codegen).
                "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                # The plan text every query posts to listeners: the short form.
                "spark.sql.ui.explainMode": "simple",
            },
        )
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _settings_end_with_their_test() -> Iterator[None]:
    """Platform settings a test cached under its own environment (``INGEST_*`` variables it
    monkeypatched) must not outlive it: forget them once its monkeypatches are undone (an
    autouse fixture's teardown runs after the test's own fixtures'). A SASL test's cached
    settings once made the next session broker wait for a SASL bootstrap that never came."""
    from ingest_core.settings import get_settings

    yield
    get_settings.cache_clear()


@pytest.fixture(autouse=True)
def _streams_end_with_their_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A streaming query a test leaves running in the suite's one driver would poll Kafka
    and Delta for the rest of the session, on a worker other tests share: stop it, and warn
    with its name so the test gets fixed. A query that failed is forgotten too
    (``resetTerminated``): ``awaitAnyTermination`` would re-raise its failure in a later
    test."""
    yield
    if "spark" not in request.fixturenames:
        return
    session = request.getfixturevalue("spark")
    leftover = list(session.streams.active)  # type: ignore[attr-defined]
    for query in leftover:
        query.stop()
    session.streams.resetTerminated()  # type: ignore[attr-defined]
    if leftover:
        names = [query.name or query.id for query in leftover]
        warnings.warn(
            f"{request.node.nodeid} left streaming queries running: {names}", stacklevel=1
        )


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a real Kafka broker: the project's running one, else a private one."""
    from ingest_core.settings import get_settings
    from ingestctl.kafka_broker import KafkaBroker

    project = KafkaBroker(get_settings().kafka)
    status = project.status()
    if status.running:
        yield status.bootstrap_servers  # where it really listens
        return
    settings = get_settings().kafka.model_copy(
        update={
            "port": free_port(),
            "controller_port": free_port(),
            "data_dir": tmp_path_factory.mktemp("kafka"),
        }
    )
    broker = KafkaBroker(settings)
    broker.up()
    try:
        yield settings.bootstrap_servers
    finally:
        broker.down()


@pytest.fixture
def kafka_topic(
    kafka_bootstrap: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., str]]:
    """Factory for fresh topics: ``kafka_topic(partitions=3) -> name``; deleted afterwards."""
    from kafka import KafkaAdminClient

    from ingest_core.topics import ensure_topics

    created: list[str] = []

    def make(partitions: int = 3, prefix: str | None = None) -> str:
        stem = (prefix or request.node.name).replace("[", "_").replace("]", "")[:60]
        name = f"t_{stem}_{uuid.uuid4().hex[:8]}"
        ensure_topics(kafka_bootstrap, [name], partitions=partitions)
        created.append(name)
        return name

    yield make
    if created:
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        try:
            admin.delete_topics(created)
        finally:
            admin.close()


@pytest.fixture
def delta_dir(tmp_path: Path) -> Path:
    """A temporary folder for Delta tables and checkpoints of one test."""
    path = tmp_path / "delta"
    path.mkdir()
    return path


#: Real datasets live beside the repository (never copied into it); see ../shared/datasets.
DATASETS = PROJECT_ROOT.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def olist_path() -> Path:
    """The Olist sample folder; the test is skipped where the datasets are not present."""
    path = DATASETS / "olist_ecommerce" / "sample"
    if not path.is_dir():
        pytest.skip(f"Olist sample not found at {path}")
    return path


@pytest.fixture(scope="session")
def uci_path() -> Path:
    """The UCI Online Retail by-day folder; skipped where absent."""
    path = DATASETS / "uci_online_retail_by_day"
    if not path.is_dir():
        pytest.skip(f"UCI Online Retail not found at {path}")
    return path


def consume_all(bootstrap: str, topics: list[str], timeout_s: float = 60.0) -> list[object]:
    """Every record of ``topics`` (those that exist), from the beginning to the end offsets
    read when called: what was sent before the call, however slow the broker is to answer.

    Waiting for "no record for a few seconds" instead returned nothing at load 6, when the
    consumer's first fetch took longer than that (``test_replay``'s 7 generated events).

    :raises TimeoutError: the end offsets were not reached within ``timeout_s`` seconds.
    """
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        existing = consumer.topics()
        partitions = [
            TopicPartition(topic, partition)
            for topic in topics
            if topic in existing
            for partition in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        if not partitions:
            return []
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        end = consumer.end_offsets(partitions)
        records: list[object] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topics}: end offsets {end} not reached in {timeout_s} s")
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()


def cli_env(bootstrap: str, **extra: str) -> dict[str, str]:
    """Environment for running ``ingestctl`` against the test broker."""
    host, port = bootstrap.rsplit(":", 1)
    return os.environ | {"INGEST_KAFKA__HOST": host, "INGEST_KAFKA__PORT": port} | extra
