"""Send source events to Kafka: topics checked, faults injected, pace kept, every send checked.

The summary says how many of each kind of message were sent and acknowledged, so that tests
and operators can reconcile the tables against it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ingest_core.contracts import TOPICS
from ingest_core.settings import KafkaSettings, check_topic_prefix
from ingest_core.topics import ensure_topics
from ingestctl.producer import Message, ProduceResult, produce
from ingestctl.replay.faults import FaultConfig, FaultCounts, Scheduled, inject
from ingestctl.replay.model import EventSource, SourceError


@dataclass(frozen=True)
class Pace:
    """How fast to send: ``speed`` source seconds per wall second, or ``None`` for as fast as
    possible. :raises ValueError: a non-positive speed."""

    speed: float | None = None

    def __post_init__(self) -> None:
        if self.speed is not None and self.speed <= 0:
            raise ValueError(f"speed must be > 0 source seconds per wall second, got {self.speed}")


@dataclass
class ReplaySummary:
    """The outcome of one replay or generate run."""

    source: str
    faults: FaultCounts
    produce: ProduceResult
    topics: dict[str, int]
    time_shift_s: float
    wall_time_s: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (what ``--summary-json`` writes)."""
        result = self.produce
        return {
            "source": self.source,
            "topics": self.topics,
            "time_shift_s": round(self.time_shift_s, 3),
            "wall_time_s": round(self.wall_time_s, 3),
            **self.faults.as_dict(),
            "messages_attempted": result.attempted,
            "messages_acknowledged": result.acknowledged,
            "messages_failed": result.failed,
            "failures_by_reason": dict(result.failures),
            "acknowledged_by_kind": dict(result.acknowledged_by_tag),
            "failed_by_kind": dict(result.failed_by_tag),
            "acknowledged_by_topic": dict(result.acknowledged_by_topic),
        }

    def as_text(self) -> str:
        """A short human summary."""
        d = self.as_dict()
        lines = [
            f"{self.source}: {d['source_events_total']} source events "
            + ", ".join(f"{k} {v}" for k, v in sorted(d["source_events"].items())),
            f"  messages: {d['messages_attempted']} sent, {d['messages_acknowledged']} "
            f"acknowledged, {d['messages_failed']} failed "
            + (
                f"({', '.join(f'{k}: {v}' for k, v in d['failures_by_reason'].items())})"
                if d["failures_by_reason"]
                else ""
            ),
            f"  faults: duplicates {d['duplicates']}, late {d['late']}, out of order "
            f"{d['out_of_order']}, malformed {d['malformed_total']}, drift "
            f"{d['drift_extra_field']} extra field / {d['drift_missing_optional_field']} "
            f"missing optional field, oversize {d['oversize']}",
        ]
        if d["malformed"]:
            lines.append(
                "  malformed by reason: "
                + ", ".join(f"{k} {v}" for k, v in sorted(d["malformed"].items()))
            )
        lines.append(
            "  by topic: "
            + ", ".join(f"{k} {v}" for k, v in sorted(d["acknowledged_by_topic"].items()))
        )
        return "\n".join(lines)


def validate_topic_prefix(prefix: str) -> str:
    """:raises SourceError: the prefix would make an invalid Kafka topic name of a contract
    topic (:func:`ingest_core.settings.check_topic_prefix`)."""
    try:
        return check_topic_prefix(prefix, TOPICS)
    except ValueError as error:
        raise SourceError(str(error)) from None


def paced(items: Iterable[Scheduled], pace: Pace) -> Iterator[Scheduled]:
    """``items`` as they fall due: each ``send_time`` after the first is waited for, at
    ``pace.speed`` source seconds per wall second (no wait with ``speed=None``)."""
    wall_start = time.monotonic()
    first: datetime | None = None
    for item in items:
        if pace.speed is not None:
            first = first or item.send_time
            due = wall_start + (item.send_time - first).total_seconds() / pace.speed
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        yield item


