"""The source-side event: what a dataset row or the generator becomes before it is sent."""

from __future__ import annotations

import csv
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ingest_core.contracts import SCHEMA_VERSION, contract_for

#: Namespace of the deterministic event ids (uuid5 of the source reference).
EVENT_ID_NAMESPACE = uuid.UUID("6f1c1f0e-3a43-4a8e-9d7b-0e5b8f9f6a11")


class EventSource(Protocol):
    """Source events in event-time order that tell their number before they are read (a
    ``list``, or :class:`~ingestctl.replay.generator.GeneratedEvents`, which makes each as
    it is read): the producer's progress bar and the oversize faults' spacing need it."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[SourceEvent]: ...


class SourceError(ValueError):
    """A dataset path, file or parameter that replay cannot use; the message says why."""


@dataclass(frozen=True)
class SourceEvent:
    """One event before it is encoded.

    :param event_time: when it happened (timezone-aware).
    :param event_type: a key of :data:`ingest_core.contracts.CONTRACTS`.
    :param payload: the contract's payload fields (JSON-serialisable values).
    :param source_ref: a stable reference to the source row (e.g. ``olist:payment:<order>:1``);
        ``event_id`` is derived from it, so a replay run twice sends the same ids.
    """

    event_time: datetime
    event_type: str
    payload: dict[str, Any]
    source_ref: str

    @property
    def event_id(self) -> str:
        """Deterministic id: uuid5 of :attr:`source_ref`."""
        return str(uuid.uuid5(EVENT_ID_NAMESPACE, self.source_ref))

    @property
    def topic(self) -> str:
        """Kafka topic of this event type."""
        return contract_for(self.event_type).topic

    @property
    def key(self) -> str | None:
        """Kafka key: the entity id named by the contract."""
        value = self.payload.get(contract_for(self.event_type).key_field)
        return None if value is None else str(value)

    def to_value(self, shift: timedelta = timedelta(0)) -> dict[str, Any]:
        """The JSON object sent to Kafka: envelope then payload; time shifted by ``shift``."""
        return {
            "event_id": self.event_id,
            "event_type": self.event_type,
            "event_time": (self.event_time + shift).isoformat(),
            "schema_version": SCHEMA_VERSION,
            **self.payload,
        }


def read_csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line number, row)`` of a UTF-8 CSV file (a BOM is accepted).

    :raises SourceError: the file lacks a ``required`` column, is not UTF-8 or has a row
        with fewer fields than the header; the message names the file and line.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise SourceError(f"{path} lacks columns {missing}")
            for row in reader:
                if None in row.values() or None in row:
                    raise SourceError(f"{path}:{reader.line_num}: row has the wrong field count")
                yield reader.line_num, row
    except UnicodeDecodeError as error:
        raise SourceError(f"{path} is not UTF-8: {error}") from None


@contextmanager
def row_error(path: Path, line: int) -> Iterator[None]:
    """Turn a bad value in one CSV row into a SourceError naming the file and line."""
    try:
        yield
    except SourceError as error:
        raise SourceError(f"{path}:{line}: {error}") from None
    except (ValueError, ArithmeticError, KeyError, AttributeError, TypeError) as error:
        raise SourceError(f"{path}:{line}: {type(error).__name__}: {error}") from None


def finite_decimal(text: str, field: str) -> Decimal:
    """Parse a money or quantity field; :raises SourceError: not a finite number."""
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise SourceError(f"{field} {text!r} is not a number") from None
    if not value.is_finite():
        raise SourceError(f"{field} {text!r} is not a finite number")
    return value


def zone(name: str) -> ZoneInfo:
    """Return the IANA time zone ``name``; :raises SourceError: if it is unknown."""
    if not name.strip():
        raise SourceError("empty time zone: use an IANA name such as Europe/London")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise SourceError(
            f"unknown time zone {name!r}: use an IANA name such as "
            "America/Sao_Paulo or Europe/London"
        ) from None


def local_time(text: str, tz: ZoneInfo) -> datetime:
    """Parse a dataset's offset-less local time (``YYYY-MM-DD HH:MM:SS``) in zone ``tz``.

    Wall times that occur twice at a DST change take the first occurrence (``fold=0``).

    :raises SourceError: not a timestamp.
    """
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise SourceError(f"not a timestamp: {text!r}") from None
    if parsed.tzinfo is not None:
        return parsed
    return parsed.replace(tzinfo=tz)


def utc(dt: datetime) -> datetime:
    """``dt`` converted to UTC."""
    return dt.astimezone(UTC)
