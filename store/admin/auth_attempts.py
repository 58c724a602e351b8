"""Token checks let through by the rate limit (``hookd.web.auth_limit``): one row per
check, by client address, in ``admin_login_failures`` (migration 0011), so that every
process (``serve --workers N``, several receivers) counts the same ones.

A row is a *reservation*: it is made before a token is looked at (an admin login) or
for a bearer token found wrong, by one statement that inserts only while the address
and everyone together are under their limits in the window. A login whose token was
right deletes its own reservation again. Reservations are serialized: on PostgreSQL
by a ``SHARE ROW EXCLUSIVE`` lock on the table (taken by nothing else), on a SQLite
file by the write turn (``store.db.transaction``) and SQLite's one writer; so two of
them can never both take the last slot. ``Checking.admitted`` is the read a right
bearer token waits for: under a ``SHARE`` lock (PostgreSQL) or the turn (SQLite),
behind every reservation asked for before it; it writes nothing.

On PostgreSQL one token check is one transaction on one connection: the plain read
of the window, then the lock and what it guards. On SQLite the plain read takes no
turn (a request refused by it never waits for the receiver's writer).

Every statement is an index range on ``failed_at`` (the window's rows, at most the
overall limit of them) or ``client``, or a primary-key delete.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store import db, dialect
from store.models import ADMIN_LOGIN_FAILURES

T = ADMIN_LOGIN_FAILURES
# Held by each reservation: self-exclusive, and it waits for (and holds off) SHARE.
RESERVE_LOCK = sa.text("LOCK TABLE admin_login_failures IN SHARE ROW EXCLUSIVE MODE")
# Held by a right token's read: shared with other reads, queued behind reservations.
ADMIT_LOCK = sa.text("LOCK TABLE admin_login_failures IN SHARE MODE")

Rows = list[tuple[str, datetime]]


async def _rows(conn: AsyncConnection, since: datetime) -> Rows:
    query = (
        sa.select(T.c.client, T.c.failed_at).where(T.c.failed_at > since).order_by(T.c.failed_at)
    )
    return [(row.client, row.failed_at) for row in await conn.execute(query)]


def _reservation(
    attempt: str, client: str, *, now: datetime, since: datetime, per_client: int, overall: int
) -> sa.Insert:
    """The insert of one row, of which nothing is inserted at either limit."""
    in_window = T.c.failed_at > since
    mine = (
        sa.select(sa.func.count())
        .select_from(T)
        .where(T.c.client == client, in_window)
        .scalar_subquery()
    )
    everyone = sa.select(sa.func.count()).select_from(T).where(in_window).scalar_subquery()
    row = sa.select(
        sa.literal(attempt, T.c.id.type),
        sa.literal(client, T.c.client.type),
        sa.literal(now, T.c.failed_at.type),
    ).where(mine < per_client, everyone < overall)
    return T.insert().from_select(["id", "client", "failed_at"], row)


class Checking:
    """The statements of one token check (``checking``): ``recent``, then ``admitted``
    or ``reserve``."""

    def __init__(self, engine: AsyncEngine, conn: AsyncConnection | None) -> None:
        self._engine = engine
        # PostgreSQL: the check's one transaction; SQLite: None (each its own).
        self._conn = conn

    @contextlib.asynccontextmanager
    async def _guarded(self) -> AsyncIterator[AsyncConnection]:
        if self._conn is not None:
            yield self._conn
            return
        async with db.transaction(self._engine)() as conn:
            yield conn

    async def recent(self, since: datetime) -> Rows:
        """Every address's reservations after ``since``, oldest first (a plain read)."""
        if self._conn is not None:
            return await _rows(self._conn, since)
        async with self._engine.connect() as conn:
            return await _rows(conn, since)

    async def admitted(self, since: datetime) -> Rows:
        """As ``recent``, read after every reservation asked for before it has committed."""
        async with self._guarded() as conn:
            if dialect.is_postgres(conn):
                await conn.execute(ADMIT_LOCK)
            return await _rows(conn, since)

    async def reserve(
        self, client: str, *, now: datetime, since: datetime, per_client: int, overall: int
    ) -> str | None:
        """A reservation for ``client`` at ``now`` (its id), or None when ``client``
        already has ``per_client`` rows after ``since`` or everyone together
        ``overall``. Rows from before ``since`` (of any client) are deleted on the way.
        Committed when ``checking`` ends (PostgreSQL) or before this returns."""
        attempt = secrets.token_hex(16)
        async with self._guarded() as conn:
            if dialect.is_postgres(conn):
                await conn.execute(RESERVE_LOCK)
            # On SQLite the first write takes the database's write lock: the insert's
            # counts below see every committed reservation, and no other can commit.
            await conn.execute(T.delete().where(T.c.failed_at <= since))
            inserted = await conn.execute(
                _reservation(
                    attempt, client, now=now, since=since, per_client=per_client, overall=overall
                )
            )
        return attempt if inserted.rowcount == 1 else None


@contextlib.asynccontextmanager
async def checking(engine: AsyncEngine) -> AsyncIterator[Checking]:
    """One token check's statements, committed when the block ends."""
    if dialect.is_postgres(engine):
        async with engine.begin() as conn:
            yield Checking(engine, conn)
    else:
        yield Checking(engine, None)


async def release(engine: AsyncEngine, attempt: str) -> None:
    """Take back a reservation: the token it was made for was right."""
    async with db.transaction(engine)() as conn:
        await conn.execute(T.delete().where(T.c.id == attempt))
