"""Bench part ``alerts``: end-to-end latency of the alert path, real-time mode against a
5-second micro-batch, side by side in the same run (issue 19).

Two drivers of ``payment_alerts_rt`` run at once on the same payments topic, each with its
own home (checkpoint, heartbeat) and its own alerts topic: one with ``--trigger
real-time=1 minute`` (the job's default), one with ``--trigger processing-time=5s`` (the
baseline: the same stateless query on micro-batches, the trigger ``payment_alerts`` uses).
A steady stream of payments (``--alert-rates``, a fixed share above the threshold) flows
for a warm-up and a window per rate.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench import jobs, report, workload
from bench.report import Measurement, Target

if TYPE_CHECKING:
    from bench.run import Bench

PREFIX = "al."
#: Share of payments above the threshold (alerts per payment).
ALERT_SHARE = 0.05
THRESHOLD = 5000.0
TARGETS = {
    "p99": Target("value", "<=", 1.0, "p99 <= 1 s at 1,000 payments/s"),
    "vs_micro_batch": Target("ratio", "<=", 0.2, "p99 <= 0.2 x the micro-batch path's"),
}
PATHS = {"real_time": "real-time=1 minute", "micro_batch": "processing-time=5s"}


@dataclass(frozen=True)
class Latencies:
    """Per path: latencies in seconds of the alerts of payments sent in the window, and the
    count of expected alerts that never arrived."""

    seconds: list[float]
    expected: int
    missing: int

    def summary(self) -> dict[str, float | None]:
        values = self.seconds
        return {
            "p50": report.percentile(values, 50) if values else None,
            "p99": report.percentile(values, 99) if values else None,
            "max": max(values) if values else None,
        }


def payments(count: int, seed: int = 19) -> list[Any]:
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
        out.append(Message(PREFIX + "payments", event_id, encode_value(event)))
    return out


def create_topics(bootstrap: str, alert_topics: Sequence[str], partitions: int = 3) -> None:
    """The payments topic and the alerts topics (LogAppendTime), created fresh."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-alerts")
    try:
        admin.create_topics(
            [NewTopic(PREFIX + "payments", partitions, 1)]
            + [
                NewTopic(
                    t, partitions, 1, topic_configs={"message.timestamp.type": "LogAppendTime"}
                )
                for t in alert_topics
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
    from ingest_core.runtime_files import read_json
    from ingest_platform.hooks import job_environment

    env = bench.env
    topics = {path: f"{PREFIX}payment_alerts_{path}" for path in PATHS}
    with bench.step("alert_latency", "s") as loads, env.use(env.home("alerts"), PREFIX):
        create_topics(env.bootstrap, list(topics.values()))
        drivers, beats = {}, {}
        for path, trigger in PATHS.items():
            home = env.home(f"alerts_{path}")
            extra = {
                **job_environment(),
                **env.variables(home, PREFIX),
                "INGEST_ALERTS__TOPIC": topics[path].removeprefix(PREFIX),
                "INGEST_ALERTS__AMOUNT_THRESHOLD": str(THRESHOLD),
            }
            command = jobs.submit_command("payment_alerts_rt", ["--trigger", trigger])
            drivers[path] = env.spawn(command, f"alerts-{path}.log", env=extra)
            beats[path] = home / "state" / "jobs" / "payment_alerts_rt" / "heartbeat.json"

        def started() -> bool:
            for path, driver in drivers.items():
                if driver.poll() is not None:
                    raise report_error(env, path, driver.returncode)
            return all(
                any(
                    q.get("status") in ("started", "active", "idle")
                    for q in ((read_json(b) or {}).get("queries") or {}).values()
                )
                for b in beats.values()
            )

        from bench.run import wait_for

        wait_for(started, 300, "both alert drivers' queries to start")
        try:
            for rate in rates:
                _one_rate(bench, rate, warmup_s, window_s, topics, loads)
        finally:
            for driver in drivers.values():
                env.stop(driver)


def report_error(env: Any, path: str, code: int | None) -> Exception:
    from bench.env import BenchError

    return BenchError(f"payment_alerts_rt ({path}) exited {code}; log {env.logs}/alerts-{path}.log")


def _one_rate(
    bench: Bench,
    rate: int,
    warmup_s: float,
    window_s: float,
    topics: dict[str, str],
    loads: dict[str, list[float]],
) -> None:
    from bench.env import BenchError

    env = bench.env
    duration = warmup_s + window_s
    messages = payments(int(rate * duration) + 1, seed=rate)
    producer = workload.SteadyProducer(env.bootstrap, rate, duration, messages=messages)
    loads[f"start_{rate}"] = report.load_avg()
    producer.start()
    producer.join()
    if producer.error:
        raise BenchError(f"payment producer failed: {producer.error}")
    window = (producer.started_at + warmup_s, producer.ended_at)
    time.sleep(12)  # two micro-batches of the baseline after the last payment
    loads[f"end_{rate}"] = report.load_avg()
    sent = read_topic(env.bootstrap, PREFIX + "payments")
    found = {
        path: latencies(sent, read_topic(env.bootstrap, t), window) for path, t in topics.items()
    }
    summary = {path: found[path].summary() for path in found}
    params = {
        "rate": rate,
        "achieved_rate": producer.achieved_rate,
        "window_s": round(window[1] - window[0], 1),
        "alert_share": ALERT_SHARE,
        "triggers": PATHS,
        "alerts": {p: len(f.seconds) for p, f in found.items()},
        "expected": {p: f.expected for p, f in found.items()},
        "missing": {p: f.missing for p, f in found.items()},
        "summary_s": summary,
        "latency": "alert LogAppendTime - payment CreateTime (one host's clock)",
    }
    baseline = summary["micro_batch"]
    for path in PATHS:
        for stat in ("p50", "p99", "max"):
            value = summary[path][stat]
            is_rt_p99 = path == "real_time" and stat == "p99"
            bench.add(
                Measurement(
                    f"alert_latency_{stat}_{path}_{rate}",
                    value,
                    "s",
                    baseline=baseline[stat] if path == "real_time" else None,
                    baseline_name=f"micro-batch {stat}" if path == "real_time" else None,
                    target=TARGETS["p99"] if is_rt_p99 and rate == 1000 else None,
                    load_avg={"start": loads[f"start_{rate}"], "end": loads[f"end_{rate}"]},
                    params=params,
                )
            )
    bench.add(
        Measurement(
            f"alert_latency_p99_vs_micro_batch_{rate}",
            summary["real_time"]["p99"],
            "s",
            baseline=baseline["p99"],
            baseline_name="micro-batch p99, same run",
            target=TARGETS["vs_micro_batch"],
            load_avg={"start": loads[f"start_{rate}"], "end": loads[f"end_{rate}"]},
            params={"rate": rate},
        )
    )
