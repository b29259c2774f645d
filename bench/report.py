"""Measurements as JSON lines, and the table printed at the end of a run.

Pure helpers (no Spark, no Kafka): percentiles, ratios, spread, targets, the record schema
and the table. ``tests/unit/test_bench_report.py`` checks them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: Keys every JSON line has (``tests/unit/test_bench_report.py`` holds the schema to this).
RECORD_KEYS = (
    "name",
    "value",
    "unit",
    "baseline",
    "baseline_name",
    "ratio",
    "target",
    "met",
    "n",
    "spread",
    "load_avg",
    "git_commit",
    "timestamp",
    "params",
    "profile",
)


@dataclass(frozen=True)
class Target:
    """A target of the issue: ``metric`` (``value`` or ``ratio``) ``op`` (``>=``/``<=``)
    ``threshold``; ``text`` is how the issue says it."""

    metric: str
    op: str
    threshold: float
    text: str

    def __post_init__(self) -> None:
        if self.metric not in ("value", "ratio") or self.op not in (">=", "<="):
            raise ValueError(f"bad target {self.metric} {self.op} {self.threshold}")

    def met(self, value: float | None, ratio: float | None) -> bool | None:
        """Whether the figure meets the target; None when the figure is missing."""
        figure = value if self.metric == "value" else ratio
        if figure is None:
            return None
        return figure >= self.threshold if self.op == ">=" else figure <= self.threshold

    def margin(self, value: float | None, ratio: float | None) -> float | None:
        """By how much the figure beats (> 0) or misses (< 0) the target, relative to it."""
        figure = value if self.metric == "value" else ratio
        if figure is None or self.threshold == 0:
            return None
        delta = figure - self.threshold if self.op == ">=" else self.threshold - figure
        return delta / self.threshold


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0 < p < 100) by :func:`statistics.quantiles` (inclusive
    method: within the observed range, as a latency percentile should be).

    :raises ValueError: no values, or ``p`` outside (0, 100).
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < p < 100:
        raise ValueError(f"percentile {p} is not within (0, 100)")
    if len(values) == 1:
        return float(values[0])
    cuts = statistics.quantiles(values, n=1000, method="inclusive")
    return cuts[round(p * 10) - 1]


def spread(values: Sequence[float]) -> dict[str, float] | None:
    """Median, min, max and relative range ``(max - min) / median`` of repeated runs; None
    for fewer than two values."""
    if len(values) < 2:
        return None
    median = statistics.median(values)
    return {
        "median": median,
        "min": min(values),
        "max": max(values),
        "rel_range": (max(values) - min(values)) / median if median else float("nan"),
    }


def ratio(value: float | None, baseline: float | None) -> float | None:
    """``value / baseline``; None when either is missing or the baseline is zero."""
    if value is None or not baseline:
        return None
    return value / baseline


def load_avg() -> list[float]:
    """1-, 5- and 15-minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def git_commit(repo: Path) -> str:
    """Short commit of ``repo``'s HEAD, with ``+dirty`` when bench/ has local changes."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
        )
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--", "bench") else "")


@dataclass
class Measurement:
    """One JSON line. ``value`` in ``unit``; ``ratio`` is ``value / baseline`` when there is
    a baseline; ``n`` runs (``spread`` over them when ``n > 1``, ``value`` is their median);
    ``load_avg`` at the start and the end of the measurement; ``profile`` says what the time
    went to (durations by phase, Spark progress ``durationMs``, top SQL executions)."""

    name: str
    value: float | None
    unit: str
    baseline: float | None = None
    baseline_name: str | None = None
    target: Target | None = None
    n: int = 1
    spread: dict[str, float] | None = None
    load_avg: dict[str, list[float]] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    git_commit: str = ""
    timestamp: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    @property
    def ratio(self) -> float | None:
        return ratio(self.value, self.baseline)

    @property
    def met(self) -> bool | None:
        return self.target.met(self.value, self.ratio) if self.target else None

    def record(self) -> dict[str, Any]:
        """The JSON-ready record (keys :data:`RECORD_KEYS`)."""
        data = asdict(self)
        data["target"] = asdict(self.target) if self.target else None
        if self.target:
            data["target"]["margin"] = self.target.margin(self.value, self.ratio)
        data["ratio"] = self.ratio
        data["met"] = self.met
        return {key: data[key] for key in RECORD_KEYS}


def write_jsonl(path: Path, measurements: Iterable[Measurement]) -> None:
    """Append one JSON line per measurement to ``path`` (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        for m in measurements:
            handle.write(json.dumps(m.record(), default=str, sort_keys=False) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a results file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def table_rows(records: Iterable[dict[str, Any]]) -> list[list[str]]:
    """Rows of the summary table: measurement, value, unit, baseline, ratio, target, met,
    n (relative range), load (1-min, at start)."""
    rows = []
    for r in records:
        target = r["target"]
        met = {True: "met", False: "MISSED", None: "-"}[r["met"]]
        if target and target.get("margin") is not None and r["met"] is not None:
            met += f" ({target['margin']:+.0%})"
        n = str(r["n"])
        if r["spread"]:
            n += f" (±{r['spread']['rel_range'] / 2:.0%})"
        load = r["load_avg"].get("start")
        rows.append(
            [
                r["name"],
                _fmt(r["value"]),
                r["unit"],
                f"{_fmt(r['baseline'])} {r['baseline_name'] or ''}".strip(),
                _fmt(r["ratio"]),
                target["text"] if target else "-",
                met,
                n,
                f"{load[0]:.2f}" if load else "-",
            ]
        )
    return rows


TABLE_HEADER = ["measurement", "value", "unit", "baseline", "ratio", "target", "met", "n", "load1"]


def print_table(records: Iterable[dict[str, Any]], title: str = "benchmarks") -> None:
    """Print the summary table with rich."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for header in TABLE_HEADER:
        table.add_column(
            header,
            justify="left"
            if header in ("measurement", "unit", "baseline", "target", "met")
            else "right",
        )
    for row in table_rows(records):
        table.add_row(*row)
    Console(width=170).print(table)


def markdown_table(records: Iterable[dict[str, Any]]) -> str:
    """The same table as GitHub Markdown (for REFERENCE.md and the README)."""
    lines = ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(records)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.report RESULTS.jsonl [--markdown]``: the table of a results file."""
    import argparse

    parser = argparse.ArgumentParser(prog="bench.report", description=main.__doc__)
    parser.add_argument("results", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    records = read_jsonl(args.results)
    if args.markdown:
        print(markdown_table(records))
    else:
        print_table(records, title=str(args.results.name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
