"""Freshness of the always-on path: Kafka timestamp -> the Delta commit that made the row
visible in ``bronze_events``.

Every row of Bronze carries its Kafka timestamp (``kafka_timestamp``: CreateTime, set by the
producer when it sent the record). Every Delta commit is a file ``_delta_log/<version>.json``
whose ``add`` actions name the Parquet files it made visible; the moment that file was
written (its mtime; ``commitInfo.timestamp`` is recorded too) is when a reader can first
see those rows. So each row's freshness is ``commit time - kafka_timestamp``, read straight
from the table's files with pyarrow, independent of Spark.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from bench.report import percentile


@dataclass
class Freshness:
    """Per-row latencies (seconds) of the rows whose Kafka time is in the window."""

    latencies_s: list[float]
    commits: int
    commit_intervals_s: list[float]

    @property
    def p50(self) -> float:
        return percentile(self.latencies_s, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_s, 99)

    @property
    def max(self) -> float:
        return max(self.latencies_s)


def commits(table: Path) -> list[dict[str, object]]:
    """Per Delta version: ``version``, ``mtime_ms`` (commit file written), ``commit_ms``
    (commitInfo's timestamp, or its in-commit timestamp), ``files`` (added data files)."""
    out = []
    for log in sorted((table / "_delta_log").glob("*.json")):
        files, commit_ms = [], None
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                files.append(table / unquote(action["add"]["path"]))
            elif "commitInfo" in action:
                info = action["commitInfo"]
                commit_ms = info.get("inCommitTimestamp") or info.get("timestamp")
        out.append(
            {
                "version": int(log.stem),
                "mtime_ms": log.stat().st_mtime_ns / 1e6,
                "commit_ms": commit_ms,
                "files": files,
            }
        )
    return out


def measure(table: Path, window_start_s: float, window_end_s: float) -> Freshness:
    """Latencies of rows whose Kafka timestamp lies in ``[window_start_s, window_end_s)``
    (epoch seconds: the steady-load window, without warm-up and drain).

    :raises ValueError: no row of the window is in the table.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    latencies: list[float] = []
    times = []
    for commit in commits(table):
        visible_s = float(commit["mtime_ms"]) / 1000  # type: ignore[arg-type]
        files = commit["files"]
        assert isinstance(files, list)
        if files:
            times.append(visible_s)
        for path in files:
            column = pq.read_table(path, columns=["kafka_timestamp"]).column(0)
            micros = pc.cast(pc.cast(column, pa.timestamp("us", tz="UTC")), pa.int64())
            seconds = pc.divide(pc.cast(micros, pa.float64()), 1_000_000.0).to_pylist()
            latencies.extend(
                visible_s - t
                for t in seconds
                if t is not None and window_start_s <= t < window_end_s
            )
    if not latencies:
        raise ValueError(f"no row of the window is in {table}")
    times.sort()
    intervals = [b - a for a, b in itertools.pairwise(times)]
    return Freshness(latencies, len(times), intervals)
