"""A validated half-open time range ``[start, end)``: the data interval of a backfill, or the
Kafka time range of a Bronze replay. Parsed once, before Spark starts; no pyspark import.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError, model_validator


class TimeRangeError(ValueError):
    """A time range that cannot be used; the message says which bound and why."""


class TimeRange(BaseModel):
    """``[start, end)``, both timezone-aware, converted to UTC.

    :param start: first instant included.
    :param end: first instant excluded; after ``start``.
    """

    model_config = ConfigDict(frozen=True)

    start: AwareDatetime
    end: AwareDatetime

    @model_validator(mode="after")
    def _ordered(self) -> TimeRange:
        object.__setattr__(self, "start", self.start.astimezone(UTC))
        object.__setattr__(self, "end", self.end.astimezone(UTC))
        if self.end <= self.start:
            raise ValueError(
                f"end {self.end.isoformat()} is not after start {self.start.isoformat()}"
            )
        return self

    @classmethod
    def parse(
        cls, start: str | datetime, end: str | datetime, max_span: timedelta | None = None
    ) -> TimeRange:
        """Build a range from ISO 8601 texts (``2018-08-01T10:00:00Z``, ``...+00:00``) or
        datetimes.

        :param max_span: refuse longer ranges (None: no limit).
        :raises TimeRangeError: unparsable text, no UTC offset, end not after start, or
            longer than ``max_span``; the message names the bound.
        """
        values = {}
        for name, value in (("start", start), ("end", end)):
            if isinstance(value, str):
                try:
                    value = datetime.fromisoformat(value.strip())
                except ValueError:
                    raise TimeRangeError(
                        f"{name} {value!r} is not an ISO 8601 date-time such as "
                        "2018-08-01T10:00:00Z"
                    ) from None
            if value.tzinfo is None:
                raise TimeRangeError(
                    f"{name} {value.isoformat()} has no UTC offset; write it with Z or +00:00"
                )
            values[name] = value
        try:
            found = cls(**values)
        except ValidationError as error:
            raise TimeRangeError("; ".join(e["msg"] for e in error.errors())) from None
        except OverflowError:  # e.g. 0001-01-01T00:00+01:00 has no UTC equivalent
            raise TimeRangeError(f"{start} .. {end} is outside the representable years") from None
        if max_span is not None and found.end - found.start > max_span:
            raise TimeRangeError(f"range {found} is longer than the limit of {max_span}")
        return found

    def __str__(self) -> str:
        return f"[{self.start.isoformat()}, {self.end.isoformat()})"

    def millis(self) -> tuple[int, int]:
        """``(start, end)`` in milliseconds since the epoch (Kafka's timestamp unit)."""
        return int(self.start.timestamp() * 1000), int(self.end.timestamp() * 1000)
