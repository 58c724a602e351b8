"""The bulk operations runner of ``hookd serve`` and ``hookd worker``.

Every process that runs it looks at the database every ``LOOK_S`` (and at once when
this process recorded one) for operations no runner holds: queued ones, and those
whose runner stopped (it gives its lease back) or died (its lease runs out,
``HOOKD_OPERATION_LEASE_S`` after its last batch). It runs them one at a time; the
lease lets one process run an operation, and a fleet shares the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import tasks
from hookd.ops import EventOps, OperationOps
from hookd.settings import Settings
from hookd.sources import Sources

log = logging.getLogger("hookd.operations")

# The longest time between two looks for operations to run.
LOOK_S = 2.0


def operations_of(
    settings: Settings,
    engine: AsyncEngine,
    sources: Sources,
    events: EventOps,
    *,
    on_created: Callable[[], None] | None = None,
) -> OperationOps:
    """Bulk operations as the settings size them (``HOOKD_OPERATION_*``); ``on_created``
    is called after one is recorded (see ``scheduled_operations``)."""
    return OperationOps(
        engine,
        sources,
        events,
        batch=settings.operation_batch,
        lease_s=settings.operation_lease_s,
        on_created=on_created,
    )


class OperationSchedule:
    """Runs the operations no runner holds, one at a time: a look every ``look_s``, and
    at once when ``look_now`` is set (its own event unless given: set only to stop)."""

    def __init__(
        self,
        operations: OperationOps,
        look_now: asyncio.Event | None = None,
        look_s: float = LOOK_S,
    ) -> None:
        self._operations = operations
        self._look_s = look_s
        self._stop = asyncio.Event()
        self._now = asyncio.Event() if look_now is None else look_now
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="hookd-operations")

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop now: an operation in progress stops after its current batch (within
        ``grace_s``, else it is cancelled) and gives its lease back for another process."""
        if self._task is None:
            return
        self._stop.set()
        self._now.set()
        await tasks.finish(self._task, grace_s)
        self._task = None

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                for operation_id in await self._operations.waiting():
                    if self._stop.is_set():
                        return
                    await self._operations.run(operation_id, self._stop)
            except Exception as exc:  # the database may be away: the next look tries again
                log.warning("operations look failed", extra={"error": type(exc).__name__})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._now.wait(), self._look_s)
            self._now.clear()


def scheduled_operations(
    settings: Settings, engine: AsyncEngine, sources: Sources, events: EventOps
) -> tuple[OperationOps, OperationSchedule]:
    """Bulk operations and their schedule in this process: one these operations record
    (from the API, the admin UI) is looked for at once, not at the next look."""
    look_now = asyncio.Event()
    operations = operations_of(settings, engine, sources, events, on_created=look_now.set)
    return operations, OperationSchedule(operations, look_now)
