"""Platform settings: one typed object built from ``include/platform.yaml`` and the environment.

Configuration flows one way (DESIGN.md, section 7): YAML in ``include/`` -> this validated
object -> the jobs, the broker and the DAGs. ``INGEST_PROFILE`` picks the YAML profile
(default ``local``); any field can be overridden by an environment variable
``INGEST_<SECTION>__<FIELD>`` (for example ``INGEST_KAFKA__PORT=19092``).

This module imports neither pyspark nor Airflow, so DAG files may import it at parse time.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

#: The repository root: ``spark_jobs/`` sits directly below it.
PROJECT_ROOT: Path = Path(__file__).resolve().parents[1]
#: Non-Python configuration (pom, YAML, log4j) lives here.
INCLUDE_DIR: Path = PROJECT_ROOT / "include"
PLATFORM_YAML: Path = INCLUDE_DIR / "platform.yaml"


def ingest_home() -> Path:
    """Return the folder for everything the platform creates at run time.

    ``INGEST_HOME`` if set, else ``<repository>/.ingest`` (ignored by git). Holds the broker's
    data, Delta tables and checkpoints; the Maven jars are in :func:`jars_dir`.
    """
    return Path(os.environ.get("INGEST_HOME", PROJECT_ROOT / ".ingest")).resolve()


def catalog_dir() -> Path:
    """Return the folder of the catalog (``pipeline.yaml``) and the event contracts
    (``contracts/``).

    ``INGEST_CATALOG_DIR`` if set, else ``<repository>/include``: a team keeps its sources
    in a folder of its own (docs/contracts.md), and a test onboards a source from a
    temporary one. The platform's other configuration (``platform.yaml``, jars, log4j)
    stays in ``include/``.
    """
    return Path(os.environ.get("INGEST_CATALOG_DIR", INCLUDE_DIR)).resolve()


def jars_dir() -> Path:
    """Return the folder of the Maven-fetched jars (``spark/`` and ``kafka/`` below it).

    ``INGEST_JARS_DIR`` if set, else ``<repository>/.ingest/jars`` where ``make jars`` puts
    them; independent of ``INGEST_HOME`` so that moving run-time state keeps the set-up.
    """
    return Path(os.environ.get("INGEST_JARS_DIR", PROJECT_ROOT / ".ingest" / "jars")).resolve()


def _resolve(path: Path) -> Path:
    return path if path.is_absolute() else ingest_home() / path


#: Settings that are secrets: accepted from the environment (or constructor arguments, e.g.
#: from an Airflow connection), refused in ``platform.yaml`` (``{section: {field, ...}}``).
SECRET_FIELDS: dict[str, frozenset[str]] = {"kafka": frozenset({"sasl_password"})}

KafkaSecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
#: SASL mechanisms authenticated by user name and password (the same in Java and kafka-python).
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
_JAAS_LOGIN_MODULES: dict[str, str] = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class KafkaSecurityError(ValueError):
    """The Kafka security settings are incomplete (e.g. SASL without a password)."""


def _jaas_quote(value: str) -> str:
    # Kafka parses sasl.jaas.config with a StreamTokenizer: backslash escapes inside quotes.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


#: Kafka's rule for topic names (``org.apache.kafka.common.internals.Topic.validate``): 1 to
#: 249 characters of [A-Za-z0-9._-].
TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"


def topic_collision_key(name: str) -> str:
    """Kafka refuses two topics whose names differ only by ``.`` against ``_`` (its metric
    names treat both alike; ``Topic.hasCollision``): names with equal keys collide."""
    return name.replace(".", "_")


def check_topic_prefix(prefix: str, names: Iterable[str]) -> str:
    """Return ``prefix`` when ``prefix + name`` is a valid Kafka topic name for every name
    (:data:`TOPIC_PATTERN`).

    :raises ValueError: the message names the longest invalid topic and what is wrong.
    """
    for name in sorted(names, key=len, reverse=True):
        topic = prefix + name
        if re.fullmatch(TOPIC_PATTERN, topic):
            continue
        shown = topic if len(topic) <= 80 else f"{topic[:40]}...{topic[-30:]}"
        why = (
            f"{len(topic)} characters, Kafka allows at most 249"
            if len(topic) > 249
            else "Kafka allows only [A-Za-z0-9._-]"
        )
        raise ValueError(f"topic prefix makes an invalid Kafka topic name {shown!r}: {why}")
    return prefix


class KafkaSettings(BaseModel):
    """The Kafka cluster clients reach, and the embedded single-node KRaft broker.

    :param host: listener address; loopback by default (the broker is for this machine only).
    :param port: client listener port (default 9092).
    :param controller_port: KRaft controller listener port (default 9093).
    :param data_dir: broker data and logs; relative paths are below :func:`ingest_home`.
    :param heap: JVM heap for the broker (``-Xmx``), e.g. ``512m``.
    :param start_timeout_s: seconds to wait for the broker to answer a metadata request.
    :param topic_prefix: prepended to every contract topic name (``orders`` ->
        ``<prefix>orders``): isolates environments or test runs sharing one cluster.
    :param bootstrap: comma-separated ``host:port`` list of an external Kafka cluster; when
        set, clients use it instead of ``host:port`` (which only the embedded broker uses).
    :param replication_factor: replication factor of the topics the platform creates
        (1 for the single-node embedded broker; 3 on a real cluster).
    :param brokers: how many embedded brokers ``ingestctl kafka up`` starts (1: the one
        combined broker and controller; 3 for the ``local-cluster`` profile: a KRaft quorum of
        three combined nodes, node ``i`` listening on ``port + i`` and ``controller_port +
        i``). Ignored when :attr:`bootstrap` names an external cluster.
    :param min_insync_replicas: replicas that must hold a record before the broker
        acknowledges an ``acks=all`` write (``min.insync.replicas`` of the topics the
        platform creates and of the embedded brokers); at most ``replication_factor``.
    :param security_protocol: ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT`` or
        ``SASL_SSL``; the same for Spark's Kafka source and sink and for kafka-python.
    :param sasl_mechanism: ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512`` (required with
        a ``SASL_*`` protocol).
    :param sasl_username: SASL user name.
    :param sasl_password: SASL password: from the environment only
        (``INGEST_KAFKA__SASL_PASSWORD``), refused in ``platform.yaml``.
    :param ssl_cafile: PEM file of the CA certificates that sign the brokers' certificates
        (kafka-python ``ssl_cafile``; Spark ``kafka.ssl.truststore.type=PEM``); when unset,
        the system's default trust store is used.
    :param ssl_check_hostname: verify that the broker's certificate matches its host name.
    :param bootstrap_timeout_s: seconds the platform's Kafka clients (kafka-python's
        producer, consumer and admin client: ``ingestctl``, topic set-up, offset checks, the
        Streaming page) try to reach a first broker before they give up, as
        ``bootstrap_timeout_ms``. kafka-python's default is 30 s, spent retrying a refused
        connection; 10 s tells a user whose broker is down so three times sooner. Raise it
        for brokers that are slow to reach. Spark's Kafka source and sink keep their own timeouts.
    """

    host: str = "127.0.0.1"
    port: int = Field(9092, ge=1, le=65535)
    controller_port: int = Field(9093, ge=1, le=65535)
    data_dir: Path = Path("kafka")
    heap: str = Field("512m", pattern=r"^\d+[kmgKMG]$")
    start_timeout_s: float = Field(90.0, gt=0)
    topic_prefix: str = Field("", pattern=r"^[A-Za-z0-9._-]*$")
    bootstrap: str | None = Field(None, pattern=r"^[^\s,]+:\d+(,[^\s,]+:\d+)*$")
    replication_factor: int = Field(1, ge=1, le=32)
    brokers: int = Field(1, ge=1, le=5)
    min_insync_replicas: int = Field(1, ge=1, le=32)
    security_protocol: KafkaSecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_check_hostname: bool = True
    bootstrap_timeout_s: float = Field(10.0, gt=0, le=600)

    @model_validator(mode="after")
    def _a_possible_cluster(self) -> KafkaSettings:
        """``min_insync_replicas`` at most ``replication_factor``; the embedded brokers' ports
        distinct; their replication at most their number."""
        if self.min_insync_replicas > self.replication_factor:
            raise ValueError(
                f"kafka.min_insync_replicas ({self.min_insync_replicas}) is more than "
                f"kafka.replication_factor ({self.replication_factor}): no write could be "
                "acknowledged"
            )
        if self.bootstrap is None and self.replication_factor > self.brokers:
            raise ValueError(
                f"kafka.replication_factor ({self.replication_factor}) is more than the "
                f"{self.brokers} embedded broker(s) (kafka.brokers): topics could not be created"
            )
        clients = set(range(self.port, self.port + self.brokers))
        controllers = set(range(self.controller_port, self.controller_port + self.brokers))
        if self.bootstrap is None and clients & controllers:
            raise ValueError(
                f"the {self.brokers} embedded broker(s) would use ports "
                f"{self.port}-{self.port + self.brokers - 1} for clients and "
                f"{self.controller_port}-{self.controller_port + self.brokers - 1} for their "
                "controllers: choose kafka.port and kafka.controller_port apart"
            )
        return self

    def node_address(self, node: int) -> str:
        """``host:port`` of embedded broker ``node`` (0-based) for clients."""
        return f"{self.host}:{self.port + node}"

    def controller_address(self, node: int) -> str:
        """``host:port`` of embedded node ``node``'s KRaft controller listener."""
        return f"{self.host}:{self.controller_port + node}"

    def topic(self, name: str) -> str:
        """The Kafka topic that carries contract topic ``name`` here."""
        return self.topic_prefix + name

    def contract_topic(self, kafka_topic: str) -> str | None:
        """The contract topic of a Kafka topic name, or None if it is not one of ours."""
        if not kafka_topic.startswith(self.topic_prefix):
            return None
        return kafka_topic[len(self.topic_prefix) :]

    @property
    def bootstrap_servers(self) -> str:
        """Comma-separated ``host:port`` list clients connect to: :attr:`bootstrap` when set,
        else the embedded brokers' (``host:port`` for one)."""
        if self.bootstrap:
            return self.bootstrap
        return ",".join(self.node_address(node) for node in range(self.brokers))

    @property
    def uses_sasl(self) -> bool:
        """Whether the protocol authenticates with SASL."""
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_ssl(self) -> bool:
        """Whether the connection is encrypted with TLS."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    def _credentials(self) -> tuple[str, str, str]:
        """``(mechanism, user name, password)`` of a SASL protocol.

        :raises KafkaSecurityError: one of them is missing; the message names the setting.
        """
        mechanism, user = self.sasl_mechanism, self.sasl_username
        password = self.sasl_password.get_secret_value() if self.sasl_password else ""
        given = {"sasl_mechanism": mechanism, "sasl_username": user, "sasl_password": password}
        missing = [name for name, value in given.items() if not value]
        if missing or not mechanism or not user:
            names = ", ".join(f"INGEST_KAFKA__{name.upper()}" for name in missing)
            raise KafkaSecurityError(
                f"kafka.security_protocol {self.security_protocol} needs {names} (secrets "
                "come from the environment, never from platform.yaml)"
            )
        return mechanism, user, password

    def spark_options(self, bootstrap_servers: str | None = None) -> dict[str, str]:
        """Every ``kafka.``-prefixed option of Spark's Kafka source and sink.

        Always ``kafka.bootstrap.servers`` and ``kafka.security.protocol``; with SASL
        ``kafka.sasl.mechanism`` and ``kafka.sasl.jaas.config`` (holds the password: pass the
        options to ``.options(...)``, never log them); with TLS the PEM trust store and the
        host-name check.

        :param bootstrap_servers: overrides :attr:`bootstrap_servers` (tests, one-off tools).
        :returns: ``{"kafka.<Kafka client property>": value}``, strings only.
        :raises KafkaSecurityError: SASL without mechanism, user name or password.

        Example::

            spark.readStream.format("kafka").options(**settings.kafka.spark_options())
        """
        options = {
            "kafka.bootstrap.servers": bootstrap_servers or self.bootstrap_servers,
            "kafka.security.protocol": self.security_protocol,
        }
        if self.uses_sasl:
            mechanism, user, password = self._credentials()
            options["kafka.sasl.mechanism"] = mechanism
            options["kafka.sasl.jaas.config"] = (
                f"{_JAAS_LOGIN_MODULES[mechanism]} required "
                f"username={_jaas_quote(user)} password={_jaas_quote(password)};"
            )
        if self.uses_ssl:
            if self.ssl_cafile is not None:
                options["kafka.ssl.truststore.type"] = "PEM"
                options["kafka.ssl.truststore.location"] = str(_resolve(self.ssl_cafile))
            if not self.ssl_check_hostname:
                options["kafka.ssl.endpoint.identification.algorithm"] = ""
        return options

    def client_config(self, bootstrap_servers: str | None = None) -> dict[str, Any]:
        """Keyword arguments for kafka-python's ``KafkaProducer``, ``KafkaConsumer`` and
        ``KafkaAdminClient``: ``bootstrap_servers``, ``security_protocol``,
        ``bootstrap_timeout_ms`` (:attr:`bootstrap_timeout_s`) and, when the protocol uses
        them, ``sasl_*`` and ``ssl_*``.

        :param bootstrap_servers: overrides :attr:`bootstrap_servers` (tests, one-off tools).
        :raises KafkaSecurityError: SASL without mechanism, user name or password.

        Example::

            KafkaConsumer(**settings.kafka.client_config(), enable_auto_commit=False)
        """
        config: dict[str, Any] = {
            "bootstrap_servers": bootstrap_servers or self.bootstrap_servers,
            "security_protocol": self.security_protocol,
            "bootstrap_timeout_ms": round(self.bootstrap_timeout_s * 1000),
        }
        if self.uses_sasl:
            mechanism, user, password = self._credentials()
            config |= {
                "sasl_mechanism": mechanism,
                "sasl_plain_username": user,
                "sasl_plain_password": password,
            }
        if self.uses_ssl:
            config["ssl_check_hostname"] = self.ssl_check_hostname
            if self.ssl_cafile is not None:
                config["ssl_cafile"] = str(_resolve(self.ssl_cafile))
        return config

    @property
    def data_path(self) -> Path:
        """Absolute path of :attr:`data_dir`."""
        return _resolve(self.data_dir)


def check_java_options(options: list[str]) -> list[str]:
    """Refuse what is not one ``-X`` JVM option per item, and ``-Xmx``.

    The options end up in ``spark.driver.extraJavaOptions``, which Spark splits like a shell
    would: an item with a space would become two JVM arguments. The heap's maximum is
    ``spark.driver.memory`` (``driver_memory``), never an option.

    :raises ValueError: naming the option.
    """
    for option in options:
        if not re.fullmatch(r"-X[A-Za-z0-9:+=._-]+", option):
            raise ValueError(f"driver_java_options: {option!r} is not one -X JVM option")
        if option.startswith("-Xmx"):
            raise ValueError(
                f"driver_java_options: {option!r}: the heap's maximum is driver_memory"
            )
    return options


#: Driver JVM options (``-X...``), checked by :func:`check_java_options`.
JavaOptions = Annotated[list[str], AfterValidator(check_java_options)]


class SparkSettings(BaseModel):
    """How the platform's SparkSessions are built (see :mod:`spark_jobs.session`).

    :param master: Spark master URL: ``local[*]`` by default, ``spark://host:7077`` on a cluster.
    :param shuffle_partitions: ``spark.sql.shuffle.partitions``; small, since a 2-core machine
        gains nothing from Spark's default of 200 and each partition costs a task per batch.
    :param snapshot_partitions: tasks Delta rebuilds a table's snapshot state with
        (``spark.databricks.delta.snapshotPartitions``; Delta's own default, 50, is sized for
        clusters); ``None``: ``shuffle_partitions``. Every idempotent Delta write rebuilds the
        state of the table's newest version to look its transaction ids up (the streaming
        sink's batch check, ``txnAppId``/``txnVersion``): three Spark jobs per micro-batch,
        whose every task generates code for Delta's action encoders (46 % of the bytes
        bronze_ingest's driver allocated, in a JFR profile). With a 1 s trigger at 5,000
        events/s it took 0.41 s of each micro-batch with 4 tasks, 0.26 s with 1, and the
        driver made 30 % fewer young collections
        (``bench/results/REFERENCE.md``, "Delta's snapshot state in every micro-batch").
    :param driver_memory: ``spark.driver.memory`` (JVM size string, e.g. ``1g``).
    :param ui_enabled: whether the driver serves the Spark UI.
    :param executor_memory: ``spark.executor.memory`` on a cluster (ignored by ``local``).
    :param cores_max: ``spark.cores.max``: the most cores one application takes from a
        standalone cluster. Unset, the first application takes every free core and the next
        ones wait (the always-on jobs would starve the scheduled ones); ``None`` leaves
        Spark's default (all), as wanted in ``local``.
    :param driver_host: address the executors reach the driver at, when drivers run in a
        container or on a host the workers know by another name (``spark.driver.host``; the
        driver then binds every interface). ``None``: Spark's own choice (loopback locally).
    :param driver_java_options: options of every driver JVM the platform starts (each one
        ``-X...`` option; ``-Xmx`` is refused: the heap is ``driver_memory``), before a catalog
        application's own. The ``local`` and ``compose`` profiles give the serial GC and a
        64 MB initial heap: on 2 cores G1 starts at 1/64 of the machine's memory and keeps
        remembered sets (about 450 MB more resident memory per scheduled driver), and its
        concurrent threads compete with Spark's (a 1M-event cycle: 351 s on G1, 268 s on the
        serial GC; ``bench/results/REFERENCE.md``).
    :param executor_java_options: options of every executor JVM on a cluster
        (``spark.executor.extraJavaOptions``; ``-Xmx`` refused: the heap is
        ``executor_memory``). ``local-cluster`` gives its executors the drivers' serial GC:
        they share the machine with the drivers.
    :param local_file_system: the Hadoop file system class behind ``file:`` paths.
        ``hadoop``: Hadoop's own, which (Spark ships no libhadoop) starts a ``chmod`` or
        ``readlink`` process for each permission it sets and each link it checks: about ten
        per micro-batch (offsets, commits, Delta's log, Parquet files), 3.5-4.6 ms each on
        2 cores. ``nio``: the platform's ``io.ingest.hadoop`` classes
        (``include/maven/localfs``; ``make jars`` builds them), which do both through
        ``java.nio`` and answer the same, except that a symlink is reported as one (Hadoop
        without libhadoop reports it as its target); the jar goes on the driver's class path
        and, for a cluster's executors, in ``spark.jars`` (``bench/results/REFERENCE.md``,
        "The local file system through java.nio": a medallion test file 134.5 -> 110 s).
    """

    master: str = "local[*]"
    shuffle_partitions: int = Field(4, ge=1)
    snapshot_partitions: int | None = Field(None, ge=1)
    driver_memory: str = Field("1g", pattern=r"^\d+[kmgKMG]$")
    ui_enabled: bool = False
    executor_memory: str = Field("1g", pattern=r"^\d+[kmgKMG]$")
    cores_max: int | None = Field(None, ge=1)
    driver_host: str | None = None
    driver_java_options: JavaOptions = []
    executor_java_options: JavaOptions = []
    local_file_system: Literal["hadoop", "nio"] = "hadoop"

    @field_validator("master")
    @classmethod
    def _known_master(cls, value: str) -> str:
        if not value.startswith(("local", "spark://", "k8s://", "yarn")):
            raise ValueError(
                f"spark master {value!r} is not local[...], spark://host:port, k8s://... or yarn"
            )
        return value


class SparkClusterSettings(BaseModel):
    """An embedded Spark standalone cluster on this machine (the ``local-cluster`` profile,
    issue 54): a master and ``workers`` workers started from pyspark's own ``spark-class``
    (the Master and Worker classes a real standalone cluster runs) by ``ingestctl spark up``.
    The master's address is the one fact :attr:`SparkSettings.master` holds
    (``spark://127.0.0.1:<port>``); the embedded Airflow points ``spark_default`` there.

    :param workers: how many workers to start; 0 (every profile but ``local-cluster``):
        the platform starts no Spark cluster.
    :param worker_cores: cores each worker offers the master. They are scheduling slots, not
        the machine's cores: with ``spark.cores_max`` 1 every always-on and scheduled
        application holds one, so two workers of 6 serve 12 applications at once, and one
        worker alone (the other killed) still serves the always-on ones.
    :param worker_memory: memory each worker offers its executors (``spark.executor.memory``
        each).
    :param master_ui_port: the master's web UI (its ``/json/`` lists workers and apps).
    :param worker_ui_port: worker ``i``'s web UI is on this port + ``i``.
    :param daemon_memory: heap of the master and worker JVMs (``SPARK_DAEMON_MEMORY``).
    :param data_dir: logs, pid files and the workers' work dirs (executor logs, fetched jars).
    :param start_timeout_s: how long ``up`` waits for every worker to register.
    """

    workers: int = Field(0, ge=0, le=8)
    worker_cores: int = Field(6, ge=1)
    worker_memory: str = Field("6g", pattern=r"^\d+[kmgKMG]$")
    master_ui_port: int = Field(18080, ge=1, le=65535)
    worker_ui_port: int = Field(18081, ge=1, le=65535)
    daemon_memory: str = Field("256m", pattern=r"^\d+[kmgKMG]$")
    data_dir: Path = Path("spark-cluster")
    start_timeout_s: float = Field(120, gt=0)

    @property
    def data_path(self) -> Path:
        """Absolute path of :attr:`data_dir`."""
        return _resolve(self.data_dir)


class StorageSettings(BaseModel):
    """Where Delta tables and streaming checkpoints live.

    :param data_dir: root of the Delta tables (``<data_dir>/<layer>/<table>``).
    :param checkpoint_dir: root of the checkpoints (``<checkpoint_dir>/<job>``).
    :param landing_dir: files that load dimensions (``<landing_dir>/<dimension>/<source>``),
        e.g. the customers files written by ``ingestctl replay``.
    :param state_dir: run-time state of the always-on jobs (heartbeats, pid files, stop
        requests, the supervisor's restart history) and the gates' Data Docs.
    :param layer_dirs: per-layer override of :attr:`data_dir` (``{"gold": "/staging"}``);
        empty normally. Set by ``layer_full_refresh`` for the jobs that rebuild a layer.
    """

    data_dir: Path = Path("data")
    checkpoint_dir: Path = Path("checkpoints")
    landing_dir: Path = Path("landing")
    state_dir: Path = Path("state")
    layer_dirs: dict[str, Path] = {}

    @property
    def data_path(self) -> Path:
        """Absolute path of :attr:`data_dir`."""
        return _resolve(self.data_dir)

    def layer_path(self, layer: str) -> Path:
        """Absolute root of ``layer``'s tables (``<root>/<layer>/<table>``): its entry in
        :attr:`layer_dirs` if any, else :attr:`data_path`. ``layer_full_refresh`` points a
        layer at a staging folder this way to rebuild it beside the live tables."""
        return _resolve(self.layer_dirs[layer]) if layer in self.layer_dirs else self.data_path

    @property
    def checkpoint_path(self) -> Path:
        """Absolute path of :attr:`checkpoint_dir`."""
        return _resolve(self.checkpoint_dir)

    @property
    def landing_path(self) -> Path:
        """Absolute path of :attr:`landing_dir`."""
        return _resolve(self.landing_dir)

    @property
    def state_path(self) -> Path:
        """Absolute path of :attr:`state_dir`."""
        return _resolve(self.state_dir)


class ReplaySettings(BaseModel):
    """Producers of ``ingestctl replay`` and ``ingestctl generate``.

    :param partitions: partition count of the topics they create (existing topics with another
        count are refused unless told otherwise).
    """

    partitions: int = Field(3, ge=1, le=1000)


class QualitySettings(BaseModel):
    """Thresholds of the Great Expectations gates between the layers (``spark_jobs.quality``).

    :param max_amount: largest plausible payment, order total or refund, in the currency's
        units (``amount``/``total`` above it fail the range expectation).
    :param max_null_customer_rate: share of rows (0..1) of an increment that may lack a
        ``customer_id`` (guest checkouts: about a third of UCI Online Retail lines).
    :param volume_history: passed, non-empty gate runs of a table that the row-count band is
        learned from; with fewer, the volume expectation is skipped (and says so).
    :param volume_band_factor: an increment's row count must be at most ``factor`` times
        the largest of that history (and, with ``volume_lower_bound``, at least its median
        over ``factor``: :func:`ingest_core.quality.rules.volume_band`).
    :param volume_lower_bound: also hold an increment with fewer rows than the band's lower
        bound. Off by default: the gate holds back data that is wrong, and a small increment
        of good data is not. A broker or upstream outage, or a cycle run soon after the
        last, makes one, and holding it stops every run of the layers above until an
        operator accepts it (the 2-hour soak, run 20: a 69-row Silver increment after broker
        outages, against a band of [85, 34061], held Silver and Gold for 25 minutes). Low
        volume is a monitoring signal (consumer lag, freshness). Turn it on for sources that
        never pause and cycles that run on a fixed schedule.
    :param volume_lower_bound_min_rows: with ``volume_lower_bound``, the lower bound is
        checked only when it is at least this many rows (a median of ``factor`` times this).
        Small increments vary more with when a cycle ran (and, in Gold, with how many windows
        the new events touched) than with what arrived: the soak's drain failed
        ``gate_gold`` on a legitimate 2-row increment against a band of [3, 1201] (issue 50;
        docs/soak.md).
    :param freshness_limit_s: the newest ``event_time`` of an increment may be at most this
        many seconds older than the validation time; ``0`` switches the expectation off
        (replays of historical datasets, whose events are years old).
    :param pandas_max_rows: increments of at most this many rows in all (the change-feed
        rows read) are validated by GX's pandas engine on a delta-rs read, without a JVM;
        larger ones by Spark. ``0`` always uses Spark. About 1 GB of the gate's process
        per million rows (measured: docs/quality.md).
    """

    max_amount: float = Field(100_000.0, gt=0)
    max_null_customer_rate: float = Field(0.5, ge=0, le=1)
    volume_history: int = Field(5, ge=1)
    volume_band_factor: float = Field(20.0, gt=1)
    volume_lower_bound: bool = False
    volume_lower_bound_min_rows: int = Field(25, ge=1)
    freshness_limit_s: float = Field(0.0, ge=0)
    pandas_max_rows: int = Field(2_000_000, ge=0)


class SupervisorSettings(BaseModel):
    """How the ``streaming_supervisor`` DAG keeps the always-on jobs alive.

    :param heartbeat_timeout_s: a running job whose heartbeat (written on every query
        progress event, and at least every idle trigger) is older than this is restarted.
    :param startup_grace_s: a freshly started job gets this long to write its first
        heartbeat (JVM start, query start) before it counts as stuck.
    :param backoff_base_s: wait after the first restart; doubles with every further restart
        inside :attr:`failure_window_s`, up to :attr:`max_backoff_s`.
    :param max_backoff_s: the longest wait between two restarts (Kubernetes caps a crashing
        container's back-off at 5 minutes too); the supervisor never stops restarting a job.
    :param crash_loop_restarts: starts inside :attr:`failure_window_s` from which the job
        counts as crash-looping: each supervisor round that finds it down fails its task, with
        the driver log's tail, so an operator sees it (it is still restarted).
    :param failure_window_s: the window the restarts are counted in.
    :param stable_after_s: a job that has run this long since its last start with a fresh
        heartbeat gets a fresh restart budget (Kubernetes resets its back-off after 10
        minutes of running without trouble).
    :param stop_timeout_s: how long a graceful stop waits for the current micro-batch.
    """

    heartbeat_timeout_s: float = Field(180.0, gt=0)
    startup_grace_s: float = Field(120.0, gt=0)
    backoff_base_s: float = Field(30.0, ge=0)
    max_backoff_s: float = Field(300.0, ge=0)
    crash_loop_restarts: int = Field(5, ge=1)
    failure_window_s: float = Field(3600.0, gt=0)
    stable_after_s: float = Field(600.0, gt=0)
    stop_timeout_s: float = Field(120.0, gt=0)


class TaskSettings(BaseModel):
    """Time budgets of the Airflow tasks that run a Spark job
    (:class:`ingest_platform.operators.SparkJobOperator`): each task's ``execution_timeout``
    unless its DAG gives one. Past it, Airflow fails the task and calls its ``on_kill``,
    which stops spark-submit and the driver (freeing the checkpoint lock); the task's
    retry, or the next run, goes on from the last committed batch. Without a budget a hung
    driver (a stuck GC, a frozen mount) holds its job's lock and, with one run at a time,
    every later run, until ``dagrun_timeout`` fails the whole run.

    :param spark_timeout_s: an incremental task (``medallion_incremental``'s Spark jobs and
        gates, ``layer_full_refresh``'s swap). 30 minutes: a 100,000-event cycle takes
        about 2 minutes here (``bench/results/REFERENCE.md``), and a catch-up longer than
        the budget still progresses, batch by batch, through the retry.
    :param rebuild_timeout_s: a task that rebuilds from the whole history
        (``layer_full_refresh``'s rebuilds and gates, ``bronze_replay``): 4 hours.
    """

    spark_timeout_s: float = Field(1800.0, gt=0)
    rebuild_timeout_s: float = Field(14400.0, gt=0)


class CheckpointSettings(BaseModel):
    """Checkpoint backups (``ingestctl checkpoints``, the ``checkpoint_maintenance`` DAG).

    :param keep_last: backups per job always kept (the newest ones).
    :param keep_days: backups younger than this many days are kept too.
    """

    keep_last: int = Field(10, ge=1)
    keep_days: float = Field(7.0, ge=0)


class AlertSettings(BaseModel):
    """Rules of the alert jobs (``payment_alerts_rt``: the amount rule; ``payment_alerts``:
    the velocity rule and the landing of the alerts topic).

    :param amount_threshold: a payment above this amount (in its currency's units) raises an
        ``amount_above_threshold`` alert.
    :param max_payments_per_window: more payments than this by one customer in one 5-minute
        window (tumbling, event time) raise a ``payment_velocity`` alert.
    :param topic: Kafka topic the alerts go to (before ``kafka.topic_prefix``).
    """

    amount_threshold: float = Field(5_000.0, gt=0)
    max_payments_per_window: int = Field(5, ge=1)
    topic: str = Field("payment_alerts", pattern=r"^[A-Za-z0-9._-]{1,200}$")


class AirflowSettings(BaseModel):
    """The embedded Airflow of ``make demo`` and the tests (``ingestctl.airflow_runtime``).

    :param database: its metadata database: ``postgres`` (default), the embedded PostgreSQL
        cluster of :mod:`ingestctl.postgres_cluster`; ``sqlite``, a file in ``AIRFLOW_HOME``
        (one writer at a time: no backfill beside a busy scheduler). A user-provided
        ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` (or ``_CMD``/``_SECRET``) wins over both.
    :param postgres_dir: the embedded cluster's folder (data, socket, password, log);
        relative paths are below ``INGEST_HOME``.
    :param postgres_start_timeout_s: how long ``up`` waits for the cluster to accept
        connections (initdb on first start included).
    :param triggerer: start Airflow's triggerer beside the scheduler, DAG processor and API
        server (on by default), without its log server (``airflow triggerer
        --skip-serve-logs``: no platform task defers, ``tests/unit/dags``
        ``test_no_task_defers``, so it has no trigger log to serve). It runs so that
        Airflow's health (the UI's Home page, ``/api/v2/monitor/health``) shows every
        component healthy instead of a triggerer that never heartbeats; it holds 180 MB PSS
        (318 MB RSS; 265 MB PSS with its log server), measured 2026-12-06 idle. With it the
        SQLite demo peaked at 4,155 MB PSS (``python -m bench --only memory --demo``,
        2026-12-06), over the 4 GB target: whether it stays on is open (issue 51's note).
        ``INGEST_AIRFLOW__TRIGGERER=false`` leaves it out (the Home page then shows it
        failed).
    """

    database: Literal["postgres", "sqlite"] = "postgres"
    postgres_dir: Path = Path("postgres")
    postgres_start_timeout_s: float = Field(60.0, gt=0)
    triggerer: bool = True

    @property
    def postgres_path(self) -> Path:
        """:attr:`postgres_dir`, absolute (relative to ``INGEST_HOME``)."""
        return _resolve(self.postgres_dir)


class PlatformSettings(BaseSettings):
    """All platform settings for one profile.

    Sources, strongest first: constructor arguments, ``INGEST_<SECTION>__<FIELD>`` environment
    variables, the profile's section of ``include/platform.yaml``, the defaults here.

    :raises pydantic.ValidationError: a value has the wrong type or is out of range; the
        message names the field.
    """

    model_config = SettingsConfigDict(
        env_prefix="INGEST_", env_nested_delimiter="__", extra="forbid"
    )

    kafka: KafkaSettings = KafkaSettings()
    spark: SparkSettings = SparkSettings()
    spark_cluster: SparkClusterSettings = SparkClusterSettings()
    storage: StorageSettings = StorageSettings()
    replay: ReplaySettings = ReplaySettings()
    quality: QualitySettings = QualitySettings()
    supervisor: SupervisorSettings = SupervisorSettings()
    alerts: AlertSettings = AlertSettings()
    checkpoints: CheckpointSettings = CheckpointSettings()
    tasks: TaskSettings = TaskSettings()
    airflow: AirflowSettings = AirflowSettings()

    @model_validator(mode="after")
    def _embedded_master_on_loopback(self) -> PlatformSettings:
        """An embedded Spark cluster (``spark_cluster.workers`` > 0) listens where
        ``spark.master`` says (``spark://<loopback>:<port>``), on ports of its own: the
        master's, its UI's and one UI port per worker, all distinct (Spark would otherwise
        move a UI to the next free port and the workers' registration could not be told)."""
        cluster = self.spark_cluster
        if cluster.workers:
            _, port = embedded_master_address(self.spark.master)
            ports = [port, cluster.master_ui_port]
            ports += [cluster.worker_ui_port + i for i in range(cluster.workers)]
            if len(set(ports)) != len(ports) or max(ports) > 65535:
                raise ValueError(
                    f"the embedded Spark cluster's ports overlap or pass 65535: master {port}, "
                    f"master UI {cluster.master_ui_port}, worker UIs {cluster.worker_ui_port}.."
                    f"{cluster.worker_ui_port + cluster.workers - 1}: choose distinct ones"
                )
        return self

    @model_validator(mode="after")
    def _valid_topic_names(self) -> PlatformSettings:
        """Every topic the platform uses, prefixed, is a valid Kafka topic name."""
        from ingest_core.contracts import TOPICS

        check_topic_prefix(self.kafka.topic_prefix, (*TOPICS, self.alerts.topic))
        key = topic_collision_key(self.alerts.topic)
        clash = [t for t in TOPICS if topic_collision_key(t) == key]
        if clash:
            raise ValueError(
                f"alerts.topic {self.alerts.topic!r} is (or collides with) the contract topic "
                f"{clash[0]!r}: the alerts would be read back as {clash[0]} events"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Put the YAML profile below the environment and above the defaults."""
        profile = os.environ.get("INGEST_PROFILE", "local")
        yaml_source = YamlConfigSettingsSource(
            settings_cls, yaml_file=PLATFORM_YAML, yaml_config_section=profile
        )
        _refuse_secrets(yaml_source.yaml_data, f"{PLATFORM_YAML} (profile {profile})")
        return (init_settings, env_settings, yaml_source)


def _refuse_secrets(data: dict[str, Any], where: str) -> None:
    """Refuse :data:`SECRET_FIELDS` in a configuration file: they would end up in git and
    in the image.

    :raises ValueError: the message names the field and the environment variable to use.
    """
    for section, fields in SECRET_FIELDS.items():
        found = sorted(fields & set(data.get(section) or {}))
        if found:
            names = ", ".join(f"INGEST_{section.upper()}__{name.upper()}" for name in found)
            raise ValueError(
                f"{where} sets secret {section}.{', '.join(found)}: secrets come only from "
                f"the environment ({names}) or an Airflow connection"
            )


def embedded_master_address(master: str) -> tuple[str, int]:
    """``(host, port)`` of an embedded standalone master URL ``spark://<host>:<port>``.

    :raises ValueError: not ``spark://`` with one loopback host and a port: the embedded
        cluster (:class:`SparkClusterSettings`) runs on this machine only.
    """
    match = re.fullmatch(r"spark://(127\.0\.0\.1|localhost):(\d{1,5})", master.strip())
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise ValueError(
            f"spark.master {master!r}: with spark_cluster.workers > 0 (an embedded standalone "
            "cluster) it must be spark://127.0.0.1:<port>, where the master will listen"
        )
    return match.group(1), int(match.group(2))


def spark_connection(settings: PlatformSettings) -> str:
    """The ``spark_default`` Airflow connection (JSON) the embedded Airflow gets when the
    environment sets none: the embedded cluster's master (``spark.master``) when the profile
    starts one (``spark_cluster.workers`` > 0), else ``local[*]`` (the provider reads the host
    of a ``spark`` connection without a port as the whole master URL)."""
    if settings.spark_cluster.workers:
        host, port = embedded_master_address(settings.spark.master)
        return json.dumps({"conn_type": "spark", "host": f"spark://{host}", "port": port})
    return json.dumps({"conn_type": "spark", "host": "local[*]"})


@lru_cache(maxsize=1)
def get_settings() -> PlatformSettings:
    """Return the settings of the current profile, read once per process.

    :raises pydantic.ValidationError: see :class:`PlatformSettings`.
    :raises KeyError: ``INGEST_PROFILE`` names a profile that ``platform.yaml`` lacks.
    """
    return PlatformSettings()
