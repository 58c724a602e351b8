"""The receiver's insert, without the ORM layer: the hot path of every webhook.

Same rows, same answers as ``store.intake.events.insert_events`` (both build the batch
with ``store.intake.events.prepare``; ``event_keys`` decides what is new, see there), at a
fraction of the CPU:

- PostgreSQL: one prepared statement per batch, on connections of hookd's own
  asyncpg pool: ``INSERT INTO event_keys … ON CONFLICT DO NOTHING RETURNING`` and,
  in a second data-modifying CTE of the same statement, the ``events`` rows of the
  keys it returned; the same statement also reads, for the keys that conflicted,
  the ``event_id`` ``event_keys`` holds. A single statement is its own transaction,
  so a batch costs one round trip, and commit waits for the WAL flush
  (``synchronous_commit=on``). A key that conflicted with a transaction which
  committed while the statement ran is not visible to that statement's snapshot:
  only then a second statement looks it up (ON CONFLICT waited for that commit, so
  the row is visible to it).
- SQLite: ``store.intake.sqlite_write``'s one transaction per batch, run either on a
  thread of this process (``SqliteInserter``) or in a writer process of its own
  (``hookd.runtime.sqlite_writer``: ``python -m store.intake.sqlite_write``), which
  takes its CPU off the receiver's interpreter.

Each also has ``probe``: one write through that same path, committed, that leaves no
row (``hookd.web.health`` uses it to tell when a database that refused commits takes
them again).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Protocol

import asyncpg
import orjson
import sqlalchemy as sa

from store import queries
from store.crypto import BodyCipher
from store.ids import new_id
from store.intake import sqlite_write
from store.intake.events import KEY_RACE_TRIES, Batch, Lease, NewEvent, NewRow, Stored, prepare
from store.intake.sqlite_write import (
    OBJECT_COLUMNS,
    WHOLE_SOURCE,
    SqliteWriter,
    with_objects,
)
from store.status import EventOrigin, EventStatus

# The statements, and why each is written so: store/sql/fastpath.sql.
SQL = queries.load("fastpath")
_PG_INSERT = SQL["insert_pg"]
PG_INSERT = _PG_INSERT.format(
    object_types="",
    object_columns="",
    object_values="",
    pending=EventStatus.PENDING,
    processing=EventStatus.PROCESSING,
)
# The same for a batch with events of an object: three more columns, read from the
# JSON where the batch's rows have them (NULL where they do not).
PG_INSERT_OBJECTS = _PG_INSERT.format(
    object_types=", object_key text, object_version float8, payload_hash text",
    object_columns=", " + ", ".join(OBJECT_COLUMNS),
    object_values=", u.object_key, u.object_version, u.payload_hash",
    pending=EventStatus.PENDING,
    processing=EventStatus.PROCESSING,
)

PG_EXISTING = SQL["existing_pg"]


# The probe's row: no configured source can have this name (names start with a letter
# or digit), and the row is deleted in the transaction that inserted it.
PROBE_SOURCE = "_probe"


def probe_event() -> NewEvent:
    now = datetime.now(UTC)
    return NewEvent(
        source=PROBE_SOURCE,
        provider=PROBE_SOURCE,
        dedupe_key=new_id(),
        type=None,
        origin=EventOrigin.WEBHOOK,
        received_at=now,
        occurred_at=None,
        verified_with="",
        headers={},
        body=b"",
    )


class Inserter(Protocol):
    async def start(self) -> None:
        """Open what the first insert would otherwise wait for (may do nothing)."""
        ...

    async def insert(self, events: Sequence[NewEvent], lease: Lease | None = None) -> list[Stored]:
        """Commit what is new (leased to ``lease``'s owner, when given), find what was
        there; one result per event, in order."""
        ...

    async def probe(self) -> None:
        """Insert a row and delete it again in one committed transaction, through the
        same connection and statement as ``insert``: it fails where a commit would
        (no space, no write permission, a lock held, a read-only server), and leaves
        nothing behind (no other transaction ever sees the row)."""
        ...

    async def close(self) -> None: ...


# What a failed insert raises when one of its rows holds what no column takes: a NUL
# or an over-long value (PostgreSQL's data exceptions, class 22), a constraint (class
# 23), a string the driver cannot encode (a lone surrogate), a number out of range.
# The database and the path to it are fine: the batch is worth committing without
# that row (``ingest.batcher``).
ROW_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.DataError,
    asyncpg.IntegrityConstraintViolationError,
    sqlite3.DataError,
    sqlite3.IntegrityError,
    UnicodeError,
    ValueError,
    TypeError,  # orjson's JSONEncodeError among them
    OverflowError,
)


def tied_to_rows(exc: BaseException) -> bool:
    """Whether a failed insert failed for a value of its rows (see ``ROW_ERRORS``)."""
    return isinstance(exc, ROW_ERRORS)


class PgInserter:
    def __init__(self, url: sa.URL, cipher: BodyCipher, *, size: int, timeout_s: float) -> None:
        self._dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._cipher = cipher
        self._size = size
        self._timeout_s = timeout_s
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        return None  # the pool opens on the first insert, as a database may be down now

    async def _get_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            async with self._lock:
                if self._pool is None:
                    self._pool = await asyncpg.create_pool(
                        self._dsn,
                        min_size=0,
                        max_size=self._size,
                        timeout=self._timeout_s,
                        command_timeout=30,
                        # Nothing session-level is ever set on these connections:
                        # skip the reset round trip on every release.
                        reset=_no_reset,
                        server_settings={
                            "synchronous_commit": "on",
                            "application_name": "hookd-receiver",
                            "jit": "off",  # as store.db's engine
                        },
                    )
        return self._pool

    async def insert(self, events: Sequence[NewEvent], lease: Lease | None = None) -> list[Stored]:
        batch = prepare(events, self._cipher, lease)
        pool = await self._get_pool()
        async with pool.acquire() as conn:
            try:
                created, existing, unleased = await _pg_insert(conn, batch)
            except asyncpg.PostgresError:
                raise  # the server answered: the connection is fine
            except BaseException:
                # Cut off mid-statement (the commit timeout, a connection that stopped
                # answering): drop the connection. Released as it is, asyncpg would first
                # wait up to command_timeout for the server to confirm a cancel that a
                # dead path never delivers, holding this committer and its requests'
                # 503s well past commit_timeout_s.
                conn.terminate()
                raise
        return batch.resolve(created, existing, unleased)

    async def probe(self) -> None:
        batch = prepare([probe_event()], self._cipher)
        payload, bodies = _pg_payload(batch.rows)
        row = batch.rows[0]
        pool = await self._get_pool()
        async with pool.acquire() as conn:
            try:
                async with conn.transaction():
                    await conn.fetch(PG_INSERT, payload, row["created_at"], bodies, WHOLE_SOURCE)
                    await conn.execute("DELETE FROM events WHERE id = $1", row["id"])
                    await conn.execute(
                        "DELETE FROM event_keys WHERE source = $1 AND dedupe_key = $2",
                        row["source"],
                        row["dedupe_key"],
                    )
            except asyncpg.PostgresError:
                raise
            except BaseException:
                conn.terminate()  # as in insert: never wait on a dead path's cancel
                raise

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


async def _pg_insert(conn: asyncpg.Connection, batch: Batch) -> sqlite_write.Written:
    """The new events' ids, the ids the other keys hold, and the new events committed
    pending though the batch was leased (their source is paused)."""
    now = batch.rows[0]["created_at"]
    created: set[str] = set()
    unleased: set[str] = set()
    existing: dict[tuple[str, str], str] = {}
    todo = batch.rows
    for _ in range(KEY_RACE_TRIES):
        objects = with_objects(todo)
        insert = PG_INSERT_OBJECTS if objects else PG_INSERT
        payload, bodies = _pg_payload(todo, objects=objects)
        for r in await conn.fetch(insert, payload, now, bodies, WHOLE_SOURCE):
            if r[1] is None:
                created.add(r[0])
                if r[3] is False:
                    unleased.add(r[0])
            else:
                existing[(r[1], r[2])] = r[0]
        missing = [
            batch.key(r) for r in todo if r["id"] not in created and batch.key(r) not in existing
        ]
        if missing:
            # Keys another transaction committed while the statement ran: visible
            # now, because ON CONFLICT waited for that commit.
            found = await conn.fetch(PG_EXISTING, [m[0] for m in missing], [m[1] for m in missing])
            existing |= {(r[1], r[2]): r[0] for r in found}
        # Left: keys that conflicted and were gone when looked up (one expired at that
        # very moment): inserted again, as new.
        todo = [r for r in todo if r["id"] not in created and batch.key(r) not in existing]
        if not todo:
            return created, existing, unleased
    raise RuntimeError("event keys kept vanishing between insert and lookup")


def _pg_payload(rows: list[NewRow], *, objects: bool = False) -> tuple[str, list[bytes]]:
    """The rows as the statement's JSON parameter (orjson: a tenth of the standard
    encoder's time; it writes datetimes as RFC 3339), and their bodies in row order."""
    items: list[dict[str, object]] = [
        {
            "n": n,
            "id": row["id"],
            "source": row["source"],
            "provider": row["provider"],
            "dedupe_key": row["dedupe_key"],
            "type": row["type"],
            "origin": row["origin"],
            "received_at": row["received_at"],
            "occurred_at": row["occurred_at"],
            "verified_with": row["verified_with"],
            "headers": row["headers"],
            "body_encrypted": row["body_encrypted"],
        }
        for n, row in enumerate(rows)
    ]
    if objects:
        for item, row in zip(items, rows, strict=True):
            item.update(_object_fields(row))
    # Only while tracing is on, and only for rows committed leased (insert as claimed);
    # absent, the column reads NULL.
    for item, row in zip(items, rows, strict=True):
        if row["traceparent"] is not None:
            item["traceparent"] = row["traceparent"]
        if row["lease_owner"] is not None:
            item["lease_owner"] = row["lease_owner"]
            item["lease_expires_at"] = row["lease_expires_at"]
    return orjson.dumps(items).decode(), [row["body"] for row in rows]


def _object_fields(row: NewRow) -> dict[str, str | float | None]:
    """The object columns of a row that has them; nothing for the others (read as NULL)."""
    if row["object_key"] is None:
        return {}
    return {
        "object_key": row["object_key"],
        "object_version": row["object_version"],
        "payload_hash": row["payload_hash"],
    }


async def _no_reset(_: asyncpg.Connection) -> None:
    return None


class SqliteInserter:
    """``SqliteWriter`` on a thread of this process: one connection, one batch at a time."""

    def __init__(self, path: str, cipher: BodyCipher) -> None:
        self._cipher = cipher
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hookd-sqlite")
        self._writer = SqliteWriter(path)

    async def start(self) -> None:
        return None

    async def insert(self, events: Sequence[NewEvent], lease: Lease | None = None) -> list[Stored]:
        batch = prepare(events, self._cipher, lease)
        loop = asyncio.get_running_loop()
        created, existing, unleased = await loop.run_in_executor(
            self._executor, self._writer.write, batch.rows
        )
        return batch.resolve(created, existing, unleased)

    async def probe(self) -> None:
        batch = prepare([probe_event()], self._cipher)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._writer.probe, batch.rows)

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._writer.discard)
        self._executor.shutdown(wait=True)
