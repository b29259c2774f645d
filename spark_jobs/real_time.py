"""Guard rails of Spark 4.2's real-time mode (``--trigger real-time=<interval>``).

Real-time mode runs each Kafka partition as one long-running task for the whole batch
duration, and processes records as they arrive instead of once per micro-batch. It accepts
only stateless queries writing to Kafka, ``foreach``, console or memory sinks (Spark 4.2's
documentation of ``DataStreamWriter.trigger(realTime=...)``; ``../shared/RUNTIME_NOTES.md``).
Two things go wrong late and quietly if nobody checks them first:

* a plan with a stateful operator (an aggregation, a deduplication, a stream-stream join,
  ``*WithState``) or a Delta sink: Spark fails only once the query starts;
* fewer task slots than source partitions: the partitions without a slot wait for one, so
  their records are delayed by a whole batch (measured: with 3 partitions on ``local[2]``
  a fifth of the records took more than 10 s), not refused.

:func:`check_plan` and :func:`check_task_slots` refuse both before the query starts, with
one line naming the operator, sink or numbers. :func:`local_master_for` sizes a local
master for the partitions: in local mode a task slot is a thread, and a real-time task
spends its time waiting on Kafka, so one thread per partition costs no extra core.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.triggers import TriggerError

#: Logical plan nodes that keep state across records (Spark's ``UnsupportedOperationChecker``
#: refuses them in real-time mode): aggregations, deduplication, joins of two streams,
#: arbitrary stateful processing, analytic windows. A ``Join`` counts only when both of its
#: sides are streams (a stream-static join keeps no state).
STATEFUL_NODES = (
    "Aggregate",
    "Deduplicate",
    "DeduplicateWithinWatermark",
    "FlatMapGroupsWithState",
    "FlatMapGroupsInPandasWithState",
    "TransformWithState",
    "TransformWithStateInPySpark",
    "Join",
    "Window",
)
#: Sinks real-time mode writes to (``DataStreamWriter.format``; foreach/foreachBatch aside).
REAL_TIME_SINKS = ("kafka", "console", "memory", "foreach")

_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")


class RealTimeRefusedError(TriggerError):
    """A query cannot run in real-time mode; the message says which operator, sink or how
    many task slots, and why."""


def stateful_operators(frame: DataFrame) -> list[str]:
    """Names of the stateful nodes (:data:`STATEFUL_NODES`) in ``frame``'s analysed logical
    plan, in plan order (top first), each once.

    Reads the plan through the JVM (``queryExecution().analyzed()``): classic Spark only.
    """
    found: list[str] = []
    pending = [frame._jdf.queryExecution().analyzed()]
    while pending:
        node = pending.pop(0)
        name = node.nodeName()
        children = [node.children().apply(i) for i in range(node.children().size())]
        stateful = name in STATEFUL_NODES and (
            name != "Join" or all(child.isStreaming() for child in children)
        )
        if stateful and name not in found:
            found.append(name)
        pending.extend(children)
    return found


def check_plan(job: str, frame: DataFrame, sink_format: str) -> None:
    """Refuse a real-time query whose plan keeps state or whose sink is not supported.

    :param job: the job's name, for the message.
    :param frame: the streaming DataFrame the query would write.
    :param sink_format: the ``DataStreamWriter`` format (``kafka``, ``delta``...).
    :raises RealTimeRefusedError: one line naming the stateful operator or the sink, and why.
    """
    if sink_format not in REAL_TIME_SINKS:
        raise RealTimeRefusedError(
            f"{job}: real-time mode refused: its sink is {sink_format!r}; Spark 4.2's "
            f"real-time mode writes only to {', '.join(REAL_TIME_SINKS)} (a Delta table "
            "needs a micro-batch trigger)"
        )
    stateful = stateful_operators(frame)
    if stateful:
        raise RealTimeRefusedError(
            f"{job}: real-time mode refused: its plan has the stateful operator "
            f"{stateful[0]}; Spark 4.2's real-time mode runs only stateless queries (keep "
            "this rule on a micro-batch trigger)"
        )


def local_threads(master: str, cores: int) -> int | None:
    """Task slots of a local master: ``local`` 1, ``local[n]`` n, ``local[*]`` ``cores``;
    None for any other master (a cluster's slots are its executors' cores)."""
    match = _LOCAL.match(master.strip())
    if match is None:
        return None
    count = match.group(1)
    if count is None:
        return 1
    return cores if count == "*" else int(count)


def local_master_for(master: str, partitions: int) -> str:
    """The master a real-time job asks for: ``local[*]`` (or bare ``local``) becomes
    ``local[<partitions>]`` when the machine has fewer cores than that; an explicit
    ``local[n]`` and cluster masters are kept (and checked by :func:`check_task_slots`)."""
    import os

    stripped = master.strip()
    if stripped in ("local", "local[*]") and (os.cpu_count() or 1) < partitions:
        return f"local[{partitions}]"
    return stripped


def task_slots(spark: SparkSession, needed: int = 1, wait_s: float = 30.0) -> int:
    """Tasks the session can run at once: local threads, or the registered executors' cores
    (Spark's ``SparkContext.maxNumConcurrentTasks`` for the default resource profile; not
    ``defaultParallelism``, which is ``spark.default.parallelism`` when that is set). On a
    cluster, waits up to ``wait_s`` seconds for executors to register until ``needed``
    slots are there, and returns what registered by then."""
    from ingest_core.waiting import wait_until

    context = spark.sparkContext._jsc.sc()
    profile = context.resourceProfileManager().defaultResourceProfile()

    def slots() -> int:
        return int(context.maxNumConcurrentTasks(profile))

    if local_threads(spark.sparkContext.master or "", 1) is not None:
        return slots()
    with contextlib.suppress(TimeoutError):  # what registered by then is the answer
        wait_until(lambda: slots() >= needed, wait_s, 1.0, what="executors to register")
    return slots()


def check_task_slots(job: str, partitions: Mapping[str, int], master: str, slots: int) -> None:
    """Refuse a real-time query with fewer task slots than Kafka partitions to read.

    :param partitions: ``{topic: partition count}`` of the topics the query reads; real-time
        mode needs one task slot per partition for the whole batch.
    :param master: the Spark master, for the message.
    :param slots: the task slots the master gives (:func:`task_slots`).
    :raises RealTimeRefusedError: the numbers (needed, per topic, offered) and what to change.
    """
    needed = sum(partitions.values())
    if slots >= needed:
        return
    per_topic = ", ".join(f"{topic}: {count}" for topic, count in sorted(partitions.items()))
    raise RealTimeRefusedError(
        f"{job}: real-time mode refused: it needs {needed} task slots (one per Kafka "
        f"partition; {per_topic}) but the Spark master {master} offers {slots}; give it "
        f"more cores (spark.cores.max, local[{needed}]) or fewer partitions"
    )
