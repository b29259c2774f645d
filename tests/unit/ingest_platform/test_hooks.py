"""The platform's hooks over the Spark provider's SparkSubmitHook: what they submit (a fake
``spark-submit`` records its arguments, or ``SparkSubmitHook.submit`` is mocked), failures
that propagate, and the pre/post-submit work (inputs check, recovery, backup)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import pytest

pytestmark = pytest.mark.unit

LOCAL = '{"conn_type": "spark", "host": "local[*]"}'
CLUSTER = '{"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077}'

#: Stands in for spark-submit: writes its arguments (one per line) and exits with $FAKE_RC.
FAKE_SPARK_SUBMIT = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_ARGS"
echo "fake spark-submit output"
exit "${FAKE_RC:-0}"
"""


@pytest.fixture
def fake_spark_submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``spark-submit`` beside a fake interpreter path (the hooks run the one beside
    ``sys.executable``); returns the file its arguments land in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "spark-submit"
    script.write_text(FAKE_SPARK_SUBMIT)
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_ARGS", str(tmp_path / "args"))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", LOCAL)
    return tmp_path / "args"


def test_platform_job_hook_submits_the_job_on_the_connection(
    fake_spark_submit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest_platform.hooks import PlatformJobHook

    PlatformJobHook("bronze_ingest", ["--trigger", "processing-time=10 seconds"]).submit()
    local = fake_spark_submit.read_text().splitlines()
    assert local[local.index("--master") + 1] == "local[*]"
    assert local[local.index("--name") + 1] == "bronze_ingest"
    assert local[-3:] == [
        str(Path("spark_jobs/bronze_ingest.py").resolve()),
        "--trigger",
        "processing-time=10 seconds",
    ]
    assert not any(part.startswith("spark.master=") for part in local)
    assert "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in local
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", CLUSTER)
    PlatformJobHook("silver_refine").submit()
    cluster = fake_spark_submit.read_text().splitlines()
    assert cluster[cluster.index("--master") + 1] == "spark://10.0.0.5:7077"
    assert cluster[-1] == str(Path("spark_jobs/silver_refine.py").resolve())


def test_a_failed_spark_submit_propagates(
    fake_spark_submit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowException

    from ingest_platform.hooks import PlatformJobHook

    monkeypatch.setenv("FAKE_RC", "3")
    with pytest.raises(AirflowException, match="Error code is: 3"):
        PlatformJobHook("silver_refine").submit()


#: Stands in for a client-mode spark-submit whose driver holds the job's checkpoint lock: the
#: "driver" is a Python child (as pyspark's driver is the JVM's child) that takes the lock.
FAKE_SPARK_SUBMIT_WITH_DRIVER = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_ARGS"
"$FAKE_PYTHON" -c "
import sys, time
from pathlib import Path
from ingest_core.locks import checkpoint_lock
with checkpoint_lock(Path(sys.argv[1])):
    time.sleep(600)
" "$FAKE_CHECKPOINT" &
wait
"""


def test_on_kill_stops_spark_submit_and_its_driver_and_frees_the_lock(
    fake_spark_submit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Airflow's on_kill (SIGTERM to the task, execution_timeout) must do: spark-submit
    and the driver it started stop, the checkpoint lock is free, and the hook starts no other
    spark-submit afterwards."""
    import threading

    from airflow.sdk.exceptions import AirflowException

    from ingest_core.locks import lock_holder
    from ingest_core.processes import is_alive
    from ingest_core.waiting import wait_until
    from ingest_platform.hooks import PlatformJobHook

    checkpoint = tmp_path / "checkpoint"
    (tmp_path / "bin" / "spark-submit").write_text(FAKE_SPARK_SUBMIT_WITH_DRIVER)
    monkeypatch.setenv("FAKE_PYTHON", str(Path(sys.prefix) / "bin" / "python"))
    monkeypatch.setenv("FAKE_CHECKPOINT", str(checkpoint))
    hook = PlatformJobHook("silver_refine")
    errors: list[BaseException] = []

    def submit() -> None:
        try:
            hook.submit()
        except BaseException as error:
            errors.append(error)

    running = threading.Thread(target=submit)
    running.start()
    driver = wait_until(lambda: lock_holder(checkpoint), 60, 0.2, what="the driver's lock")
    hook.on_kill(grace_s=5)
    running.join(timeout=30)
    assert not running.is_alive()
    assert not is_alive(driver)
    assert lock_holder(checkpoint) is None
    assert len(errors) == 1
    assert isinstance(errors[0], AirflowException)  # spark-submit was killed
    with pytest.raises(AirflowException, match="killed"):
        hook.submit()


def test_the_launcher_becomes_spark_submit(fake_spark_submit: Path, tmp_path: Path) -> None:
    """The detached launcher of an always-on job execs spark-submit: the process the
    supervisor started is spark-submit itself (same pid; no Python process holding Airflow's
    imports stays beside the driver), its output lands where the launcher's did, and its exit
    status is spark-submit's."""
    import os
    import subprocess

    pid_file = tmp_path / "pid"
    # The fake spark-submit also records its pid ($$).
    script = Path(sys.executable).parent / "spark-submit"
    script.write_text(
        FAKE_SPARK_SUBMIT.replace("#!/bin/sh\n", f"#!/bin/sh\necho $$ > {pid_file}\n")
    )
    # The launcher runs spark-submit from beside its interpreter (job_environment's PATH):
    # point it at the fake one's folder.
    launcher = (
        f"import sys; sys.executable = {sys.executable!r}; "
        "from ingest_platform.hooks import main; "
        "sys.exit(main(['submit', 'bronze_ingest', '--', '--trigger', 'available-now']))"
    )
    process = subprocess.Popen(
        [str(Path(sys.prefix) / "bin" / "python"), "-c", launcher],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "FAKE_RC": "3"},
    )
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 3, output
    assert int(pid_file.read_text()) == process.pid  # exec: spark-submit is the launcher
    assert "fake spark-submit output" in output
    recorded = fake_spark_submit.read_text().splitlines()
    assert recorded[-3:] == [
        str(Path("spark_jobs/bronze_ingest.py").resolve()),
        "--trigger",
        "available-now",
    ]
    assert recorded[recorded.index("--name") + 1] == "bronze_ingest"


def test_a_launcher_without_spark_submit_says_so(
    fake_spark_submit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest_platform.hooks import main

    bin_dir = Path(sys.executable).parent
    (bin_dir / "spark-submit").unlink()
    monkeypatch.setenv("PATH", str(bin_dir))  # no other spark-submit to find
    assert main(["submit", "bronze_ingest"]) == 127


def test_submit_goes_through_the_providers_public_submit(monkeypatch) -> None:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from ingest_platform.hooks import PlatformJobHook

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", LOCAL)
    with mock.patch.object(SparkSubmitHook, "submit", autospec=True) as submit:
        submit.return_value = None
        hook = PlatformJobHook(
            "gold_aggregate",
            ["--trigger", "available-now"],
            conf={"spark.sql.shuffle.partitions": "3"},
            env_vars={"EXTRA": "1"},
        )
        hook.submit()
    (provider_hook, application), _ = submit.call_args
    assert application == str(Path("spark_jobs/gold/gold_aggregate.py").resolve())
    assert isinstance(provider_hook, SparkSubmitHook)
    failing = mock.patch.object(SparkSubmitHook, "submit", side_effect=RuntimeError("boom"))
    with failing, pytest.raises(RuntimeError, match="boom"):
        hook.submit()


def test_the_provider_hook_gets_the_platform_conf_and_environment(monkeypatch) -> None:
    from ingest_platform import hooks
    from spark_jobs.session import spark_submit_conf

    provider = mock.MagicMock()
    monkeypatch.setattr(
        "airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook", provider
    )
    hooks.PlatformJobHook(
        "gold_aggregate",
        ["--trigger", "available-now"],
        conf={"spark.sql.shuffle.partitions": "3"},
        env_vars={"EXTRA": "1"},
        submit_options={"executor_memory": "2g"},
    ).submit()
    kwargs = provider.call_args.kwargs
    assert kwargs["conf"] == {
        **spark_submit_conf("gold_aggregate"),
        "spark.sql.shuffle.partitions": "3",
    }
    assert kwargs["conn_id"] == "spark_default"
    assert kwargs["name"] == "gold_aggregate"
    assert kwargs["application_args"] == ["--trigger", "available-now"]
    assert kwargs["env_vars"] == {**hooks.job_environment(), "EXTRA": "1"}
    assert kwargs["executor_memory"] == "2g"
    provider.return_value.submit.assert_called_once_with(
        str(Path("spark_jobs/gold/gold_aggregate.py").resolve())
    )


def test_unknown_job_is_refused() -> None:
    from ingest_platform.hooks import PlatformJobHook, StreamingJobHook

    with pytest.raises(ValueError, match="unknown job 'silver_refined'"):
        PlatformJobHook("silver_refined")
    with pytest.raises(ValueError, match="'silver_refine' is not an always-on job"):
        StreamingJobHook("silver_refine")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from ingest_core.settings import get_settings

    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_run_recovers_submits_backs_up_and_skips_unchanged_inputs(home, monkeypatch) -> None:
    from ingest_core import checkpoints, recovery
    from ingest_core.catalog import get_catalog
    from ingest_platform.hooks import PlatformJobHook

    calls: list[str] = []
    monkeypatch.setattr(recovery, "recover", lambda job: calls.append(f"recover {job}") or [])
    monkeypatch.setattr(recovery, "prune", lambda job: [])

    def backup(job: str):
        calls.append(f"backup {job}")
        raise checkpoints.BackupError("nothing committed yet")

    monkeypatch.setattr(checkpoints, "backup", backup)
    monkeypatch.setattr(PlatformJobHook, "submit", lambda self: calls.append("submit"))
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(str(get_catalog().table("bronze_events").path()), pa.table({"n": [1]}))
    hook = PlatformJobHook("silver_refine", inputs=["bronze_events"])
    assert hook.run() is True
    assert calls == ["recover silver_refine", "submit", "backup silver_refine"]
    recorded = json.loads(hook._inputs_file().read_text())
    assert recorded["tables"] == {"bronze_events": 0}
    assert hook.processed == recorded  # what the operator hands Airflow as its XCom
    assert hook.run() is False  # nothing new: Spark not started
    assert calls == ["recover silver_refine", "submit", "backup silver_refine"]
    staged = PlatformJobHook("silver_refine", manage_checkpoint=False)
    staged.run()
    assert calls[3:] == ["submit"]  # no recovery, no backup


def test_a_job_whose_input_tables_do_not_exist_yet_starts_no_spark(home, monkeypatch) -> None:
    """A new platform: medallion_incremental's first run may come before Bronze's first
    batch; silver_refine then has nothing to do (it would fail with "run bronze_ingest
    first")."""
    from ingest_core import recovery
    from ingest_platform.hooks import PlatformJobHook

    calls: list[str] = []
    monkeypatch.setattr(recovery, "recover", lambda job: calls.append("recover") or [])
    monkeypatch.setattr(PlatformJobHook, "submit", lambda self: calls.append("submit"))
    assert PlatformJobHook("silver_refine", inputs=["bronze_events"]).run() is False
    assert calls == []


def test_a_failed_run_takes_no_backup_and_records_no_inputs(home, monkeypatch) -> None:
    from airflow.sdk.exceptions import AirflowException

    from ingest_core import checkpoints, recovery
    from ingest_platform.hooks import PlatformJobHook

    monkeypatch.setattr(recovery, "recover", lambda job: [])
    monkeypatch.setattr(checkpoints, "backup", mock.Mock(side_effect=AssertionError))

    def fail(self) -> None:
        raise AirflowException("Cannot execute: spark-submit. Error code is: 1.")

    monkeypatch.setattr(PlatformJobHook, "submit", fail)
    import pyarrow as pa
    from deltalake import write_deltalake

    from ingest_core.catalog import get_catalog

    write_deltalake(str(get_catalog().table("bronze_events").path()), pa.table({"n": [1]}))
    hook = PlatformJobHook("silver_refine", inputs=["bronze_events"])
    with pytest.raises(AirflowException, match="Error code is: 1"):
        hook.run()
    assert not hook._inputs_file().exists()


def test_operator_execute_delegates_to_the_hook(monkeypatch) -> None:
    from ingest_platform.hooks import PlatformJobHook
    from ingest_platform.operators import SparkJobOperator

    task = SparkJobOperator(
        task_id="t",
        job="gold_aggregate",
        job_args=["--trigger", "available-now"],
        inputs=["silver_payments"],
        conn_id="spark_cluster",
        executor_memory="2g",
        env_vars={"EXTRA": "1"},
    )
    ran: list[PlatformJobHook] = []

    def run(self: PlatformJobHook) -> bool:
        ran.append(self)
        self.processed = {"tables": {"silver_payments": 7}}
        return True

    monkeypatch.setattr(PlatformJobHook, "run", run)
    # What the run processed becomes the task's XCom (Airflow shows it with the task).
    assert task.execute({}) == {"tables": {"silver_payments": 7}}
    (hook,) = ran
    assert (hook.job, hook.job_args, hook.conn_id) == (
        "gold_aggregate",
        ["--trigger", "available-now"],
        "spark_cluster",
    )
    assert hook.inputs == ["silver_payments"]
    assert hook.env_vars == {"EXTRA": "1"}
    assert hook.submit_options == {"executor_memory": "2g"}
    assert hook.manage_checkpoint is True
    assert "job_args" in SparkJobOperator.template_fields


def test_streaming_hook_launches_the_job_through_the_platform_hook(monkeypatch) -> None:
    from ingest_platform.hooks import StreamingJobHook, parse_launcher_args

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", CLUSTER)
    hook = StreamingJobHook("bronze_ingest")
    command = hook.command()
    assert command[:4] == [sys.executable, "-m", "ingest_platform.hooks", "submit"]
    # What the launcher parses back is what the hook meant (the job's own options stay the
    # job's: a first version handed "--conn-id spark_default --" to bronze_ingest).
    assert parse_launcher_args(command[3:]) == (
        "bronze_ingest",
        "spark_default",
        ["--trigger", "processing-time=10 seconds"],
    )
    assert parse_launcher_args(["submit", "bronze_ingest", "--", "--conn-id", "x"]) == (
        "bronze_ingest",
        "spark_default",
        ["--conn-id", "x"],
    )
    env = hook.environment()
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"]) == json.loads(CLUSTER)
    assert env["PYSPARK_PYTHON"] == sys.executable


def test_the_launcher_starts_from_inside_an_airflow_task(monkeypatch) -> None:
    """A real scheduler runs the supervise task with Airflow 3's task environment, whose
    metadata-database URL is unusable on purpose ("airflow-db-not-allowed:///"); the detached
    launcher imports Airflow and died on it, so `make demo` never started bronze_ingest."""
    import os
    import subprocess

    from ingest_platform.hooks import LAUNCHER_MODULE, StreamingJobHook

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", CLUSTER)
    in_task = {**os.environ, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "airflow-db-not-allowed:///"}
    launcher = [sys.executable, "-m", LAUNCHER_MODULE, "submit", "--help"]

    def start(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(launcher, env=env, capture_output=True, text=True, timeout=120)

    broken = start(in_task)  # the environment as the task has it: the failure seen
    assert broken.returncode != 0
    assert "Could not parse SQLAlchemy URL" in broken.stderr
    started = start({**in_task, **StreamingJobHook("bronze_ingest").environment()})
    assert started.returncode == 0, started.stderr[-2000:]
    assert "spark-submit a job" in started.stdout or "usage" in started.stdout
