"""Read-only queries for what an operator watches beside dead letters: events stuck in
``processing`` past their lease, events that keep failing (many attempts), and a
sample of stored events to try a handler on (``hookd try``).

Nothing here changes a row.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store.models import EVENTS
from store.rows import EVENT_COLUMNS, EVENT_COLUMNS_NO_BODY, EventRow
from store.status import RUNNABLE_STATUSES, EventStatus

# Not finished: what "still being tried" means for the many-attempts list.
UNFINISHED = (*RUNNABLE_STATUSES, EventStatus.PROCESSING)


def _page(
    query: sa.Select[tuple[object, ...]],
    source: str | None,
    before_id: str | None,
    limit: int,
) -> sa.Select[tuple[object, ...]]:
    """Newest first, keyset-paged on the id, like ``store.intake.events.list_events``."""
    if source is not None:
        query = query.where(EVENTS.c.source == source)
    if before_id is not None:
        query = query.where(EVENTS.c.id < before_id)
    return query.order_by(EVENTS.c.id.desc()).limit(limit)


async def stuck_events(
    conn: AsyncConnection,
    now: datetime,
    *,
    source: str | None = None,
    limit: int = 50,
    before_id: str | None = None,
) -> list[EventRow]:
    """Events still ``processing`` whose lease ended before ``now``: their worker died
    or stalled, and no other worker has taken them over yet. Bodies are not read."""
    query = sa.select(*EVENT_COLUMNS_NO_BODY).where(
        EVENTS.c.status == EventStatus.PROCESSING, EVENTS.c.lease_expires_at < now
    )
    return list(map(EventRow._make, await conn.execute(_page(query, source, before_id, limit))))


async def retried_events(
    conn: AsyncConnection,
    min_attempts: int,
    *,
    source: str | None = None,
    limit: int = 50,
    before_id: str | None = None,
) -> list[EventRow]:
    """Events not finished yet (pending, retrying, processing) that were attempted at
    least ``min_attempts`` times. Bodies are not read."""
    query = sa.select(*EVENT_COLUMNS_NO_BODY).where(
        EVENTS.c.status.in_(UNFINISHED), EVENTS.c.attempts >= min_attempts
    )
    return list(map(EventRow._make, await conn.execute(_page(query, source, before_id, limit))))


def like_pattern(glob: str) -> str:
    """A shell-style glob (``*``, ``?``) as a LIKE pattern with ``\\`` as its escape."""
    out = []
    for char in glob:
        if char in "%_\\":
            out.append("\\" + char)
        elif char == "*":
            out.append("%")
        elif char == "?":
            out.append("_")
        else:
            out.append(char)
    return "".join(out)


async def sample_events(
    conn: AsyncConnection,
    *,
    source: str | None = None,
    type_glob: str | None = None,
    since: datetime | None = None,
    limit: int = 10,
) -> list[EventRow]:
    """The newest ``limit`` stored events that still have a body, received at or after
    ``since``, of ``source``, whose type matches ``type_glob``; bodies included."""
    query = sa.select(*EVENT_COLUMNS).where(EVENTS.c.body.is_not(None))
    if type_glob is not None:
        query = query.where(EVENTS.c.type.like(like_pattern(type_glob), escape="\\"))
    if since is not None:
        query = query.where(EVENTS.c.received_at >= since)
    return list(map(EventRow._make, await conn.execute(_page(query, source, None, limit))))