def write_dimension(
    rows: Sequence[dict[str, Any]], folder: Path, source: str, key: str = "customer_id"
) -> tuple[Path, int]:
    """Upsert a dimension's rows into ``<folder>/<source>.parquet`` by ``key`` (SCD type 1).

    The file accumulates every row any replay of ``source`` landed: a row whose key is
    already there replaces it (the latest replay wins), a new key is added, and keys this
    replay does not mention stay. So replaying a dataset one file at a time (one day of
    UCI Online Retail after another) lands the union of their customers, not only the last
    file's. Rows without a key are left out (nothing could update them, and
    ``silver_refine`` ignores them). Every value is stored as a string.

    The read-modify-write holds an exclusive lock on ``<folder>/.<source>.lock`` (two
    replays at once do not lose each other's rows) and replaces the file atomically (the
    Silver job never reads half a file).

    :param rows: dicts with at least ``key``; other columns as the source has them.
    :param folder: the landing folder, e.g. ``<landing_dir>/customers``.
    :param source: the source's name: ``olist``, ``uci_retail``.
    :param key: the dimension's key column.
    :returns: the file and the number of rows (keys) it holds afterwards.
    :raises ValueError: ``rows`` lack the ``key`` column.
    """
    import pandas as pd

    from ingest_core.locks import file_lock

    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{source}.parquet"
    staging = folder / f".{source}.parquet.tmp"
    incoming = pd.DataFrame(list(rows)).astype("string")
    if len(incoming) and key not in incoming.columns:
        raise ValueError(f"dimension rows of {source} have no {key!r} column")
    if key not in incoming.columns:
        incoming[key] = pd.Series(dtype="string")
    incoming = incoming[incoming[key].notna()]
    with file_lock(folder / f".{source}.lock"):  # released at the end (or if the process dies)
        if target.exists():
            earlier = pd.read_parquet(target).astype("string")
            merged = pd.concat([earlier, incoming], ignore_index=True)
            # keep="last": this replay's row replaces an earlier one with the same key.
            incoming = merged.drop_duplicates(subset=[key], keep="last").reset_index(drop=True)
        incoming.to_parquet(staging, index=False)
        staging.replace(target)
    return target, len(incoming)


def run(
    source: str,
    events: EventSource,
    *,
    bootstrap_servers: str,
    faults: FaultConfig,
    pace: Pace,
    shift_to_now: bool = False,
    partitions: int = 3,
    allow_partition_mismatch: bool = False,
    topic_prefix: str = "",
    progress: bool = True,
    kafka: KafkaSettings | None = None,
) -> ReplaySummary:
    """Produce ``events`` (sorted by event time) to their topics and summarise.

    :param source: name for the summary (``olist``, ``uci-retail``, ``generator``).
    :param events: source events in event-time order: a list, or a stream that tells its
        length and is produced as it is read (:class:`~ingestctl.replay.generator.
        GeneratedEvents`).
    :param bootstrap_servers: Kafka ``host:port`` list.
    :param faults: faults to inject.
    :param pace: sending speed.
    :param shift_to_now: move event times so that the first event happens now (UTC).
    :param partitions: partition count for topics created here.
    :param allow_partition_mismatch: accept existing topics with another partition count.
    :param topic_prefix: prepended to every topic name (isolated test or demo runs).
    :param progress: show a progress bar (events sent, rate, errors).
    :param kafka: Kafka security settings (SASL, TLS) and replication factor for the topic
        administration and the producer; the current profile's when ``None``.
    :raises ingest_core.topics.TopicMismatchError: see ``allow_partition_mismatch``.
    :raises SourceError: an invalid topic prefix.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    validate_topic_prefix(topic_prefix)
    topic_counts = ensure_topics(
        bootstrap_servers,
        [topic_prefix + t for t in TOPICS],
        partitions=partitions,
        allow_partition_mismatch=allow_partition_mismatch,
        kafka=kafka,
    )
    shift = timedelta(0)
    first = next(iter(events), None) if shift_to_now else None
    if first is not None:
        shift = datetime.now(UTC) - first.event_time
    counts = FaultCounts()
    scheduled = paced(inject(events, faults, counts, shift), pace)
    messages = (
        Message(topic_prefix + s.message.topic, s.message.key, s.message.value, s.message.tag)
        for s in scheduled
    )
    expected = len(events) * (1 + faults.duplicate_rate + faults.malformed_rate)
    expected += faults.oversize_count
    started = time.monotonic()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>8.0f} msg/s  errors {task.fields[errors]}"),
        disable=not progress,
        transient=False,
    ) as bar:
        task = bar.add_task(f"{source} -> kafka", total=round(expected), rate=0.0, errors=0)

        def update(result: ProduceResult) -> None:
            elapsed = max(time.monotonic() - started, 1e-6)
            bar.update(
                task,
                completed=result.attempted,
                rate=result.attempted / elapsed,
                errors=result.failed,
            )

        result = produce(
            bootstrap_servers,
            messages,
            raise_on_failure=False,
            batch_flush=200 if pace.speed else 2000,
            on_resolved=update,
            kafka=kafka,
        )
        bar.update(task, total=result.attempted, completed=result.attempted)
    return ReplaySummary(
        source=source,
        faults=counts,
        produce=result,
        topics=topic_counts,
        time_shift_s=shift.total_seconds(),
        wall_time_s=time.monotonic() - started,
    )


def write_summary_json(summary: ReplaySummary, path: Path) -> None:
    """Write the summary as JSON to ``path`` (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary.as_dict(), indent=2, sort_keys=True) + "\n")
