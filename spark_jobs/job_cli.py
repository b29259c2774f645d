"""The command line every streaming job shares: ``--trigger``, defaulting to the job's
declared trigger, parsed and checked before Spark starts."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

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


def operator_errors(main: Callable[..., int]) -> Callable[..., int]:
    """Decorate a job's ``main``: errors an operator can act on (checkpoint in use, damaged
    or from another configuration, input table missing, lost Kafka data) print one clear line
    and exit 1 instead of a traceback. Anything else (a failed query, unbalanced counts)
    propagates with its full trace."""
    from ingest_core.checkpoint_health import ConfigurationChangedError, DamagedCheckpointError
    from ingest_core.locks import CheckpointBusyError

    @functools.wraps(main)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        try:
            return main(*args, **kwargs)
        except (
            CheckpointBusyError,
            FileNotFoundError,
            DamagedCheckpointError,
            ConfigurationChangedError,
        ) as error:
            job = main.__globals__.get("JOB_NAME", main.__module__)
            print(f"{job}: {error}", file=sys.stderr)
            return 1

    return wrapper
