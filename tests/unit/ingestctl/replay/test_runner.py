"""The landing file of a replay's customers dimension: upserted by key, never overwritten."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ingestctl.replay.runner import write_dimension


def _landed(path: Path) -> dict[str, str | None]:
    frame = pd.read_parquet(path)
    return {
        row.customer_id: (None if pd.isna(row.country) else row.country)
        for row in frame.itertuples()
    }


def test_each_replay_upserts_its_customers_by_key(tmp_path: Path) -> None:
    folder = tmp_path / "customers"
    path, total = write_dimension(
        [
            {"customer_id": "1", "country": "United Kingdom", "source": "uci_retail"},
            {"customer_id": "2", "country": "France", "source": "uci_retail"},
        ],
        folder,
        "uci_retail",
    )
    assert (path, total) == (folder / "uci_retail.parquet", 2)
    # The next day's file: customer 2 moved, customer 3 is new, customer 1 is not in it.
    path, total = write_dimension(
        [
            {"customer_id": "2", "country": "Germany", "source": "uci_retail"},
            {"customer_id": "3", "country": None, "source": "uci_retail"},
            {"customer_id": None, "country": "Spain", "source": "uci_retail"},
        ],
        folder,
        "uci_retail",
    )
    assert total == 3
    assert _landed(path) == {"1": "United Kingdom", "2": "Germany", "3": None}
    # Another source has a file of its own.
    other, _ = write_dimension([{"customer_id": "x", "city": "recife"}], folder, "olist")
    assert other == folder / "olist.parquet"
    assert _landed(path) == {"1": "United Kingdom", "2": "Germany", "3": None}
    assert sorted(p.name for p in folder.glob("*.parquet")) == [
        "olist.parquet",
        "uci_retail.parquet",
    ]


def test_the_same_replay_twice_changes_nothing(tmp_path: Path) -> None:
    rows = [{"customer_id": "1", "country": "EIRE"}, {"customer_id": "2", "country": "EIRE"}]
    path, _ = write_dimension(rows, tmp_path, "uci_retail")
    first = pd.read_parquet(path)
    write_dimension(rows, tmp_path, "uci_retail")
    pd.testing.assert_frame_equal(pd.read_parquet(path), first)
