"""What one ``streaming_supervisor`` task does for one always-on job, given the DAG run's
parameters (``action``: supervise, start or stop; ``jobs``: which jobs)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ingest_platform import supervisor

log = logging.getLogger(__name__)


def validate_params(params: Mapping[str, Any]) -> tuple[str, list[str]]:
    """Check a run's parameters.

    :returns: ``(action, jobs)``.
    :raises ValueError: an unknown action or job; the message lists the valid ones.
    """
    action = str(params.get("action") or "supervise")
    if action not in supervisor.ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {supervisor.ACTIONS}")
    known = supervisor.always_on_jobs()
    given = params.get("jobs")
    if given is not None and not given:
        raise ValueError(f"jobs is empty: name at least one of {known} (or leave it out)")
    jobs = list(given) if given is not None else known
    unknown = [job for job in jobs if job not in known]
    if unknown:
        raise ValueError(f"not always-on jobs: {unknown}; always-on jobs: {known}")
    return action, jobs


def act(job: str, params: Mapping[str, Any]) -> str:
    """Supervise, start or stop ``job`` as the run's parameters say.

    :returns: one line saying what was done (the task's XCom and log).
    :raises airflow.sdk.exceptions.AirflowSkipException: the run's ``jobs`` leave this job out.
    :raises ValueError: bad parameters.
    :raises ingest_platform.supervisor.SupervisorError: the job keeps failing, or a start
        failed.
    """
    from airflow.sdk.exceptions import AirflowSkipException

    from ingest_platform.hooks import StreamingJobHook

    action, jobs = validate_params(params)
    if job not in jobs:
        raise AirflowSkipException(f"{job} is not among this run's jobs {jobs}")
    hook = StreamingJobHook(job)
    if action == "stop":
        outcome = hook.stop()
    else:
        if action == "start":
            hook.enable()
        outcome = hook.supervise(echo=log.info)
    log.info(outcome)
    return outcome
