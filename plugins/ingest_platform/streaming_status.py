"""What the Streaming page and ``/metrics`` show: one snapshot of the platform's streams.

Read-only and cheap enough to compute every few seconds, from what the platform already
writes: the always-on jobs' heartbeats and supervisor records
(:mod:`ingest_core.runtime_files`), the checkpoints' committed offsets against the broker's
end offsets (kafka-python), the Delta logs (delta-rs) and the gates' bookkeeping
(:mod:`ingest_core.quality.state`). Job and table lists come from include/pipeline.yaml.
Imports neither pyspark nor Airflow; each section that cannot be read (broker down, a
table being rewritten) is reported in ``errors`` instead of failing the whole snapshot.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from ingest_core.catalog import JobSpec, KafkaSourceSpec, get_catalog
from ingest_core.checkpoint_health import query_dirs
from ingest_core.consumer_groups import (
    KAFKA_API_VERSION,
    TopicOffsets,
    consumer_group,
    kafka_offsets,
)
from ingest_core.delta_tables import committed_offsets, table_activity, table_exists
from ingest_core.runtime_files import read_json, runtime_files
from ingest_core.settings import PlatformSettings, get_settings

#: Job states the page and ``ingest_job_state`` use.
JOB_STATES = ("running", "starting", "stale", "stopped", "failed")
#: Newest alerts shown.
ALERTS_SHOWN = 10
#: Total-lag samples kept per job for the trend (one per snapshot, at most one per 5 s).
LAG_SAMPLES = 120
#: Milliseconds the lag section waits for the broker before reporting it unreachable.
KAFKA_TIMEOUT_MS = 6000
_lag_history: dict[str, deque[tuple[float, int]]] = {}
_lag_lock = threading.Lock()


def _epoch_s(value: Any) -> float | None:
    """Seconds since the epoch of an ISO-8601 text (Spark's ``...Z`` included), else None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def job_state(
    running: bool, heartbeat_status: str | None, age_s: float | None, timeout_s: float
) -> str:
    """One of :data:`JOB_STATES`.

    * ``running``: the driver is alive and its heartbeat younger than ``timeout_s``
      (``supervisor.heartbeat_timeout_s``);
    * ``starting``: alive, no heartbeat yet; ``stale``: alive, heartbeat too old (the
      supervisor restarts it on its next run);
    * ``failed``: a query failed, or the driver is gone while its heartbeat still says
      ``running``/``stopping`` (killed: kill -9, the kernel's OOM killer; the supervisor
      restarts it); ``stopped``: not alive after a clean stop, or never started.
    """
    if heartbeat_status == "failed":
        return "failed"
    if not running:
        return "failed" if heartbeat_status in ("running", "stopping") else "stopped"
    if age_s is None:
        return "starting"
    return "running" if age_s <= timeout_s else "stale"


def query_view(name: str, query: dict[str, Any], now: float) -> dict[str, Any]:
    """One query of a heartbeat (:class:`spark_jobs.streaming_runtime.HeartbeatListener`)
    as the page shows it.

    :returns: ``name``, ``status``, ``batch_id``, ``last_batch_at`` (ISO UTC),
        ``input_rows_per_second`` and ``processed_rows_per_second`` (rows/s),
        ``batch_duration_s`` (the whole trigger), ``watermark`` (ISO UTC, None before the
        first batch with event time), ``watermark_delay_s`` (now minus the watermark),
        ``has_watermark`` (False: the query defines no event-time watermark, as a stateless
        query; None: no batch yet), ``state_rows``, ``observed`` and ``history`` (recent
        batches, oldest first).
    """
    progress = query.get("last_progress") or {}
    durations = progress.get("duration_ms") or {}
    watermark = (progress.get("event_time") or {}).get("watermark")
    watermark_s = _epoch_s(watermark)
    if watermark_s is not None and watermark_s <= 0:  # Spark's "no watermark yet"
        watermark, watermark_s = None, None
    trigger_ms = durations.get("triggerExecution")
    return {
        "name": name or "(job)",
        "status": query.get("status"),
        "batch_id": progress.get("batch_id"),
        "last_batch_at": progress.get("timestamp"),
        "input_rows_per_second": _number(progress.get("input_rows_per_second")),
        "processed_rows_per_second": _number(progress.get("processed_rows_per_second")),
        "batch_duration_s": None if trigger_ms is None else trigger_ms / 1000,
        "watermark": watermark,
        "watermark_delay_s": None if watermark_s is None else max(0.0, now - watermark_s),
        # Spark reports eventTime.watermark only for a query with a watermark.
        "has_watermark": "watermark" in (progress.get("event_time") or {}) if progress else None,
        "state_rows": progress.get("state_rows"),
        "observed": progress.get("observed") or {},
        "exception": query.get("exception"),
        "history": query.get("history") or [],
        "carried_over": bool(query.get("carried_over")),
        "last_batch_age_s": _age(progress.get("timestamp"), now),
    }


