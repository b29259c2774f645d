"""The deduplication id history's size over a long event-time span (issue 17, item 2:
"its size after 1M events over a long event-time span must stay bounded; report rows and
bytes in the bench").

``silver_event_ids`` remembers every event id Silver kept, so that a re-sent event is
counted as a duplicate. Table maintenance prunes it (``keep_rows`` in
``include/pipeline.yaml``: ids whose event time is more than 30 days before silver_refine's
watermark; docs/jobs.md). This part sends ``events`` generated events over a long span of
event time, in :data:`ROUNDS` rounds in event-time order (each at the rate that would fill
:data:`SPAN_DAYS` / :data:`ROUNDS` days; the generator's sessions make a round of 250,000
events last about 36 days, so the whole span is about 146 days), and after each round runs
``bronze_ingest`` and ``silver_refine`` (AvailableNow, under spark-submit) and then table
maintenance of ``silver_event_ids`` (:func:`ingest_core.table_maintenance.maintain_table`,
delta-rs), as the ``table_maintenance`` DAG would between cycles.

Per round it records the table's rows and bytes (its current snapshot's data files) before
and after maintenance, and checks the rows left against an independent computation: the
ids of the events the bench generated whose event time is at or after the cut (the
watermark silver_refine recorded minus ``keep``), compared as sets (``missing``: expected
ids not in the table; ``extra``: ids in the table the horizon does not need). Bounded
means: the rows after maintenance stay at the horizon's ids, whatever the number of events
sent so far.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from bench.run import Bench

#: Days of event time the events are meant to span (four times the id horizon of 30 days;
#: see the module docstring for what the generator makes of it).
SPAN_DAYS = 120
#: Rounds of send -> Bronze -> Silver -> maintenance, each a slice of the span.
ROUNDS = 4
#: Event time of the first event.
START = datetime(2026, 1, 1, tzinfo=UTC)
#: The table measured.
TABLE = "silver_event_ids"


@dataclass(frozen=True)
class RoundSize:
    """The id history after one round.

    :param events_sent: events sent so far (all rounds up to this one).
    :param rows_before: rows before maintenance; ``bytes_before`` the bytes of its
        snapshot's data files.
    :param rows_after: rows after maintenance; ``bytes_after`` likewise (bytes).
    :param expected_rows: the independent count: generated events at or after ``cutoff``.
    :param missing: expected ids the table does not have; ``extra``: ids it has beyond them.
    :param watermark: silver_refine's watermark (ISO UTC) maintenance measured from;
        ``cutoff`` that minus ``keep``.
    :param maintenance_s: wall seconds of the maintenance of the table.
    """

    round: int
    events_sent: int
    rows_before: int
    bytes_before: int
    rows_after: int
    bytes_after: int
    expected_rows: int
    missing: int
    extra: int
    watermark: str | None
    cutoff: str | None
    maintenance_s: float


def ids_within_horizon(events: Iterable[tuple[str, datetime]], cutoff: datetime | None) -> set[str]:
    """The event ids whose event time is at or after ``cutoff`` (all of them when there is
    no cutoff yet): what the id history must still hold after maintenance.

    :param events: ``(event_id, event_time)`` pairs (timezone-aware event times).
    """
    return {event_id for event_id, when in events if cutoff is None or when >= cutoff}


def table_ids(path: Path) -> tuple[pa.ChunkedArray, int]:
    """The Delta table at ``path``, read with delta-rs: its ``event_id`` column (one value per
    row, as Arrow: no Python object per id until a caller asks), and the bytes of its current
    snapshot's data files."""
    from deltalake import DeltaTable

    from ingest_core.table_maintenance import file_stats

    ids = DeltaTable(str(path)).to_pyarrow_table(columns=["event_id"]).column(0)
    return ids, file_stats(path).bytes


def round_events(count: int, rounds: int, span_days: float) -> Iterator[list[Any]]:
    """The rounds' events: ``rounds`` lists of ``count`` generated events each
    (``ingestctl.replay.generator`` ``SourceEvent``s, seed ``100 + round``, so ids never
    repeat across rounds), at the event-time rate that spreads a round over
    ``span_days / rounds`` days. The generator's times are random: a round starts at its
    slice's start or one minute after the previous round's last event, whichever is later,
    so that no round's events are older than an earlier round's (they would be late)."""
    from ingestctl.replay.generator import generate_events

    width = timedelta(days=span_days / rounds)
    rate = count / width.total_seconds()
    after = START
    for number in range(rounds):
        start = max(START + number * width, after)
        made = list(generate_events(count, seed=100 + number, start=start, rate=rate))
        if made:
            after = made[-1].event_time + timedelta(minutes=1)
        yield made


def measure_rounds(
    bench: Bench, events: int, rounds: int = ROUNDS, span_days: float = SPAN_DAYS
) -> list[RoundSize]:
    """Run the rounds (see the module docstring) in the current home and topic prefix.

    :raises bench.env.BenchError: a job failed, or the table has no row retention.
    :raises RuntimeError: a message was not acknowledged.
    """
    from bench import jobs, workload
    from bench.env import BenchError
    from ingest_core.catalog import get_catalog
    from ingest_core.settings import get_settings
    from ingest_core.table_maintenance import maintain_table, silver_watermark

    settings = get_settings()
    spec = get_catalog().table(TABLE)
    path = spec.path(settings)
    keep = spec.maintenance.keep_rows
    if keep is None:
        raise BenchError(f"{TABLE} has no row retention (keep_rows) in include/pipeline.yaml")
    sent: list[tuple[str, datetime]] = []
    sizes = []
    for number, made in enumerate(round_events(events // rounds, rounds, span_days)):
        workload.produce_backlog(
            bench.env.bootstrap,
            len(made),
            topic_prefix=settings.kafka.topic_prefix,
            events=made,
        )
        sent += [(event.event_id, event.event_time) for event in made]
        for job in ("bronze_ingest", "silver_refine"):
            jobs.run_job(
                bench.env, job, ["--trigger", "available-now"], f"id-history-{job}-{number}"
            )
        before, bytes_before = table_ids(path)
        began = time.monotonic()
        maintain_table(TABLE, settings=settings)
        took = time.monotonic() - began
        kept, bytes_after = table_ids(path)
        after = set(kept.to_pylist())
        mark = silver_watermark(settings)
        cutoff = mark - keep.keep_delta if mark is not None else None
        expected = ids_within_horizon(sent, cutoff)
        sizes.append(
            RoundSize(
                round=number + 1,
                events_sent=len(sent),
                rows_before=len(before),
                bytes_before=bytes_before,
                rows_after=len(kept),
                bytes_after=bytes_after,
                expected_rows=len(expected),
                missing=len(expected - after),
                extra=len(after - expected),
                watermark=mark.isoformat() if mark else None,
                cutoff=cutoff.isoformat() if cutoff else None,
                maintenance_s=round(took, 2),
            )
        )
        print(f"[bench] id history after round {number + 1}: {asdict(sizes[-1])}", flush=True)
    return sizes
