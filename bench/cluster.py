"""``python -m bench --only cluster``: what the ``local-cluster`` profile's engines carry on
this machine, the measured inputs of the scale plan (``docs/scale.md``, issue 54). No target:
a plan's input.

One run, in the bench's work folder, on ports of its own:

1. three replicated KRaft brokers (replication factor 3, ``min.insync.replicas`` 2) and a
   Spark standalone master with two workers, started as ``make cluster-up`` does
   (:func:`ingestctl.demo.start_engines`);
2. **cluster_produce_rate**: ``--events`` generated events produced with ``acks=all``
   (``ingestctl``'s producer, one process): events/s the replicated cluster acknowledges;
3. **cluster_bronze_rate_<n>core** and **cluster_silver_rate_<n>core**: ``bronze_ingest`` and
   then ``silver_refine`` (AvailableNow, spark-submit in client mode on the cluster) over that
   backlog with ``spark.cores.max`` 1 and 2, each from nothing (events / the query span, as
   the bench's throughput: the JVM's and the session's start are left out), each against the
   same job on ``local[*]`` first (**cluster_<job>_rate_local**, the baseline of the ratio).
   The rate per core is what the plan extrapolates; on 2 cores the driver, three brokers and
   the Spark daemons compete with the executors, so these are lower bounds of what cores of
   a real worker carry.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

from bench import jobs, report, workload

if TYPE_CHECKING:
    from bench.run import Bench

#: ``spark.cores.max`` of the measured applications.
CORES = (1, 2)
#: The baseline: the same job on the same backlog in one JVM, as the ``local`` profile runs.
LOCAL = "local[*]"


def _cluster_environment(bench: Bench) -> dict[str, str]:
    """The ``local-cluster`` profile on free ports: the brokers' client and controller ports
    two blocks of three, the Spark master, its UI and the workers' UIs a block of four."""
    from ingestctl.kafka_broker import free_port_block

    kafka, spark = free_port_block(6), free_port_block(4)
    return {
        "INGEST_PROFILE": "local-cluster",
        "INGEST_KAFKA__PORT": str(kafka),
        "INGEST_KAFKA__CONTROLLER_PORT": str(kafka + 3),
        "INGEST_KAFKA__HEAP": "384m",
        "INGEST_SPARK__MASTER": f"spark://127.0.0.1:{spark}",
        "INGEST_SPARK_CLUSTER__MASTER_UI_PORT": str(spark + 1),
        "INGEST_SPARK_CLUSTER__WORKER_UI_PORT": str(spark + 2),
        "INGEST_SPARK_CLUSTER__DATA_DIR": str(bench.env.root / "spark-cluster"),
    }


def _fresh(job: str) -> None:
    """Remove ``job``'s outputs and checkpoint (a run from nothing)."""
    from ingest_core.catalog import get_catalog
    from ingest_core.settings import get_settings

    catalog, settings = get_catalog(), get_settings()
    spec = catalog.job(job)
    for table in spec.outputs:
        shutil.rmtree(catalog.table(table).path(settings), ignore_errors=True)
    shutil.rmtree(spec.checkpoint(settings), ignore_errors=True)


def _rate(
    bench: Bench,
    job: str,
    name: str,
    events: int,
    master: str,
    cores: int | None,
    baseline: float | None = None,
) -> float | None:
    """Run ``job`` (AvailableNow) from nothing on ``master`` with ``spark.cores.max``
    ``cores`` (None: the master's own); record events / query span as ``name`` (against the
    local ``baseline``); return that rate. Silver reads the Bronze the last Bronze run left."""
    rate: float | None = None
    with bench.step(name, "events/s") as loads:
        _fresh(job)
        run = jobs.run_job(
            bench.env,
            job,
            ["--trigger", "available-now"],
            name,
            master=master,
            conf_overrides={"spark.cores.max": str(cores)} if cores else None,
        )
        span = run.query_span_s
        rate = round(events / span) if span else None
        bench.add(
            report.Measurement(
                name,
                rate,
                "events/s",
                baseline=baseline,
                baseline_name=f"{job} on {LOCAL}" if baseline else None,
                load_avg=loads | {"end": report.load_avg()},
                params={
                    "events": events,
                    "cores_max": cores,
                    "master": master,
                    "input_rows": run.app.input_rows if run.app else None,
                },
                profile=run.profile(),
            )
        )
    return rate


def cluster_bench(bench: Bench, events: int) -> None:
    """Steps 1-3 (module docstring); every figure is one :class:`report.Measurement`.

    The caller has made a home current (:meth:`bench.env.BenchEnv.use`); the cluster's
    ports are free ones (:func:`_cluster_environment`), not the bench's broker ports.
    """
    from ingest_core.contracts import TOPICS
    from ingest_core.settings import get_settings
    from ingest_core.topics import ensure_topics
    from ingestctl.demo import start_engines
    from ingestctl.kafka_broker import KafkaBroker
    from ingestctl.spark_cluster import SparkStandalone

    os.environ.update(_cluster_environment(bench))
    get_settings.cache_clear()
    settings = get_settings()
    try:
        start_engines(settings, lambda line: print(f"[bench] {line}", flush=True))
        bootstrap = settings.kafka.bootstrap_servers
        ensure_topics(bootstrap, [settings.kafka.topic(t) for t in TOPICS], kafka=settings.kafka)
        with bench.step("cluster_produce_rate", "events/s") as loads:
            produced = workload.produce_backlog(bootstrap, events)
            bench.add(
                report.Measurement(
                    "cluster_produce_rate",
                    round(produced.rate),
                    "events/s",
                    load_avg=loads | {"end": report.load_avg()},
                    params={
                        "events": produced.acknowledged,
                        "brokers": settings.kafka.brokers,
                        "replication_factor": settings.kafka.replication_factor,
                        "acks": "all",
                        "mean_bytes": round(produced.mean_bytes),
                    },
                )
            )
        for job, short in (("bronze_ingest", "bronze"), ("silver_refine", "silver")):
            local = _rate(bench, job, f"cluster_{short}_rate_local", events, LOCAL, None)
            for cores in CORES:
                name = f"cluster_{short}_rate_{cores}core"
                _rate(bench, job, name, events, settings.spark.master, cores, local)
    finally:
        SparkStandalone(settings).down(grace_s=10)
        KafkaBroker(settings.kafka).down(timeout_s=10)
