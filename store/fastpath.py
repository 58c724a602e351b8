"""The receiver's insert, without the ORM layer: the hot path of every webhook.

Same rows, same answers as ``store.events.insert_events`` (both build the batch
with ``store.events.prepare``; ``event_keys`` decides what is new, see there), at a
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
- SQLite: in one ``BEGIN IMMEDIATE`` transaction, a multi-row ``INSERT INTO
  event_keys … RETURNING``, the ``events`` rows of the new keys, and the lookup of
  the others, on a connection owned by one thread, with the same pragmas as the
  engine (WAL, ``synchronous=FULL``).

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

from store.crypto import BodyCipher
from store.db import SQLITE_PRAGMAS, check_url
from store.events import KEY_RACE_TRIES, Batch, NewEvent, NewRow, Stored, prepare
from store.ids import new_id
from store.status import EventOrigin, EventStatus

COLUMNS = (
    "id",
    "source",
    "provider",
    "dedupe_key",
    "type",
    "origin",
    "received_at",
    "occurred_at",
    "verified_with",
    "headers",
    "body",
    "body_encrypted",
    "status",
    "attempts",
    "next_attempt_at",
    "created_at",
    "updated_at",
    "traceparent",
)

KEY_COLUMNS = ("source", "dedupe_key", "event_id", "received_at")
# Written only by a batch that holds an event of a source with [sources.order]; every
# other batch's statements are the ones without them, unchanged.
OBJECT_COLUMNS = ("object_key", "object_version", "payload_hash")

# SQLite allows 32,766 parameters per statement; a larger batch is split into
# statements of this many rows inside one transaction.
SQLITE_ROWS = 32_766 // len(COLUMNS)
SQLITE_KEY_ROWS = 32_766 // len(KEY_COLUMNS)

# The whole batch travels as one JSON text parameter and PostgreSQL unpacks it:
# encoding a dozen typed arrays element by element cost the receiver's event
# loop more than everything else per row, and the database has the other core.
# The bodies go beside it as one bytea[] ($3, row n at index n + 1): asyncpg sends
# them as they are, with no base64 to encode here and decode there.
# Every new row starts as pending with no attempt, as ``prepare`` writes it.
#
# Keys are inserted in the batch's order (sorted by key in ``prepare``): two
# batches sharing keys wait on each other instead of deadlocking. The statement
# answers one row per new event (source NULL) and one per key that was stored
# before the statement's snapshot (its event_id, source and key); the other CTEs'
# writes are invisible to that last SELECT, so it never sees the keys just added.
_PG_INSERT = """
WITH u AS MATERIALIZED (
  SELECT *
  FROM json_to_recordset($1::json) AS u(n int, id text, source text, provider text,
                                        dedupe_key text, type text, origin text,
                                        received_at timestamptz, occurred_at timestamptz,
                                        verified_with text, headers json,
                                        body_encrypted bool, traceparent text{object_types})
),
k AS (
  INSERT INTO event_keys (source, dedupe_key, event_id, received_at)
  SELECT u.source, u.dedupe_key, u.id, u.received_at FROM u ORDER BY u.n
  ON CONFLICT (source, dedupe_key) DO NOTHING
  RETURNING event_id
),
e AS (
  INSERT INTO events (id, source, provider, dedupe_key, type, origin, received_at,
                      occurred_at, verified_with, headers, body, body_encrypted, status,
                      attempts, next_attempt_at, created_at, updated_at,
                      traceparent{object_columns})
  SELECT u.id, u.source, u.provider, u.dedupe_key, u.type, u.origin, u.received_at,
         u.occurred_at, u.verified_with, u.headers, ($3::bytea[])[u.n + 1],
         u.body_encrypted, '{pending}', 0, u.received_at, $2, $2,
         u.traceparent{object_values}
  FROM u JOIN k ON k.event_id = u.id
  ORDER BY u.n
  RETURNING id
)
SELECT e.id, NULL::text AS source, NULL::text AS dedupe_key FROM e
UNION ALL
SELECT x.event_id, x.source, x.dedupe_key
FROM (SELECT u.source, u.dedupe_key FROM u WHERE u.id NOT IN (SELECT event_id FROM k)) AS c
JOIN event_keys x ON x.source = c.source AND x.dedupe_key = c.dedupe_key
"""
PG_INSERT = _PG_INSERT.format(
    object_types="", object_columns="", object_values="", pending=EventStatus.PENDING
)
# The same for a batch with events of an object: three more columns, read from the
# JSON where the batch's rows have them (NULL where they do not).
PG_INSERT_OBJECTS = _PG_INSERT.format(
    object_types=", object_key text, object_version float8, payload_hash text",
    object_columns=", " + ", ".join(OBJECT_COLUMNS),
    object_values=", u.object_key, u.object_version, u.payload_hash",
    pending=EventStatus.PENDING,
)

PG_EXISTING = """
SELECT x.event_id, x.source, x.dedupe_key
FROM event_keys x
JOIN unnest($1::text[], $2::text[]) AS k(source, dedupe_key)
  ON x.source = k.source AND x.dedupe_key = k.dedupe_key
