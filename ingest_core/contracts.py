"""Event contracts: the one place that says what an event on each topic looks like.

Kafka values are UTF-8 JSON objects; the Kafka key is the entity id (order id for orders,
payments and refunds; customer id for customer activity) so that one entity's events keep
their order inside a partition.

Envelope (every event):

=================  =========  ==========================================================
field              type       rule
=================  =========  ==========================================================
``event_id``       string     required; the business id and deduplication key
``event_type``     string     required; one of :data:`EVENT_TYPES`
``event_time``     string     required; ISO-8601 *with* an offset; stored as UTC timestamp
``schema_version`` integer    required; :data:`SCHEMA_VERSION` (1)
=================  =========  ==========================================================

Payloads by event type (``?`` = optional, may be null or absent):

* ``order_placed``, ``order_status_changed``, ``order_canceled`` (topic ``orders``):
  ``order_id``, ``customer_id?``, ``status``, ``items?`` (array of ``product_id``,
  ``seller_id?``, ``quantity?``, ``price``, ``freight?``), ``total``, ``currency``.
  ``customer_id`` is null for guest orders (a third of UCI Online Retail lines have none).
* ``payment`` (topic ``payments``): ``payment_id``, ``order_id``, ``customer_id?``,
  ``method`` (:data:`PAYMENT_METHODS`), ``installments?``, ``amount``, ``currency``,
  ``status`` (``authorized`` or ``failed``).
* ``refund`` (topic ``refunds``): ``refund_id``, ``order_id?`` (UCI cancellations do not
  reference their invoice), ``customer_id?``, ``amount`` (positive), ``currency``, ``reason?``.
* ``customer_activity`` (topic ``customer_activity``): ``customer_id``, ``activity``
  (:data:`ACTIVITIES`), ``session_id?``, ``url?``, ``product_id?``.

Money is a JSON number with at most 2 decimals, stored as ``decimal(18,2)``; currency codes
are ISO 4217 (stored upper-case). Fields a payload does not declare are kept in Silver's
``_rescued_data`` column, never dropped.

Imports neither pyspark nor Airflow: the DDL strings here become Spark schemas in
:func:`spark_jobs.transforms.silver.payload_schema`.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = 1
ENVELOPE_FIELDS = ("event_id", "event_type", "event_time", "schema_version")

#: Olist's payment types plus debit_card; ``not_defined`` is Olist's own value for a payment
#: whose method was not recorded (one row of the 3,000-order sample).
PAYMENT_METHODS = frozenset({"credit_card", "boleto", "voucher", "debit_card", "not_defined"})
PAYMENT_STATUSES = frozenset({"authorized", "failed"})
ACTIVITIES = frozenset({"page_view", "add_to_cart", "checkout"})
#: ISO 4217 codes the platform accepts (the currencies of its markets and datasets).
CURRENCIES = frozenset(
    {"BRL", "GBP", "EUR", "USD", "CHF", "SEK", "NOK", "DKK", "PLN", "AUD", "CAD", "JPY"}
)


@dataclass(frozen=True)
class EventContract:
    """The contract of one event type.

    :param event_type: value of the envelope's ``event_type``.
    :param topic: Kafka topic the events travel on.
    :param key_field: payload field used as the Kafka key.
    :param required: payload fields that must be present and non-null.
    :param money_fields: fields that are money: non-negative, ``decimal(18,2)``.
    :param silver_table: the Silver table the events land in.
    """

    event_type: str
    topic: str
    key_field: str
    required: tuple[str, ...]
    money_fields: tuple[str, ...]
    silver_table: str


_ORDER = dict(
    topic="orders",
    key_field="order_id",
    required=("order_id", "status", "total", "currency"),
    money_fields=("total",),
    silver_table="silver_orders",
)
CONTRACTS: dict[str, EventContract] = {
    c.event_type: c
    for c in (
        EventContract("order_placed", **_ORDER),  # type: ignore[arg-type]
        EventContract("order_status_changed", **_ORDER),  # type: ignore[arg-type]
        EventContract("order_canceled", **_ORDER),  # type: ignore[arg-type]
        EventContract(
            "payment",
            topic="payments",
            key_field="order_id",
            required=("payment_id", "order_id", "method", "amount", "currency", "status"),
            money_fields=("amount",),
            silver_table="silver_payments",
        ),
        EventContract(
            "refund",
            topic="refunds",
            key_field="refund_id",
            required=("refund_id", "amount", "currency"),
            money_fields=("amount",),
            silver_table="silver_refunds",
        ),
        EventContract(
            "customer_activity",
            topic="customer_activity",
            key_field="customer_id",
            required=("customer_id", "activity"),
            money_fields=(),
            silver_table="silver_customer_activity",
        ),
    )
}
EVENT_TYPES = frozenset(CONTRACTS)
TOPICS: tuple[str, ...] = tuple(dict.fromkeys(c.topic for c in CONTRACTS.values()))

#: Spark DDL of each payload (envelope fields excluded), by topic. Money is parsed as
#: decimal(18,2); timestamps arrive as strings and are converted to UTC by the Silver job.
PAYLOAD_DDL: dict[str, str] = {
    "orders": (
        "order_id string, customer_id string, status string, "
        "items array<struct<product_id: string, seller_id: string, quantity: int, "
        "price: decimal(18,2), freight: decimal(18,2)>>, "
        "total decimal(18,2), currency string"
    ),
    "payments": (
        "payment_id string, order_id string, customer_id string, method string, "
        "installments int, amount decimal(18,2), currency string, status string"
    ),
    "refunds": (
        "refund_id string, order_id string, customer_id string, amount decimal(18,2), "
        "currency string, reason string"
    ),
    "customer_activity": (
        "customer_id string, activity string, session_id string, url string, product_id string"
    ),
}
ENVELOPE_DDL = "event_id string, event_type string, event_time string, schema_version int"

#: Identifier fields by topic (envelope and payload): strings that may not contain control
#: characters (Unicode category Cc: U+0000-U+001F, U+007F-U+009F). JSON can carry them
#: escaped (``"c\u0000"`` is valid JSON), and an id with a NUL in it joins with nothing and
#: prints as something else; Silver quarantines such a record as ``control_character``.
ID_FIELDS: dict[str, tuple[str, ...]] = {
    "orders": ("event_id", "order_id", "customer_id"),
    "payments": ("event_id", "payment_id", "order_id", "customer_id"),
    "refunds": ("event_id", "refund_id", "order_id", "customer_id"),
    "customer_activity": ("event_id", "customer_id", "session_id", "product_id"),
}
#: Identifier fields of each element of an order's ``items`` (same rule as :data:`ID_FIELDS`).
ITEM_ID_FIELDS = ("product_id", "seller_id")


def contract_for(event_type: str) -> EventContract:
    """Return the contract of ``event_type``.

    :raises KeyError: unknown event type; the message lists the known ones.
    """
    try:
        return CONTRACTS[event_type]
    except KeyError:
        raise KeyError(f"unknown event type {event_type!r}; known: {sorted(CONTRACTS)}") from None
