"""The soak's verdict, computed independently of the platform's Spark code: what Kafka holds
(read back with a consumer) and the soak's own log against Bronze, Silver, Gold, the alerts
and the reconciliation, with pandas.

Every check is a :class:`Check`: a name, the count of rows or records that break it (0 when
it holds), and a few examples. The pure functions take frames, so the tests exercise them on
small hand-made ones (tests/unit/ingestctl/test_soak.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd

from ingestctl.soak.stream import SoakLog, value_hash

if TYPE_CHECKING:
    from ingest_core.settings import PlatformSettings

#: Tags of the stream's well-formed events (a duplicate is a copy of one).
WELL_FORMED = ("event", "duplicate")
#: The columns that identify a Kafka record.
COORDINATES = ["topic", "partition", "offset"]


@dataclass(frozen=True)
class Check:
    """One invariant of the verdict.

    :param name: what must hold, e.g. ``bronze: every acknowledged record exactly once``.
    :param failures: records or rows that break it (0: it holds).
    :param checked: records or rows it looked at.
    :param examples: up to five of the failures, as text.
    :param kind: ``lost``, ``duplicated``, ``differing``, ``orphan`` or ``other``: how the
        summary counts it.
    """

    name: str
    failures: int
    checked: int
    kind: str = "other"
    examples: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the invariant holds."""
        return self.failures == 0


def _examples(items: Iterable[Any], limit: int = 5) -> tuple[str, ...]:
    return tuple(str(item) for item in list(items)[:limit])


def _check(name: str, bad: Iterable[Any], checked: int, kind: str) -> Check:
    bad = list(bad)
    return Check(name, len(bad), checked, kind, _examples(bad))


# --- Bronze -------------------------------------------------------------------------------


