"""One lifecycle for what a process starts and stops.

A ``Service`` has ``start()`` and ``stop()``; ``running`` starts services in the order
given and stops them in the reverse order, at the end or when a later one fails to
start. The classes of ``ingest``, ``processing``, ``reconcile`` and ``store`` keep their
own names for these calls (``close``, a ``start`` that is not a coroutine, none at all):
``Adapted`` makes a service of them where a process is composed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Protocol


class Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def _nothing() -> None:
    return None


class Adapted:
    """A service from another object's own calls: what stops (or closes) it, and what
    starts it, if anything does (each a coroutine function or a plain one)."""

    def __init__(
        self,
        stop: Callable[[], Awaitable[None] | None],
        start: Callable[[], Awaitable[None] | None] = _nothing,
    ) -> None:
        self._start = start
        self._stop = stop

    async def start(self) -> None:
        started = self._start()
        if started is not None:
            await started

    async def stop(self) -> None:
        stopped = self._stop()
        if stopped is not None:
            await stopped


@contextlib.asynccontextmanager
async def running(services: Iterable[Service]) -> AsyncIterator[None]:
    """Every service started, in order, for the body; then stopped, last first."""
    async with contextlib.AsyncExitStack() as stack:
        for service in services:
            await service.start()
            stack.push_async_callback(service.stop)
        yield