def _age(value: Any, now: float) -> float | None:
    when = _epoch_s(value)
    return None if when is None else max(0.0, now - when)


#: What a running always-on job is doing (:func:`job_activity`).
JOB_ACTIVITIES = ("processing", "idle", "stuck")


def job_activity(
    state: str, lag_total: int | None, last_batch_age_s: float | None, stuck_after_s: float
) -> str | None:
    """What a job in ``state`` is doing, which tells a healthy idle job from a stuck one:

    * ``processing``: its newest batch is younger than ``stuck_after_s``;
    * ``idle``: no batch for longer (or none since its start), and nothing waits in Kafka
      (``lag_total`` 0, or a job that reads no Kafka: ``None``);
    * ``stuck``: records wait in Kafka while no batch ran for ``stuck_after_s`` seconds.

    None unless ``state`` is ``running`` (``stale``, ``failed``... say it already).
    ``stuck_after_s`` is ``supervisor.heartbeat_timeout_s``. Pure.
    """
    if state != "running":
        return None
    if last_batch_age_s is not None and last_batch_age_s < stuck_after_s:
        return "processing"
    return "stuck" if lag_total else "idle"


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def job_view(job: str, settings: PlatformSettings, now: float) -> dict[str, Any]:
    """One always-on job: ``job``, ``state`` (:func:`job_state`), ``pid``,
    ``heartbeat_age_s``, ``disabled``, ``restarts_last_hour`` (supervisor starts in the last
    3,600 s after the first one it recorded), ``trigger`` and ``queries``
    (:func:`query_view`)."""
    from ingest_platform import supervisor

    current = supervisor.status(job, settings, now)
    beat = current.heartbeat or {}
    record = read_json(runtime_files(job, settings).supervisor) or {}
    starts = sorted(float(t) for t in record.get("starts", []))
    return {
        "job": job,
        "state": job_state(
            current.running,
            beat.get("status"),
            current.heartbeat_age_s,
            settings.supervisor.heartbeat_timeout_s,
        ),
        "pid": current.pid,
        "disabled": current.disabled,
        "paused_by": list(current.paused_by),
        "heartbeat_age_s": current.heartbeat_age_s,
        "restarts_last_hour": sum(1 for t in starts[1:] if now - t < 3600),
        "trigger": get_catalog().job(job).default_trigger,
        # Spark names a job's queries "<job>.<query>"; lag rows use the checkpoint's
        # "<query>" folder: one name on both.
        "queries": [
            query_view(name.removeprefix(f"{job}."), query, now)
            for name, query in (beat.get("queries") or {}).items()
        ],
    }


def checkpoint_positions(job: JobSpec, settings: PlatformSettings) -> dict[str, TopicOffsets]:
    """``{query name: {topic: {partition: next offset}}}``: the Kafka offsets each of the
    job's queries committed in its checkpoint (``""`` names a single-query job; a query that
    committed nothing yet is absent)."""
    positions = {}
    for query, folder in query_dirs(job.checkpoint(settings)).items():
        committed = committed_offsets(folder)
        offsets = kafka_offsets(committed["sources"]) if committed else {}
        if offsets:
            positions[query] = offsets
    return positions