def _coordinates(frame: pd.DataFrame) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of each row, in order."""
    return list(map(tuple, frame[COORDINATES].itertuples(index=False)))


def bronze_checks(kafka: pd.DataFrame, bronze: pd.DataFrame, log: SoakLog) -> list[Check]:
    """Bronze against Kafka and the acknowledgements.

    :param kafka: every record of the topics: ``topic`` (without prefix), ``partition``,
        ``offset``, ``hash`` (of the value bytes).
    :param bronze: ``bronze_events`` with the same columns.
    """
    coordinates = _coordinates(bronze)
    seen = pd.Series(coordinates, dtype=object).value_counts() if coordinates else pd.Series()
    twice = [c for c, n in seen.items() if n > 1]
    in_bronze = set(coordinates)
    kafka_coordinates = _coordinates(kafka)
    in_kafka = set(kafka_coordinates)
    acknowledged = set(log.acknowledged)
    by_hash = dict(zip(coordinates, bronze["hash"], strict=True))
    kafka_hash = dict(zip(kafka_coordinates, kafka["hash"], strict=True))
    changed = [c for c in in_bronze & in_kafka if by_hash[c] != kafka_hash[c]]
    return [
        _check(
            "bronze: every acknowledged record is in Kafka and in Bronze",
            sorted(acknowledged - (in_bronze & in_kafka)),
            len(acknowledged),
            "lost",
        ),
        _check("bronze: no record twice", twice, len(coordinates), "duplicated"),
        _check(
            "bronze: every Kafka record landed", sorted(in_kafka - in_bronze), len(in_kafka), "lost"
        ),
        _check(
            "bronze: nothing Kafka does not hold",
            sorted(in_bronze - in_kafka),
            len(in_bronze),
            "other",
        ),
        _check(
            "bronze: each record's bytes as Kafka holds them",
            sorted(changed),
            len(in_bronze),
            "differing",
        ),
    ]


# --- Silver -------------------------------------------------------------------------------


def classify(kafka: pd.DataFrame, log: SoakLog) -> pd.DataFrame:
    """``kafka`` with the soak's ``tag`` of each record (by its value's hash; ``unknown``
    for a record the soak never sent)."""
    return kafka.assign(tag=[log.tags.get(h, "unknown") for h in kafka["hash"]])


def well_formed_events(kafka: pd.DataFrame) -> pd.DataFrame:
    """One row per well-formed record Kafka holds: its coordinates, ``event_id``,
    ``event_type``, ``copies`` (records of the same id) and the parsed ``event`` dict."""
    rows = kafka[kafka["tag"].isin(WELL_FORMED)]
    events = [json.loads(v) for v in rows["value"]]
    frame = rows[COORDINATES].assign(
        event_id=[e["event_id"] for e in events],
        event_type=[e["event_type"] for e in events],
        event=events,
    )
    copies = frame.groupby("event_id")["event_id"].transform("size")
    return frame.assign(copies=copies)


def silver_checks(
    events: pd.DataFrame,
    silver: dict[str, pd.DataFrame],
    late: pd.DataFrame,
    quarantine: pd.DataFrame,
    malformed: pd.DataFrame,
    tables: dict[str, str],
) -> list[Check]:
    """Silver against the well-formed and malformed records Kafka holds.

    :param events: :func:`well_formed_events`.
    :param silver: Silver table -> its rows (``event_id``).
    :param late: ``silver_late_events`` (``event_id``, ``event_type``).
    :param quarantine: ``silver_quarantine`` (coordinates and ``reason``).
    :param malformed: the malformed records Kafka holds: coordinates and ``tag``
        (``malformed:<reason>``).
    :param tables: event type -> Silver table.
    """
    checks = []
    for table in sorted(set(tables.values())):
        types = [t for t, name in tables.items() if name == table]
        wanted = events[events.event_type.isin(types)]
        rows = silver.get(table, pd.DataFrame())
        on_time = list(rows["event_id"]) if "event_id" in rows.columns else []  # none yet
        late_ids = list(late[late.event_type.isin(types)]["event_id"]) if len(late) else []
        sent_ids = set(wanted.event_id)
        copies = dict(zip(wanted.event_id, wanted.copies, strict=False))
        counts = pd.Series(on_time + late_ids, dtype=object).value_counts()
        twice_on_time = pd.Series(on_time, dtype=object).value_counts()
        checks += [
            _check(
                f"silver: {table} holds each event id once",
                [i for i, n in twice_on_time.items() if n > 1],
                len(on_time),
                "duplicated",
            ),
            _check(
                f"silver: every {'/'.join(types)} event in {table} or silver_late_events",
                sorted(sent_ids - set(on_time) - set(late_ids)),
                len(sent_ids),
                "lost",
            ),
            _check(
                f"silver: {table} and late events hold only events Kafka holds",
                sorted((set(on_time) | set(late_ids)) - sent_ids),
                len(counts),
                "other",
            ),
            _check(
                f"silver: an id in {table} and late, or late twice, only when Kafka has copies",
                sorted(i for i, n in counts.items() if n > copies.get(i, 1)),
                len(counts),
                "duplicated",
            ),
        ]
    reasons = (
        dict(
            zip(
                map(tuple, quarantine[COORDINATES].itertuples(index=False)),
                quarantine["reason"],
                strict=True,
            )
        )
        if len(quarantine)
        else {}
    )
    expected = {
        tuple(c): tag.split(":", 1)[1]
        for c, tag in zip(
            malformed[COORDINATES].itertuples(index=False), malformed["tag"], strict=True
        )
    }
    checks.append(
        _check(
            "silver: every malformed record quarantined with its reason",
            sorted(
                f"{c}: want {r}, got {reasons.get(c)}"
                for c, r in expected.items()
                if reasons.get(c) != r
            ),
            len(expected),
            "lost",
        )
    )
    return checks


# --- Gold ---------------------------------------------------------------------------------


def _naive_utc(values: Any) -> pd.Series:
    stamps = pd.to_datetime(pd.Series(values), utc=True, format="ISO8601")
    return stamps.dt.tz_convert(None).astype("datetime64[us]")


def _limit(watermark: datetime | None) -> pd.Timestamp | None:
    if watermark is None:
        return None
    stamp = pd.Timestamp(watermark)
    return (stamp.tz_convert(None) if stamp.tzinfo else stamp).as_unit("us")


def unique_events(events: pd.DataFrame, event_types: tuple[str, ...]) -> pd.DataFrame:
    """The distinct events (first copy per ``event_id``) of ``event_types`` as a flat frame
    with ``event_time`` naive UTC."""
    rows = events[events.event_type.isin(event_types)].drop_duplicates("event_id")
    flat = pd.DataFrame(list(rows["event"])) if len(rows) else pd.DataFrame()
    if flat.empty:
        return flat
    return flat.assign(event_time=_naive_utc(flat["event_time"]))


def expected_payment_totals(
    payments: pd.DataFrame, minutes: int, slide: int | None, watermark: datetime | None
) -> set[tuple]:
    """(window_start, currency, payment_count, amount_total rounded to cents) of authorized
    payments per event-time window that ends at or before ``watermark`` (tumbling when
    ``slide`` is None, else windows of ``minutes`` every ``slide`` minutes)."""
    limit = _limit(watermark)
    if limit is None or payments.empty:
        return set()
    paid = payments[payments.status == "authorized"]
    step = slide or minutes
    starts = []
    for shift in range(0, minutes, step):
        base = paid.event_time.dt.floor(f"{step}min") - pd.Timedelta(minutes=shift)
        starts.append(paid.assign(window_start=base))
    windows = pd.concat(starts) if starts else paid
    windows = windows.assign(amount=windows.amount.astype(float))
    grouped = windows.groupby(["window_start", "currency"]).agg(
        payment_count=("event_id", "size"), amount_total=("amount", "sum")
    )
    return {
        (start, currency, int(r.payment_count), round(float(r.amount_total), 2))
        for (start, currency), r in grouped.iterrows()
        if start + pd.Timedelta(minutes=minutes) <= limit
    }


def expected_success_rates(
    payments: pd.DataFrame, minutes: int, watermark: datetime | None
) -> set[tuple]:
    """(window_start, method, attempts, successes) per tumbling window ending at or before
    ``watermark``."""
    limit = _limit(watermark)
    if limit is None or payments.empty:
        return set()
    frame = payments.assign(
        window_start=payments.event_time.dt.floor(f"{minutes}min"),
        ok=(payments.status == "authorized").astype(int),
    )
    grouped = frame.groupby(["window_start", "method"]).agg(
        attempts=("event_id", "size"), successes=("ok", "sum")
    )
    return {
        (start, method, int(r.attempts), int(r.successes))
        for (start, method), r in grouped.iterrows()
        if start + pd.Timedelta(minutes=minutes) <= limit
    }


def expected_sessions(
    activity: pd.DataFrame, gap: timedelta, watermark: datetime | None
) -> set[tuple]:
    """Sessionisation by hand: per customer, in time order, an event more than ``gap`` after
    the previous one starts a new session (exactly ``gap`` joins, as Spark's session_window
    does); a session ends ``gap`` after its last event. (customer, start, end, events,
    reached checkout) of the sessions that end at or before ``watermark``."""
    limit = _limit(watermark)
    if limit is None or activity.empty:
        return set()
    sessions = set()
    for customer, rows in activity.sort_values("event_time").groupby("customer_id"):
        times, kinds = list(rows.event_time), list(rows.activity)
        first = 0
        for i in range(1, len(times) + 1):
            if i == len(times) or times[i] - times[i - 1] > gap:
                end = times[i - 1] + gap
                if end <= limit:
                    sessions.add(
                        (customer, times[first], end, i - first, "checkout" in kinds[first:i])
                    )
                first = i
    return sessions


def expected_customer_metrics(orders: pd.DataFrame) -> set[tuple]:
    """(customer, currency, order count, spend rounded to cents) of placed orders with a
    customer."""
    if orders.empty:
        return set()
    placed = orders[(orders.event_type == "order_placed") & orders.customer_id.notna()]
    placed = placed.assign(currency=placed.currency.str.upper(), total=placed.total.astype(float))
    grouped = placed.groupby(["customer_id", "currency"]).agg(
        order_count=("event_id", "size"), spend=("total", "sum")
    )
    return {
        (c, cur, int(r.order_count), round(float(r.spend), 2)) for (c, cur), r in grouped.iterrows()
    }


def compare(name: str, expected: set[tuple], actual: set[tuple]) -> Check:
    """A Gold table's rows against the independent computation: every differing row (missing
    or extra) is a failure."""
    missing = sorted(expected - actual, key=str)
    extra = sorted(actual - expected, key=str)
    bad = [f"missing {row}" for row in missing] + [f"extra {row}" for row in extra]
    return _check(f"gold: {name} equals pandas", bad, max(len(expected), len(actual)), "differing")


def _final_windows(frame: pd.DataFrame, watermark: datetime | None) -> pd.DataFrame:
    """A Gold window table's rows whose window ends at or before ``watermark`` (times as
    naive UTC); none without a watermark."""
    limit = _limit(watermark)
    if limit is None or frame.empty:
        return frame.iloc[:0]
    frame = frame.assign(
        window_start=_naive_utc(frame.window_start), window_end=_naive_utc(frame.window_end)
    )
    return frame[frame.window_end <= limit]


def actual_payment_totals(frame: pd.DataFrame, watermark: datetime | None) -> set[tuple]:
    """``gold_payment_totals_*`` rows as :func:`expected_payment_totals` tuples (windows
    ending at or before ``watermark``)."""
    return {
        (r.window_start, r.currency, int(r.payment_count), round(float(r.amount_total), 2))
        for r in _final_windows(frame, watermark).itertuples()
    }


def actual_success_rates(frame: pd.DataFrame, watermark: datetime | None) -> set[tuple]:
    """``gold_payment_success_rate_15m`` rows as :func:`expected_success_rates` tuples."""
    return {
        (r.window_start, r.method, int(r.attempts), int(r.successes))
        for r in _final_windows(frame, watermark).itertuples()
    }


def actual_sessions(frame: pd.DataFrame) -> set[tuple]:
    """``gold_customer_sessions`` rows as :func:`expected_sessions` tuples."""
    if frame.empty:
        return set()
    frame = frame.assign(
        session_start=_naive_utc(frame.session_start), session_end=_naive_utc(frame.session_end)
    )
    return {
        (
            r.customer_id,
            r.session_start,
            r.session_end,
            int(r.event_count),
            bool(r.reached_checkout),
        )
        for r in frame.itertuples()
    }


def actual_customer_metrics(frame: pd.DataFrame) -> set[tuple]:
    """``gold_customer_metrics`` rows as :func:`expected_customer_metrics` tuples."""
    if frame.empty:
        return set()
    return {
        (r.customer_id, r.currency, int(r.order_count), round(float(r.spend), 2))
        for r in frame.itertuples()
    }


def alert_checks(payments: pd.DataFrame, alerts: pd.DataFrame, threshold: float) -> list[Check]:
    """Every well-formed payment above ``threshold`` alerted by the amount rule, and every
    alert landed once (by ``alert_id``)."""
    worthy = (
        set(payments[payments.amount.astype(float) > threshold].event_id)
        if len(payments)
        else set()
    )
    if alerts.empty:
        alerted: set[str] = set()
        twice: list[str] = []
    else:
        amount_rule = alerts[alerts.rule.str.contains("amount", na=False)]
        alerted = set(amount_rule.event_id.dropna())
        counts = alerts.alert_id.value_counts()
        twice = [a for a, n in counts.items() if n > 1]
    return [
        _check(
            "alerts: every payment above the threshold alerted",
            sorted(worthy - alerted),
            len(worthy),
            "lost",
        ),
        _check("alerts: every alert landed once", twice, len(alerts), "duplicated"),
    ]


def reconciliation_check(reconciliation: pd.DataFrame, bronze_rows: int) -> list[Check]:
    """``silver_reconciliation``: per batch, records read = written + quarantined +
    duplicates + late; and the newest Silver query (a refresh starts a new one) read every
    Bronze record once."""
    if reconciliation.empty:
        return [Check("silver: reconciliation balanced", 0, 0)]
    frame = reconciliation.fillna(0)
    accounted = (
        frame.records_written
        + frame.records_quarantined
        + frame.duplicates_dropped
        + frame.late_events
    )
    bad = frame[accounted != frame.records_read]
    newest = frame.sort_values("batch_time").query_id.iloc[-1]
    read = int(frame[frame.query_id == newest].records_read.sum())
    return [
        _check(
            "silver: reconciliation balanced",
            [f"batch {r.batch_id}: read {r.records_read}" for r in bad.itertuples()],
            len(frame),
            "other",
        ),
        _check(
            "silver: every Bronze record read once",
            [f"Silver read {read} records, Bronze holds {bronze_rows}"]
            if read != bronze_rows
            else [],
            bronze_rows,
            "other",
        ),
    ]


# --- reading the platform (services) -------------------------------------------------------


def read_kafka(settings: PlatformSettings) -> pd.DataFrame:
    """Every record of the contract topics, read back with a consumer: ``topic`` (without
    the prefix), ``partition``, ``offset``, ``value`` (bytes or None), ``hash``."""
    from kafka import KafkaConsumer, TopicPartition

    from ingest_core.contracts import TOPICS

    prefix = settings.kafka.topic_prefix
    consumer = KafkaConsumer(
        **settings.kafka.client_config(), enable_auto_commit=False, consumer_timeout_ms=10_000
    )
    rows: list[tuple[str, int, int, bytes | None]] = []
    try:
        partitions = [
            TopicPartition(prefix + topic, p)
            for topic in TOPICS
            for p in sorted(consumer.partitions_for_topic(prefix + topic) or ())
        ]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        left = {tp for tp in partitions if ends[tp] > 0}
        while left:
            batch = consumer.poll(timeout_ms=2000, max_records=5000)
            if not batch and all(consumer.position(tp) >= ends[tp] for tp in left):
                break
            for tp, records in batch.items():
                for record in records:
                    if record.offset < ends[tp]:
                        rows.append(
                            (
                                tp.topic.removeprefix(prefix),
                                tp.partition,
                                record.offset,
                                record.value,
                            )
                        )
                if consumer.position(tp) >= ends[tp]:
                    left.discard(tp)
    finally:
        consumer.close()
    frame = pd.DataFrame(rows, columns=[*COORDINATES, "value"])
    return frame.assign(hash=[value_hash(v) for v in frame["value"]])


def gate_checks(results: pd.DataFrame, holds: pd.DataFrame) -> list[Check]:
    """The quality gates held nothing back and needed no one.

    The soak's stream has no data a gate should stop (its malformed records are Silver's
    quarantine's), so a failed gate result is an increment held until an operator acts; an
    ``accept`` (an ``accepted`` result) or a ``quarantine`` (rows in ``ops_gate_holds``) is
    what the operator did. Soak run 20: a Silver gate failed a legitimate 69-row increment
    for 25 minutes, until it was accepted by hand; no fault's check noticed, since the
    medallion faults then found no task to strike.

    :param results: ``ops_gate_results`` (``table``, ``from_version``, ``to_version``,
        ``rows``, ``status``, ``failed_expectations``, ``resolved_by``, ``reason``,
        ``validated_at``), in any order; empty when no gate ran.
    :param holds: ``ops_gate_holds`` (``table``, ``event_id``, ``reason``, ``run_id``,
        ``held_by``); empty when nothing was quarantined.
    """
    from ingest_core.quality.results import describe_failures

    increments = ["table", "from_version", "to_version", "rows"]
    checked = 0 if results.empty else len(results.drop_duplicates(increments))
    held, by_hand = [], []
    if not results.empty:
        # One held increment is validated again and again, its end growing with Silver:
        # one entry per start, with the newest result's reasons.
        failed = results[results["status"] == "failed"].sort_values("validated_at")
        for row in failed.drop_duplicates(["table", "from_version"], keep="last").itertuples():
            why = "; ".join(describe_failures(row.failed_expectations))
            held.append(f"{row.table} versions {row.from_version}..{row.to_version}: {why}")
        accepted = results[results["status"] == "accepted"]
        by_hand += [
            f"accepted {row.table} versions {row.from_version}..{row.to_version} by "
            f"{row.resolved_by}: {row.reason}"
            for row in accepted.itertuples()
        ]
    if not holds.empty:
        quarantines = holds.groupby(["run_id", "table", "held_by", "reason"]).size()
        by_hand += [
            f"quarantined {count} rows of {table} ({run_id}) by {held_by}: {reason}"
            for (run_id, table, held_by, reason), count in quarantines.items()
        ]
    return [
        _check("quality gates: no increment held back", held, checked, "other"),
        _check("quality gates: no remedy run by hand", by_hand, checked, "other"),
    ]


def read_table(settings: PlatformSettings, table: str) -> pd.DataFrame:
    """A catalog table through delta-rs; an empty frame when it does not exist."""
    from ingest_core.catalog import get_catalog
    from ingest_core.delta_tables import read_pandas, table_exists

    path = get_catalog().table(table).path(settings)
    return read_pandas(path) if table_exists(path) else pd.DataFrame()


def gold_watermark(settings: PlatformSettings, table: str) -> datetime | None:
    """The event-time watermark of ``gold_aggregate``'s query writing ``table``, from its
    checkpoint's newest committed batch."""
    from ingest_core.catalog import get_catalog
    from ingest_core.delta_tables import committed_offsets

    checkpoint = get_catalog().job("gold_aggregate").checkpoint(settings, table)
    offsets = committed_offsets(checkpoint) if checkpoint.exists() else None
    millis = int((offsets or {}).get("metadata", {}).get("batchWatermarkMs", 0))
    return datetime.fromtimestamp(millis / 1000, tz=UTC) if millis else None


