"""Three always-on drivers against shared ones: what sharing would save and cost.

A decision's input, not a target: the demo's memory target (<= 4 GB) cannot be met while the
three always-on jobs run as three driver JVMs (bench/results/REFERENCE.md). This part runs
the same always-on load in three layouts, one after the other, on fresh homes and topics:

* ``separate``: ``bronze_ingest`` (1 s trigger), ``payment_alerts`` and ``payment_alerts_rt``
  (their catalog triggers) submitted as the platform submits them, three applications;
* ``shared``: the same queries in one application (:mod:`bench.shared_always_on`), on
  ``local[N]`` with N the real-time query's partitions plus two;
* ``alerts_shared``: ``bronze_ingest`` on its own, the two alert jobs in one application.

Each layout gets 5,000 events/s of the steady workload for the warm-up and the window, with
every 50th message a payment of :func:`bench.alerts.payments` (every 20th of those above the
real-time rule's threshold). Measured in the window: the drivers' memory (RSS and PSS peaks
of the layout's processes, :class:`bench.memory.MemorySampler`), Bronze freshness
(:mod:`bench.freshness`), the real-time alerts' latency (:func:`bench.alerts.latencies`) and
the drivers' GC pauses (``-Xlog:gc``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import alerts, freshness, jobs, memory, report, workload
from bench.report import Measurement

if TYPE_CHECKING:
    import subprocess

    from bench.run import Bench

LAYOUTS = ("separate", "shared", "alerts_shared")
#: The jobs each layout runs in one application; the others run as the platform runs them.
SHARED_JOBS = {
    "separate": (),
    "shared": ("bronze_ingest", "payment_alerts", "payment_alerts_rt"),
    "alerts_shared": ("payment_alerts", "payment_alerts_rt"),
}
#: Partitions of every topic a layout creates (the real-time query holds a task slot for each).
PARTITIONS = 3
#: Every this many messages of the steady workload, one payment of :func:`alerts.payments`.
PAYMENT_EVERY = 50
#: The always-on jobs' applications in the ``separate`` layout, with their arguments.
SEPARATE = (
    ("bronze_ingest", ("--trigger", "processing-time=1s")),
    ("payment_alerts", ()),
    ("payment_alerts_rt", ()),
)
APPLICATION = Path(__file__).with_name("shared_always_on.py")
_PAUSE = re.compile(r"Pause (Young|Full).* (\d+(?:\.\d+)?)ms")


def gc_pauses(log_dir: Path) -> dict[str, float]:
    """Young and full pauses summed over the ``-Xlog:gc`` files (``gc-*.log``) of
    ``log_dir``: ``young`` and ``full`` (counts), ``young_s`` and ``full_s`` (seconds)."""
    counts = {"young": 0, "full": 0}
    seconds = {"young": 0.0, "full": 0.0}
    for log in log_dir.glob("gc-*.log"):
        for line in log.read_text(errors="replace").splitlines():
            found = _PAUSE.search(line)
            if found:
                kind = found.group(1).lower()
                counts[kind] += 1
                seconds[kind] += float(found.group(2)) / 1000
    return counts | {f"{kind}_s": round(value, 3) for kind, value in seconds.items()}


def commands(layout: str, real_time_partitions: int) -> list[tuple[str, list[str]]]:
    """(log name, spark-submit command) of each application of ``layout``: the jobs it
    does not share as the platform submits them, then one :mod:`bench.shared_always_on`
    application on ``local[N]``, N the real-time query's partitions plus two."""
    from ingest_platform.operators import job_application

    shared = SHARED_JOBS[layout]
    out = [(job, jobs.submit_command(job, args)) for job, args in SEPARATE if job not in shared]
    if shared:
        command = jobs.submit_command("bronze_ingest", [])
        at = command.index(job_application("bronze_ingest"))
        master = f"local[{real_time_partitions + 2}]"
        command[at:] = [str(APPLICATION), "--master", master, "--jobs", ",".join(shared)]
        out.append(("shared", command))
    return out