"""


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
    async def insert(self, events: Sequence[NewEvent]) -> list[Stored]: ...

    async def probe(self) -> None:
        """Insert a row and delete it again in one committed transaction, through the
        same connection and statement as ``insert``: it fails where a commit would
        (no space, no write permission, a lock held, a read-only server), and leaves
        nothing behind (no other transaction ever sees the row)."""
        ...

    async def close(self) -> None: ...


class PgInserter:
    def __init__(self, url: sa.URL, cipher: BodyCipher, *, size: int, timeout_s: float) -> None:
        self._dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._cipher = cipher
        self._size = size
        self._timeout_s = timeout_s
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()

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

    async def insert(self, events: Sequence[NewEvent]) -> list[Stored]:
        batch = prepare(events, self._cipher)
        pool = await self._get_pool()
        async with pool.acquire() as conn:
            try:
                created, existing = await _pg_insert(conn, batch)
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
        return batch.resolve(created, existing)

    async def probe(self) -> None:
        batch = prepare([probe_event()], self._cipher)
        payload, bodies = _pg_payload(batch.rows)
        row = batch.rows[0]
        pool = await self._get_pool()
        async with pool.acquire() as conn:
            try:
                async with conn.transaction():
                    await conn.fetch(PG_INSERT, payload, row["created_at"], bodies)
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


async def _pg_insert(
    conn: asyncpg.Connection, batch: Batch
) -> tuple[set[str], dict[tuple[str, str], str]]:
    """The new events' ids, and the ids the other keys hold."""
    now = batch.rows[0]["created_at"]
    created: set[str] = set()
    existing: dict[tuple[str, str], str] = {}
    todo = batch.rows
    for _ in range(KEY_RACE_TRIES):
        objects = _with_objects(todo)
        insert = PG_INSERT_OBJECTS if objects else PG_INSERT
        payload, bodies = _pg_payload(todo, objects=objects)
        for r in await conn.fetch(insert, payload, now, bodies):
            if r[1] is None:
                created.add(r[0])
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
            return created, existing
    raise RuntimeError("event keys kept vanishing between insert and lookup")


def _with_objects(rows: list[NewRow]) -> bool:
    """Whether a row of the batch names an object ([sources.order])."""
    return any(row["object_key"] is not None for row in rows)


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
    # Only while tracing is on; absent, the column reads NULL.
    for item, row in zip(items, rows, strict=True):
        if row["traceparent"] is not None:
            item["traceparent"] = row["traceparent"]
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