def lag_rows(
    positions: dict[str, dict[str, TopicOffsets]],
    end_offsets: dict[tuple[str, int], int],
    start_offsets: dict[tuple[str, int], int],
    declared: dict[str, list[str]],
) -> list[dict[str, Any]]:
    """Kafka lag per job, query, topic and partition: the broker's end offset minus the
    offset the checkpoint committed (a partition the checkpoint has not reached yet counts
    from the earliest offset Kafka holds). Pure: the offsets are inputs.

    :param positions: job -> :func:`checkpoint_positions`.
    :param end_offsets: ``(topic, partition)`` -> the broker's end offset.
    :param start_offsets: ``(topic, partition)`` -> the earliest offset Kafka holds.
    :param declared: job -> the topics its catalog source reads (read even before the
        first committed batch).
    :returns: rows of ``job``, ``query``, ``topic``, ``partition``, ``committed`` (None when
        nothing was committed), ``end``, ``lag`` (records still to read, never negative) and
        ``note`` (None, or what makes the offsets suspect: the checkpoint ahead of the
        broker, or records deleted before the job read them).
    """
    rows = []
    for job in sorted(set(positions) | set(declared)):
        queries = positions.get(job) or {"": {}}
        for query, offsets in queries.items():
            topics = set(offsets) | (set(declared.get(job, [])) if query in ("", job) else set())
            for topic in sorted(topics):
                parts = sorted(p for (t, p) in end_offsets if t == topic)
                for partition in parts:
                    end = end_offsets[(topic, partition)]
                    committed = offsets.get(topic, {}).get(partition)
                    base = (
                        committed
                        if committed is not None
                        else start_offsets.get((topic, partition), 0)
                    )
                    start = start_offsets.get((topic, partition), 0)
                    rows.append(
                        {
                            "job": job,
                            "query": query or job,
                            "topic": topic,
                            "partition": partition,
                            "committed": committed,
                            "end": end,
                            "lag": max(0, end - max(base, start)),
                            "note": _lag_note(committed, start, end),
                        }
                    )
    return rows


def _lag_note(committed: int | None, start: int, end: int) -> str | None:
    if committed is None:
        return None
    if committed > end:
        return (
            f"checkpoint at {committed}, past the broker's end {end}: the topic was "
            "re-created or truncated (the job refuses to start; see checkpoint recovery)"
        )
    if committed < start:
        return f"{start - committed} records deleted by retention before the job read them"
    return None


def broker_offsets(
    settings: PlatformSettings, topics: list[str]
) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """End and earliest offsets of every partition of ``topics`` (a topic Kafka does not
    have is left out), read with kafka-python within :data:`KAFKA_TIMEOUT_MS`.

    kafka-python's metadata calls wait for ever on a broker that is down, so the reads run
    in a daemon thread and closing the client after the deadline releases it.

    :returns: ``({(topic, partition): end offset}, {(topic, partition): earliest offset})``.
    :raises TimeoutError: the broker did not answer in time.
    :raises kafka.errors.KafkaError: it refused.
    """
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        **settings.kafka.client_config(),
        enable_auto_commit=False,
        api_version=KAFKA_API_VERSION,  # no probe in the constructor (it leaks when down)
        request_timeout_ms=KAFKA_TIMEOUT_MS,
        session_timeout_ms=KAFKA_TIMEOUT_MS // 2,
        heartbeat_interval_ms=KAFKA_TIMEOUT_MS // 6,
    )
    outcome: dict[str, Any] = {}

    def read() -> None:
        try:
            partitions = [
                TopicPartition(topic, p)
                for topic in topics
                for p in sorted(consumer.partitions_for_topic(topic) or ())
            ]
            ends = consumer.end_offsets(partitions) if partitions else {}
            starts = consumer.beginning_offsets(partitions) if partitions else {}
            outcome["value"] = (
                {(tp.topic, tp.partition): int(o) for tp, o in ends.items()},
                {(tp.topic, tp.partition): int(o) for tp, o in starts.items()},
            )
        except Exception as error:
            outcome["error"] = error

    reader = threading.Thread(target=read, name="streaming-status-kafka", daemon=True)
    reader.start()
    reader.join(KAFKA_TIMEOUT_MS / 1000)
    timed_out = reader.is_alive()
    with contextlib.suppress(Exception):
        consumer.close(autocommit=False)  # also releases a read still waiting
    if "value" in outcome:
        return outcome["value"]
    if "error" in outcome and not timed_out:
        raise outcome["error"]
    raise TimeoutError(
        f"Kafka at {settings.kafka.bootstrap_servers} did not answer within "
        f"{KAFKA_TIMEOUT_MS / 1000:.0f} s"
    )


