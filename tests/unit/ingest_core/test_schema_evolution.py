"""Schema evolution of the event contracts (``ingest_core.schema_evolution``): which changes
silver_refine accepts at its next start and which it refuses, one by one, and how the
checkpoint's recorded contract shapes and ``ingestctl catalog check`` say so."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ingest_core.catalog import get_catalog
from ingest_core.contracts import get_contracts
from ingest_core.schema_evolution import contract_changes, contract_shapes

pytestmark = pytest.mark.unit


def shapes() -> dict:
    return contract_shapes(get_contracts(), ["silver_payments", "silver_refunds"])


def changed(edit: Callable[[dict], object]) -> dict:
    new = copy.deepcopy(shapes())
    edit(new)
    return new


def add_field(required: bool) -> Callable[[dict], object]:
    return lambda s: s["payments"]["fields"].update(
        voucher={"type": "string", "required": required}
    )


@pytest.mark.parametrize(
    ("edit", "compatible", "incompatible"),
    [
        (add_field(False), ["payments: new optional field voucher"], []),
        (lambda s: s["payments"]["event_types"].append("payment_voided"),
         ["payments: new event type payment_voided"], []),
        (lambda s: s["payments"]["fields"]["amount"].update(required=False),
         ["payments.amount: now optional"], []),
        (lambda s: s.update(sensors=copy.deepcopy(s["refunds"])), ["sensors: new source"], []),
        (add_field(True), [], ["payments: new required field voucher (older events lack it)"]),
        (lambda s: s["payments"]["fields"]["amount"].update(type="string"),
         [], ["payments.amount: type decimal(18,2) -> string"]),
        (lambda s: s["payments"]["fields"].pop("method"), [], ["payments: field method removed"]),
        (lambda s: s["payments"]["fields"]["customer_id"].update(required=True),
         [], ["payments.customer_id: now required (older events lack it)"]),
        (lambda s: s["payments"].update(key="payment_id"),
         [], ["payments: key order_id -> payment_id"]),
        (lambda s: s["payments"]["event_types"].remove("payment"),
         [], ["payments: event type payment removed"]),
        (lambda s: s.pop("refunds"),
         [], ["refunds: source removed (its records would lose their contract)"]),
    ],
    ids=["optional-field", "event-type", "loosened", "source", "required-field", "type",
         "removed-field", "tightened", "key", "removed-event-type", "removed-source"],
)  # fmt: skip
def test_each_change_is_compatible_or_not(
    edit: Callable[[dict], object], compatible: list[str], incompatible: list[str]
) -> None:
    assert contract_changes(shapes(), changed(edit)) == (compatible, incompatible)


def test_enums_are_not_part_of_the_shape() -> None:
    """A widened enum changes what is quarantined from now on, not Silver's columns."""
    payments = shapes()["payments"]
    assert set(payments) == {"key", "silver_table", "event_types", "fields"}
    assert payments["fields"]["currency"] == {"type": "string", "required": True}


def _record(edit: Callable[[dict], object]) -> Path:
    """silver_refine's checkpoint as an older contract left it (recorded shapes edited)."""
    from ingest_core.checkpoint_health import check_before_start, fingerprint_file

    check_before_start("silver_refine")  # no checkpoint yet: records the fingerprint
    record = fingerprint_file(get_catalog().job("silver_refine"))
    document = json.loads(record.read_text())
    edit(document["config"]["contracts"])
    record.write_text(json.dumps(document))
    return record


def test_silver_refine_starts_after_a_compatible_change_and_records_it(ingest_home: Path) -> None:
    from ingest_core.checkpoint_health import check_before_start

    # The checkpoint predates payments' customer_id: the declaration adds it, optional.
    record = _record(lambda c: c["payments"]["fields"].pop("customer_id"))
    check_before_start("silver_refine")
    recorded = json.loads(record.read_text())["config"]["contracts"]
    assert "customer_id" in recorded["payments"]["fields"]


def test_silver_refine_refuses_an_incompatible_change_saying_what_to_do(
    ingest_home: Path,
) -> None:
    from ingest_core.checkpoint_health import ConfigurationChangedError, check_before_start

    # The checkpoint was made when amount was a string.
    _record(lambda c: c["payments"]["fields"]["amount"].update(type="string"))
    with pytest.raises(ConfigurationChangedError) as refused:
        check_before_start("silver_refine")
    message = str(refused.value)
    assert "payments.amount: type string -> decimal(18,2)" in message
    assert "layer_full_refresh with layer=silver" in message


def test_catalog_check_reports_drift_against_the_running_platform(ingest_home: Path) -> None:
    from ingestctl.cli import app

    _record(lambda c: c["payments"]["fields"].pop("customer_id"))
    accepted = CliRunner().invoke(app, ["catalog", "check"])
    assert accepted.exit_code == 0, accepted.output
    assert "compatible contract change, accepted at its next start: payments: new optional " \
        "field customer_id" in accepted.output  # fmt: skip
    _record(lambda c: c["payments"]["fields"]["amount"].update(type="string"))
    refused = CliRunner().invoke(app, ["catalog", "check"])
    assert refused.exit_code == 1
    assert "silver_refine: incompatible contract change: payments.amount: type string" in (
        refused.output
    )
