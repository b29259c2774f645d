"""Schema evolution of the event contracts, with rules a user can predict (issue 53).

What Silver's rows depend on in a contract is its *shape* (:func:`contract_shape`): the
topic's key, its Silver table, its event types, and each field's type and whether it is
required. ``silver_refine`` records the shapes of the contracts it refines with its
checkpoint (``ingest_core.checkpoint_health.fingerprint_config``), and at every start
compares them with the declarations (:func:`contract_changes`):

* **compatible** (the job starts and records the new shapes): a new source, a new event
  type, a new *optional* field (Silver's table gains the column on the next append, Delta's
  ``mergeSchema``; older rows read null), a required field made optional. Enum values are
  not part of the shape: a widened enum just stops quarantining the new values.
* **incompatible** (the job refuses to start, saying what changed and what to do): a
  changed type, a new *required* field (older events lack it), a removed field, event type
  or source, a changed key or Silver table. The way through is to rebuild Silver under the
  new contract (``layer_full_refresh`` with ``layer=silver``), or to revert the change.

``ingestctl catalog check`` reports both kinds against the running platform's recorded
shapes before anything runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest_core.contracts import Contracts, SourceContract


def incompatible_advice() -> str:
    """What an incompatible contract change asks of the operator (appended to the refusal),
    naming the contracts folder in use (``INGEST_CATALOG_DIR``, else the repository's)."""
    from ingest_core.contracts import contracts_dir

    return (
        "Silver's rows and deduplication state were made under the old contract. Options: "
        f"(1) revert the contract change in {contracts_dir()}; (2) rebuild Silver under the "
        "new contract: trigger layer_full_refresh with layer=silver (docs/backfills.md), "
        "which refines Bronze again beside the live tables and swaps after the Silver gate"
    )


def contract_shape(source: SourceContract) -> dict[str, Any]:
    """What Silver's rows depend on in ``source``: ``key``, ``silver_table``,
    ``event_types`` (sorted) and ``fields`` (name -> ``{"type": Spark DDL, "required":
    bool}``), JSON-serialisable."""
    return {
        "key": source.key_field,
        "silver_table": source.silver_table,
        "event_types": sorted(source.event_types),
        "fields": {
            f.name: {"type": f.spark_type, "required": f.name in source.required}
            for f in source.fields
        },
    }


def contract_shapes(contracts: Contracts, silver_tables: list[str]) -> dict[str, Any]:
    """:func:`contract_shape` of every source landing in one of ``silver_tables``, by topic."""
    return {
        topic: contract_shape(source)
        for topic, source in contracts.sources.items()
        if source.silver_table in silver_tables
    }


def contract_changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Compare two ``{topic: shape}`` mappings (:func:`contract_shapes`).

    :returns: ``(compatible, incompatible)``: one line per change, e.g.
        ``payments: new optional field voucher`` or ``payments.amount: type decimal(18,2)
        -> string``; both empty when nothing that matters changed.
    """
    compatible: list[str] = []
    incompatible: list[str] = []
    for topic in sorted(set(old) | set(new)):
        before, after = old.get(topic), new.get(topic)
        if before is None:
            compatible.append(f"{topic}: new source")
            continue
        if after is None:
            incompatible.append(f"{topic}: source removed (its records would lose their contract)")
            continue
        for key in ("key", "silver_table"):
            if before[key] != after[key]:
                incompatible.append(f"{topic}: {key} {before[key]} -> {after[key]}")
        added = sorted(set(after["event_types"]) - set(before["event_types"]))
        removed = sorted(set(before["event_types"]) - set(after["event_types"]))
        compatible += [f"{topic}: new event type {t}" for t in added]
        incompatible += [f"{topic}: event type {t} removed" for t in removed]
        fields_before, fields_after = before["fields"], after["fields"]
        for name in sorted(set(fields_before) | set(fields_after)):
            a, b = fields_before.get(name), fields_after.get(name)
            if a is None:
                (incompatible if b["required"] else compatible).append(
                    f"{topic}: new {'required' if b['required'] else 'optional'} field {name}"
                    + (" (older events lack it)" if b["required"] else "")
                )
            elif b is None:
                incompatible.append(f"{topic}: field {name} removed")
            else:
                if a["type"] != b["type"]:
                    incompatible.append(f"{topic}.{name}: type {a['type']} -> {b['type']}")
                if a["required"] and not b["required"]:
                    compatible.append(f"{topic}.{name}: now optional")
                elif b["required"] and not a["required"]:
                    incompatible.append(f"{topic}.{name}: now required (older events lack it)")
    return compatible, incompatible