def kafka_lag(settings: PlatformSettings, now: float) -> dict[str, Any]:
    """Lag of every job that reads Kafka (:func:`lag_rows`), with per-job totals, their
    ``trend`` (records per minute, over the samples of the last 5 minutes; positive: falling
    behind) and ``history`` (``[epoch s, total]``), and each job's ``consumer_group``;
    ``errors``: job -> why its checkpoint could not be read (the other jobs still show).

    :raises TimeoutError: the broker did not answer (:func:`broker_offsets`).
    :raises kafka.errors.KafkaError: it refused.
    """
    catalog = get_catalog()
    positions: dict[str, dict[str, TopicOffsets]] = {}
    declared: dict[str, list[str]] = {}
    problems: dict[str, str] = {}
    for name, spec in catalog.jobs.items():
        if isinstance(spec.source, KafkaSourceSpec):
            declared[name] = [settings.kafka.topic(t) for t in spec.source.topics]
        try:
            found = checkpoint_positions(spec, settings)
        except (OSError, ValueError, KeyError, IndexError) as error:  # a damaged checkpoint
            problems[name] = f"{type(error).__name__}: {error}"
            continue
        if found:
            positions[name] = found
    topics = {t for parts in declared.values() for t in parts}
    topics |= {t for queries in positions.values() for o in queries.values() for t in o}
    ends, starts = broker_offsets(settings, sorted(topics))
    rows = lag_rows(positions, ends, starts, declared)
    totals: dict[str, int] = {}
    for row in rows:
        totals[row["job"]] = totals.get(row["job"], 0) + row["lag"]
    jobs = []
    for job, total in sorted(totals.items()):
        samples = _sample_lag(job, total, now)
        recent = [(t, v) for t, v in samples if now - t <= 300]
        span = recent[-1][0] - recent[0][0] if len(recent) > 1 else 0.0
        trend = (recent[-1][1] - recent[0][1]) * 60 / span if span > 0 else 0.0
        jobs.append(
            {
                "job": job,
                "consumer_group": consumer_group(job, settings),
                "total": total,
                "trend_per_minute": trend,
                "history": [[t, v] for t, v in samples],
            }
        )
    return {"partitions": rows, "jobs": jobs, "errors": problems}


def _sample_lag(job: str, total: int, now: float) -> list[tuple[float, int]]:
    with _lag_lock:
        samples = _lag_history.setdefault(job, deque(maxlen=LAG_SAMPLES))
        if not samples or now - samples[-1][0] >= 5:
            samples.append((now, total))
        else:
            samples[-1] = (samples[-1][0], total)
        return list(samples)


def table_view(
    name: str, settings: PlatformSettings, now: float, gate: dict[str, Any] | None
) -> dict[str, Any]:
    """One catalog table: ``table``, ``layer``, ``path``, ``version`` (the newest, None
    before its first commit), and of its newest *data* commit (maintenance and empty batches
    are not data, :func:`ingest_core.delta_tables.changes_data`): ``last_commit_at`` (ISO
    UTC), ``freshness_s`` (seconds since), ``operation`` and ``rows_added`` (Delta's
    operation metrics, :data:`ingest_core.delta_tables.ROWS_ADDED_METRICS`);
    ``maintenance``: the newest maintenance commit after it (``operation``, ``at`` ISO UTC,
    ``age_s``) or None; and ``gate`` (:func:`gate_views`, with ``pending_versions``: the
    data versions no gate validated; None for a table no gate checks)."""
    spec = get_catalog().table(name)
    path = spec.path(settings)
    view: dict[str, Any] = {
        "table": name,
        "layer": spec.layer,
        "path": str(path),
        "version": None,
        "last_commit_at": None,
        "freshness_s": None,
        "operation": None,
        "rows_added": None,
        "maintenance": None,
        "gate": gate,
    }
    activity = table_activity(path, None if gate is None else gate["validated_through"])
    if activity is None:
        if gate is not None:
            view["gate"] = gate | {"pending_versions": 0}
        return view
    data, maintenance = activity.data, activity.maintenance
    view["version"] = activity.version
    if data.timestamp_ms is not None:
        at, age = _commit_time(data.timestamp_ms, now)
        view |= {
            "last_commit_at": at,
            "freshness_s": age,
            "operation": data.operation,
            "rows_added": data.rows,
        }
    if maintenance is not None and maintenance.timestamp_ms is not None:
        at, age = _commit_time(maintenance.timestamp_ms, now)
        view["maintenance"] = {"operation": maintenance.operation, "at": at, "age_s": age}
    if gate is not None:
        view["gate"] = gate | {"pending_versions": len(activity.data_versions_after)}
    return view


