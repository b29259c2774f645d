"""Bench part ``alerts``: end-to-end latency of the alert path, real-time mode against a
5-second micro-batch, in the same run (issue 19).

``payment_alerts_rt`` runs twice, one driver after the other (two JVMs at once on 2 cores
measure CPU contention, not the trigger), each with its own home (checkpoint, heartbeat)
and its own topic prefix (payments and alerts topics): first with the job's default trigger
(``real-time=...`` in include/pipeline.yaml), then with ``--trigger processing-time=5s``
(the baseline: the same stateless query on micro-batches, the trigger ``payment_alerts``
uses). Each gets a
steady stream of payments at every rate of ``Profile.alert_rates`` (a fixed share above the
threshold) for a warm-up and a window.

Latency of one alert = the alert record's Kafka timestamp (the alerts topics are created
with ``message.timestamp.type=LogAppendTime``: the broker's clock when the alert arrived)
minus the payment record's Kafka timestamp (CreateTime, set by the producer when it sent
it), both read back from the broker after the run, joined on the payment's ``event_id``.
Only payments sent inside the window count; an expected alert that never arrived is
reported as ``missing``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench import jobs, report, workload
from bench.report import Measurement, Target

if TYPE_CHECKING:
    from bench.run import Bench

PREFIXES = {"real_time": "alrt.", "micro_batch": "almb."}
#: Share of payments above the threshold (alerts per payment).
ALERT_SHARE = 0.05
THRESHOLD = 5000.0
TARGETS = {
    "p99": Target("value", "<=", 1.0, "p99 <= 1 s at 1,000 payments/s"),
    "vs_micro_batch": Target("ratio", "<=", 0.2, "p99 <= 0.2 x the micro-batch path's"),
}


def _paths() -> dict[str, str]:
    """The triggers compared: the job's own (``default_trigger`` in include/pipeline.yaml)
    and the 5-second micro-batch baseline."""
    from ingest_core.catalog import get_catalog

    return {
        "real_time": get_catalog().job("payment_alerts_rt").default_trigger,
        "micro_batch": "processing-time=5s",
    }


PATHS = _paths()


@dataclass
class Latencies:
    """Per path: latencies in seconds of the alerts of payments sent in the window, and the
    count of expected alerts that never arrived."""

    seconds: list[float]
    expected: int
    missing: int
    params: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, float | None]:
        values = self.seconds
        return {
            "p50": report.percentile(values, 50) if values else None,
            "p99": report.percentile(values, 99) if values else None,
            "max": max(values) if values else None,
        }


def payments(count: int, prefix: str, seed: int = 19) -> list[Any]:
    """``count`` valid payments (contract fields), one customer each; every 20th (a
    :data:`ALERT_SHARE` of them) above :data:`THRESHOLD`. Returns producer messages."""
    import random

    from ingestctl.producer import Message, encode_value

    rng = random.Random(seed)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out = []
    for i in range(count):
        big = i % round(1 / ALERT_SHARE) == 0
        event_id = f"bench-{seed}-{i}"
        event = {
            "event_id": event_id,
            "event_type": "payment",
            "event_time": stamp,
            "schema_version": 1,
            "payment_id": f"p{i}",
            "order_id": f"o{i}",
            "customer_id": f"c{i}",
            "method": "credit_card",
            "installments": 1,
            "amount": round(THRESHOLD * 2 if big else rng.uniform(5, 500), 2),
            "currency": "BRL",
            "status": "authorized",
        }
        out.append(Message(prefix + "payments", event_id, encode_value(event)))
    return out


def create_topics(bootstrap: str, prefix: str, alerts_topic: str, partitions: int = 3) -> None:
    """The payments topic and the alerts topic (LogAppendTime) of one path, created fresh."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-alerts")
    try:
        admin.create_topics(
            [
                NewTopic(prefix + "payments", partitions, 1),
                NewTopic(
                    alerts_topic,
                    partitions,
                    1,
                    topic_configs={"message.timestamp.type": "LogAppendTime"},
                ),
            ]
        )
    finally:
        admin.close()


