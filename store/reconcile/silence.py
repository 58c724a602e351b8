"""The silence watch's state (``source_watch``) and reads: webhooks counted per window,
and a judged window recorded with the state that says it was judged.

A window is judged in one transaction: the state's ``judged_until`` moves from the
window's start to its end only if it still is at the start (another process that
judged it first leaves nothing to do), and a silent window goes into the coverage
ledger in the same transaction: as a new interval, or by extending the silence's last
one when the window before was silent too (``silent_row``).
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store.ids import id_floor, new_id
from store.models import EVENTS, RECONCILE_COVERAGE, SOURCE_WATCH
from store.status import CoverageOutcome, EventOrigin


class WatchRow(NamedTuple):
    source: str
    window_s: int
    started_at: datetime
    judged_until: datetime
    silent_since: datetime | None
    silent_row: str | None


WATCH_COLUMNS = [SOURCE_WATCH.c[name] for name in WatchRow._fields]


class Judged(NamedTuple):
    """What a window was found to be."""

    silent: bool
    received: int  # webhooks counted (at most what it took to decide)
    needed: int  # what it had to have


async def get(conn: AsyncConnection, source: str) -> WatchRow | None:
    row = (
        await conn.execute(sa.select(*WATCH_COLUMNS).where(SOURCE_WATCH.c.source == source))
    ).one_or_none()
    return None if row is None else WatchRow._make(row)


async def all_states(conn: AsyncConnection) -> dict[str, WatchRow]:
    rows = await conn.execute(sa.select(*WATCH_COLUMNS))
    return {row.source: WatchRow._make(row) for row in rows}


async def begin(
    conn: AsyncConnection, source: str, window_s: int, start: datetime, now: datetime
) -> None:
    """The watch of ``source`` (re)started at ``start``: the windows from there on are
    judged. A state judged with another window length is replaced."""
    await conn.execute(sa.delete(SOURCE_WATCH).where(SOURCE_WATCH.c.source == source))
    await conn.execute(
        sa.insert(SOURCE_WATCH).values(
            source=source,
            window_s=window_s,
            started_at=start,
            judged_until=start,
            silent_since=None,
            silent_row=None,
            updated_at=now,
        )
    )


async def webhooks(
    conn: AsyncConnection, source: str, start: datetime, end: datetime, limit: int | None
) -> int:
    """The webhooks of ``source`` received in ``[start, end)``, counted up to ``limit``
    (enough to decide: a busy source's window is not read whole). A window is a range
    of ids (ULIDs minted at receipt) over ``ix_events_source_id``; what reconciliation
    stored is not the sender being heard from, and is left out."""
    low = id_floor(int(start.timestamp() * 1000))
    high = id_floor(int(end.timestamp() * 1000))
    inner = sa.select(sa.literal(1).label("one")).where(
        EVENTS.c.source == source,
        EVENTS.c.id >= low,
        EVENTS.c.id < high,
        EVENTS.c.origin == EventOrigin.WEBHOOK,
    )
    if limit is not None:
        inner = inner.limit(limit)
    counted = await conn.execute(sa.select(sa.func.count()).select_from(inner.subquery()))
    return int(counted.scalar_one())


async def judge(
    conn: AsyncConnection,
    state: WatchRow,
    end: datetime,
    *,
    verdict: Judged | None,
    reason: str,
    now: datetime,
) -> WatchRow | None:
    """The window ``[state.judged_until, end)`` judged ``verdict`` (None: outside the
    expected hours, passed over), recorded; the new state, or None when another process
    judged it first (nothing was written: roll the transaction back or leave it)."""
    start = state.judged_until
    silent_since, silent_row = state.silent_since, state.silent_row
    if verdict is None:
        silent_row = None  # the silence goes on, its next interval is another one
    elif not verdict.silent:
        silent_since = silent_row = None
    else:
        silent_since = silent_since or start
        extended = 0
        if silent_row is not None:
            extended = (
                await conn.execute(
                    sa.update(RECONCILE_COVERAGE)
                    .where(
                        RECONCILE_COVERAGE.c.id == silent_row,
                        RECONCILE_COVERAGE.c.end_at == start,
                    )
                    .values(end_at=end, reason=reason, recorded_at=now)
                )
            ).rowcount
        if not extended:
            silent_row = new_id()
            await conn.execute(
                sa.insert(RECONCILE_COVERAGE).values(
                    id=silent_row,
                    source=state.source,
                    run_id=None,
                    start_at=start,
                    end_at=end,
                    outcome=CoverageOutcome.SILENT,
                    repaired=0,
                    reason=reason,
                    recorded_at=now,
                )
            )
    moved = await conn.execute(
        sa.update(SOURCE_WATCH)
        .where(SOURCE_WATCH.c.source == state.source, SOURCE_WATCH.c.judged_until == start)
        .values(judged_until=end, silent_since=silent_since, silent_row=silent_row, updated_at=now)
    )
    if not moved.rowcount:
        return None
    return state._replace(judged_until=end, silent_since=silent_since, silent_row=silent_row)


async def heard(conn: AsyncConnection, state: WatchRow, now: datetime) -> WatchRow | None:
    """The silence of ``state`` ended: the window under way already has what it needs.
    None when the state moved meanwhile."""
    moved = await conn.execute(
        sa.update(SOURCE_WATCH)
        .where(
            SOURCE_WATCH.c.source == state.source,
            SOURCE_WATCH.c.judged_until == state.judged_until,
        )
        .values(silent_since=None, silent_row=None, updated_at=now)
    )
    if not moved.rowcount:
        return None
    return state._replace(silent_since=None, silent_row=None)