def _commit_time(timestamp_ms: int, now: float) -> tuple[str, float]:
    """A commit's time as ISO UTC text, and its age in seconds at ``now`` (never negative)."""
    committed_s = timestamp_ms / 1000
    return datetime.fromtimestamp(committed_s, UTC).isoformat(), max(0.0, now - committed_s)


def gate_views(settings: PlatformSettings) -> dict[str, dict[str, Any]]:
    """Gate state per gated table: ``layer``, ``validated_through`` (Delta version, -1 when
    never validated), ``last_result`` and ``last_validated_at`` (the newest gate result),
    ``held`` (an unresolved failed result holds the layer's next increment until an operator
    accepts or quarantines it). :func:`table_view` adds ``pending_versions`` (versions after
    ``validated_through``, up to the table's current one) from the version it reads."""
    from ingest_core.quality.rules import GATED_LAYERS, layer_rules
    from ingest_core.quality.state import gate_results, unresolved_failures, validated_through

    results = gate_results(settings)
    views: dict[str, dict[str, Any]] = {}
    for layer in GATED_LAYERS:
        failures = unresolved_failures(layer, settings)
        held = set() if failures.empty else set(failures["table"])
        for rules in layer_rules(layer):
            done = validated_through(results, rules.table)
            newest = None
            if not results.empty:
                mine = results[results["table"] == rules.table]
                if not mine.empty:
                    newest = mine.sort_values("validated_at").iloc[-1]
            views[rules.table] = {
                "layer": layer,
                "validated_through": done,
                "last_result": None if newest is None else str(newest["status"]),
                "last_validated_at": None if newest is None else str(newest["validated_at"]),
                "held": rules.table in held,
            }
    return views


def newest_alerts(settings: PlatformSettings, limit: int = ALERTS_SHOWN) -> list[dict[str, Any]]:
    """The ``limit`` newest rows of ``gold_payment_alerts`` by ``detected_at`` (JSON-ready:
    timestamps as ISO 8601 with offset, amounts as text)."""
    from deltalake import DeltaTable

    path = get_catalog().table("gold_payment_alerts").path(settings)
    if not table_exists(path):
        return []
    columns = ["detected_at", "rule", "customer_id", "amount", "currency", "payment_count"]
    frame = DeltaTable(str(path)).to_pandas(columns=columns)
    if frame.empty:
        return []
    newest = frame.sort_values("detected_at", ascending=False).head(limit)
    return [{c: _text(row[c]) for c in columns if c in newest} for _, row in newest.iterrows()]


def _text(value: Any) -> str | None:
    """JSON-ready: None for a missing value, ISO 8601 for a timestamp, else ``str``."""
    import pandas as pd

    if not isinstance(value, list | dict) and bool(pd.isna(value)):
        return None
    if isinstance(value, pd.Timestamp | datetime):
        stamp = pd.Timestamp(value)
        return (stamp if stamp.tzinfo else stamp.tz_localize(UTC)).isoformat()
    return str(value)


