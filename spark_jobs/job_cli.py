"""What every platform job's entry point shares: ``--trigger``, defaulting to the job's
declared trigger, parsed and checked before Spark starts; the checkpoint lock; and
:func:`run_job`, the one way a job runs and refuses."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from pyspark.sql import SparkSession

from ingest_core.catalog import get_catalog
from spark_jobs.triggers import TriggerError, parse_trigger


def job_parser(job_name: str, description: str) -> argparse.ArgumentParser:
    """An argument parser with ``--trigger`` (default: the job's ``default_trigger``)."""
    default = get_catalog().job(job_name).default_trigger
    parser = argparse.ArgumentParser(prog=job_name, description=description)
    parser.add_argument(
        "--trigger",
        default=default,
        help=f"available-now | processing-time=<interval> | real-time=<interval> "
        f"(default: {default})",
    )
    return parser


def parse_job_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, real_time_refusal: str | None
) -> argparse.Namespace:
    """Parse ``argv``; ``args.trigger`` becomes a :class:`~spark_jobs.triggers.TriggerSpec`.

    A malformed or refused trigger exits 2 with the reason (argparse's ``error``).
    """
    args = parser.parse_args(argv)
    try:
        args.trigger = parse_trigger(args.trigger, real_time_refusal=real_time_refusal)
    except TriggerError as error:
        parser.error(str(error))
    return args


@contextmanager
def owned_checkpoint(job_name: str) -> Iterator[None]:
    """Hold ``job_name``'s checkpoint lock for the driver's lifetime (one driver per
    checkpoint), move aside what an earlier driver's crash left half-written (one line each
    on stderr; :func:`ingest_core.recovery.set_aside_unfinished_writes`), and refuse a
    damaged checkpoint or a changed configuration before Spark starts
    (:func:`ingest_core.checkpoint_health.check_before_start`).

    :raises ingest_core.locks.CheckpointBusyError: another driver holds the checkpoint.
    :raises ingest_core.checkpoint_health.DamagedCheckpointError: damaged files, named.
    :raises ingest_core.checkpoint_health.ConfigurationChangedError: what changed, options.
    """
    from ingest_core.checkpoint_health import check_before_start
    from ingest_core.locks import checkpoint_lock
    from ingest_core.recovery import set_aside_unfinished_writes

    with checkpoint_lock(get_catalog().job(job_name).checkpoint()):
        for action in set_aside_unfinished_writes(job_name):
            print(f"{job_name}: a crash left a half-written file: {action}", file=sys.stderr)
        check_before_start(job_name)
        yield


class JobRefusedError(Exception):
    """A job's refusal an operator can act on (a broker that does not answer, a name Kafka
    refuses): :func:`run_job` prints it as one line and exits 1."""


def run_job(
    job: str,
    body: Callable[[Callable[..., SparkSession]], int | None],
    *,
    lock: str | None = "own",
    refusals: tuple[type[Exception], ...] = (),
    session_builder: Callable[..., SparkSession] | None = None,
) -> int:
    """The one entry point of every platform job (after it parsed its command line, so a bad
    argument exits 2 before anything starts): hold the checkpoint lock the job needs, run
    ``body``, and turn what an operator can act on into one line on stderr and exit 1.

    :param job: the job's name in ``include/pipeline.yaml`` (the prefix of every line).
    :param body: the job's work; it gets ``session(**options)``, which builds the job's
        Spark session (``spark_jobs.session.build_spark_session(job, **options)``) when
        called: a job that refuses before Spark starts never starts a JVM. It returns the
        exit code (None: 0).
    :param lock: ``"own"``: the job's own checkpoint, with the checks of
        :func:`owned_checkpoint`; another job's name: that job's checkpoint lock alone
        (Gold's batch jobs never write beside ``gold_aggregate``); None: no lock.
    :param refusals: more exception types printed as one line, exit 1.
    :returns: the exit code.
    :raises Exception: anything else (a failed query, unbalanced counts) with its trace.
    """
    from ingest_core.checkpoint_health import ConfigurationChangedError, DamagedCheckpointError
    from ingest_core.locks import CheckpointBusyError, checkpoint_lock

    def session(**options: Any) -> SparkSession:
        if session_builder is not None:
            return session_builder(job, **options)
        from spark_jobs.session import build_spark_session

        return build_spark_session(job, **options)

    if lock == "own":
        held: AbstractContextManager[Any] = owned_checkpoint(job)
    elif lock is not None:
        held = checkpoint_lock(get_catalog().job(lock).checkpoint())
    else:
        held = nullcontext()
    refused: tuple[type[Exception], ...] = (
        CheckpointBusyError,
        FileNotFoundError,
        DamagedCheckpointError,
        ConfigurationChangedError,
        JobRefusedError,
        *refusals,
    )
    try:
        with held:
            code = body(session)
        return 0 if code is None else code
    except refused as error:
        print(f"{job}: {error}", file=sys.stderr)
        return 1
