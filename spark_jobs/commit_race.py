"""commit_race: Spark and delta-rs appending one-row commits to one Delta table at once, with
Spark's commits paused before their atomic step as a GC pause or a preemption would pause
them; then every append either engine acknowledged is counted in the table.

Issue 50: on Delta's stock ``HDFSLogStore`` (check, then ``rename(2)``) such a race lost
delta-rs commits delta-rs had reported as successful; the platform's log store
(``include/maven/logstore``, :data:`spark_jobs.session.DELTA_LOG_STORE`) makes each
``_delta_log/<version>.json`` an atomic put-if-absent. ``tests/integration/
test_delta_log_store.py`` runs the race on the suite's driver; the soak's
``concurrent_commits`` fault runs it as this command beside the running platform, under its
load.

Run::

    python -m spark_jobs.commit_race /tmp/race_table --rounds 12 --pause-ms 50

It prints one JSON object (:class:`RaceResult`) and exits 0 when nothing acknowledged was
lost or duplicated and the versions have no gap, else 1. Not a platform job: it writes only
the folder it is given, which must not exist yet or be empty.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession

#: The Hadoop key of the platform log store's test pause (``LocalPutIfAbsentLogStore.
#: PAUSE_KEY``): milliseconds between writing a commit's temporary file and its atomic step.
COMMIT_PAUSE_KEY = "io.ingest.test.commitPauseMs"
#: The Hadoop key of the pause before the rename Delta's stock ``HDFSLogStore`` makes
#: (``NioRawLocalFileSystem.RENAME_PAUSE_KEY``, the platform's ``file:`` file system).
RENAME_PAUSE_KEY = "io.ingest.test.renamePauseMs"


@dataclass
class RaceResult:
    """What a race acknowledged and what the table holds.

    :param acknowledged: per writer (``spark``, ``delta-rs``), the round numbers whose append
        returned without an error.
    :param landed: ``[writer, round]`` of every row in the table but the initial one.
    :param failures: appends that raised (type and message): none is expected.
    :param versions: the table's commit versions (``_delta_log/*.json``), sorted.
    """

    acknowledged: dict[str, list[int]] = field(default_factory=dict)
    landed: list[list[object]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

    @property
    def lost(self) -> list[list[object]]:
        """Acknowledged appends whose row is not in the table."""
        have = {tuple(row) for row in self.landed}
        return [[w, n] for w, ns in self.acknowledged.items() for n in ns if (w, n) not in have]

    @property
    def duplicated(self) -> int:
        """Rows in the table more than once."""
        return len(self.landed) - len({tuple(row) for row in self.landed})

    @property
    def version_gaps(self) -> bool:
        """True when the commit versions are not 0..n without a hole."""
        return self.versions != list(range(len(self.versions)))

    @property
    def ok(self) -> bool:
        """Nothing lost or duplicated, no failure, versions without a gap."""
        return not (self.lost or self.duplicated or self.failures or self.version_gaps)


@contextmanager
def paused_commits(spark: SparkSession, key: str, millis: int) -> Iterator[None]:
    """Set a pause on the driver's Hadoop configuration (``key``: :data:`COMMIT_PAUSE_KEY` or
    :data:`RENAME_PAUSE_KEY`), removed afterwards."""
    conf = spark._jsc.hadoopConfiguration()
    conf.set(key, str(millis))
    try:
        yield
    finally:
        conf.unset(key)


def _check_target(path: Path) -> None:
    """:raises ValueError: ``path`` exists and is not an empty folder."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ValueError(f"{path}: not an empty folder; the race writes a table of its own")


def race(spark: SparkSession, path: Path, *, rounds: int = 12, pause_ms: int = 50) -> RaceResult:
    """Create a one-row table at ``path`` with delta-rs, then append ``rounds`` one-row
    commits from each engine at once (Spark's paused ``pause_ms`` before their atomic step),
    and read the table back with delta-rs.

    :raises ValueError: ``path`` exists and is not an empty folder; ``rounds`` < 1.
    """
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from spark_jobs.local_frames import local_frame

    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    _check_target(path)
    schema = pa.schema([("writer", pa.string()), ("n", pa.int64())])
    write_deltalake(str(path), pa.Table.from_pylist([{"writer": "init", "n": 0}], schema))
    result = RaceResult(acknowledged={"spark": [], "delta-rs": []})

    def spark_appends() -> None:
        for n in range(rounds):
            frame = local_frame(spark, [("spark", n)], "writer string, n long")
            try:
                frame.write.format("delta").mode("append").save(str(path))
            except Exception as error:  # reported: an unacknowledged append is a finding
                result.failures.append(f"spark {n}: {type(error).__name__}: {error}"[:300])
                continue
            result.acknowledged["spark"].append(n)

    def delta_rs_appends() -> None:
        for n in range(rounds):
            row = pa.Table.from_pylist([{"writer": "delta-rs", "n": n}], schema)
            try:
                write_deltalake(str(path), row, mode="append")
            except Exception as error:
                result.failures.append(f"delta-rs {n}: {type(error).__name__}: {error}"[:300])
                continue
            result.acknowledged["delta-rs"].append(n)
            time.sleep(0.02)

    with paused_commits(spark, COMMIT_PAUSE_KEY, pause_ms):
        threads = [threading.Thread(target=f) for f in (spark_appends, delta_rs_appends)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    result.landed = sorted([r["writer"], r["n"]] for r in rows if r["writer"] != "init")
    result.versions = sorted(int(p.stem) for p in (path / "_delta_log").glob("*.json"))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: prints the :class:`RaceResult` (with ``lost``, ``duplicated``, ``ok``)
    as one JSON line; exit 0 when ``ok``, 1 when not, 2 on a bad argument."""
    from spark_jobs.session import build_spark_session

    parser = argparse.ArgumentParser(prog="python -m spark_jobs.commit_race", description=__doc__)
    parser.add_argument("path", type=Path, help="a new (or empty) folder for the race's table")
    parser.add_argument("--rounds", type=int, default=12, help="appends per engine (12)")
    parser.add_argument("--pause-ms", type=int, default=50, help="Spark's commit pause (50)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.pause_ms < 0:
        parser.error("--rounds must be at least 1 and --pause-ms at least 0")
    try:
        _check_target(args.path)
    except ValueError as error:
        parser.error(str(error))
    spark = build_spark_session("commit_race")
    try:
        result = race(spark, args.path, rounds=args.rounds, pause_ms=args.pause_ms)
    finally:
        spark.stop()
    report = {**asdict(result), "lost": result.lost, "duplicated": result.duplicated}
    print(json.dumps({**report, "ok": result.ok}))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