def _table_or_gate(
    name: str, settings: PlatformSettings, now: float, gates: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    return table_view(name, settings, now, gates.get(name))


def snapshot(settings: PlatformSettings | None = None, now: float | None = None) -> dict[str, Any]:
    """The whole page's data: ``generated_at``, ``jobs`` (:func:`job_view` per always-on
    job, with ``activity``: :func:`job_activity`), ``lag`` (:func:`kafka_lag`), ``tables``
    (:func:`table_view` per catalog table, in catalog order), ``alerts``
    (:func:`newest_alerts`) and ``errors`` (section -> message, for what could not be
    read)."""
    from ingest_platform.supervisor import always_on_jobs

    settings = settings or get_settings()
    now = time.time() if now is None else now
    errors: dict[str, str] = {}

    def section(name: str, read: Callable[[], Any], empty: Any) -> Any:
        try:
            return read()
        except Exception as error:  # shown on the page, never a 500
            errors[name] = f"{type(error).__name__}: {error}"
            return empty

    gates = section("gates", lambda: gate_views(settings), {})
    tables = []
    for name in get_catalog().tables:
        tables.append(
            section(
                f"table {name}",
                partial(_table_or_gate, name, settings, now, gates),
                {"table": name, "layer": get_catalog().table(name).layer, "version": None},
            )
        )
    lag = section("kafka lag", partial(kafka_lag, settings, now), {"partitions": [], "jobs": []})
    for job, problem in lag.pop("errors", {}).items():
        errors[f"kafka lag {job}"] = problem
    jobs = [
        section(f"job {job}", partial(job_view, job, settings, now), {"job": job})
        for job in always_on_jobs()
    ]
    lag_totals = {row["job"]: row["total"] for row in lag.get("jobs", [])}
    for job in jobs:
        if "state" in job:
            ages = [
                q["last_batch_age_s"] for q in job["queries"] if q["last_batch_age_s"] is not None
            ]
            job["activity"] = job_activity(
                job["state"],
                lag_totals.get(job["job"]),
                min(ages) if ages else None,
                settings.supervisor.heartbeat_timeout_s,
            )
    return {
        "generated_at": datetime.fromtimestamp(now, UTC).isoformat(),
        "jobs": jobs,
        "lag": lag,
        "tables": tables,
        "alerts": section("alerts", lambda: newest_alerts(settings), []),
        "errors": errors,
    }


def metric_families(snap: dict[str, Any]) -> list[Any]:
    """Prometheus metric families (``prometheus_client`` ``GaugeMetricFamily``) of a
    :func:`snapshot`. Pure: the snapshot is the input. Series (units in the names):

    * ``ingest_job_up{job}`` 1 when running; ``ingest_job_state{job,state}`` 1 for the
      current state; ``ingest_job_activity{job,activity}`` (:func:`job_activity`);
      ``ingest_job_restarts_last_hour{job}``;
    * ``ingest_query_input_rows_per_second``, ``ingest_query_processed_rows_per_second``,
      ``ingest_query_batch_duration_seconds``, ``ingest_query_last_batch_id``,
      ``ingest_query_watermark_delay_seconds``, ``ingest_query_state_rows``,
      ``ingest_query_last_batch_age_seconds`` ``{job,query}``;
    * ``ingest_kafka_lag_records{job,query,topic,partition}`` and
      ``ingest_kafka_lag_total_records{job}``;
    * ``ingest_table_version``, ``ingest_table_freshness_seconds``,
      ``ingest_table_last_commit_rows`` (of the last data commit),
      ``ingest_table_maintenance_age_seconds{table,layer}``;
    * ``ingest_gate_pending_versions``, ``ingest_gate_held{table,layer}``;
    * ``ingest_status_errors{section}``: sections the snapshot could not read.
    """
    errors = _gauge(
        "ingest_status_errors", "1 per snapshot section that could not be read", ["section"]
    )
    for section in snap.get("errors", {}):
        errors.add_metric([section], 1.0)
    return [*_job_families(snap), *_lag_families(snap), *_table_families(snap), errors]


def _gauge(name: str, doc: str, labels: list[str]) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(name, doc, labels=labels)


#: Per-query series: key of :func:`query_view` -> (metric name, help).
_QUERY_SERIES = {
    "input_rows_per_second": ("ingest_query_input_rows_per_second", "Input rate of the last batch"),
    "processed_rows_per_second": (
        "ingest_query_processed_rows_per_second",
        "Processing rate of the last batch",
    ),
    "batch_duration_s": ("ingest_query_batch_duration_seconds", "Duration of the last trigger"),
    "batch_id": ("ingest_query_last_batch_id", "Last batch id"),
    "watermark_delay_s": ("ingest_query_watermark_delay_seconds", "Now minus the watermark"),
    "state_rows": ("ingest_query_state_rows", "Rows in state stores"),
    "last_batch_age_s": (
        "ingest_query_last_batch_age_seconds",
        "Seconds since the last batch (kept across a restart)",
    ),
}


def _job_families(snap: dict[str, Any]) -> list[Any]:
    """The ``ingest_job_*`` and ``ingest_query_*`` families of :func:`metric_families`."""
    up = _gauge("ingest_job_up", "1 when the always-on job runs with a fresh heartbeat", ["job"])
    state = _gauge("ingest_job_state", "1 for the job's current state", ["job", "state"])
    activity = _gauge("ingest_job_activity", "1 for what the running job does", ["job", "activity"])
    restarts = _gauge(
        "ingest_job_restarts_last_hour", "Supervisor restarts in the last hour", ["job"]
    )
    per_query = {
        key: _gauge(name, doc, ["job", "query"]) for key, (name, doc) in _QUERY_SERIES.items()
    }
    for job in snap.get("jobs", []):
        if "state" not in job:
            continue
        name = job["job"]
        up.add_metric([name], 1.0 if job["state"] == "running" else 0.0)
        for one in JOB_STATES:
            state.add_metric([name, one], 1.0 if job["state"] == one else 0.0)
        if job.get("activity"):
            for one in JOB_ACTIVITIES:
                activity.add_metric([name, one], 1.0 if job["activity"] == one else 0.0)
        restarts.add_metric([name], float(job["restarts_last_hour"]))
        for query in job["queries"]:
            for key, family in per_query.items():
                value = _number(query.get(key))
                if value is not None:
                    family.add_metric([name, query["name"]], value)
    return [up, state, activity, restarts, *per_query.values()]


def _lag_families(snap: dict[str, Any]) -> list[Any]:
    """The ``ingest_kafka_lag_*`` families of :func:`metric_families`."""
    lag = _gauge(
        "ingest_kafka_lag_records",
        "Broker end offset minus the checkpoint's committed offset",
        ["job", "query", "topic", "partition"],
    )
    for row in snap.get("lag", {}).get("partitions", []):
        lag.add_metric(
            [row["job"], row["query"], row["topic"], str(row["partition"])], float(row["lag"])
        )
    total = _gauge("ingest_kafka_lag_total_records", "Kafka lag summed per job", ["job"])
    for job in snap.get("lag", {}).get("jobs", []):
        total.add_metric([job["job"]], float(job["total"]))
    return [lag, total]


def _table_families(snap: dict[str, Any]) -> list[Any]:
    """The ``ingest_table_*`` and ``ingest_gate_*`` families of :func:`metric_families`."""
    by_table = ["table", "layer"]
    version = _gauge("ingest_table_version", "Delta version", by_table)
    freshness = _gauge(
        "ingest_table_freshness_seconds", "Seconds since the last data commit", by_table
    )
    added = _gauge("ingest_table_last_commit_rows", "Rows added by the last data commit", by_table)
    maintained = _gauge(
        "ingest_table_maintenance_age_seconds",
        "Seconds since a maintenance commit newer than the last data commit",
        by_table,
    )
    pending_versions = _gauge(
        "ingest_gate_pending_versions", "Delta versions no gate has validated", by_table
    )
    held = _gauge("ingest_gate_held", "1 when a failed gate holds the table", by_table)
    for table in snap.get("tables", []):
        table_key = [table["table"], str(table.get("layer"))]
        for family, value in (
            (version, table.get("version")),
            (freshness, table.get("freshness_s")),
            (added, table.get("rows_added")),
            (maintained, (table.get("maintenance") or {}).get("age_s")),
        ):
            number = _number(value)
            if number is not None:
                family.add_metric(table_key, number)
        gate = table.get("gate")
        if gate:
            pending_versions.add_metric(table_key, float(gate["pending_versions"]))
            held.add_metric(table_key, 1.0 if gate["held"] else 0.0)
    return [version, freshness, added, maintained, pending_versions, held]
