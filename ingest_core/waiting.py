"""Waiting for a condition, on tenacity: the one polling loop of the platform.

:func:`wait_until` calls a predicate every ``interval_s`` seconds until it returns a truthy
value (returned) or ``timeout_s`` seconds have passed (:class:`TimeoutError` naming what was
awaited). The predicate is always called at least once, and once more at the end of the
timeout: a condition met just in time is not reported as a timeout. An exception from the
predicate propagates at once (it is a failure, not a "not yet").
:func:`accepts_connections` is the predicate for a server that should be listening.
"""

from __future__ import annotations

import operator
import socket
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float,
    interval_s: float = 0.5,
    what: str = "the condition",
) -> T:
    """Call ``predicate`` every ``interval_s`` seconds until it returns a truthy value.

    :param timeout_s: how long to wait, in seconds (0: ask once).
    :param interval_s: pause between two calls, in seconds.
    :param what: what is awaited, for the error message ("the broker to answer").
    :returns: the predicate's first truthy value.
    :raises TimeoutError: still falsy after ``timeout_s`` seconds; the message names
        ``what`` and the timeout ("timed out after 60 s waiting for <what>").
    :raises Exception: whatever the predicate raises, at once.
    """
    retrying = Retrying(
        retry=retry_if_result(operator.not_),
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(interval_s),
        reraise=True,
    )
    try:
        value = retrying(predicate)
    except RetryError:
        # Stopped by the deadline: one last look, so a condition met during the last pause
        # is not reported as a timeout.
        value = predicate()
        if not value:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}") from None
    return value


def accepts_connections(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether something accepts a TCP connection on ``host``:``port`` within ``timeout_s``
    seconds (the connection is closed at once)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def port_is_taken(port: int) -> bool:
    """Whether a TCP ``port`` of this machine is already bound by a listener on any local
    address (loopback, every IPv4 interface as ``0.0.0.0``, or IPv6 ``::``): binding it on
    every interface fails then. A port held only by connections in TIME_WAIT counts as free
    (``SO_REUSEADDR``, as servers such as uvicorn and gunicorn set it)."""
    families = [(socket.AF_INET, "0.0.0.0")]
    if socket.has_ipv6:
        families.append((socket.AF_INET6, "::"))
    for family, host in families:
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no such address family on this machine
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind((host, port))
            except OSError:
                return True
    return False
