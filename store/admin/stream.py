"""Read-only queries behind the event stream (``GET /api/events:stream``, ``hookd
listen``): events in id order after a cursor, ids alone for the look-back re-read, and
the cursor that ``last=N`` starts from.

Nothing here changes a row.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store.admin.watch import like_pattern
from store.models import EVENTS
from store.rows import EVENT_COLUMNS, EventRow


def _matching(
    query: sa.Select[tuple[object, ...]], sources: Sequence[str], type_glob: str | None
) -> sa.Select[tuple[object, ...]]:
    if sources:
        query = query.where(EVENTS.c.source.in_(list(sources)))
    if type_glob is not None:
        query = query.where(EVENTS.c.type.like(like_pattern(type_glob), escape="\\"))
    return query


async def ids_between(
    conn: AsyncConnection,
    *,
    after: str,
    before: str,
    sources: Sequence[str],
    type_glob: str | None,
    limit: int,
) -> list[str]:
    """Up to ``limit`` ids of matching events above ``after`` and below ``before``,
    ascending: no body read (the look-back re-reads ids it has mostly sent already)."""
    query = sa.select(EVENTS.c.id).where(EVENTS.c.id > after, EVENTS.c.id < before)
    query = _matching(query, sources, type_glob).order_by(EVENTS.c.id).limit(limit)
    return [str(i) for i in (await conn.execute(query)).scalars()]


async def events_by_id(conn: AsyncConnection, ids: Sequence[str]) -> list[EventRow]:
    """The rows of ``ids`` with their bodies as stored, ascending by id (a row pruned
    meanwhile is simply absent)."""
    if not ids:
        return []
    query = sa.select(*EVENT_COLUMNS).where(EVENTS.c.id.in_(list(ids))).order_by(EVENTS.c.id)
    return list(map(EventRow._make, await conn.execute(query)))


async def cursor_before_last(
    conn: AsyncConnection, count: int, *, sources: Sequence[str], type_glob: str | None
) -> str:
    """The cursor after which exactly the newest ``count`` matching events lie: the id
    of the one just older than them, or ``""`` when there are no more than ``count``."""
    query = sa.select(EVENTS.c.id)
    query = _matching(query, sources, type_glob).order_by(EVENTS.c.id.desc())
    found = (await conn.execute(query.offset(count).limit(1))).scalar()
    return "" if found is None else str(found)
