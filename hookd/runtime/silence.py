"""The silence watch's schedule (``reconcile.silence``), kept by every process that
keeps the prune schedule (each receiver of ``hookd serve``, ``hookd worker``): every
``look_s`` one process of the cluster (a lease, ``maintenance_state`` task
``silence``) judges the windows that ended. ``look_s`` is a quarter of the shortest
``[sources.expect] window_s``, between ``MIN_LOOK_S`` and ``MAX_LOOK_S``; nothing runs
without a source with the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import tasks
from hookd.sources import Sources
from reconcile import silence
from store.ids import worker_id
from store.retention import lease

log = logging.getLogger("hookd.silence")

TASK = "silence"
MIN_LOOK_S = 0.25
MAX_LOOK_S = 30.0
# A pass's lease: a process that died judging delays the next by this long.
LEASE_S = 60.0


def look_s(sources: Sources) -> float | None:
    windows = [expect.window_s for _, expect in silence.watched(sources)]
    if not windows:
        return None
    return max(MIN_LOOK_S, min(MAX_LOOK_S, min(windows) / 4))


class SilenceSchedule:
    def __init__(self, engine: AsyncEngine, sources: Sources) -> None:
        self._engine = engine
        self._sources = sources
        self._look_s = look_s(sources)
        self._owner = worker_id()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._look_s is not None:
            self._task = asyncio.create_task(self._loop(), name="hookd-silence")

    async def stop(self, grace_s: float = 5.0) -> None:
        if self._task is None:
            return
        self._stop.set()
        await tasks.finish(self._task, grace_s)
        self._task = None

    async def _loop(self) -> None:
        assert self._look_s is not None
        while not self._stop.is_set():
            try:
                await self.once(datetime.now(UTC))
            except Exception as exc:  # the database away: the next look tries again
                log.warning("silence not judged", extra={"error": type(exc).__name__})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._look_s)

    async def once(self, now: datetime) -> silence.Watched | None:
        """A pass if no process made one within ``look_s`` (None: another did, or
        holds the lease)."""
        every = self._look_s or MIN_LOOK_S
        due_before = now - timedelta(seconds=every * 0.9)
        taken = await lease.acquire(
            self._engine, self._owner, LEASE_S, now, due_before=due_before, task=TASK
        )
        if not taken:
            return None
        finished = None
        try:
            done = await silence.watch(self._engine, self._sources, now)
            finished = now
        finally:
            await asyncio.shield(
                lease.release(self._engine, self._owner, finished_at=finished, task=TASK)
            )
        for name, count in done.silent.items():
            log.warning("source silent", extra={"source": name, "windows": count})
        for name in done.ended:
            log.info("source heard from again", extra={"source": name})
        return done
