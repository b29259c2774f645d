"""What an always-on job needs to be supervised: a heartbeat, a pid, and a graceful stop.

Each always-on job (``bronze_ingest``, ``payment_alerts``, ``payment_alerts_rt``) runs its
queries through
:func:`run_supervised`, which

* registers a :class:`HeartbeatListener` (a ``StreamingQueryListener``) that rewrites
  ``<storage.state_dir>/jobs/<job>/heartbeat.json`` on every query event: started, progress
  (batch id, input rows, rates, durations, end offsets, state rows and memory, and the
  last :data:`HISTORY` batches for the Streaming page's charts), idle, and terminated; the
  streaming supervisor restarts a job whose heartbeat grows older than
  ``supervisor.heartbeat_timeout_s``;
* stops the queries gracefully when ``stop.request`` appears beside the heartbeat: it waits
  until no micro-batch is running (``isTriggerActive`` false), then stops, so a stop never
  interrupts a batch half-written (a batch that is interrupted anyway is replayed
  idempotently on restart); a real-time job (``between_batches=False``) stops at once, its
  batch lasting its whole interval; SIGTERM (``kill <pid>``, the supervisor's terminate, a
  container stop) is the same request;
* commits each batch's Kafka end offsets to the job's consumer group
  (:mod:`ingest_core.consumer_groups`), so Kafka's own tools show the job's lag;
* leaves the heartbeat at ``stopped`` after a stop, SIGTERM or Ctrl-C, ``failed`` after a
  query's failure: never ``running`` for a driver that has gone.

The driver's checkpoint lock (:mod:`ingest_core.locks`) carries its pid, so the supervisor
knows which process to watch or stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming import StreamingQueryListener as _Listener

from ingest_core.consumer_groups import GroupOffsetCommitter, kafka_offsets
from ingest_core.runtime_files import RuntimeFiles, read_json, runtime_files, write_json
from ingest_core.settings import PlatformSettings, get_settings

#: Batches kept per query in the heartbeat's ``history`` (the Streaming page's charts).
HISTORY = 60


def progress_summary(progress: Any) -> dict[str, Any]:
    """The heartbeat's view of one ``StreamingQueryProgress``.

    :returns: ``batch_id``, ``timestamp`` (the trigger's start, ISO UTC), ``input_rows``,
        ``input_rows_per_second``, ``processed_rows_per_second``, ``duration_ms`` (phase ->
        milliseconds),
        ``end_offsets`` (one per source; for Kafka ``{topic: {partition: next offset}}``),
        ``state_rows`` and ``state_memory_bytes`` (summed over stateful operators),
        ``event_time`` (watermark and min/max event time when the query has a watermark),
        ``observed`` (the query's ``DataFrame.observe`` metrics: name -> {metric: value}).
    """
    state = list(progress.stateOperators or [])
    return {
        "batch_id": progress.batchId,
        "timestamp": progress.timestamp,
        "input_rows": progress.numInputRows,
        "input_rows_per_second": progress.inputRowsPerSecond,
        "processed_rows_per_second": progress.processedRowsPerSecond,
        "duration_ms": dict(progress.durationMs or {}),
        "end_offsets": [_offsets(source.endOffset) for source in progress.sources],
        "state_rows": sum(op.numRowsTotal for op in state),
        "state_memory_bytes": sum(op.memoryUsedBytes for op in state),
        "event_time": dict(progress.eventTime or {}),
        "observed": {name: row.asDict() for name, row in (progress.observedMetrics or {}).items()},
    }


def _offsets(value: Any) -> Any:
    # Spark hands a source's offsets over as JSON text (Kafka: {"topic": {"partition": n}}).
    try:
        return json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return value


def carried_over(previous: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The part of a previous driver's heartbeat (:class:`HeartbeatListener`) a restarted
    driver keeps: per query, ``last_progress`` and ``history``, with ``status``
    ``"restarted"`` and ``carried_over`` true. Pure; ``{}`` for no (or a foreign) heartbeat.
    """
    kept: dict[str, dict[str, Any]] = {}
    for name, query in ((previous or {}).get("queries") or {}).items():
        if isinstance(query, dict) and query.get("last_progress"):
            kept[str(name)] = {
                "status": "restarted",
                "carried_over": True,
                "last_progress": query["last_progress"],
                "history": list(query.get("history") or [])[-HISTORY:],
            }
    return kept


class HeartbeatListener(_Listener):
    """Writes the job's heartbeat file on every query event (see the module docstring).

    Heartbeat JSON: ``job``, ``pid``, ``status`` (``running``, ``stopping``, ``stopped``,
    ``failed``), ``updated_at`` (ISO UTC), ``updated_at_epoch_s`` (float seconds) and
    ``queries``: query name -> ``id``, ``run_id``, ``status``, ``last_event_at``,
    ``last_progress`` (:func:`progress_summary`), ``history`` (the last :data:`HISTORY`
    batches: ``batch_id``, ``timestamp``, ``input_rows``, ``input_rows_per_second``,
    ``processed_rows_per_second``, ``duration_ms`` (the whole trigger, milliseconds)),
    ``exception``.

    A restarted driver keeps what the previous one's heartbeat knew of each query: its
    ``last_progress`` and ``history`` stay (marked ``carried_over``: true) until the query's
    first batch in this run replaces them, so an idle job's page shows its last batch and
    its age instead of nothing (issue 51).

    :param committer: commits each batch's Kafka end offsets to the job's consumer group;
        None commits nothing.
    """

    def __init__(
        self, job: str, files: RuntimeFiles, committer: GroupOffsetCommitter | None = None
    ) -> None:
        self.job = job
        self.files = files
        self.committer = committer
        self.status = "running"
        self.queries: dict[str, dict[str, Any]] = carried_over(read_json(files.heartbeat))
        self._terminated: set[str] = set()
        self._changed = threading.Condition()

    def wait_terminated(self, query_ids: list[str], timeout_s: float) -> bool:
        """Wait until Spark delivered the terminated event of every query in ``query_ids``
        (Spark posts listener events asynchronously and in order, so the queries' last
        progress events came before). Returns whether they all arrived within ``timeout_s``
        seconds."""
        with self._changed:
            return self._changed.wait_for(
                lambda: set(query_ids) <= self._terminated, timeout=timeout_s
            )

    def _query(self, event: Any) -> dict[str, Any]:
        # Idle and terminated events carry the query's id but not its name.
        query_id = str(event.id)
        known = [entry for entry in self.queries.values() if entry.get("id") == query_id]
        if known:
            entry = known[0]
        else:
            name = getattr(event, "name", None) or query_id
            entry = self.queries.setdefault(name, {})
            entry["id"] = query_id
        if getattr(event, "runId", None) is not None:
            entry["run_id"] = str(event.runId)
        entry["last_event_at"] = datetime.now(UTC).isoformat()
        return entry

    def beat(self, status: str | None = None) -> None:
        """Rewrite the heartbeat file now (optionally with a new job status)."""
        if status:
            self.status = status
        now = datetime.now(UTC)
        write_json(
            self.files.heartbeat,
            {
                "job": self.job,
                "pid": os.getpid(),
                "status": self.status,
                "updated_at": now.isoformat(),
                "updated_at_epoch_s": now.timestamp(),
                "queries": self.queries,
            },
        )

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's listener API
        self._query(event)["status"] = "started"
        self.beat()

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        progress = event.progress
        entry = self._query(progress)
        entry["status"] = "active"
        summary = progress_summary(progress)
        entry["last_progress"] = summary
        entry.pop("carried_over", None)
        point = {
            "batch_id": summary["batch_id"],
            "timestamp": summary["timestamp"],
            "input_rows": summary["input_rows"],
            "input_rows_per_second": summary["input_rows_per_second"],
            "processed_rows_per_second": summary["processed_rows_per_second"],
            "duration_ms": summary["duration_ms"].get("triggerExecution"),
        }
        entry["history"] = [*entry.get("history", []), point][-HISTORY:]
        self.beat()
        if self.committer is not None:
            self.committer.commit(kafka_offsets(summary["end_offsets"]))

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        self._query(event)["status"] = "idle"
        self.beat()

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        entry = self._query(event)
        entry["status"] = "terminated"
        entry["exception"] = event.exception
        self.beat("failed" if event.exception else None)
        with self._changed:
            self._terminated.add(str(event.id))
            self._changed.notify_all()


def run_supervised(
    spark: SparkSession,
    job: str,
    start_queries: Callable[[], list[StreamingQuery]],
    *,
    settings: PlatformSettings | None = None,
    poll_s: float = 2.0,
    between_batches: bool = True,
) -> int:
    """Run a job's queries until they end (AvailableNow), fail, or a stop is requested (the
    ``stop.request`` file, or SIGTERM when called from the main thread).

    :param start_queries: starts the job's queries and returns them.
    :param poll_s: seconds between checks for a stop request (whole seconds, at least 1).
    :param between_batches: a stop waits (up to ``supervisor.stop_timeout_s``) for the
        current micro-batch to end; False stops at once (real-time mode, whose batch lasts
        its whole interval and whose Kafka sink replays what an interrupted batch sent).
    :returns: 0 when the queries ended or were stopped on request.
    :raises pyspark.errors.StreamingQueryException: a query failed (the heartbeat says
        ``failed`` with the exception).
    :raises KeyboardInterrupt: Ctrl-C (the heartbeat says ``stopped``).
    :raises SystemExit: SIGTERM before the queries started (exit 143; ``stopped``).
    """
    settings = settings or get_settings()
    files = runtime_files(job, settings)
    files.stop_request.unlink(missing_ok=True)  # a request older than this driver is void
    committer = GroupOffsetCommitter(job, settings)
    listener = HeartbeatListener(job, files, committer)
    spark.streams.addListener(listener)
    listener.beat("running")
    terminate = threading.Event()
    polling = threading.Event()

    def on_sigterm() -> None:
        terminate.set()
        if not polling.is_set():
            # Still starting (a JVM call or kafka-python can block for long): stop now.
            raise SystemExit(128 + signal.SIGTERM)

    restore_sigterm = _on_sigterm(on_sigterm)
    queries: list[StreamingQuery] = []
    try:
        queries = start_queries()
        polling.set()  # from here on, SIGTERM waits for the micro-batch to end
        while any(query.isActive for query in queries):
            _await_queries(queries, max(1, round(poll_s)))
            if files.stop_request.exists() or terminate.is_set():
                listener.beat("stopping")
                _stop_between_batches(
                    queries, settings.supervisor.stop_timeout_s if between_batches else 0.0
                )
                files.stop_request.unlink(missing_ok=True)
                break
        for query in queries:
            query.awaitTermination()  # re-raises a query's failure
    except Exception:
        # A SIGTERM to the whole process group also stops the JVM under the queries.
        listener.beat("stopped" if terminate.is_set() else "failed")
        raise
    except BaseException:  # Ctrl-C, SIGTERM while starting: an operator's stop, not a failure
        listener.beat("stopped")
        raise
    finally:
        restore_sigterm()
        # Spark delivers listener events asynchronously: let the last ones reach the listener,
        # then unregister it, before the process (and py4j's callback server) goes away.
        # Otherwise the JVM calls back a dead Python side and logs a py4j stack trace.
        # Best effort: if the JVM is gone, the original error must surface, not py4j's.
        with contextlib.suppress(Exception):
            # Only queries that ended: after an interrupt the others are still active and
            # post nothing, so waiting for them would only delay the exit.
            ended = [str(query.id) for query in queries if not query.isActive]
            listener.wait_terminated(ended, timeout_s=10)
            spark.streams.removeListener(listener)
        committer.close()
    listener.beat("stopped")
    return 0


def _await_queries(queries: list[StreamingQuery], timeout_s: int) -> None:
    """Wait up to ``timeout_s`` seconds for the first active query of ``queries`` to end,
    after re-raising the failure of any of them that ended with one.

    Only these queries count: ``spark.streams.awaitAnyTermination`` would also wake on, and
    re-raise the failure of, any other query the session ever ran (a notebook's, the test
    suite's), killing a healthy job and leaving its query running unsupervised.

    :raises pyspark.errors.StreamingQueryException: one of ``queries`` failed.
    """
    for query in queries:
        if not query.isActive:
            query.awaitTermination()  # returns at once; re-raises its failure
    active = [query for query in queries if query.isActive]
    if active:
        active[0].awaitTermination(timeout_s)


def mark_failed(job: str, message: str, settings: PlatformSettings | None = None) -> int:
    """For a driver that cannot start its queries: ``<job>: <message>`` on stderr and a
    ``failed`` heartbeat (with the message), so the supervisor and the operator see why.

    :returns: 1, the driver's exit code.
    """
    import sys

    print(f"{job}: {message}", file=sys.stderr)
    listener = HeartbeatListener(job, runtime_files(job, settings or get_settings()))
    listener.queries[job] = {"status": "failed", "exception": message}
    listener.beat("failed")
    return 1


def _on_sigterm(handler: Callable[[], None]) -> Callable[[], None]:
    """Call ``handler`` on SIGTERM instead of dying at once; returns what restores the previous
    handling. Python only lets the main thread install signal handlers: elsewhere (a job run
    in a thread, as in tests) SIGTERM keeps its previous handling."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: handler())

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def _stop_between_batches(queries: list[StreamingQuery], timeout_s: float) -> None:
    from ingest_core.waiting import wait_until

    deadline = time.monotonic() + timeout_s  # one budget for all the queries
    for query in queries:

        def between_batches(query: StreamingQuery = query) -> bool:
            return not (query.isActive and query.status["isTriggerActive"])

        with contextlib.suppress(TimeoutError):  # stop anyway: the batch is replayed idempotently
            wait_until(
                between_batches,
                max(0.0, deadline - time.monotonic()),
                0.2,
                what="the query to be between micro-batches",
            )
        query.stop()
