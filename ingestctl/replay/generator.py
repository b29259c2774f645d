"""A realistic synthetic stream of all four event types, deterministic for a given seed.

Customers browse in sessions (page views, sometimes add-to-cart, sometimes checkout); a
checkout places an order, which is paid a little later (most payments authorized, some
failed); a few orders are refunded 5 to 30 minutes later. Sessions start as a Poisson
process sized so that the whole stream averages ``rate`` events per second of event time.

With the same ``seed`` and ``start`` the stream is identical, event ids included.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ingestctl.replay.model import SourceEvent

#: Roughly Olist's mix of payment types.
_METHODS = (("credit_card", 0.72), ("boleto", 0.19), ("voucher", 0.06), ("debit_card", 0.03))
_CURRENCIES = (("BRL", 0.8), ("EUR", 0.1), ("USD", 0.1))
_AVG_EVENTS_PER_SESSION = 6.0
#: Warm-up before `start`: at most 15 minutes of event time, at most 20,000 sessions.
_WARM_UP_S = 900.0
_WARM_UP_SESSIONS = 20_000


def _pick(rng: random.Random, weighted: tuple[tuple[str, float], ...]) -> str:
    return rng.choices([v for v, _ in weighted], weights=[w for _, w in weighted])[0]


#: Adds one event: ``push(event time, event type, payload)``.
Push = Callable[[datetime, str, dict[str, Any]], None]
#: Share of paid orders refunded, 5 to 30 minutes after the payment.
REFUND_RATE = 0.05


def browse(
    rng: random.Random, push: Push, customer: str, session_id: str, at: datetime
) -> datetime | None:
    """One browsing session of ``customer`` from ``at``: 1-6 page views 5-90 s apart, then
    (half the time) an add-to-cart, then (60 % of those) a checkout.

    :returns: the checkout's time, or None when the session ended without one.
    """
    when = at
    product = ""
    for _ in range(rng.randint(1, 6)):
        product = f"gp{rng.randint(1, 400):04d}"
        push(
            when,
            "customer_activity",
            {
                "customer_id": customer,
                "activity": "page_view",
                "session_id": session_id,
                "url": f"/product/{product}",
                "product_id": product,
            },
        )
        when += timedelta(seconds=rng.uniform(5, 90))
    if rng.random() > 0.5:
        return None
    push(
        when,
        "customer_activity",
        {
            "customer_id": customer,
            "activity": "add_to_cart",
            "session_id": session_id,
            "product_id": product,
        },
    )
    if rng.random() > 0.6:
        return None
    when += timedelta(seconds=rng.uniform(10, 120))
    push(
        when,
        "customer_activity",
        {
            "customer_id": customer,
            "activity": "checkout",
            "session_id": session_id,
            "url": "/checkout",
        },
    )
    return when


def maybe_refund(rng: random.Random, push: Push, paid: datetime, order: dict[str, Any]) -> None:
    """Refund ``order`` (``order_id``, ``customer_id``, ``currency``, ``total``) in full
    5 to 30 minutes after ``paid``, with probability :data:`REFUND_RATE`."""
    if rng.random() < REFUND_RATE:
        push(
            paid + timedelta(minutes=rng.uniform(5, 30)),
            "refund",
            {
                "refund_id": f"{order['order_id']}-r1",
                "order_id": order["order_id"],
                "customer_id": order["customer_id"],
                "amount": order["total"],
                "currency": order["currency"],
                "reason": "customer_request",
            },
        )


def companion_events(events: Iterable[SourceEvent], *, seed: int) -> list[SourceEvent]:
    """Customer activity and refunds for the customers of a replayed source that has
    neither (Olist): before each placed order a browsing session of its customer
    (:func:`browse`, starting 3-10 minutes before the order; a long one can run past it),
    and after each authorized payment a refund with
    probability :data:`REFUND_RATE`. Deterministic for ``seed``; event ids derive from
    ``companion:<seed>:<n>``.

    :param events: the source's events (``order_placed`` and ``payment`` are used).
    :returns: the new events only, in event-time order.
    """
    rng = random.Random(seed)
    made: list[SourceEvent] = []

    def push(when: datetime, event_type: str, payload: dict[str, Any]) -> None:
        made.append(SourceEvent(when, event_type, payload, f"companion:{seed}:{len(made)}"))

    orders: dict[str, dict[str, Any]] = {}
    paid: set[str] = set()  # one refund decision per order, whatever its payment count
    for event in events:
        payload = event.payload
        if event.event_type == "order_placed" and payload["order_id"] not in orders:
            orders[payload["order_id"]] = payload
            start = event.event_time - timedelta(minutes=rng.uniform(3, 10))
            browse(rng, push, str(payload["customer_id"]), f"c{seed}-{len(made)}", start)
        elif event.event_type == "payment" and payload.get("status") == "authorized":
            if payload["order_id"] in paid:
                continue
            paid.add(payload["order_id"])
            order = {
                "order_id": payload["order_id"],
                "customer_id": payload["customer_id"],
                "currency": payload["currency"],
                "total": payload["amount"],
            }
            maybe_refund(rng, push, event.event_time, order)
    return sorted(made, key=lambda e: e.event_time)


@dataclass(frozen=True)
class GeneratedEvents:
    """The ``count`` events of :func:`generate_events` (same parameters), made as they are
    read: a stream of millions holds one event's memory at a time, not all of them (a list
    of 5M held 3.2 GB before the first was sent). Each iteration yields the same events.

    :raises ValueError: see :func:`generate_events` (when iterated).
    """

    count: int
    seed: int
    start: datetime
    rate: float = 50.0

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[SourceEvent]:
        return generate_events(self.count, seed=self.seed, start=self.start, rate=self.rate)


def generate_events(
    count: int, *, seed: int, start: datetime, rate: float = 50.0, customers: int = 500
) -> Iterator[SourceEvent]:
    """Yield ``count`` events in event-time order.

    :param count: events to yield.
    :param seed: random seed; same seed and start -> same stream.
    :param start: event time of the stream's beginning (timezone-aware).
    :param rate: mean events per second of event time.
    :param customers: size of the customer pool.
    :raises ValueError: a non-positive count, rate or customer pool, or a naive ``start``.
    """
    if count < 0 or rate <= 0 or customers <= 0:
        raise ValueError("count must be >= 0, rate and customers > 0")
    if start.tzinfo is None:
        raise ValueError("start must be timezone-aware")
    rng = random.Random(seed)
    pending: list[tuple[datetime, int, SourceEvent]] = []
    seq = 0
    session_rate = rate / _AVG_EVENTS_PER_SESSION

    def push(when: datetime, event_type: str, payload: dict[str, object]) -> None:
        nonlocal seq
        seq += 1
        ref = f"generator:{seed}:{seq}"
        heapq.heappush(pending, (when, seq, SourceEvent(when, event_type, payload, ref)))

    def session(at: datetime) -> None:
        customer = f"gc{rng.randint(1, customers):05d}"
        checkout = browse(rng, push, customer, f"s{seed}-{seq}", at)
        if checkout is None:
            return
        when = checkout
        order_id = f"go{seed}-{seq:08d}"
        currency = _pick(rng, _CURRENCIES)
        lines: list[dict[str, Any]] = [
            {
                "product_id": f"gp{rng.randint(1, 400):04d}",
                "seller_id": f"gs{rng.randint(1, 60):03d}",
                "quantity": rng.randint(1, 3),
                "price": round(rng.uniform(5, 400), 2),
                "freight": round(rng.uniform(0, 40), 2),
            }
            for _ in range(rng.randint(1, 3))
        ]
        total = round(sum(i["quantity"] * i["price"] + i["freight"] for i in lines), 2)
        order = {"order_id": order_id, "customer_id": customer, "currency": currency}
        push(
            when + timedelta(seconds=2),
            "order_placed",
            order | {"status": "created", "items": lines, "total": total},
        )
        paid = when + timedelta(seconds=rng.uniform(5, 60))
        authorized = rng.random() < 0.92
        push(
            paid,
            "payment",
            {
                "payment_id": f"{order_id}-1",
                "order_id": order_id,
                "customer_id": customer,
                "method": _pick(rng, _METHODS),
                "installments": rng.choice([1, 1, 1, 2, 3, 6, 10]),
                "amount": total,
                "currency": currency,
                "status": "authorized" if authorized else "failed",
            },
        )
        if authorized:
            maybe_refund(rng, push, paid, order | {"total": total})

    # Start sessions before `start` so that the stream begins in a steady state (sessions
    # under way, orders being paid) rather than with a burst of first page views.
    clock = start - timedelta(seconds=min(_WARM_UP_S, _WARM_UP_SESSIONS / session_rate))
    emitted = 0
    while emitted < count:
        while not pending or pending[0][0] > clock:
            session(clock)
            clock += timedelta(seconds=rng.expovariate(session_rate))
        event = heapq.heappop(pending)[2]
        if event.event_time >= start:
            yield event
            emitted += 1
