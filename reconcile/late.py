"""Late deliveries, noted off the request path.

The receiver answers a duplicate at once and hands its (source, dedupe key) here
(``note``: no I/O, never blocks). One task writes what gathered, a batch per
transaction (``store.reconcile.coverage.record_late``): a key a reconcile run stored first is
marked late and counted on that run. A burst of duplicates (a provider retrying a
backlog) is a few statements, not one transaction per request queueing for the pool
in front of the answers. A batch that fails is tried again; what is still queued at
shutdown is written then. A process that dies loses the notes of its last moments:
those deliveries stay counted as missed only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import tasks
from store.reconcile import coverage as ledger

log = logging.getLogger("hookd.reconcile")

BATCH = 500
# Notes waiting beyond this many are dropped (and logged): memory stays bounded when
# the database is away for long.
MAX_QUEUED = 100_000
RETRY_S = 1.0
TRIES = 5


class LateNotes:
    def __init__(self, engine: AsyncEngine, *, retry_s: float = RETRY_S) -> None:
        self._engine = engine
        self._retry_s = retry_s
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue(MAX_QUEUED)
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    def note(self, source: str, dedupe_key: str) -> None:
        """A webhook of ``source`` was answered as a duplicate of ``dedupe_key``."""
        try:
            self._queue.put_nowait((source, dedupe_key))
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning(
                    "late-delivery notes dropped: too many waiting",
                    extra={"source": source, "dropped": self.dropped},
                )

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="hookd-late-notes")

    async def stop(self, grace_s: float = 5.0) -> None:
        """Write what is queued (within ``grace_s``), then stop."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace_s):
                await self._queue.join()
        await tasks.cancel(self._task)
        self._task = None

    async def _loop(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._write(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _write(self, batch: list[tuple[str, str]]) -> None:
        for attempt in range(1, TRIES + 1):
            try:
                async with self._engine.begin() as conn:
                    by_run = await ledger.record_late(conn, batch, datetime.now(UTC))
            except Exception as exc:  # the database may be away: try again shortly
                log.warning(
                    "could not record late deliveries",
                    extra={"notes": len(batch), "attempt": attempt, "error": type(exc).__name__},
                )
                if attempt < TRIES:
                    await asyncio.sleep(self._retry_s * attempt)
                continue
            for run_id, count in by_run.items():
                log.info(
                    "late deliveries of reconciled events", extra={"run_id": run_id, "late": count}
                )
            return
        log.error("late deliveries not recorded", extra={"notes": len(batch)})
