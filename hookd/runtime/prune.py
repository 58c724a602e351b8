"""The maintenance schedule of ``hookd serve`` and ``hookd worker``: every
``HOOKD_PRUNE_EVERY_S``, prune as ``hookd prune`` does; and, on PostgreSQL, whatever
that setting, keep the partitions of ``events`` made ahead and the statistics of the
busy tables fresh.

Every process that runs it looks at the database once a minute (or every
``HOOKD_PRUNE_EVERY_S``, if shorter): when the last prune, by any process, finished
longer ago than that, it takes the prune lease and prunes. So a fleet of receivers
and workers prunes about once per period, one process at a time, and a process that
dies while pruning leaves a lease that runs out (``store.retention.lease.LEASE_S``).

At start and then once a minute it also creates the day partitions of ``events`` that
are missing (``store.retention.partition_create.ensure``: a catalog read when none is) and analyzes
the tables whose statistics went stale (``store.retention.analyze``: nothing while autovacuum
keeps up). Both are cheap when there is nothing to do, and safe in many processes
at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import tasks
from hookd.ops import prune_sources
from hookd.sources import Sources
from store.ids import worker_id
from store.retention import analyze, partition_create
from store.retention import lease as prune_lease

log = logging.getLogger("hookd.prune")

# The longest time between two looks at whether a prune is due; and between two
# rounds of partitions and statistics.
LOOK_S = 60.0
# How long the start waits for the partitions to be made before going on without.
START_S = 10.0


class PruneSchedule:
    def __init__(self, engine: AsyncEngine, sources: Sources, every_s: float) -> None:
        self._engine = engine
        self._sources = sources
        self._every_s = every_s
        self._owner = worker_id()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # Partitions first: a day without one goes to the default partition.
        try:
            await asyncio.wait_for(partition_create.ensure(self._engine), START_S)
        except Exception as exc:  # the loop tries again; inserts never fail meanwhile
            log.warning("partitions not checked at start", extra={"error": type(exc).__name__})
        self._task = asyncio.create_task(self._loop(), name="hookd-prune-schedule")

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop now: a prune in progress ends after its current batch (within
        ``grace_s``, else it is cancelled); either way it gives its lease back."""
        if self._task is None:
            return
        self._stop.set()
        await tasks.finish(self._task, grace_s)
        self._task = None

    async def _loop(self) -> None:
        look_s = min(self._every_s, LOOK_S) if self._every_s > 0 else LOOK_S
        maintained = time.monotonic()
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), look_s)
            if self._stop.is_set():
                return
            if time.monotonic() - maintained >= LOOK_S:
                maintained = time.monotonic()
                try:
                    await partition_create.ensure(self._engine)
                    await analyze.analyze_stale(self._engine)
                except Exception as exc:  # the database may be away: the next round tries
                    log.warning("maintenance failed", extra={"error": type(exc).__name__})
            if self._every_s <= 0:
                continue
            try:
                await self._once()
            except Exception as exc:  # the database may be away: the next look tries again
                log.warning("scheduled prune failed", extra={"error": type(exc).__name__})

    async def _once(self) -> None:
        now = datetime.now(UTC)
        due_before = now - timedelta(seconds=self._every_s)
        last = await prune_lease.last_finished(self._engine)
        if last is not None and last >= due_before:
            return  # this or another process pruned within the period
        done = await prune_sources(
            self._engine, self._sources, owner=self._owner, stop=self._stop, due_before=due_before
        )
        if done.lease_held:
            return
        for source, counts in done.counts.items():
            if counts.total():
                log.info("pruned", extra={"source": source, **counts.as_dict()})