@dataclass
class DataVerdict:
    """Every data check, and the counts the summary reports."""

    checks: list[Check] = field(default_factory=list)
    kafka_records: int = 0
    acknowledged: int = 0

    def count(self, kind: str) -> int:
        """Failures of the checks of ``kind`` (``lost``, ``duplicated``, ``differing``...)."""
        return sum(c.failures for c in self.checks if c.kind == kind)


def judge_data(settings: PlatformSettings, log: SoakLog) -> DataVerdict:
    """Read Kafka and the tables; run every data check."""
    from ingest_core.catalog import get_catalog
    from ingest_core.contracts import CONTRACTS
    from ingest_core.intervals import parse_interval

    prefix = settings.kafka.topic_prefix
    kafka = classify(read_kafka(settings), log)
    bronze = read_table(settings, "bronze_events")
    bronze = (
        bronze.assign(
            topic=bronze["topic"].str.removeprefix(prefix),
            hash=[value_hash(v) for v in bronze["value"]],
        )
        if len(bronze)
        else pd.DataFrame(columns=[*COORDINATES, "hash"])
    )
    verdict = DataVerdict(kafka_records=len(kafka), acknowledged=len(log.acknowledged))
    verdict.checks += bronze_checks(kafka, bronze, log)
    verdict.checks.append(
        _check(
            "kafka: every record is one the soak sent",
            list(kafka[kafka.tag == "unknown"][COORDINATES].itertuples(index=False)),
            len(kafka),
            "other",
        )
    )
    events = well_formed_events(kafka)
    tables = {t: c.silver_table for t, c in CONTRACTS.items()}
    silver = {table: read_table(settings, table) for table in set(tables.values())}
    late = read_table(settings, "silver_late_events")
    quarantine = read_table(settings, "silver_quarantine")
    if len(quarantine):
        quarantine = quarantine.assign(topic=quarantine["topic"].str.removeprefix(prefix))
    malformed = kafka[kafka.tag.str.startswith("malformed:")]
    verdict.checks += silver_checks(events, silver, late, quarantine, malformed, tables)
    verdict.checks += reconciliation_check(
        read_table(settings, "silver_reconciliation"), len(bronze)
    )

    payments = unique_events(events, ("payment",))
    for table, minutes, slide in (
        ("gold_payment_totals_5m", 5, None),
        ("gold_payment_totals_10m_sliding", 10, 5),
    ):
        watermark = gold_watermark(settings, table)
        verdict.checks.append(
            compare(
                table,
                expected_payment_totals(payments, minutes, slide, watermark),
                actual_payment_totals(read_table(settings, table), watermark),
            )
        )
    watermark = gold_watermark(settings, "gold_payment_success_rate_15m")
    verdict.checks.append(
        compare(
            "gold_payment_success_rate_15m",
            expected_success_rates(payments, 15, watermark),
            actual_success_rates(read_table(settings, "gold_payment_success_rate_15m"), watermark),
        )
    )
    gap = parse_interval(get_catalog().job("gold_aggregate").setting("session_gap"))
    activity_types = tuple(t for t, table in tables.items() if table == "silver_customer_activity")
    verdict.checks.append(
        compare(
            "gold_customer_sessions",
            expected_sessions(
                unique_events(events, activity_types),
                gap,
                gold_watermark(settings, "gold_customer_sessions"),
            ),
            actual_sessions(read_table(settings, "gold_customer_sessions")),
        )
    )
    order_types = tuple(t for t, table in tables.items() if table == "silver_orders")
    verdict.checks.append(
        compare(
            "gold_customer_metrics",
            expected_customer_metrics(unique_events(events, order_types)),
            actual_customer_metrics(read_table(settings, "gold_customer_metrics")),
        )
    )
    verdict.checks += alert_checks(
        payments, read_table(settings, "gold_payment_alerts"), settings.alerts.amount_threshold
    )
    verdict.checks += gate_checks(
        read_table(settings, "ops_gate_results"), read_table(settings, "ops_gate_holds")
    )
    return verdict
