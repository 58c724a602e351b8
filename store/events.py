"""Event queries. The hot path is one multi-row ``INSERT … ON CONFLICT DO NOTHING``
per batch, in SQLAlchemy Core; the unique constraint decides what is new."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from hookd.timefmt import iso_z_or_none
from store.crypto import BodyCipher
from store.ids import new_id
from store.models import EVENTS
from store.rows import EVENT_COLUMNS, EVENT_COLUMNS_NO_BODY, EventRow
from store.status import DONE_STATUSES, EventStatus


@dataclass(frozen=True, slots=True)
class NewEvent:
    source: str
    provider: str
    dedupe_key: str
    type: str | None
    origin: str
    received_at: datetime
    occurred_at: datetime | None
    verified_with: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class Stored:
    event_id: str
    created: bool


class NewRow(TypedDict):
    """An ``events`` row as ``prepare`` builds it: the columns an insert sets."""

    id: str
    source: str
    provider: str
    dedupe_key: str
    type: str | None
    origin: str
    received_at: datetime
    occurred_at: datetime | None
    verified_with: str
    headers: dict[str, str]
    body: bytes
    body_encrypted: bool
    status: EventStatus
    attempts: int
    next_attempt_at: datetime
    created_at: datetime
    updated_at: datetime


def _insert(conn: AsyncConnection) -> postgresql.Insert | sqlite.Insert:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(EVENTS)
    return sqlite.insert(EVENTS)


@dataclass(slots=True)
class Batch:
    """Rows to insert (first of each key, in key order) and how to answer every input."""

    events: Sequence[NewEvent]
    rows: list[NewRow]
    ids: list[str]
    first_of: dict[tuple[str, str], int]

    def resolve(self, created: set[str], existing: dict[tuple[str, str], str]) -> list[Stored]:
        """One result per input, in order: new rows, repeats within the batch, and
        rows another transaction committed first (``existing``)."""
        out: list[Stored] = []
        for i, ev in enumerate(self.events):
            key = (ev.source, ev.dedupe_key)
            first = self.first_of[key]
            if self.ids[first] in created:
                out.append(Stored(self.ids[first], created=first == i))
            else:
                out.append(Stored(existing[key], created=False))
        return out

    def missing(self, created: set[str]) -> list[tuple[str, str]]:
        return [(r["source"], r["dedupe_key"]) for r in self.rows if r["id"] not in created]


def prepare(events: Sequence[NewEvent], cipher: BodyCipher) -> Batch:
    now = datetime.now(UTC)
    first_of: dict[tuple[str, str], int] = {}
    rows: list[NewRow] = []
    ids: list[str] = []
    for i, ev in enumerate(events):
        key = (ev.source, ev.dedupe_key)
        if key in first_of:
            ids.append(ids[first_of[key]])
            continue
        first_of[key] = i
        event_id = new_id()
        ids.append(event_id)
        body, encrypted = cipher.seal(ev.body)
        rows.append(
            {
                "id": event_id,
                "source": ev.source,
                "provider": ev.provider,
                "dedupe_key": ev.dedupe_key,
                "type": ev.type,
                "origin": ev.origin,
                "received_at": ev.received_at,
                "occurred_at": ev.occurred_at,
                "verified_with": ev.verified_with,
                "headers": ev.headers,
                "body": body,
                "body_encrypted": encrypted,
                "status": EventStatus.PENDING,
                "attempts": 0,
                "next_attempt_at": ev.received_at,
                "created_at": now,
                "updated_at": now,
            }
        )
    # One lock order for every batch: two concurrent batches that share keys
    # then wait on each other instead of deadlocking (PostgreSQL).
    rows.sort(key=lambda r: (r["source"], r["dedupe_key"]))
    return Batch(events, rows, ids, first_of)


async def insert_events(
    conn: AsyncConnection, events: Sequence[NewEvent], cipher: BodyCipher
) -> list[Stored]:
    """Insert what is new, find what was there; one result per input, in order.

    Runs inside the caller's transaction: nothing is acknowledged until it commits.
    The receiver's hot path does the same without the ORM layer (``store.fastpath``).
    """
    batch = prepare(events, cipher)
    stmt = _insert(conn).on_conflict_do_nothing(index_elements=["source", "dedupe_key"])
    result = await conn.execute(stmt.returning(EVENTS.c.id), batch.rows)
    created = {row[0] for row in result}
    missing = batch.missing(created)
    existing: dict[tuple[str, str], str] = {}
    if missing:
        found = await conn.execute(
            sa.select(EVENTS.c.id, EVENTS.c.source, EVENTS.c.dedupe_key).where(
                sa.tuple_(EVENTS.c.source, EVENTS.c.dedupe_key).in_(missing)
            )
        )
        existing = {(r.source, r.dedupe_key): r.id for r in found}
    return batch.resolve(created, existing)


async def get_event(
    conn: AsyncConnection, event_id: str, *, with_body: bool = False
) -> EventRow | None:
    """The event, its body read only ``with_body`` (None in its place otherwise)."""
    cols = EVENT_COLUMNS if with_body else EVENT_COLUMNS_NO_BODY
    row = (await conn.execute(sa.select(*cols).where(EVENTS.c.id == event_id))).first()
    return None if row is None else EventRow._make(row)


async def list_events(
    conn: AsyncConnection,
    *,
    source: str | None = None,
    status: str | None = None,
    type_: str | None = None,
    origin: str | None = None,
    limit: int = 50,
    before_id: str | None = None,
) -> list[EventRow]:
    """Newest first, keyset-paged on the time-ordered id; bodies are not read."""
    query = sa.select(*EVENT_COLUMNS_NO_BODY).order_by(EVENTS.c.id.desc()).limit(limit)
    if source is not None:
        query = query.where(EVENTS.c.source == source)
    if status is not None:
        query = query.where(EVENTS.c.status == status)
    if type_ is not None:
        query = query.where(EVENTS.c.type == type_)
    if origin is not None:
        query = query.where(EVENTS.c.origin == origin)
    if before_id is not None:
        query = query.where(EVENTS.c.id < before_id)
    return list(map(EventRow._make, await conn.execute(query)))


def event_resource(row: EventRow) -> dict[str, Any]:
    """An event as the API and ``hookd events`` show it, shaped like a long-running
    operation: ``name`` (``events/ID``), ``done`` once processed or dead, ``error`` and
    ``poll_after_seconds`` (null once done) for a client that polls it.

    A JSON object that callers extend (the admin UI, ``hookd events --body``), hence
    a plain dict."""
    done = row.status in DONE_STATUSES
    return {
        "name": f"events/{row.id}",
        "id": row.id,
        "source": row.source,
        "provider": row.provider,
        "type": row.type,
        "dedupe_key": row.dedupe_key,
        "origin": row.origin,
        "status": row.status,
        "done": done,
        "attempts": row.attempts,
        "received_at": iso_z_or_none(row.received_at),
        "occurred_at": iso_z_or_none(row.occurred_at),
        "processed_at": iso_z_or_none(row.processed_at),
        "verified_with": row.verified_with,
        "error": event_error(row),
        "poll_after_seconds": None if done else 1,
    }


def event_error(row: EventRow) -> dict[str, str | None] | None:
    """The last failed attempt's error, while the event retries and once it is dead
    (processing and replay clear it): the summary line, the handler that raised
    (None when processing failed outside the handlers) and the exception type."""
    if not row.last_error:
        return None
    return {
        "message": row.last_error,
        "handler": row.last_error_handler,
        "type": row.last_error_type,
    }
