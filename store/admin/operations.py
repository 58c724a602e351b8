"""Bulk operations: their records, their lease, and the events a filter selects.

An operation goes over the events its filter selects in id order (ids are ULIDs,
minted at receipt), a batch at a time: each batch's changes and the operation's new
``cursor`` and counts commit in one transaction, fenced on the operation's lease, so
a runner that dies or loses its lease commits nothing of the batch in hand and the
next runner starts right after the last batch that committed. Events stored after the
operation was asked for (ids from ``id_below`` up) are never part of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple, TypedDict

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from store import dialect
from store.admin.watch import like_pattern
from store.ids import id_floor
from store.models import EVENTS, OPERATIONS
from store.status import (
    RUNNABLE_STATUSES,
    UNFINISHED_OPERATION_STATUSES,
    EventStatus,
    OperationStatus,
)


class OperationRow(NamedTuple):
    """``operations``: one bulk operation's record."""

    id: str
    request_id: str
    action: str  # an OperationAction's value
    trigger: str
    filter: dict[str, str]  # as hookd.ops.operations.OperationFilter.as_json writes it
    dry_run: bool
    status: str  # an OperationStatus's value
    total: int
    done_count: int
    changed_count: int
    skipped_count: int
    id_below: str
    cursor: str | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    cancel_requested_at: datetime | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime


OPERATION_COLUMNS = [OPERATIONS.c[name] for name in OperationRow._fields]


class NewOperation(TypedDict):
    id: str
    request_id: str
    action: str
    trigger: str
    filter: dict[str, str]
    dry_run: bool
    status: str
    total: int
    id_below: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Selection:
    """Which events an operation goes over, in the store's terms.

    ``since`` is inclusive and ``until`` exclusive, on ``received_at``; ``type_glob``
    takes ``*`` and ``?``; ``statuses`` empty means any; ``object_key`` is the key
    per-object ordering (``[sources.order]``) stored with the event.
    """

    sources: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    type_glob: str | None = None
    origin: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    object_key: str | None = None

    def where(self) -> list[sa.ColumnElement[bool]]:
        clauses: list[sa.ColumnElement[bool]] = []
        if self.sources:
            clauses.append(EVENTS.c.source.in_(self.sources))
        if self.statuses:
            clauses.append(EVENTS.c.status.in_(self.statuses))
        if self.type_glob is not None:
            clauses.append(EVENTS.c.type.like(like_pattern(self.type_glob), escape="\\"))
        if self.origin is not None:
            clauses.append(EVENTS.c.origin == self.origin)
        if self.since is not None:
            clauses.append(EVENTS.c.received_at >= self.since)
            # An id is minted when its event is stored, after it was received: no event
            # received since ``since`` has an id below this. On PostgreSQL it also
            # keeps the scan out of the day partitions before it.
            clauses.append(EVENTS.c.id >= id_floor(int(self.since.timestamp() * 1000)))
        if self.until is not None:
            clauses.append(EVENTS.c.received_at < self.until)
        if self.object_key is not None:
            clauses.append(EVENTS.c.object_key == self.object_key)
        return clauses


async def estimate(conn: AsyncConnection, selection: Selection, id_below: str) -> int:
    """How many events the selection holds now: the total shown before it starts."""
    query = sa.select(sa.func.count()).select_from(EVENTS)
    query = query.where(EVENTS.c.id < id_below, *selection.where())
    return int((await conn.execute(query)).scalar_one())


async def next_batch(
    conn: AsyncConnection, selection: Selection, after: str | None, id_below: str, limit: int
) -> list[str]:
    """The next ``limit`` ids of the selection above ``after``, in id order (keyset)."""
    query = sa.select(EVENTS.c.id).where(EVENTS.c.id < id_below, *selection.where())
    if after is not None:
        query = query.where(EVENTS.c.id > after)
    query = query.order_by(EVENTS.c.id).limit(limit)
    return [row[0] for row in await conn.execute(query)]


def _insert(conn: AsyncConnection) -> postgresql.Insert | sqlite.Insert:
    return dialect.insert(conn, OPERATIONS)


async def insert(conn: AsyncConnection, new: NewOperation, *, finished: bool = False) -> bool:
    """Record a new operation; False when its request id has one already (the unique
    constraint ``uq_operations_request_id`` decides, not a read before)."""
    created = new["created_at"]
    ended = {"started_at": created, "finished_at": created} if finished else {}
    result = await conn.execute(
        _insert(conn)
        .values(**new, done_count=0, changed_count=0, skipped_count=0, updated_at=created, **ended)
        .on_conflict_do_nothing(index_elements=["request_id"])
        .returning(OPERATIONS.c.id)
    )
    return result.first() is not None


async def get(conn: AsyncConnection, operation_id: str) -> OperationRow | None:
    query = sa.select(*OPERATION_COLUMNS).where(OPERATIONS.c.id == operation_id)
    row = (await conn.execute(query)).first()
    return None if row is None else OperationRow._make(row)


async def by_request_id(conn: AsyncConnection, request_id: str) -> OperationRow | None:
    query = sa.select(*OPERATION_COLUMNS).where(OPERATIONS.c.request_id == request_id)
    row = (await conn.execute(query)).first()
    return None if row is None else OperationRow._make(row)


async def recent(
    conn: AsyncConnection, limit: int, before_id: str | None = None
) -> list[OperationRow]:
    """Newest first, keyset-paged on the id."""
    query = sa.select(*OPERATION_COLUMNS).order_by(OPERATIONS.c.id.desc()).limit(limit)
    if before_id is not None:
        query = query.where(OPERATIONS.c.id < before_id)
    return list(map(OperationRow._make, await conn.execute(query)))