def read_topic(bootstrap: str, topic: str) -> list[Any]:
    """Every record of ``topic`` now (from the beginning to the end offsets)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        records: list[Any] = []
        while any(consumer.position(p) < ends[p] for p in parts):
            for batch in consumer.poll(1000).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()


def latencies(
    payment_records: Sequence[Any], alert_records: Sequence[Any], window: tuple[float, float]
) -> Latencies:
    """Join alerts to payments on ``event_id``: alert timestamp - payment timestamp, for
    payments above the threshold whose timestamp is inside ``window`` (epoch seconds)."""
    sent: dict[str, float] = {}
    for record in payment_records:
        value = json.loads(record.value)
        if value["amount"] > THRESHOLD and window[0] <= record.timestamp / 1000 <= window[1]:
            sent[value["event_id"]] = record.timestamp / 1000
    arrived: dict[str, float] = {}
    for record in alert_records:
        event_id = json.loads(record.value).get("event_id")
        if event_id in sent and event_id not in arrived:  # a replay's resend is not latency
            arrived[event_id] = record.timestamp / 1000
    seconds = [arrived[e] - sent[e] for e in arrived]
    return Latencies(seconds, len(sent), len(sent) - len(arrived))


def alert_latency(bench: Bench, rates: Sequence[int], warmup_s: float, window_s: float) -> None:
    """Measure both paths at each rate (see the module docstring)."""
    found: dict[int, dict[str, Latencies]] = {rate: {} for rate in rates}
    with bench.step("alert_latency", "s") as loads:
        for path in PATHS:
            for rate, latency in _one_path(bench, path, rates, warmup_s, window_s, loads).items():
                found[rate][path] = latency
        for rate in rates:
            _record(bench, rate, found[rate], loads)


def _one_path(
    bench: Bench,
    path: str,
    rates: Sequence[int],
    warmup_s: float,
    window_s: float,
    loads: dict[str, list[float]],
) -> dict[int, Latencies]:
    """Start one path's driver, stream each rate through it, stop it."""
    from bench.env import BenchError
    from bench.run import wait_for
    from ingest_core.runtime_files import read_json
    from ingest_platform.hooks import job_environment

    env, prefix = bench.env, PREFIXES[path]
    alerts_topic = f"{prefix}payment_alerts"
    home = env.home(f"alerts_{path}")
    found: dict[int, Latencies] = {}
    with env.use(home, prefix):
        create_topics(env.bootstrap, prefix, alerts_topic)
        extra = {**job_environment(), "INGEST_ALERTS__AMOUNT_THRESHOLD": str(THRESHOLD)}
        command = jobs.submit_command("payment_alerts_rt", ["--trigger", PATHS[path]])
        driver = env.spawn(command, f"alerts-{path}.log", env=extra)
        beat = home / "state" / "jobs" / "payment_alerts_rt" / "heartbeat.json"

        def started() -> bool:
            if driver.poll() is not None:
                raise BenchError(
                    f"payment_alerts_rt ({path}) exited {driver.returncode}; log "
                    f"{env.logs / f'alerts-{path}.log'}"
                )
            queries = ((read_json(beat) or {}).get("queries") or {}).values()
            return any(q.get("status") in ("started", "active", "idle") for q in queries)

        try:
            wait_for(started, 300, f"the {path} driver's query to start")
            for rate in rates:
                loads[f"start_{path}_{rate}"] = report.load_avg()
                found[rate] = _stream(bench, prefix, alerts_topic, rate, warmup_s, window_s)
                loads[f"end_{path}_{rate}"] = report.load_avg()
        finally:
            env.stop(driver)
    return found


def _stream(
    bench: Bench, prefix: str, alerts_topic: str, rate: int, warmup_s: float, window_s: float
) -> Latencies:
    """Send payments at ``rate`` for the warm-up and the window; the window's latencies."""
    from bench.env import BenchError

    env = bench.env
    duration = warmup_s + window_s
    messages = payments(int(rate * duration) + 1, prefix, seed=rate)
    producer = workload.SteadyProducer(env.bootstrap, rate, duration, messages=messages)
    producer.start()
    producer.join()
    if producer.error:
        raise BenchError(f"payment producer failed: {producer.error}")
    window = (producer.started_at + warmup_s, producer.ended_at)
    time.sleep(12)  # two micro-batches of the baseline after the last payment
    sent = read_topic(env.bootstrap, prefix + "payments")
    found = latencies(sent, read_topic(env.bootstrap, alerts_topic), window)
    found.params.update(rate=rate, achieved_rate=producer.achieved_rate, window_s=window_s)
    return found


def _record(
    bench: Bench, rate: int, found: dict[str, Latencies], loads: dict[str, list[float]]
) -> None:
    summary = {path: found[path].summary() for path in found}
    params = {
        "rate": rate,
        "achieved_rate": {p: f.params.get("achieved_rate") for p, f in found.items()},
        "alert_share": ALERT_SHARE,
        "triggers": PATHS,
        "alerts": {p: len(f.seconds) for p, f in found.items()},
        "expected": {p: f.expected for p, f in found.items()},
        "missing": {p: f.missing for p, f in found.items()},
        "summary_s": summary,
        "latency": "alert LogAppendTime - payment CreateTime (one host's clock)",
        "order": "real-time driver first, then the micro-batch driver, one at a time",
    }
    baseline = summary.get("micro_batch", {})
    for path in found:
        load = {
            "start": loads.get(f"start_{path}_{rate}", []),
            "end": loads.get(f"end_{path}_{rate}", []),
        }
        for stat in ("p50", "p99", "max"):
            rt = path == "real_time"
            bench.add(
                Measurement(
                    f"alert_latency_{stat}_{path}_{rate}",
                    summary[path][stat],
                    "s",
                    baseline=baseline.get(stat) if rt else None,
                    baseline_name=f"micro-batch {stat}, same run" if rt else None,
                    target=TARGETS["p99"] if rt and stat == "p99" and rate == 1000 else None,
                    load_avg=load,
                    params=params,
                )
            )
    if "real_time" in summary and baseline:
        bench.add(
            Measurement(
                f"alert_latency_p99_vs_micro_batch_{rate}",
                summary["real_time"]["p99"],
                "s",
                baseline=baseline.get("p99"),
                baseline_name="micro-batch p99, same run",
                target=TARGETS["vs_micro_batch"],
                params={"rate": rate},
            )
        )
