"""Olist Brazilian e-commerce sample -> order, payment and cancellation events.

Mapping (the dataset's times have no offset; they are read in ``timezone``, default
America/Sao_Paulo):

* ``order_placed`` for every order, at ``order_purchase_timestamp``, with its items
  (product, seller, price, freight) and ``total`` = sum of item prices and freights, in BRL.
* ``payment`` for every payment row, at the order's ``order_approved_at``. An order that was
  never approved (9 of the 3,000 sample orders, most of them canceled) still has payment
  rows: each becomes a **failed** payment at the purchase time, so every payment row yields
  exactly one event and none is silently dropped. Approved orders' payments are
  ``authorized``. ``payment_id`` is ``<order_id>-<payment_sequential>``.
* ``order_canceled`` for every order whose status is ``canceled`` or ``unavailable``, with
  that status. Olist has no cancellation time: the event takes the order's latest known
  timestamp (approval, carrier hand-over or delivery, else purchase).
* The customers file loads the customers dimension (see :func:`read_customers`).
* Every CSV file a contract maps to ``dataset: olist`` (``x-ingest-replay``, e.g. the
  reviews) adds its events (:func:`ingestctl.replay.declared.declared_events`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from ingestctl.replay.declared import declared_events
from ingestctl.replay.model import (
    SourceError,
    SourceEvent,
    finite_decimal,
    local_time,
    read_csv_rows,
    row_error,
    zone,
)

ORDERS = "olist_orders_dataset.csv"
PAYMENTS = "olist_order_payments_dataset.csv"
ITEMS = "olist_order_items_dataset.csv"
CUSTOMERS = "olist_customers_dataset.csv"
CANCELED_STATUSES = frozenset({"canceled", "unavailable"})
DEFAULT_TIMEZONE = "America/Sao_Paulo"
CURRENCY = "BRL"


def _folder(path: Path) -> Path:
    """Accept the dataset folder or its ``sample/`` subfolder."""
    for candidate in (path, path / "sample"):
        if (candidate / ORDERS).is_file():
            missing = [f for f in (PAYMENTS, ITEMS, CUSTOMERS) if not (candidate / f).is_file()]
            if missing:
                raise SourceError(f"{candidate} has {ORDERS} but lacks {', '.join(missing)}")
            return candidate
    raise SourceError(f"{path} is not an Olist dataset folder: no {ORDERS} in it or in sample/")


_COLUMNS = {
    ORDERS: (
        "order_id",
        "customer_id",
        "order_status",
        "order_purchase_timestamp",
        "order_approved_at",
        "order_delivered_carrier_date",
        "order_delivered_customer_date",
    ),
    PAYMENTS: (
        "order_id",
        "payment_sequential",
        "payment_type",
        "payment_installments",
        "payment_value",
    ),
    ITEMS: ("order_id", "product_id", "seller_id", "price", "freight_value"),
    CUSTOMERS: (
        "customer_id",
        "customer_unique_id",
        "customer_zip_code_prefix",
        "customer_city",
        "customer_state",
    ),
}


def _rows(folder: Path, name: str) -> Iterator[tuple[Path, int, dict[str, str]]]:
    path = folder / name
    for line, row in read_csv_rows(path, _COLUMNS[name]):
        yield path, line, row


def _money(text: str, field: str) -> float:
    value = finite_decimal(text, field)
    if value != value.quantize(Decimal("0.01")):
        raise SourceError(f"{field} {text!r} has more than 2 decimals")
    return float(value)


def read_events(path: Path, timezone: str = DEFAULT_TIMEZONE) -> list[SourceEvent]:
    """Map the Olist files in ``path`` onto event contracts, sorted by event time.

    :param path: the dataset folder (or its ``sample/`` subfolder).
    :param timezone: IANA zone of the dataset's offset-less timestamps.
    :raises SourceError: missing files, an unknown time zone or an unparseable timestamp.
    """
    folder, tz = _folder(Path(path)), zone(timezone)
    orders: dict[str, dict[str, str]] = {}
    order_lines: dict[str, int] = {}
    for file, line, row in _rows(folder, ORDERS):
        with row_error(file, line):
            if not row["order_id"]:
                raise SourceError("empty order_id")
            if row["order_id"] in orders:
                raise SourceError(f"duplicate order_id {row['order_id']!r}")
            orders[row["order_id"]] = row
            order_lines[row["order_id"]] = line
    items: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for file, line, row in _rows(folder, ITEMS):
        with row_error(file, line):
            if row["order_id"] not in orders:
                raise SourceError(f"item of unknown order {row['order_id']!r}")
            items[row["order_id"]].append(
                {
                    "product_id": row["product_id"],
                    "seller_id": row["seller_id"],
                    "quantity": 1,
                    "price": _money(row["price"], "price"),
                    "freight": _money(row["freight_value"], "freight_value"),
                }
            )
    events: list[SourceEvent] = []
    for order_id, order in orders.items():
        with row_error(folder / ORDERS, order_lines[order_id]):
            events.extend(_order_events(order_id, order, items.get(order_id, []), tz))
    for file, line, row in _rows(folder, PAYMENTS):
        with row_error(file, line):
            if row["order_id"] not in orders:
                raise SourceError(f"payment of unknown order {row['order_id']!r}")
            order = orders[row["order_id"]]
            approved = order["order_approved_at"]
            events.append(
                SourceEvent(
                    local_time(approved or order["order_purchase_timestamp"], tz),
                    "payment",
                    {
                        "payment_id": f"{row['order_id']}-{row['payment_sequential']}",
                        "order_id": row["order_id"],
                        "customer_id": order["customer_id"],
                        "method": row["payment_type"],
                        "installments": int(row["payment_installments"]),
                        "amount": _money(row["payment_value"], "payment_value"),
                        "currency": CURRENCY,
                        "status": "authorized" if approved else "failed",
                    },
                    f"olist:payment:{row['order_id']}:{row['payment_sequential']}",
                )
            )
    events += declared_events("olist", folder, tz)
    events.sort(key=lambda e: (e.event_time, e.source_ref))
    return events


def _order_events(
    order_id: str, order: dict[str, str], lines: list[dict[str, Any]], tz: Any
) -> list[SourceEvent]:
    """order_placed, and order_canceled for canceled/unavailable orders."""
    placed = local_time(order["order_purchase_timestamp"], tz)
    lines = sorted(lines, key=lambda i: (i["product_id"], i["price"]))
    total = sum((Decimal(str(i["price"])) + Decimal(str(i["freight"])) for i in lines), Decimal(0))
    base = {"order_id": order_id, "customer_id": order["customer_id"], "currency": CURRENCY}
    events = [
        SourceEvent(
            placed,
            "order_placed",
            base | {"status": "created", "items": lines, "total": float(total)},
            f"olist:order_placed:{order_id}",
        )
    ]
    if order["order_status"] in CANCELED_STATUSES:
        stamps = [
            order[c]
            for c in (
                "order_approved_at",
                "order_delivered_carrier_date",
                "order_delivered_customer_date",
            )
            if order[c]
        ]
        when = max((local_time(s, tz) for s in stamps), default=placed)
        events.append(
            SourceEvent(
                when,
                "order_canceled",
                base | {"status": order["order_status"], "items": lines, "total": float(total)},
                f"olist:order_canceled:{order_id}",
            )
        )
    return events


def read_customers(path: Path) -> list[dict[str, str | None]]:
    """Rows of the customers dimension from ``olist_customers_dataset.csv``.

    :returns: dicts with ``customer_id``, ``customer_unique_id``, ``zip_code_prefix``,
        ``city``, ``state``, ``country`` (``BR``), ``source`` (``olist``); all strings.
    :raises SourceError: the folder is not an Olist dataset.
    """
    return [
        {
            "customer_id": row["customer_id"],
            "customer_unique_id": row["customer_unique_id"],
            "zip_code_prefix": row["customer_zip_code_prefix"],
            "city": row["customer_city"],
            "state": row["customer_state"],
            "country": "BR",
            "source": "olist",
        }
        for _, _, row in _rows(_folder(Path(path)), CUSTOMERS)
    ]