def run_layout(bench: Bench, layout: str, warmup_s: float, window_s: float) -> dict[str, Any]:
    """Run one layout on its own home and topics; what was measured in its window.

    :raises bench.env.BenchError: a driver exited before the window's end, or the producer
        failed.
    """
    from bench.env import BenchError
    from bench.run import STEADY_RATE, wait_for
    from ingest_core.catalog import get_catalog
    from ingest_core.contracts import TOPICS
    from ingest_core.settings import get_settings
    from ingest_core.topics import ensure_topics
    from ingest_platform.hooks import job_environment

    env = bench.env
    name = f"shared_driver_{layout}"
    prefix = f"{layout}."
    home = env.home(name)
    gc_dir = home / "gc"
    gc_dir.mkdir(parents=True, exist_ok=True)
    saved_options = env.user_submit_options
    env.user_submit_options = f"{saved_options} -Xlog:gc:file={gc_dir}/gc-%p.log:uptime".strip()
    drivers: list[subprocess.Popen[bytes]] = []
    try:
        with env.use(home, prefix):
            settings = get_settings()
            alerts_topic = settings.kafka.topic(settings.alerts.topic)
            alerts.create_topics(env.bootstrap, prefix, alerts_topic, PARTITIONS)
            ensure_topics(env.bootstrap, [prefix + t for t in TOPICS], partitions=PARTITIONS)
            for log, command in commands(layout, real_time_partitions=PARTITIONS):
                drivers.append(env.spawn(command, f"{name}-{log}.log", env=job_environment()))
            table = get_catalog().table("bronze_events").path()

            def started() -> bool:
                if any(d.poll() is not None for d in drivers):
                    raise BenchError(f"{name}: a driver exited; logs in {env.logs}")
                return any((table / "_delta_log").glob("*.json"))

            wait_for(started, 300, f"{name}'s Bronze table")
            time.sleep(20)  # the alert queries start after Bronze's
            producer = workload.SteadyProducer(
                env.bootstrap, STEADY_RATE, warmup_s + window_s, topic_prefix=prefix
            )
            extra = iter(alerts.payments(len(producer.messages) // PAYMENT_EVERY + 1, prefix))
            producer.messages = [
                next(extra) if i % PAYMENT_EVERY == 0 else message
                for i, message in enumerate(producer.messages)
            ]
            sampler = memory.MemorySampler(str(home))
            load_start = report.load_avg()
            producer.start()
            time.sleep(warmup_s)
            sampler.start()
            producer.join()
            sampler.stop()
            if producer.error:
                raise BenchError(f"{name}: steady producer failed: {producer.error}")
            window = (producer.started_at + warmup_s, producer.ended_at)
            time.sleep(12)  # the last micro-batches commit
            load_end = report.load_avg()
            if any(d.poll() is not None for d in drivers):
                raise BenchError(f"{name}: drivers exited during the window; logs in {env.logs}")
            fresh = freshness.measure(table, *window)
            latency = alerts.latencies(
                alerts.read_topic(env.bootstrap, prefix + "payments"),
                alerts.read_topic(env.bootstrap, alerts_topic),
                window,
            )
    finally:
        for driver in drivers:
            env.stop(driver)
        env.user_submit_options = saved_options
    summary = latency.summary()
    return {
        "load_avg": {"start": load_start, "end": load_end},
        "drivers_rss_peak_mb": round(sampler.peaks_mb.get("spark", 0.0), 1),
        "drivers_pss_peak_mb": round(sampler.total_peak_pss_mb, 1),
        "peak_detail_mb": sampler.peak_detail,
        "freshness_p50_s": round(fresh.p50, 3),
        "freshness_p99_s": round(fresh.p99, 3),
        "freshness_max_s": round(fresh.max, 3),
        "bronze_rows_in_window": len(fresh.latencies_s),
        "achieved_rate": round(producer.achieved_rate, 1),
        "alerts_p99_s": None if summary["p99"] is None else round(summary["p99"], 3),
        "alerts": {"expected": latency.expected, "missing": latency.missing}
        | {k: None if v is None else round(v, 3) for k, v in summary.items()},
        "gc": gc_pauses(gc_dir),
    }


def shared_driver(bench: Bench, warmup_s: float, window_s: float) -> None:
    """Every layout, one after the other; per sharing layout one measurement per figure
    (``<layout>_driver_rss_peak`` ...), against the separate layout's as baseline."""
    found: dict[str, dict[str, Any]] = {}
    for layout in LAYOUTS:
        with bench.step(f"shared_driver_{layout}"):
            found[layout] = run_layout(bench, layout, warmup_s, window_s)
    if "separate" not in found:
        return
    separate = found["separate"]
    figures = (
        ("rss_peak", "drivers_rss_peak_mb", "MB"),
        ("pss_peak", "drivers_pss_peak_mb", "MB"),
        ("freshness_p99", "freshness_p99_s", "s"),
        ("alert_p99", "alerts_p99_s", "s"),
    )
    for layout in (name for name in LAYOUTS if name != "separate" and name in found):
        for suffix, key, unit in figures:
            bench.add(
                Measurement(
                    f"{layout}_driver_{suffix}",
                    found[layout][key],
                    unit,
                    baseline=separate[key],
                    baseline_name="three drivers",
                    load_avg=found[layout]["load_avg"],
                    params={"window_s": window_s, "warmup_s": warmup_s, "order": LAYOUTS},
                    profile=found,
                )
            )
