"""What one ``table_maintenance`` task does for one table, given the DAG run's parameters.

The work and its rules are :mod:`ingest_core.table_maintenance`; this module adds what only
the Airflow side can do: read and check the run's parameters, and pause the table's
always-on writer (through its :class:`~ingest_platform.hooks.StreamingJobHook`: stop and
disable it, so the supervisor does not restart it meanwhile, then enable it again, which
lets the next supervisor round start it) when ``always_on`` is ``pause``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ingest_core.catalog import MaintenanceSpec, get_catalog
from ingest_core.table_maintenance import Pin

log = logging.getLogger(__name__)

#: The parameters of a table_maintenance run (dags/table_maintenance.py).
PARAMS = ("tables", "dry_run", "retention_hours", "on_busy", "always_on")
#: Layer -> the Airflow pool its maintenance task runs in: the pools of the medallion tasks
#: that write the layer, so Airflow never runs both at once (the checkpoint locks stop any
#: writer started outside Airflow).
LAYER_POOLS = {"silver": "silver_layer", "gold": "gold_layer", "ops": "gold_layer"}


def validate_params(params: Mapping[str, Any]) -> tuple[list[str], MaintenanceSpec, dict]:
    """Check a run's parameters.

    ``tables`` (list of declared tables; empty: all), ``dry_run`` (bool),
    ``retention_hours`` (None or a number of hours >= 0), ``on_busy`` (``wait``/``skip``)
    and ``always_on`` (``pause``/``skip``; None: the catalog's ``maintenance`` section).

    :returns: ``(tables, policy, keyword arguments of maintain_table)``.
    :raises ValueError: an unknown parameter, table or option, a retention that is not a
        number of hours from 0 to ten years; the message lists what is accepted.
    """
    from ingest_core.table_maintenance import check_requested_retention

    catalog = get_catalog()
    unknown_keys = sorted(set(params) - set(PARAMS))
    if unknown_keys:  # a typo such as "dryrun" must not become a real run
        raise ValueError(f"unknown parameters {unknown_keys}; accepted: {list(PARAMS)}")
    given = params.get("tables") or list(catalog.tables)
    if not isinstance(given, list | tuple) or not all(isinstance(t, str) for t in given):
        raise ValueError(f"tables must be a list of table names, not {given!r}")
    tables = list(given)
    unknown = [t for t in tables if t not in catalog.tables]
    if unknown:
        raise ValueError(f"unknown tables {unknown}; declared: {sorted(catalog.tables)}")
    retention = params.get("retention_hours")
    if retention is not None and (
        isinstance(retention, bool) or not isinstance(retention, int | float)
    ):
        raise ValueError(f"retention_hours must be a number of hours, not {retention!r}")
    check_requested_retention(None if retention is None else float(retention))
    update = {k: params[k] for k in ("on_busy", "always_on") if params.get(k) is not None}
    try:
        policy = MaintenanceSpec.model_validate({**catalog.maintenance.model_dump(), **update})
    except ValueError as error:
        raise ValueError(f"bad maintenance parameters: {error}") from None
    dry_run = params.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ValueError(f"dry_run must be true or false, not {dry_run!r}")
    keywords = {
        "dry_run": dry_run,
        "retention_hours": None if retention is None else float(retention),
    }
    return tables, policy, keywords


@contextmanager
def always_on_writers_paused(table: str, policy: MaintenanceSpec, dry_run: bool) -> Iterator[None]:
    """Pause the always-on writers of ``table`` for the ``with`` block when the policy says
    ``pause`` (and this is no dry run), and end the pauses afterwards
    (:func:`ingest_platform.supervisor.pause`). A pause is not an operator's stop: a job an
    operator stops during the maintenance stays stopped after it (soak run 4: re-enabling
    it undid the stop, and the operator's restore was refused). Exactly-once is kept: a
    stop happens between micro-batches, and the restarted driver resumes from its
    checkpoint."""
    from ingest_platform.hooks import StreamingJobHook

    writers = [j for j in get_catalog().jobs.values() if j.mode == "always_on"]
    writers = [j for j in writers if table in j.outputs]
    paused: list[tuple[StreamingJobHook, Path]] = []
    try:
        if policy.always_on == "pause" and not dry_run:
            for job in writers:
                hook = StreamingJobHook(job.name)
                # Paused even when it is not running, so that no supervisor round starts it
                # while the maintenance holds its checkpoint lock (the start would fail).
                token, outcome = hook.pause(f"table_maintenance of {table}")
                log.info("pausing %s for the maintenance of %s: %s", job.name, table, outcome)
                paused.append((hook, token))
        yield
    finally:
        for hook, token in paused:
            hook.resume(token)
            log.info("%s: pause ended; the next streaming_supervisor round starts it", hook.job)


def gate_pins(table: str) -> list[Pin]:
    """Constraint (d) of a gated table: the quality gate reads the snapshot at the table's
    validated version and the change feed after it (``ingest_core.quality.state``); a failed
    increment stays pending until an operator resolves it, however long that takes.

    :returns: ``[("gate", who, version)]``, or ``[]`` for a table no gate validates.
    """
    from ingest_core.quality.rules import GATED_LAYERS, layer_rules
    from ingest_core.quality.state import gate_results, validated_through

    gated = {rules.table for layer in GATED_LAYERS for rules in layer_rules(layer)}
    if table not in gated:
        return []
    done = validated_through(gate_results(), table)
    what = (
        f"quality gate (validated through version {done})"
        if done >= 0
        else ("quality gate (never validated: reads from version 0)")
    )
    return [("gate", what, max(done, 0))]


def maintain(table: str, params: Mapping[str, Any]) -> str:
    """Maintain ``table`` as the run's parameters say; log the report.

    :returns: the report (the task's XCom).
    :raises airflow.sdk.exceptions.AirflowSkipException: the run leaves the table out, or a
        writer holds its lock (on_busy skip, or the wait ran out; the reason is logged).
    :raises ValueError: bad parameters.
    :raises ingest_core.table_maintenance.RetentionRefusedError: ``retention_hours`` is
        below what a stream, a backup or the floor needs.
    """
    from airflow.sdk.exceptions import AirflowSkipException

    from ingest_core.table_maintenance import TableBusyError, maintain_table

    tables, policy, keywords = validate_params(params)
    if table not in tables:
        raise AirflowSkipException(f"{table} is not among this run's tables")
    try:
        with always_on_writers_paused(table, policy, keywords["dry_run"]):
            report = maintain_table(table, policy=policy, pinned=gate_pins(table), **keywords)
    except TableBusyError as error:
        raise AirflowSkipException(str(error)) from None
    lines = report.lines()
    for line in lines:
        log.info(line)
    return "\n".join(lines)
