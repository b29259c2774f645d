"""Events of the CSV files a contract maps declaratively (``x-ingest-replay``,
:mod:`ingest_core.replay_mappings`): a new source replayed with no Python. Each replay
source (:mod:`ingestctl.replay.olist`, :mod:`ingestctl.replay.uci_retail`) adds them to its
own events."""

from __future__ import annotations

from pathlib import Path
from zoneinfo import ZoneInfo

from ingest_core.contracts import Contracts
from ingest_core.replay_mappings import convert, replay_mappings
from ingestctl.replay.model import SourceError, SourceEvent, local_time, read_csv_rows, row_error


def declared_events(
    dataset: str, folder: Path, tz: ZoneInfo, contracts: Contracts | None = None
) -> list[SourceEvent]:
    """The events of every mapping declared for ``dataset``, read from ``folder``.

    :param tz: the zone of the dataset's offset-less times.
    :param contracts: the contracts declaring the mappings (default: the catalog's).
    :returns: one event per CSV row, unsorted; ``source_ref`` is
        ``<dataset>:<event_type>:<ref values joined by ":">``.
    :raises SourceError: a malformed mapping, a missing file or column, a duplicate
        reference, or a row whose time does not parse; the message names the file and line.
    """
    try:
        mappings = replay_mappings(dataset, contracts)
    except ValueError as error:
        raise SourceError(str(error)) from None
    events: list[SourceEvent] = []
    for source, mapping in mappings:
        path = folder / mapping.file
        if not path.is_file():
            raise SourceError(
                f"{source.path.name} maps {mapping.file} of {dataset}, not found in {folder}"
            )
        seen: set[str] = set()
        for line, row in read_csv_rows(path, mapping.columns):
            with row_error(path, line):
                ref = ":".join(row[c] for c in mapping.ref)
                if ref in seen:
                    raise SourceError(f"{mapping.ref} {ref!r} twice: the event id would repeat")
                seen.add(ref)
                payload = {
                    field: convert(source, field, row[column])
                    for field, column in mapping.fields.items()
                }
                events.append(
                    SourceEvent(
                        local_time(row[mapping.event_time], tz),
                        mapping.event_type,
                        payload,
                        f"{dataset}:{mapping.event_type}:{ref}",
                    )
                )
    return events
