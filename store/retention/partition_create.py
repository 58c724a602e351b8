"""PostgreSQL: the partitions of ``events`` made ahead (``store.retention.partitions`` describes
the whole): yesterday's, today's and ``AHEAD_DAYS`` more, each created apart and then
attached, the rows a missing day left in the default partition moved into it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store import dialect
from store.retention.partition_catalog import (
    COLUMNS,
    PARENT,
    Partition,
    bounds,
    is_partitioned,
    list_partitions,
    name_of,
    quoted,
    references,
    storage_clause,
)
from store.retention.partition_sql import (
    forget,
    is_lock_timeout,
    put_back,
    set_aside,
    set_lock_timeout,
)

log = logging.getLogger("hookd.partitions")

AHEAD_DAYS = 7
BEHIND_DAYS = 1
# pg_advisory_xact_lock key for creating partitions: one process at a time.
CREATE_LOCK = 0x686F6F6B64_01


@dataclass(slots=True)
class Ensured:
    created: list[str] = field(default_factory=list)
    moved: int = 0  # rows moved out of the default partition
    postponed: list[str] = field(default_factory=list)  # the lock was not free in time


def wanted_days(now: datetime) -> list[date]:
    today = now.astimezone(UTC).date()
    return [today + timedelta(days=d) for d in range(-BEHIND_DAYS, AHEAD_DAYS + 1)]


async def ensure(engine: AsyncEngine, now: datetime | None = None) -> Ensured:
    """Create the missing partitions from the day before ``now`` (default: the clock)
    to ``AHEAD_DAYS`` after it; nothing on SQLite or an unpartitioned ``events``.

    A day whose range overlaps a partition an operator made is left to that one. A
    partition whose lock was not free within ``LOCK_TIMEOUT_MS`` is left for the next
    call (``Ensured.postponed``): inserts meanwhile land in the default partition,
    and are moved when it is created."""
    done = Ensured()
    parts = await _partitions_now(engine)
    if parts is None:
        return done
    for day in wanted_days(now or datetime.now(UTC)):
        lo, hi = bounds(day)
        if not any(p.overlaps(lo, hi) for p in parts):
            await _ensure_day(engine, day, done)
    if done.created:
        log.info("partitions created", extra={"partitions": done.created, "moved": done.moved})
    if done.postponed:
        log.warning("partitions postponed: lock not free", extra={"partitions": done.postponed})
    return done


async def _partitions_now(engine: AsyncEngine) -> list[Partition] | None:
    """The partitions of ``events``; None on SQLite or an unpartitioned ``events``."""
    if not dialect.is_postgres(engine):
        return None
    async with engine.connect() as conn:
        if not await is_partitioned(conn):
            return None
        return await list_partitions(conn)


async def _ensure_day(engine: AsyncEngine, day: date, done: Ensured) -> None:
    """``day``'s partition, missing, created (``done.created``), or left for the next
    call when its lock was not free (``done.postponed``)."""
    try:
        moved = await create_day(engine, day)
    except sa.exc.DBAPIError as exc:
        if not is_lock_timeout(exc):
            raise
        done.postponed.append(name_of(day))
        return
    if moved is None:
        return  # another process creates partitions right now, or did
    done.created.append(name_of(day))
    done.moved += moved


async def create_day(engine: AsyncEngine, day: date) -> int | None:
    """One day's partition; the rows moved out of the default partition (None: another
    process holds the creation lock, or made it meanwhile)."""
    lo, hi = bounds(day)
    name = name_of(day)
    async with engine.begin() as conn:
        await set_lock_timeout(conn)
        got = await conn.execute(
            sa.text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": CREATE_LOCK}
        )
        if not got.scalar():
            return None
        parts = await list_partitions(conn)
        if any(p.overlaps(lo, hi) for p in parts):
            return None  # made meanwhile by another process
        default = next((p.name for p in parts if p.default), None)
        if default is not None:
            strays = await conn.execute(
                sa.text(f"SELECT 1 FROM {quoted(default)} WHERE id >= :lo AND id < :hi LIMIT 1"),  # noqa: S608 - a quoted catalog name
                {"lo": lo, "hi": hi},
            )
            if strays.first() is not None:
                return await _move_from_default(conn, name, lo, hi, default)
        # Created apart, then attached: ATTACH locks events in a mode that lets the
        # receivers' inserts go on (CREATE … PARTITION OF would block them); what
        # reads every partition (a claim) waits the milliseconds the default
        # partition is held.
        await conn.exec_driver_sql(
            f"CREATE TABLE {quoted(name)} (LIKE {PARENT} INCLUDING DEFAULTS "
            f"INCLUDING CONSTRAINTS) WITH ({storage_clause()})"
        )
        await conn.exec_driver_sql(
            f"ALTER TABLE {PARENT} ATTACH PARTITION {quoted(name)} "
            f"FOR VALUES FROM ('{lo}') TO ('{hi}')"
        )
        return 0


async def _move_from_default(
    conn: AsyncConnection, name: str, lo: str, hi: str, default: str
) -> int:
    """Create the partition ``[lo, hi)`` while the default partition holds rows of that
    range: PostgreSQL refuses a partition whose rows are in the default, so they are
    set aside (with the rows that refer to them, the ledger's, which deleting them would
    cascade away), deleted, and inserted again once the partition exists; all in this
    one transaction, with
    ``events`` held exclusively, so nobody sees them missing."""
    await conn.exec_driver_sql(f"LOCK TABLE {PARENT} IN ACCESS EXCLUSIVE MODE")
    params = {"lo": lo, "hi": hi}
    await conn.execute(
        sa.text(
            f"CREATE TEMP TABLE _hookd_moved ON COMMIT DROP AS SELECT {COLUMNS} "  # noqa: S608 - fixed names
            f"FROM {quoted(default)} WHERE id >= :lo AND id < :hi"
        ),
        params,
    )
    refs = await references(conn)
    aside = await set_aside(conn, refs, lo=lo, hi=hi)
    await forget(conn, refs, lo, hi, through=False)
    moved = (
        await conn.execute(
            sa.text(f"DELETE FROM {quoted(default)} WHERE id >= :lo AND id < :hi"),  # noqa: S608 - a quoted catalog name
            params,
        )
    ).rowcount
    await conn.exec_driver_sql(
        f"CREATE TABLE {quoted(name)} PARTITION OF {PARENT} "
        f"FOR VALUES FROM ('{lo}') TO ('{hi}') WITH ({storage_clause()})"
    )
    await conn.exec_driver_sql(
        f"INSERT INTO {PARENT} ({COLUMNS}) SELECT {COLUMNS} FROM _hookd_moved"  # noqa: S608 - fixed names
    )
    await put_back(conn, aside)
    log.warning(
        "events moved out of the default partition",
        extra={"partition": name, "events": moved},
    )
    return int(moved)
