"""Source objects: per-object ordering of the events of a source with ``[sources.order]``,
and each object's latest known state (``source_objects``).

An event stamped with an object (``events.object_key``, at ingest: ``hookd.ordering``)
is never claimed by ``store.claims.claiming.claim_due`` (whose index holds none); ``claim``
here hands out, among the due events of each object, only the one of lowest
version (then lowest id), and only while no event of that object is being
processed. So one object's handlers run one at a time, in version order, whichever
worker claims, with or without Redis: the database decides.

An event older than the newest processed for its object (``source_objects.version``)
is marked ``superseded`` when its object is next claimed, without running, if its
source says ``stale = "supersede"``. An event of the same version as the newest
processed is not older: it runs (providers that stamp versions in whole seconds,
Stripe's ``created``, give two changes within a second the same one).

How the claim is safe on PostgreSQL: the candidates' objects are locked for the
claiming transaction (``pg_try_advisory_xact_lock``; an object another worker is
claiming right now is skipped, not waited for), and only then, in a later statement
and so on a snapshot taken after the lock, are they looked at again: another worker's
claim of the same object either committed before (its event shows as processing and
the object is skipped) or has not started. A stale event stored after the step that
supersedes is not handed out either: the pick skips events older than the object's
state, and the next claim supersedes them. On SQLite the claim is one ``UPDATE``
under the database's single writer (after the one that supersedes).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import dialect, queries
from store.delivery.destinations import paused_sources
from store.models import EVENTS, SOURCE_OBJECTS
from store.rows import EVENT_COLUMNS, SOURCE_OBJECT_COLUMNS, EventRow, SourceObjectRow
from store.status import RUNNABLE_STATUSES, EventStatus, sql_in

# The first key of the two-key advisory locks of objects ("hkob"): apart from any
# other user of advisory locks in the database.
LOCK_SPACE = 0x686B6F62

_NOW = sa.bindparam("now", type_=EVENTS.c.updated_at.type)
_RUNNABLE = sql_in("e.status", RUNNABLE_STATUSES)

SQL = queries.load("objects")
_STATUS = {
    "runnable": _RUNNABLE,
    "superseded": EventStatus.SUPERSEDED,
    "processing": EventStatus.PROCESSING,
}
LOCK_PG = sa.text(SQL["lock_pg"])
SUPERSEDE_PG = sa.text(SQL["supersede_pg"].format(**_STATUS)).bindparams(_NOW)
HEADS_PG = sa.text(SQL["heads_pg"].format(**_STATUS)).bindparams(_NOW)


class Superseded(NamedTuple):
    """An event a claim marked superseded, and the attempts it had used."""

    id: str
    source: str
    attempts: int


@dataclass(slots=True)
class Claimed:
    """What one claim of object events did: the events claimed, and those it marked
    superseded."""

    rows: list[EventRow] = field(default_factory=list)
    superseded: list[Superseded] = field(default_factory=list)


def _heads(
    now: datetime, limit: int, *, probes: bool = False, exclude: Collection[str] = ()
) -> sa.Select[Any]:
    """Due events that head their object (no due event of it of lower version, or the
    same version and a lower id) of an object none of whose events is being processed,
    in due order: at most one per object.

    ``probes`` (PostgreSQL): each ``NOT EXISTS`` as a probe of ``ix_events_object`` per
    candidate read in due order (``OFFSET 0`` keeps the planner from making them
    anti-joins), so the read stops at ``limit`` heads; as anti-joins, with a backlog,
    it would hash every due event of every object twice per claim."""
    e, busy, lower = EVENTS.alias("e"), EVENTS.alias("p"), EVENTS.alias("l")
    same = sa.and_(
        busy.c.source == e.c.source,
        busy.c.object_key == e.c.object_key,
        busy.c.object_key.is_not(None),
        busy.c.status == EventStatus.PROCESSING,
    )
    before = sa.and_(
        lower.c.source == e.c.source,
        lower.c.object_key == e.c.object_key,
        lower.c.object_key.is_not(None),
        lower.c.status.in_(RUNNABLE_STATUSES),
        lower.c.next_attempt_at <= now,
        sa.or_(
            lower.c.object_version < e.c.object_version,
            sa.and_(lower.c.object_version == e.c.object_version, lower.c.id < e.c.id),
        ),
    )
    return (
        sa.select(e.c.id, e.c.source, e.c.object_key)
        .where(
            e.c.status.in_(RUNNABLE_STATUSES),
            e.c.object_key.is_not(None),
            e.c.next_attempt_at <= now,
            # As claims.claim_due: a paused source's events wait where they are.
            e.c.source.not_in(paused_sources()),
            # Sources whose share of the claimer's slots is full (processing.processor).
            *([e.c.source.not_in(list(exclude))] if exclude else []),
            ~_exists(same, probes=probes),
            ~_exists(before, probes=probes),
        )
        .order_by(e.c.next_attempt_at)
        .limit(limit)
    )


def _exists(where: sa.ColumnElement[bool], *, probes: bool) -> sa.Exists:
    found = sa.select(sa.literal(1)).where(where)
    return (found.offset(0) if probes else found).exists()


async def claim(
    conn: AsyncConnection,
    owner: str,
    lease_s: float,
    limit: int,
    now: datetime,
    *,
    supersede: Collection[str],
    exclude: Collection[str] = (),
) -> Claimed:
    """Claim up to ``limit`` due events of objects for ``owner`` (attempts += 1), one per
    object, each its object's next; first mark superseded the stale events of the
    objects looked at whose source is in ``supersede``; none of a source in ``exclude``.
    See the module's text."""
    postgres = dialect.is_postgres(conn)
    heads = _heads(now, limit, probes=postgres, exclude=exclude)
    pick = _pick_pg if postgres else _pick_sqlite
    out = Claimed()
    out.superseded, chosen = await pick(conn, heads, now, supersede)
    if chosen is not None:
        out.rows = await take(
            conn,
            sa.and_(
                chosen,
                EVENTS.c.status.in_(RUNNABLE_STATUSES),
                EVENTS.c.source.not_in(paused_sources()),
            ),
            owner,
            lease_s,
            now,
        )
    return out


