"""Reconciliation as a service: what is due, the in-process scheduler, source views."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd import tasks
from hookd.sources import Source, Sources
from reconcile.poller import Outcome, Reconciler
from store.reconcile import coverage as ledger
from store.reconcile import runs as state
from store.rows import SourceStateRow
from store.status import CoverageOutcome

log = logging.getLogger("hookd.reconcile")

TICK_S = 5.0


def reconciled(sources: Sources) -> list[Source]:
    return [s for s in sources if s.config.reconcile is not None]


def is_due(current: SourceStateRow | None, now: datetime) -> bool:
    """Due for a scheduled run: never ran, or its next run is due; not disabled."""
    if current is None:
        return True
    return not current.disabled and (current.next_run_at is None or current.next_run_at <= now)


def is_leased(current: SourceStateRow | None, now: datetime) -> bool:
    """A run of the source holds its lease (in this process or another)."""
    return (
        current is not None
        and current.lease_owner is not None
        and current.lease_expires_at is not None
        and current.lease_expires_at > now
    )


async def run_due(reconciler: Reconciler, sources: Sources) -> list[Outcome]:
    """Run every source whose next run is due (or that never ran), one after another.

    A source whose lease another run holds is left to that run: every process that
    keeps the schedule (each ``hookd worker``, ``hookd serve`` without Redis) looks
    at the same sources, and the lease, not the schedule, says who runs one."""
    now = datetime.now(UTC)
    async with reconciler.engine.connect() as conn:
        states = await state.all_states(conn)
    outcomes = []
    for source in reconciled(sources):
        current = states.get(source.name)
        if not is_due(current, now) or is_leased(current, now):
            continue
        try:
            outcomes.append(await reconciler.run(source, trigger="schedule"))
        except Exception as exc:  # one source's trouble must not stop the others
            log.error(  # noqa: TRY400 - no traceback: it may quote SQL parameters
                "scheduled run crashed", extra={"source": source.name, "error": type(exc).__name__}
            )
    return outcomes


class Scheduler:
    """The in-process schedule of ``hookd serve`` when there is no Redis/worker."""

    def __init__(self, reconciler: Reconciler, sources: Sources, tick_s: float = TICK_S) -> None:
        self._reconciler = reconciler
        self._sources = sources
        self._tick_s = tick_s
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    async def start(self) -> None:
        if reconciled(self._sources):
            self._task = asyncio.create_task(self._loop(), name="hookd-reconcile-scheduler")

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop between runs; a run in progress gets ``grace_s`` to finish first."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), grace_s)
        await tasks.cancel(self._task)
        self._task = None

    async def _loop(self) -> None:
        while True:
            self._idle.clear()
            try:
                await run_due(self._reconciler, self._sources)
            except Exception as exc:  # the database may be away: try at the next tick
                log.warning("scheduler tick failed", extra={"error": type(exc).__name__})
            finally:
                self._idle.set()
            await asyncio.sleep(self._tick_s)


async def enable(engine: AsyncEngine, source: str, now: datetime | None = None) -> bool:
    now = now or datetime.now(UTC)
    async with engine.begin() as conn:
        await state.ensure_state(conn, source, now)
        await _record_disabled_window(conn, source, now)
        return await state.update_state(
            conn,
            source,
            None,
            disabled=False,
            disabled_reason=None,
            # When and by whom it was off: read them before this (the coverage
            # ledger's unchecked window ends now).
            disabled_at=None,
            disabled_by=None,
            auth_failures=0,
            error_count=0,
            next_run_at=now,
            updated_at=now,
        )


async def _record_disabled_window(conn: AsyncConnection, source: str, now: datetime) -> None:
    """A source enabled again was not checked from its cursor (where its last good run
    left off) until now: the coverage ledger says so. Runs from now on check that
    window again as far as the provider still keeps it; the rest stays a hole."""
    current = await state.get_state(conn, source)
    if current is None or not current.disabled:
        return
    start = None if current.cursor is None else datetime.fromtimestamp(current.cursor, UTC)
    start = start or await ledger.first_start(conn, source)
    if start is None:  # disabled before any run recorded anything: nothing was promised
        return
    await ledger.record(
        conn,
        source=source,
        start=start,
        end=now,
        outcome=CoverageOutcome.NOT_CHECKED,
        reason=f"reconciliation disabled: {current.disabled_reason or 'no reason recorded'}",
        now=now,
    )
