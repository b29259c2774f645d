"""The soak's fault kinds and its seeded schedule: which fault, with which parameters, at
which second of the stream. Pure: the same seed, duration and kinds give the same schedule.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The always-on jobs and the scheduled Spark jobs a kill can hit (include/pipeline.yaml).
ALWAYS_ON = ("bronze_ingest", "payment_alerts", "payment_alerts_rt")
SCHEDULED = ("silver_refine", "gold_aggregate", "late_corrections")
AIRFLOW_COMPONENTS = ("scheduler", "api-server", "dag-processor")


@dataclass(frozen=True)
class FaultKind:
    """One kind of infrastructure fault.

    :param name: its name in schedules, results and ``--kinds``.
    :param weight: relative frequency once every kind has had its turn.
    :param what: one line for the report and ``ingestctl soak --help``.
    :param draw: its parameters, drawn from the schedule's random generator and the longest
        outage allowed (seconds).
    """

    name: str
    weight: float
    what: str
    draw: Callable[[random.Random, float], dict[str, Any]] = field(
        default=lambda rng, longest: {}, compare=False
    )


def _choice(key: str, values: Sequence[str]) -> Callable[[random.Random, float], dict[str, Any]]:
    return lambda rng, longest: {key: rng.choice(list(values))}


def _outage(low: float, high: float) -> Callable[[random.Random, float], dict[str, Any]]:
    return lambda rng, longest: {"seconds": round(rng.uniform(low, max(low, min(high, longest))))}


#: Every fault kind the soak can inject, in the order the first round takes them.
KINDS: tuple[FaultKind, ...] = (
    FaultKind(
        "kill_always_on_driver",
        3,
        "kill -9 of an always-on driver (its spark-submit JVM)",
        _choice("job", ALWAYS_ON),
    ),
    FaultKind(
        "kill_scheduled_driver",
        2,
        "kill -9 of a scheduled job's driver mid-run (Silver, Gold, late corrections)",
        _choice("job", SCHEDULED),
    ),
    FaultKind(
        "kill_airflow_component",
        2,
        "kill -9 of the Airflow scheduler, API server or DAG processor",
        _choice("component", AIRFLOW_COMPONENTS),
    ),
    FaultKind("stop_metadata_db", 1, "the metadata database stopped for 10-90 s", _outage(10, 90)),
    FaultKind(
        "kill_metadata_db",
        1,
        "kill -9 of the metadata database, back 5-20 s later (as its service manager would)",
        _outage(5, 20),
    ),
    FaultKind("stop_broker", 1, "the Kafka broker stopped for 10-300 s", _outage(10, 300)),
    FaultKind(
        "kill_broker",
        1,
        "kill -9 of the Kafka broker, back 5-30 s later (as its service manager would)",
        _outage(5, 30),
    ),
    FaultKind("mark_task_failed", 1, "a running Spark task marked failed through the API"),
    # Half the weight: each one holds medallion_incremental (one run at a time) for up to
    # the soak's task budget, and the faults that need a running medallion task wait.
    FaultKind(
        "hang_scheduled_driver",
        0.5,
        "a scheduled job's driver SIGSTOPped mid-run and left hung: its task's execution_timeout"
        " must end it",
        _choice("job", SCHEDULED),
    ),
    FaultKind("kill_gate", 1, "kill -9 of a running gate task (gate_silver or gate_gold)"),
    FaultKind("gates_at_once", 1, "three Silver gates started at once beside the scheduled ones"),
    FaultKind(
        "concurrent_commits",
        1,
        "Spark and delta-rs committing to one table at once, Spark's commits paused 50 ms",
    ),
    # Half the weight: Airflow runs one backfill of a DAG at a time and each takes 75-570 s,
    # so they queue; soak run 13 drew six of forty, and the last one started 13 minutes
    # after the stream ended (the run took 36 minutes; the default's target is 30).
    FaultKind("backfill", 0.5, "`airflow backfill create` of two intervals beside scheduled runs"),
    FaultKind(
        "checkpoint_backup",
        1,
        "a checkpoint backup of a running always-on job",
        _choice("job", ALWAYS_ON),
    ),
    FaultKind(
        "checkpoint_restore",
        1,
        "bronze_ingest backed up, stopped, that backup restored, started (the operator's way)",
    ),
    FaultKind(
        "table_maintenance",
        1,
        "table_maintenance run mid-stream (pauses and restarts the always-on writers)",
    ),
    FaultKind("layer_full_refresh", 1, "layer_full_refresh of Gold mid-stream"),
)
#: The fault kinds of a replicated cluster (issue 54; the ``local-cluster`` profile, where
#: ``kafka.brokers`` > 1): one broker at a time, the others keep the topics writable
#: (``min.insync.replicas`` of 3). ``node`` "leader" is the leader of the first contract
#: topic's partition 0 when the fault starts, "controller" the quorum's active controller.
CLUSTER_KINDS: tuple[FaultKind, ...] = (
    FaultKind(
        "kill_cluster_broker",
        2,
        "kill -9 of one broker of the cluster (a partition leader, the active controller or"
        " any node), back 5-60 s later",
        lambda rng, longest: {
            "node": rng.choice(["leader", "controller", "any"]),
            "seconds": round(rng.uniform(5, max(5, min(60, longest)))),
        },
    ),
    FaultKind(
        "stop_cluster_broker",
        1,
        "one broker of the cluster stopped for 10-300 s (any node)",
        lambda rng, longest: {
            "node": "any",
            "seconds": round(rng.uniform(10, max(10, min(300, longest)))),
        },
    ),
)
#: The fault kinds of an embedded Spark standalone cluster (issue 54; ``local-cluster``, where
#: ``spark_cluster.workers`` > 0): a worker lost with its executors (the master starts
#: executors on the other worker, Spark retries the lost tasks), or one executor.
SPARK_CLUSTER_KINDS: tuple[FaultKind, ...] = (
    FaultKind(
        "kill_spark_worker",
        2,
        "kill -9 of one Spark worker (its executors exit with it), back 5-60 s later",
        lambda rng, longest: {"worker": "any", **_outage(5, 60)(rng, longest)},
    ),
    FaultKind(
        "kill_spark_executor",
        2,
        "kill -9 of one executor JVM of a running application (the master starts another)",
    ),
)
#: Both clusters at once (a rack lost): one broker and one Spark worker.
BOTH_CLUSTERS_KINDS: tuple[FaultKind, ...] = (
    FaultKind(
        "kill_broker_and_worker",
        1,
        "kill -9 of one broker and one Spark worker at once, both back 5-60 s later",
        lambda rng, longest: {"node": "any", "worker": "any", **_outage(5, 60)(rng, longest)},
    ),
)
KINDS_BY_NAME = {
    kind.name: kind for kind in (*KINDS, *CLUSTER_KINDS, *SPARK_CLUSTER_KINDS, *BOTH_CLUSTERS_KINDS)
}


def default_kinds(brokers: int, workers: int = 0) -> tuple[FaultKind, ...]:
    """Every kind that applies to a platform with ``brokers`` embedded brokers and
    ``workers`` embedded Spark workers: a broker's kinds only when there are several, a
    worker's when there is a Spark cluster, both at once when there are both."""
    kinds = list(KINDS)
    if brokers > 1:
        kinds += CLUSTER_KINDS
    if workers:
        kinds += SPARK_CLUSTER_KINDS
    if brokers > 1 and workers:
        kinds += BOTH_CLUSTERS_KINDS
    return tuple(kinds)