# What a claim's pick found: the events it marked superseded, and which to take (None:
# none).
_Picked = tuple[list[Superseded], sa.ColumnElement[bool] | None]


async def _pick_pg(
    conn: AsyncConnection, heads: sa.Select[Any], now: datetime, supersede: Collection[str]
) -> _Picked:
    candidates = (await conn.execute(heads)).all()
    if not candidates:
        return [], None
    locked = (
        await conn.execute(
            LOCK_PG,
            {
                "sources": [c.source for c in candidates],
                "keys": [c.object_key for c in candidates],
                "space": LOCK_SPACE,
            },
        )
    ).all()
    if not locked:
        return [], None
    superseded: list[Superseded] = []
    stale = [(s, k) for s, k in locked if s in supersede]
    if stale:
        result = await conn.execute(
            SUPERSEDE_PG,
            {"now": now, "sources": [s for s, _ in stale], "keys": [k for _, k in stale]},
        )
        superseded = [Superseded._make(r) for r in result]
    found = await conn.execute(
        HEADS_PG,
        {
            "now": now,
            "sources": [s for s, _ in locked],
            "keys": [k for _, k in locked],
            "supersede": [s in supersede for s, _ in locked],
        },
    )
    ids = [r[0] for r in found]
    return superseded, (EVENTS.c.id.in_(ids) if ids else None)


