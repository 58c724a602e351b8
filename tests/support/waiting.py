"""Wait until something is so, or fail saying what was last seen.

Processes, servers and workers do their work in their own time, so a test polls for the
outcome. Hand-written loops each got the deadline arithmetic, the sleep and the failure
message slightly differently; these two functions do it once. Anything the predicate
asserts (``worker.alive()``, say) fails at once, not at the deadline.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")

# What to say on timeout: a string, or a callable (sync or async) called only then, so a
# log file is read or a process's output awaited once, when it is needed.
Message = str | Callable[[], object] | None


def _failure(timeout_s: float, last: object, said: object) -> AssertionError:
    head = f"not so after {timeout_s:g} s (last value: {last!r})"
    return AssertionError(head if said is None else f"{head}: {said}")


@overload
async def wait_for(
    predicate: Callable[[], Awaitable[T]],
    *,
    timeout_s: float,
    interval_s: float = 0.05,
    message: Message = None,
) -> T: ...


@overload
async def wait_for(
    predicate: Callable[[], T],
    *,
    timeout_s: float,
    interval_s: float = 0.05,
    message: Message = None,
) -> T: ...


async def wait_for(
    predicate: Callable[[], object],
    *,
    timeout_s: float,
    interval_s: float = 0.05,
    message: Message = None,
) -> object:
    """Call ``predicate`` (sync or async) every ``interval_s`` until it returns something
    truthy, and return that; after ``timeout_s`` raise AssertionError with ``message``
    and the last value. The first call is immediate."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            said = message() if callable(message) else message
            if inspect.isawaitable(said):
                said = await said
            raise _failure(timeout_s, value, said)
        await asyncio.sleep(interval_s)


def wait_for_sync(
    predicate: Callable[[], T],
    *,
    timeout_s: float,
    interval_s: float = 0.05,
    message: str | Callable[[], object] | None = None,
) -> T:
    """``wait_for`` for tests that are not async: the same contract, ``time.sleep`` between
    calls, and ``predicate`` and ``message`` must be plain functions."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _failure(timeout_s, value, message() if callable(message) else message)
        time.sleep(interval_s)
