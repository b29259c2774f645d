"""UCI Online Retail (by-day CSVs) -> order and refund events.

Mapping (times have no offset; read in ``timezone``, default Europe/London):

* one ``order_placed`` per invoice whose number does not start with ``C``, at the invoice's
  first line time, with its lines as items (``product_id`` = StockCode, ``quantity``,
  ``price`` = UnitPrice) and ``total`` = sum of quantity x price, in GBP;
* one ``refund`` per ``C`` invoice (a cancellation): ``refund_id`` = the invoice number,
  ``amount`` = the absolute value of its lines' total, ``reason`` = ``cancellation``. UCI does
  not say which invoice a cancellation reverses, so ``order_id`` is null.
* ``customer_id`` is the CustomerID without its float formatting (``"17850.0"`` ->
  ``"17850"``); lines without one keep a **null** customer id (guest orders, allowed by the
  contract), they are not dropped.
* Real data does real things: stock adjustments appear as non-``C`` invoices with negative
  quantities or zero prices. They are replayed as they are; the Silver job quarantines an
  order whose total is negative (``invalid_value``).
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from ingestctl.replay.model import (
    SourceError,
    SourceEvent,
    finite_decimal,
    local_time,
    read_csv_rows,
    row_error,
    zone,
)

DEFAULT_TIMEZONE = "Europe/London"
CURRENCY = "GBP"
COLUMNS = ("InvoiceNo", "StockCode", "Quantity", "InvoiceDate", "UnitPrice", "CustomerID")


def _files(path: Path) -> list[Path]:
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.glob("*.csv"))
    if not files:
        raise SourceError(f"{path}: no UCI Online Retail CSV files (expected YYYY-MM-DD.csv)")
    return files


def _rows(path: Path) -> Iterator[tuple[Path, int, dict[str, str]]]:
    for file in _files(path):
        for line, row in read_csv_rows(file, COLUMNS):
            yield file, line, row


def customer_id(text: str) -> str | None:
    """``"17850.0"`` -> ``"17850"``; empty -> None.

    :raises SourceError: not a whole number.
    """
    text = text.strip()
    if not text:
        return None
    value = finite_decimal(text, "CustomerID")
    if value != value.to_integral_value():
        raise SourceError(f"CustomerID {text!r} is not a whole number")
    return str(int(value))


def read_events(path: Path, timezone: str = DEFAULT_TIMEZONE) -> list[SourceEvent]:
    """Map UCI Online Retail CSVs (a folder of by-day files, or one file) onto event contracts.

    :raises SourceError: no CSV files, missing columns, bad time zone or timestamp.
    """
    tz = zone(timezone)
    invoices: dict[str, list[dict[str, Any]]] = {}
    for file, line, row in _rows(path):
        with row_error(file, line):
            if not row["InvoiceNo"].strip():
                raise SourceError("empty InvoiceNo")
            invoices.setdefault(row["InvoiceNo"], []).append(
                {
                    "when": local_time(row["InvoiceDate"], tz),
                    "product_id": row["StockCode"],
                    "quantity": int(row["Quantity"]),
                    "price": finite_decimal(row["UnitPrice"], "UnitPrice"),
                    "customer_id": customer_id(row["CustomerID"]),
                }
            )
    events = []
    for invoice, lines in invoices.items():
        when = min(line["when"] for line in lines)
        items: list[dict[str, Any]] = [
            {"product_id": i["product_id"], "quantity": i["quantity"], "price": float(i["price"])}
            for i in lines
        ]
        total = sum((i["quantity"] * i["price"] for i in lines), Decimal(0))
        customer = lines[0]["customer_id"]
        payload: dict[str, Any]
        if invoice.startswith("C"):
            payload = {
                "refund_id": invoice,
                "order_id": None,
                "customer_id": customer,
                "amount": float(abs(total).quantize(Decimal("0.01"))),
                "currency": CURRENCY,
                "reason": "cancellation",
            }
            events.append(SourceEvent(when, "refund", payload, f"uci:refund:{invoice}"))
        else:
            payload = {
                "order_id": invoice,
                "customer_id": customer,
                "status": "created",
                "items": items,
                "total": float(total.quantize(Decimal("0.01"))),
                "currency": CURRENCY,
            }
            events.append(SourceEvent(when, "order_placed", payload, f"uci:order:{invoice}"))
    events.sort(key=lambda e: (e.event_time, e.source_ref))
    return events


def read_customers(path: Path) -> list[dict[str, str | None]]:
    """The thin customers dimension: one row per CustomerID with its country.

    :returns: dicts with ``customer_id``, ``country`` (as written, e.g. ``United Kingdom``)
        and ``source`` (``uci_retail``); the first country seen wins.
    """
    seen: dict[str, dict[str, str | None]] = {}
    for file, line, row in _rows(path):
        with row_error(file, line):
            cid = customer_id(row["CustomerID"])
        if cid is not None and cid not in seen:
            seen[cid] = {"customer_id": cid, "country": row.get("Country"), "source": "uci_retail"}
    return list(seen.values())
