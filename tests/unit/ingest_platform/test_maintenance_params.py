"""table_maintenance's run parameters are checked before any table is touched."""

from __future__ import annotations

import pytest

from ingest_platform.maintenance import validate_params

pytestmark = pytest.mark.unit


def test_defaults_are_every_table_and_the_catalogs_policy() -> None:
    from ingest_core.catalog import get_catalog

    tables, policy, keywords = validate_params({})
    assert tables == list(get_catalog().tables)
    assert policy == get_catalog().maintenance
    assert keywords == {"dry_run": False, "retention_hours": None}


def test_overrides_are_applied() -> None:
    tables, policy, keywords = validate_params(
        {
            "tables": ["silver_orders"],
            "on_busy": "skip",
            "always_on": "skip",
            "dry_run": True,
            "retention_hours": 200,
        }
    )
    assert tables == ["silver_orders"]
    assert (policy.on_busy, policy.always_on) == ("skip", "skip")
    assert keywords == {"dry_run": True, "retention_hours": 200.0}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"tables": ["silver_nope"]}, "unknown tables"),
        ({"retention_hours": -1}, "retention_hours must be"),
        ({"on_busy": "later"}, "bad maintenance parameters"),
        ({"dry_run": "yes"}, "dry_run must be"),
        ({"dryrun": True}, r"unknown parameters \['dryrun'\]"),
        ({"tables": "silver_orders"}, "tables must be a list"),
        ({"retention_hours": "abc"}, "retention_hours must be a number"),
        ({"retention_hours": float("inf")}, "from 0 to 87600"),
    ],
)
def test_bad_parameters_are_refused_with_what_is_wrong(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_params(params)


def test_the_gate_pins_the_version_it_validated_through(ingest_home) -> None:
    from datetime import UTC, datetime

    import pyarrow as pa
    from deltalake import write_deltalake

    from ingest_core.catalog import get_catalog
    from ingest_platform.maintenance import gate_pins

    assert gate_pins("silver_orders") == [
        ("gate", "quality gate (never validated: reads from version 0)", 0)
    ]
    write_deltalake(
        str(get_catalog().table("ops_gate_results").path()),
        pa.table(
            {
                "table": ["silver_orders", "silver_orders"],
                "status": ["passed", "failed"],
                "to_version": [3, 5],
                "validated_at": pa.array(
                    [datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)],
                    pa.timestamp("us", tz="UTC"),
                ),
            }
        ),
    )
    assert gate_pins("silver_orders") == [("gate", "quality gate (validated through version 3)", 3)]
    assert gate_pins("silver_event_ids") == []  # no gate reads it