@dataclass(frozen=True)
class PlannedFault:
    """One fault of the schedule: ``kind`` with ``params`` at ``at_s`` seconds into the
    stream; ``number`` is its place in the schedule (1-based)."""

    number: int
    at_s: float
    kind: str
    params: dict[str, Any]

    def label(self) -> str:
        """``kind`` with its parameters, one word each (``kill_always_on_driver:bronze_ingest``)."""
        words = [str(v) for k, v in sorted(self.params.items()) if k != "seconds"]
        seconds = self.params.get("seconds")
        return ":".join([self.kind, *words]) + (f" ({seconds} s)" if seconds else "")


def parse_kinds(text: str | None, brokers: int = 1, workers: int = 0) -> tuple[FaultKind, ...]:
    """``--kinds``: comma-separated kind names, or None/empty for all that apply to a
    platform of ``brokers`` embedded brokers and ``workers`` Spark workers
    (:func:`default_kinds`).

    :raises ValueError: an unknown name (the message lists the known ones), or a cluster's
        kind on a platform without that cluster.
    """
    if not text:
        return default_kinds(brokers, workers)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in KINDS_BY_NAME]
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; known: {', '.join(KINDS_BY_NAME)}")
    applicable = {kind.name for kind in default_kinds(brokers, workers)}
    missing = [name for name in names if name not in applicable]
    if missing:
        raise ValueError(
            f"fault kinds {missing} need the local-cluster profile's clusters (kafka.brokers "
            "> 1 for a broker's kinds, spark_cluster.workers > 0 for a worker's: "
            "INGEST_PROFILE=local-cluster)"
        )
    return tuple(KINDS_BY_NAME[name] for name in dict.fromkeys(names))


def schedule(
    seed: int,
    window_s: float,
    count: int,
    kinds: Sequence[FaultKind] = KINDS,
    *,
    longest_outage_s: float = 300,
    start_s: float = 0,
) -> list[PlannedFault]:
    """``count`` faults spread over ``[start_s, start_s + window_s)`` seconds of the stream.

    Each fault gets its own slot of ``window_s / count`` seconds and a random moment inside
    it (so faults land mid-batch and at no fixed phase). The first ``len(kinds)`` faults take
    every kind once, in a shuffled order; the rest are drawn by weight.

    :param longest_outage_s: the longest outage a drawn ``seconds`` parameter may ask for.
    :raises ValueError: a non-positive window or count, or no kinds.
    """
    if window_s <= 0 or count <= 0:
        raise ValueError(f"window_s and count must be positive, got {window_s} and {count}")
    if not kinds:
        raise ValueError("no fault kinds to schedule")
    rng = random.Random(seed)
    first = list(kinds)
    rng.shuffle(first)
    slot = window_s / count
    planned = []
    for number in range(count):
        kind = first[number] if number < len(first) else _weighted(rng, kinds)
        at = start_s + slot * (number + rng.uniform(0.1, 0.9))
        planned.append(
            PlannedFault(number + 1, round(at, 1), kind.name, kind.draw(rng, longest_outage_s))
        )
    return planned


def _weighted(rng: random.Random, kinds: Sequence[FaultKind]) -> FaultKind:
    return rng.choices(list(kinds), weights=[kind.weight for kind in kinds])[0]
