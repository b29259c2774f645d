"""Parse and apply the ``--trigger`` option shared by every streaming job.

Accepted forms (case-insensitive):

* ``available-now``: process everything available at start, in micro-batches that respect
  ``maxOffsetsPerTrigger``, then stop (the 15-minute scheduled jobs);
* ``processing-time=<interval>``: an always-on query with one micro-batch per interval;
* ``real-time=<interval>``: Spark 4.2's real-time mode; only stateless queries with a Kafka,
  foreach, console or memory sink accept it, so each job says whether it supports it.

An interval is read by :func:`ingest_core.intervals.spark_interval`: ``<number> <unit>`` or
``<number><unit>`` with unit ms, s, m, h, d (or their long names), for example
``10 seconds``, ``10s``, ``500ms``; zero is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pyspark.sql.streaming import DataStreamWriter

from ingest_core.intervals import IntervalError, spark_interval

TriggerKind = Literal["available-now", "processing-time", "real-time"]


class TriggerError(ValueError):
    """A ``--trigger`` value that is malformed or that the job cannot run with."""


@dataclass(frozen=True)
class TriggerSpec:
    """A parsed trigger.

    :param kind: ``available-now``, ``processing-time`` or ``real-time``.
    :param interval: Spark interval string (``"10 seconds"``) or ``None`` for available-now.
    """

    kind: TriggerKind
    interval: str | None = None

    def apply(self, writer: DataStreamWriter) -> DataStreamWriter:
        """Set this trigger on a ``DataStreamWriter`` and return the writer."""
        if self.kind == "available-now":
            return writer.trigger(availableNow=True)
        if self.interval is None:
            raise TriggerError(f"{self.kind} needs an interval")
        if self.kind == "processing-time":
            return writer.trigger(processingTime=self.interval)
        # pyspark 4.2's typing overloads do not list realTime yet; the method accepts it.
        return writer.trigger(realTime=self.interval)  # type: ignore[call-overload]

    def __str__(self) -> str:
        return self.kind if self.interval is None else f"{self.kind}={self.interval}"


def _parse_interval(text: str, original: str) -> str:
    try:
        return spark_interval(text, positive=True)
    except IntervalError as error:
        raise TriggerError(f"trigger {original!r}: {error}") from None


def parse_trigger(text: str, *, real_time_refusal: str | None = None) -> TriggerSpec:
    """Parse a ``--trigger`` value.

    :param text: ``available-now``, ``processing-time=<interval>`` or ``real-time=<interval>``.
    :param real_time_refusal: why the calling job cannot run in real-time mode (``None`` if it
        can); when set, a real-time trigger is refused with this reason.
    :raises TriggerError: the value is malformed, or real-time is asked of a job that refuses
        it; the message says which and why.

    >>> parse_trigger("processing-time=10s")
    TriggerSpec(kind='processing-time', interval='10 seconds')
    """
    kind, _, interval = text.strip().partition("=")
    kind = kind.strip().lower()
    if kind in ("available-now", "availablenow"):
        if interval:
            raise TriggerError(f"trigger {text!r}: available-now takes no interval")
        return TriggerSpec("available-now")
    if kind in ("processing-time", "real-time"):
        if not interval:
            raise TriggerError(f"trigger {text!r}: {kind} needs an interval, e.g. {kind}=10s")
        if kind == "real-time" and real_time_refusal:
            raise TriggerError(f"trigger {text!r} refused: {real_time_refusal}")
        return TriggerSpec(kind, _parse_interval(interval, text))  # type: ignore[arg-type]
    raise TriggerError(
        f"trigger {text!r} is not one of: available-now, processing-time=<interval>, "
        "real-time=<interval>"
    )