def _sqlite_time(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _sqlite_params(
    rows: list[NewRow], *, objects: bool = False
) -> list[str | int | float | bytes | None]:
    """The rows' values, flat, in ``COLUMNS`` order (then ``OBJECT_COLUMNS``'s)."""
    params: list[str | int | float | bytes | None] = []
    for r in rows:
        params += (
            r["id"],
            r["source"],
            r["provider"],
            r["dedupe_key"],
            r["type"],
            r["origin"],
            _sqlite_time(r["received_at"]),
            _sqlite_time(r["occurred_at"]),
            r["verified_with"],
            orjson.dumps(r["headers"]).decode(),
            r["body"],
            int(r["body_encrypted"]),
            r["status"],
            r["attempts"],
            _sqlite_time(r["next_attempt_at"]),
            _sqlite_time(r["created_at"]),
            _sqlite_time(r["updated_at"]),
            r["traceparent"],
        )
        if objects:
            params += (r["object_key"], r["object_version"], r["payload_hash"])
    return params


def _sqlite_key_params(rows: list[NewRow]) -> list[str | None]:
    """The rows' keys, flat, in ``KEY_COLUMNS`` order."""
    params: list[str | None] = []
    for r in rows:
        params += (r["source"], r["dedupe_key"], r["id"], _sqlite_time(r["received_at"]))
    return params


class SqliteInserter:
    """One connection, used only by one thread; batches run one at a time."""

    def __init__(self, path: str, cipher: BodyCipher) -> None:
        self._path = path
        self._cipher = cipher
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hookd-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._statements: dict[tuple[str, int, int], str] = {}

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self._path, timeout=5, isolation_level=None)
            for pragma in SQLITE_PRAGMAS:
                conn.execute(pragma)
            self._conn = conn
        return self._conn

    def _statement(self, table: str, columns: Sequence[str], n: int) -> str:
        """A multi-row insert of ``n`` rows; into event_keys, the new keys returned."""
        sql = self._statements.get((table, len(columns), n))
        if sql is None:
            one = "(" + ",".join("?" * len(columns)) + ")"
            sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES {','.join([one] * n)}"  # noqa: S608 - constants and placeholders only
            if table == "event_keys":
                sql += " ON CONFLICT (source, dedupe_key) DO NOTHING RETURNING event_id"
            self._statements[(table, len(columns), n)] = sql
        return sql

    def _insert(
        self, conn: sqlite3.Connection, rows: list[NewRow]
    ) -> tuple[set[str], dict[tuple[str, str], str]]:
        """The batch's keys, then the rows of the new ones, then the ids of the others;
        inside the caller's transaction."""
        created: set[str] = set()
        key_params = _sqlite_key_params(rows)
        width = len(KEY_COLUMNS)
        step = SQLITE_KEY_ROWS * width
        for i in range(0, len(key_params), step):
            chunk = key_params[i : i + step]
            sql = self._statement("event_keys", KEY_COLUMNS, len(chunk) // width)
            created.update(row[0] for row in conn.execute(sql, chunk).fetchall())
        new = [r for r in rows if r["id"] in created]
        objects = _with_objects(new)
        columns = COLUMNS + OBJECT_COLUMNS if objects else COLUMNS
        row_params = _sqlite_params(new, objects=objects)
        width = len(columns)
        step = (32_766 // width) * width
        for i in range(0, len(row_params), step):
            part = row_params[i : i + step]
            conn.execute(self._statement("events", columns, len(part) // width), part)
        existing: dict[tuple[str, str], str] = {}
        for r in rows:
            if r["id"] in created:
                continue
            found = conn.execute(
                "SELECT event_id FROM event_keys WHERE source = ? AND dedupe_key = ?",
                (r["source"], r["dedupe_key"]),
            ).fetchone()
            if found is not None:
                existing[(r["source"], r["dedupe_key"])] = found[0]
        return created, existing

    def _write(self, rows: list[NewRow]) -> tuple[set[str], dict[tuple[str, str], str]]:
        conn = self._connect()
        try:
            # One transaction: under SQLite's single writer nothing can change a key
            # between its insert and its lookup.
            conn.execute("BEGIN IMMEDIATE")
            created, existing = self._insert(conn, rows)
            conn.execute("COMMIT")
        except sqlite3.Error:
            self._discard()  # closing rolls back an open transaction
            raise
        return created, existing

    def _probe(self, rows: list[NewRow]) -> None:
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            self._insert(conn, rows)
            conn.execute("DELETE FROM events WHERE id = ?", (rows[0]["id"],))
            conn.execute(
                "DELETE FROM event_keys WHERE source = ? AND dedupe_key = ?",
                (rows[0]["source"], rows[0]["dedupe_key"]),
            )
            conn.execute("COMMIT")
        except sqlite3.Error:
            self._discard()  # closing rolls back an open transaction
            raise

    def _discard(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    async def insert(self, events: Sequence[NewEvent]) -> list[Stored]:
        batch = prepare(events, self._cipher)
        loop = asyncio.get_running_loop()
        created, existing = await loop.run_in_executor(self._executor, self._write, batch.rows)
        return batch.resolve(created, existing)

    async def probe(self) -> None:
        batch = prepare([probe_event()], self._cipher)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._probe, batch.rows)

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._discard)
        self._executor.shutdown(wait=True)


def inserter_for(url: str, cipher: BodyCipher, *, committers: int, timeout_s: float) -> Inserter:
    parsed = check_url(url)
    if parsed.get_backend_name() == "sqlite":
        return SqliteInserter(parsed.database or ":memory:", cipher)
    return PgInserter(parsed, cipher, size=committers, timeout_s=timeout_s)