async def _pick_sqlite(
    conn: AsyncConnection, heads: sa.Select[Any], now: datetime, supersede: Collection[str]
) -> _Picked:
    superseded: list[Superseded] = []
    if supersede:
        version = (
            sa.select(SOURCE_OBJECTS.c.version)
            .where(
                SOURCE_OBJECTS.c.source == EVENTS.c.source,
                SOURCE_OBJECTS.c.object_key == EVENTS.c.object_key,
            )
            .scalar_subquery()
        )
        result = await conn.execute(
            sa.update(EVENTS)
            .where(
                EVENTS.c.status.in_(RUNNABLE_STATUSES),
                EVENTS.c.object_key.is_not(None),
                EVENTS.c.source.in_(list(supersede)),
                EVENTS.c.object_version < version,
            )
            .values(
                status=EventStatus.SUPERSEDED,
                processed_at=now,
                updated_at=now,
                last_error=None,
                last_error_handler=None,
                last_error_type=None,
            )
            .returning(EVENTS.c.id, EVENTS.c.source, EVENTS.c.attempts)
        )
        superseded = [Superseded._make(r) for r in result]
    # One statement: SQLite's single writer holds the database while it reads and writes.
    return superseded, EVENTS.c.id.in_(sa.select(heads.subquery("heads").c.id))


async def take(
    conn: AsyncConnection,
    chosen: sa.ColumnElement[bool],
    owner: str,
    lease_s: float,
    now: datetime,
) -> list[EventRow]:
    """The one write of every claim (here and ``store.claims.claiming``'s): the events
    ``chosen`` selects, to ``owner`` for ``lease_s``, attempts += 1."""
    result = await conn.execute(
        sa.update(EVENTS)
        .where(chosen)
        .values(
            status=EventStatus.PROCESSING,
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=lease_s),
            attempts=EVENTS.c.attempts + 1,
            updated_at=now,
        )
        .returning(*EVENT_COLUMNS)
    )
    return list(map(EventRow._make, result))


async def record_processed(conn: AsyncConnection, rows: Sequence[EventRow], now: datetime) -> None:
    """The objects of ``rows`` (events just processed) move to them, unless a newer
    version of the object was processed already (``stale = "run"``)."""
    newest: dict[tuple[str, str], EventRow] = {}
    for row in rows:
        if row.object_key is None or row.object_version is None:
            continue
        key = (row.source, row.object_key)
        kept = newest.get(key)
        if kept is None or (kept.object_version or 0.0, kept.id) < (row.object_version, row.id):
            newest[key] = row
    if not newest:
        return
    stmt = dialect.insert(conn, SOURCE_OBJECTS)
    stmt = stmt.on_conflict_do_update(
        index_elements=[SOURCE_OBJECTS.c.source, SOURCE_OBJECTS.c.object_key],
        set_={
            "type": stmt.excluded.type,
            "version": stmt.excluded.version,
            "event_id": stmt.excluded.event_id,
            "payload_hash": stmt.excluded.payload_hash,
            "updated_at": stmt.excluded.updated_at,
        },
        where=SOURCE_OBJECTS.c.version <= stmt.excluded.version,
    )
    await conn.execute(
        stmt,
        [
            {
                "source": r.source,
                "object_key": r.object_key,
                "type": r.type,
                "version": r.object_version,
                "event_id": r.id,
                "payload_hash": r.payload_hash,
                "updated_at": now,
            }
            for r in sorted(newest.values(), key=lambda r: (r.source, r.object_key or ""))
        ],
    )


async def get_object(conn: AsyncConnection, source: str, key: str) -> SourceObjectRow | None:
    row = (
        await conn.execute(
            sa.select(*SOURCE_OBJECT_COLUMNS).where(
                SOURCE_OBJECTS.c.source == source, SOURCE_OBJECTS.c.object_key == key
            )
        )
    ).first()
    return None if row is None else SourceObjectRow._make(row)


async def object_counts(conn: AsyncConnection, source: str, key: str) -> dict[str, int]:
    """How many of the object's stored events are in each status."""
    result = await conn.execute(
        sa.select(EVENTS.c.status, sa.func.count())
        .where(
            EVENTS.c.source == source,
            EVENTS.c.object_key == key,
            EVENTS.c.object_key.is_not(None),
        )
        .group_by(EVENTS.c.status)
    )
    return {status: int(count) for status, count in result}