def _free(now: datetime) -> sa.ColumnElement[bool]:
    return sa.or_(OPERATIONS.c.lease_owner.is_(None), OPERATIONS.c.lease_expires_at < now)


async def waiting(conn: AsyncConnection, now: datetime, limit: int = 10) -> list[str]:
    """Operations no runner holds: queued ones, and running ones whose runner stopped
    or died (its lease given back or run out); oldest first."""
    query = (
        sa.select(OPERATIONS.c.id)
        .where(OPERATIONS.c.status.in_(UNFINISHED_OPERATION_STATUSES), _free(now))
        .order_by(OPERATIONS.c.id)
        .limit(limit)
    )
    return [row[0] for row in await conn.execute(query)]


async def acquire(
    conn: AsyncConnection, operation_id: str, owner: str, lease_s: float, now: datetime
) -> bool:
    """Take the operation's lease if nobody holds it (or it ran out): it is ``running``."""
    result = await conn.execute(
        sa.update(OPERATIONS)
        .where(
            OPERATIONS.c.id == operation_id,
            OPERATIONS.c.status.in_(UNFINISHED_OPERATION_STATUSES),
            _free(now),
        )
        .values(
            status=OperationStatus.RUNNING,
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=lease_s),
            started_at=sa.func.coalesce(OPERATIONS.c.started_at, now),
            updated_at=now,
        )
    )
    return bool(result.rowcount)


def _held(operation_id: str, owner: str) -> sa.ColumnElement[bool]:
    return sa.and_(
        OPERATIONS.c.id == operation_id,
        OPERATIONS.c.lease_owner == owner,
        OPERATIONS.c.status == OperationStatus.RUNNING,
    )


async def renew(
    conn: AsyncConnection, operation_id: str, owner: str, lease_s: float, now: datetime
) -> OperationRow | None:
    """Renew the lease ``owner`` holds; the operation as it is now, or None when the
    lease was lost (another runner took it over, or the operation was finished)."""
    result = await conn.execute(
        sa.update(OPERATIONS)
        .where(_held(operation_id, owner))
        .values(lease_expires_at=now + timedelta(seconds=lease_s), updated_at=now)
        .returning(*OPERATION_COLUMNS)
    )
    row = result.first()
    return None if row is None else OperationRow._make(row)


async def advance(
    conn: AsyncConnection,
    operation_id: str,
    owner: str,
    *,
    cursor: str,
    changed: int,
    skipped: int,
    lease_s: float,
    now: datetime,
) -> bool:
    """Count a batch and move the cursor past it, in the batch's own transaction;
    False (the caller rolls the batch back) when ``owner`` no longer holds the lease."""
    result = await conn.execute(
        sa.update(OPERATIONS)
        .where(_held(operation_id, owner))
        .values(
            cursor=cursor,
            done_count=OPERATIONS.c.done_count + changed + skipped,
            changed_count=OPERATIONS.c.changed_count + changed,
            skipped_count=OPERATIONS.c.skipped_count + skipped,
            lease_expires_at=now + timedelta(seconds=lease_s),
            updated_at=now,
        )
    )
    return bool(result.rowcount)


async def finish(
    conn: AsyncConnection,
    operation_id: str,
    owner: str | None,
    status: OperationStatus,
    *,
    now: datetime,
    error: str | None = None,
) -> bool:
    """Record the end: fenced on ``owner``'s lease, or (``owner`` None) on the
    operation being unfinished and held by nobody alive."""
    if owner is not None:
        where = _held(operation_id, owner)
    else:
        where = sa.and_(
            OPERATIONS.c.id == operation_id,
            OPERATIONS.c.status.in_(UNFINISHED_OPERATION_STATUSES),
            _free(now),
        )
    result = await conn.execute(
        sa.update(OPERATIONS)
        .where(where)
        .values(
            status=status,
            error=error,
            finished_at=now,
            lease_owner=None,
            lease_expires_at=None,
            updated_at=now,
        )
    )
    return bool(result.rowcount)


async def release(conn: AsyncConnection, operation_id: str, owner: str, now: datetime) -> None:
    """Give the lease back, the operation unfinished: the next runner resumes it at once."""
    await conn.execute(
        sa.update(OPERATIONS)
        .where(_held(operation_id, owner))
        .values(lease_owner=None, lease_expires_at=None, updated_at=now)
    )


async def request_cancel(conn: AsyncConnection, operation_id: str, now: datetime) -> None:
    """Ask the runner to stop: it does at its next batch (the first ask is kept)."""
    await conn.execute(
        sa.update(OPERATIONS)
        .where(
            OPERATIONS.c.id == operation_id,
            OPERATIONS.c.status.in_(UNFINISHED_OPERATION_STATUSES),
            OPERATIONS.c.cancel_requested_at.is_(None),
        )
        .values(cancel_requested_at=now, updated_at=now)
    )


async def cancel_events(
    conn: AsyncConnection, event_ids: list[str], reason: str, now: datetime
) -> list[str]:
    """Make those of ``event_ids`` still pending or retrying dead, with ``reason`` as
    their error (type ``cancelled``); the ids it did. One being processed is left: its
    worker holds it (on PostgreSQL the update waits for a claim's lock and then sees
    ``processing``)."""
    if not event_ids:
        return []
    result = await conn.execute(
        sa.update(EVENTS)
        .where(EVENTS.c.id.in_(event_ids), EVENTS.c.status.in_(RUNNABLE_STATUSES))
        .values(
            status=EventStatus.DEAD,
            last_error=reason,
            last_error_handler=None,
            last_error_type="cancelled",
            lease_owner=None,
            lease_expires_at=None,
            updated_at=now,
        )
        .returning(EVENTS.c.id)
    )
    return [row[0] for row in result]
