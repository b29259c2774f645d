"""Dataset mapping onto the event contracts, checked against counts taken independently
from the CSVs with pandas."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal

import pandas as pd
import pytest

from ingest_core.contracts import CONTRACTS
from ingest_core.replay_mappings import replay_mappings
from ingestctl.replay import olist, uci_retail
from ingestctl.replay.model import SourceError

pytestmark = pytest.mark.unit


def test_olist_event_counts_match_the_csvs(olist_path) -> None:
    orders = pd.read_csv(olist_path / olist.ORDERS, dtype=str)
    payments = pd.read_csv(olist_path / olist.PAYMENTS, dtype=str)
    counts = Counter(e.event_type for e in olist.read_events(olist_path))
    declared = Counter()  # files a contract maps (x-ingest-replay): one event per row
    for _, mapping in replay_mappings("olist"):
        declared[mapping.event_type] += len(pd.read_csv(olist_path / mapping.file, dtype=str))
    assert counts == {
        "order_placed": len(orders),
        "payment": len(payments),
        "order_canceled": int(orders.order_status.isin(["canceled", "unavailable"]).sum()),
        **declared,
    }


def test_olist_times_carry_the_sao_paulo_offset(olist_path) -> None:
    events = {e.source_ref: e for e in olist.read_events(olist_path)}
    placed = events["olist:order_placed:2c810e97c1d3956172e1830863e6a133"]
    assert placed.to_value()["event_time"] == "2018-08-15T11:30:33-03:00"
    assert placed.event_time.astimezone(UTC) == datetime(2018, 8, 15, 14, 30, 33, tzinfo=UTC)
    other = olist.read_events(olist_path, timezone="UTC")
    assert other[0].to_value()["event_time"].endswith("+00:00")


def test_olist_unapproved_orders_give_failed_payments_at_purchase(olist_path) -> None:
    orders = pd.read_csv(olist_path / olist.ORDERS, dtype=str).set_index("order_id")
    payments = [e for e in olist.read_events(olist_path) if e.event_type == "payment"]
    unapproved = orders[orders.order_approved_at.isna()].index
    failed = [p for p in payments if p.payload["status"] == "failed"]
    assert {p.payload["order_id"] for p in failed} == set(unapproved)
    for payment in failed:
        purchase = orders.loc[payment.payload["order_id"], "order_purchase_timestamp"]
        assert payment.event_time.replace(tzinfo=None) == datetime.fromisoformat(purchase)


def test_olist_order_totals_equal_items_price_plus_freight(olist_path) -> None:
    items = pd.read_csv(olist_path / olist.ITEMS, dtype=str)
    expected = (
        items.assign(v=items.price.map(Decimal) + items.freight_value.map(Decimal))
        .groupby("order_id")
        .v.sum()
    )
    for event in olist.read_events(olist_path):
        if event.event_type == "order_placed":
            total = Decimal(str(event.payload["total"]))
            assert total == expected.get(event.payload["order_id"], Decimal(0))


def test_uci_invoices_become_orders_and_refunds_with_null_customers_kept(uci_path) -> None:
    lines = pd.concat(
        [pd.read_csv(f, dtype=str, keep_default_na=False) for f in sorted(uci_path.glob("*.csv"))]
    )
    invoices = lines.groupby("InvoiceNo").CustomerID.first()
    events = uci_retail.read_events(uci_path)
    counts = Counter(e.event_type for e in events)
    refunds = invoices.index.str.startswith("C")
    assert counts == {"order_placed": int((~refunds).sum()), "refund": int(refunds.sum())}
    assert sum(e.payload["customer_id"] is None for e in events) == int((invoices == "").sum())
    assert all(e.to_value()["event_time"][-6:] in ("+00:00", "+01:00") for e in events)
    refund = next(e for e in events if e.event_type == "refund")
    assert refund.payload["amount"] > 0


def test_uci_customer_ids_lose_their_float_formatting() -> None:
    assert uci_retail.customer_id("17850.0") == "17850"
    assert uci_retail.customer_id("") is None


def test_event_ids_are_deterministic_and_unique(olist_path) -> None:
    first = [e.event_id for e in olist.read_events(olist_path)]
    assert first == [e.event_id for e in olist.read_events(olist_path)]
    assert len(set(first)) == len(first)


def test_every_event_satisfies_its_contract(olist_path, uci_path) -> None:
    for event in [*olist.read_events(olist_path), *uci_retail.read_events(uci_path)]:
        value = event.to_value()
        contract = CONTRACTS[event.event_type]
        missing = [f for f in contract.required if value.get(f) is None]
        assert missing == [], (event.source_ref, missing)
        assert datetime.fromisoformat(value["event_time"]).utcoffset() is not None


def test_bad_inputs_are_refused_with_a_reason(tmp_path) -> None:
    with pytest.raises(SourceError, match="not an Olist dataset folder"):
        olist.read_events(tmp_path)
    with pytest.raises(SourceError, match="no UCI Online Retail CSV files"):
        uci_retail.read_events(tmp_path)
    (tmp_path / "2010-12-01.csv").write_text("a,b\n1,2\n")
    with pytest.raises(SourceError, match="lacks columns"):
        uci_retail.read_events(tmp_path)


def test_unknown_time_zone_is_refused(olist_path) -> None:
    with pytest.raises(SourceError, match="unknown time zone 'Mars/Olympus'"):
        olist.read_events(olist_path, timezone="Mars/Olympus")


UCI_HEADER = "InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country\n"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("536365,85123A,X,abc,2010-12-01 08:26:00,2.55,17850.0,UK", "ValueError"),
        ("536365,85123A,X,6,2010-12-01 08:26:00,NaN,17850.0,UK", "not a finite number"),
        ("536365,85123A,X,6,2010-12-01 08:26:00,N/A,17850.0,UK", "not a number"),
        ("536365,85123A,X,6,2010-12-01 08:26:00,2.55,ABC,UK", "CustomerID 'ABC'"),
        ("536365,85123A,X,6", "wrong field count"),
        (",85123A,X,6,2010-12-01 08:26:00,2.55,17850.0,UK", "empty InvoiceNo"),
        ("536365,85123A,X,6,12/01/2010 8:26,2.55,17850.0,UK", "not a timestamp"),
    ],
)
def test_a_bad_uci_row_is_refused_naming_file_and_line(tmp_path, row: str, message: str) -> None:
    good = "536366,22633,Y,6,2010-12-01 08:28:00,1.85,17850.0,UK\n"
    (tmp_path / "2010-12-01.csv").write_text(UCI_HEADER + good + row + "\n")
    with pytest.raises(SourceError, match=message) as refused:
        uci_retail.read_events(tmp_path)
    assert "2010-12-01.csv:3" in str(refused.value)


def test_uci_file_with_a_bom_is_read(tmp_path) -> None:
    row = "536365,85123A,X,6,2010-12-01 08:26:00,2.55,17850.0,UK\n"
    (tmp_path / "2010-12-01.csv").write_text("\ufeff" + UCI_HEADER + row, encoding="utf-8")
    assert len(uci_retail.read_events(tmp_path)) == 1


def _olist_copy(olist_path, tmp_path, name: str, edit) -> None:
    import shutil

    for file in olist_path.glob("*.csv"):
        shutil.copy(file, tmp_path / file.name)
    target = tmp_path / name
    target.write_text(edit(target.read_text()))


def test_olist_item_of_unknown_order_is_refused(olist_path, tmp_path) -> None:
    _olist_copy(
        olist_path,
        tmp_path,
        olist.ITEMS,
        lambda t: t + "ffffffffffffffffffffffffffffffff,1,p,s,2018-01-01 00:00:00,1.00,1.00\n",
    )
    with pytest.raises(SourceError, match="item of unknown order"):
        olist.read_events(tmp_path)


def test_olist_duplicate_order_is_refused(olist_path, tmp_path) -> None:
    _olist_copy(olist_path, tmp_path, olist.ORDERS, lambda t: t + t.splitlines()[1] + "\n")
    with pytest.raises(SourceError, match="duplicate order_id"):
        olist.read_events(tmp_path)
