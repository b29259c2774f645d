"""Declared CSV replay mappings: how ``ingestctl replay`` (and ``make demo``) turns the rows
of a dataset's CSV file into a source's events, declared in the source's contract
(``x-ingest-replay`` in ``include/contracts/<source>.yaml``), so that a new source is
replayed with no Python.

A contract may declare a list of mappings, e.g. Olist's reviews::

    x-ingest-replay:
      - dataset: olist                         # the replay source that reads it
        file: olist_order_reviews_dataset.csv  # in the dataset folder
        event_type: review_submitted
        event_time: review_creation_date       # a column: local time, the dataset's zone
        ref: [review_id, order_id]             # columns naming the row: its event id
        fields:                                # payload field -> CSV column
          review_id: review_id
          order_id: order_id
          score: review_score

Each value is converted to its field's declared type: an ``integer`` field's text becomes
an int and a money field's a number, an empty cell ``null``. A cell that does not convert
is sent as the text it is, so that Silver quarantines the event with its reason
(``type_mismatch``) instead of the replay dropping it. Spark-free and Airflow-free.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ingest_core.contracts import MONEY_TYPE, Contracts, SourceContract, get_contracts

#: Datasets whose folder a mapping's file may be in (``ingestctl replay --source``). UCI's
#: reader takes every CSV of its folder for an invoice file: no mapping there yet.
DATASETS = ("olist",)
_COLUMN = r"^[A-Za-z_][A-Za-z0-9_ ]*$"


class ReplayMapping(BaseModel):
    """One CSV file of a dataset mapped onto one event type of a source.

    :param dataset: the replay source reading the file (:data:`DATASETS`).
    :param file: the CSV file's name in the dataset folder (no path).
    :param event_type: one of the source's ``event_types``.
    :param event_time: the column holding the event's time (ISO 8601; without an offset it
        is local time in the dataset's zone).
    :param ref: the columns naming the row; the event id is derived from them (a replay run
        twice sends the same ids).
    :param fields: payload field -> CSV column. The contract's required fields must be
        mapped.
    :raises pydantic.ValidationError: a malformed mapping.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str
    file: str = Field(pattern=r"^[A-Za-z0-9_.-]+\.csv$")
    event_type: str
    event_time: str = Field(pattern=_COLUMN)
    ref: tuple[str, ...] = Field(min_length=1)
    fields: dict[str, str] = Field(min_length=1)

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str) -> str:
        if value not in DATASETS:
            raise ValueError(f"dataset {value!r} is none of {list(DATASETS)}")
        return value

    @property
    def columns(self) -> tuple[str, ...]:
        """Every CSV column the mapping reads."""
        return tuple(dict.fromkeys([self.event_time, *self.ref, *self.fields.values()]))


def mappings_of(source: SourceContract) -> tuple[ReplayMapping, ...]:
    """The source's declared mappings, checked against its contract.

    :raises ValueError: a malformed mapping, an event type the source does not declare, a
        field it does not declare, or a required field left unmapped; the message names the
        contract file.
    """
    declared = source.schema.get("x-ingest-replay", [])
    where = f"{source.path.name}: x-ingest-replay"
    if not isinstance(declared, list):
        raise ValueError(f"{where}: a list of mappings, not {type(declared).__name__}")
    mappings = []
    for n, entry in enumerate(declared):
        try:
            mapping = ReplayMapping.model_validate(entry)
        except ValidationError as error:
            first = error.errors()[0]
            at = ".".join(str(p) for p in first["loc"]) or "(mapping)"
            raise ValueError(
                f"{where}[{n}].{at}: {first['msg'].removeprefix('Value error, ')}"
            ) from None
        if mapping.event_type not in source.event_types:
            raise ValueError(
                f"{where}[{n}]: event_type {mapping.event_type!r} is none of the source's "
                f"{list(source.event_types)}"
            )
        unknown = sorted(set(mapping.fields) - set(source.names))
        if unknown:
            raise ValueError(f"{where}[{n}]: {unknown} are not fields of the contract")
        unmapped = [f for f in source.required if f not in mapping.fields]
        if unmapped:
            raise ValueError(f"{where}[{n}]: required fields {unmapped} are not mapped")
        mappings.append(mapping)
    return tuple(mappings)


def replay_mappings(
    dataset: str, contracts: Contracts | None = None
) -> list[tuple[SourceContract, ReplayMapping]]:
    """Every declared mapping of ``dataset``, with its source, in contract order.

    :raises ValueError: a malformed mapping (see :func:`mappings_of`).
    """
    contracts = contracts or get_contracts()
    return [
        (source, mapping)
        for source in contracts.sources.values()
        for mapping in mappings_of(source)
        if mapping.dataset == dataset
    ]


def mapping_problems(contracts: Contracts) -> list[str]:
    """One line per contract whose mappings are malformed (``ingestctl catalog check``)."""
    problems = []
    for source in contracts.sources.values():
        try:
            mappings_of(source)
        except ValueError as error:
            problems.append(f"contracts/{error}")
    return problems


def convert(source: SourceContract, field: str, text: str) -> Any:
    """``text`` (a CSV cell) as field ``field``'s declared type: ``None`` when empty, an
    int for an ``integer`` field, a number rounded to cents for money; a cell that does not
    convert is returned as it is (Silver quarantines it: ``type_mismatch``)."""
    if text == "":
        return None
    spark_type = source.field(field).spark_type
    try:
        if spark_type == "int":
            if not re.fullmatch(r"[+-]?\d+", text.strip()):
                return text
            return int(text)
        if spark_type == MONEY_TYPE:
            value = Decimal(text.strip())
            return float(value) if value.is_finite() else text
    except InvalidOperation:
        return text
    return text
