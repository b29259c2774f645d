"""ingest_core.waiting.wait_until: the value, the timeout's message, exceptions at once."""

from __future__ import annotations

import time

import pytest

from ingest_core.waiting import wait_until

pytestmark = pytest.mark.unit


def test_returns_the_first_truthy_value() -> None:
    calls = iter([None, 0, "ready"])
    assert wait_until(lambda: next(calls), timeout_s=5, interval_s=0.01, what="x") == "ready"


def test_timeout_names_what_and_how_long() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"timed out after 0.3 s waiting for the broker"):
        wait_until(lambda: False, timeout_s=0.3, interval_s=0.05, what="the broker")
    assert 0.3 <= time.monotonic() - started < 2


def test_met_during_the_last_pause_is_not_a_timeout() -> None:
    deadline = time.monotonic() + 0.2
    assert wait_until(lambda: time.monotonic() > deadline, timeout_s=0.15, interval_s=0.1)


def test_an_exception_of_the_predicate_propagates_at_once() -> None:
    calls: list[int] = []

    def broken() -> bool:
        calls.append(1)
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        wait_until(broken, timeout_s=5, interval_s=0.01)
    assert len(calls) == 1
