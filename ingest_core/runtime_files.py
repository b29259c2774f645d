"""The run-time files of an always-on job (heartbeat, stop request, supervisor record,
driver log) and their atomic JSON reads and writes.

Imports no pyspark: the Airflow side (the supervisor, DAG files, the CLI) reads these files
and must not load Spark to do it; the drivers write them through
:mod:`spark_jobs.streaming_runtime`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest_core.settings import PlatformSettings, get_settings


@dataclass(frozen=True)
class RuntimeFiles:
    """Run-time files of one always-on job, in ``<storage.state_dir>/jobs/<job>/``.

    :param heartbeat: JSON written by the job's listener (see :class:`HeartbeatListener`).
    :param stop_request: its presence asks the job to stop between micro-batches.
    :param disabled: written when an operator stopped the job; the supervisor leaves a
        disabled job alone until it is started again.
    :param pauses: a folder with one file per pause a platform task holds (table
        maintenance): the supervisor starts the job once every pause is gone (or its task
        died); apart from ``disabled``, so a pause ending never undoes an operator's stop.
    :param supervisor: the supervisor's record of starts (for back-off and failure limits).
    :param driver_log: stdout and stderr of the driver the supervisor started.
    """

    folder: Path
    heartbeat: Path
    stop_request: Path
    disabled: Path
    pauses: Path
    supervisor: Path
    driver_log: Path


def runtime_files(job: str, settings: PlatformSettings | None = None) -> RuntimeFiles:
    """The run-time files of ``job`` (the folder is created)."""
    folder = (settings or get_settings()).storage.state_path / "jobs" / job
    folder.mkdir(parents=True, exist_ok=True)
    return RuntimeFiles(
        folder=folder,
        heartbeat=folder / "heartbeat.json",
        stop_request=folder / "stop.request",
        disabled=folder / "disabled",
        pauses=folder / "pauses",
        supervisor=folder / "supervisor.json",
        driver_log=folder / "driver.log",
    )


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically (temporary file, then rename): a reader never
    sees half a file, even if the writer dies mid-write."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path``, or None when it is missing or unreadable."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
