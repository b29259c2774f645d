"""Intervals such as ``"30 minutes"``, parsed in one place.

Every duration the platform declares (watermarks, window lengths and slides, session gaps,
trigger intervals, skew limits in ``include/pipeline.yaml`` and ``--trigger`` values) is read
by :func:`parse_interval`. Spark wants the text form, normalised by :func:`spark_interval`.

Accepted: ``<whole number> <unit>`` or ``<whole number><unit>`` (case-insensitive), unit one
of ms, s, m, h, d or their long names (``millisecond(s)``, ``sec``, ``second(s)``, ``min``,
``minute(s)``, ``hour(s)``, ``day(s)``): ``10 seconds``, ``10s``, ``500ms``, ``1 day``.

Imports neither pyspark nor Airflow.
"""

from __future__ import annotations

import re
from datetime import timedelta

#: Accepted unit -> Spark's (plural) unit name.
UNITS: dict[str, str] = {
    "ms": "milliseconds",
    "millisecond": "milliseconds",
    "milliseconds": "milliseconds",
    "s": "seconds",
    "sec": "seconds",
    "second": "seconds",
    "seconds": "seconds",
    "m": "minutes",
    "min": "minutes",
    "minute": "minutes",
    "minutes": "minutes",
    "h": "hours",
    "hour": "hours",
    "hours": "hours",
    "d": "days",
    "day": "days",
    "days": "days",
}
_INTERVAL = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$")


class IntervalError(ValueError):
    """Text that is not ``<whole number> <unit>``."""


def _split(text: str) -> tuple[int, str]:
    match = _INTERVAL.match(str(text).lower())
    if not match or match.group(2) not in UNITS:
        raise IntervalError(
            f"interval {text!r} is not '<whole number> <unit>' with unit ms, s, m or h, "
            "or d for days (e.g. '10 seconds', '10s', '500ms', '30 minutes', '1 day')"
        )
    return int(match.group(1)), UNITS[match.group(2)]


def parse_interval(text: str, *, positive: bool = False) -> timedelta:
    """``"30 minutes"`` -> ``timedelta(minutes=30)``.

    :param positive: refuse zero (a trigger interval, a window length).
    :raises IntervalError: malformed, unknown unit, or zero when ``positive``; the message
        shows the accepted forms.

    >>> parse_interval("1 day")
    datetime.timedelta(days=1)
    """
    number, unit = _split(text)
    if positive and number <= 0:
        raise IntervalError(f"interval {text!r} must be a positive number of {unit}")
    return timedelta(**{unit: number})


def spark_interval(text: str, *, positive: bool = False) -> str:
    """The interval in Spark's form: ``"10s"`` -> ``"10 seconds"``, ``"1m"`` -> ``"1 minute"``
    (Spark's interval parser takes a unit with or without the plural ``s``).

    :raises IntervalError: see :func:`parse_interval`.
    """
    parse_interval(text, positive=positive)
    number, unit = _split(text)
    return f"{number} {unit.removesuffix('s') if number == 1 else unit}"
