"""PostgreSQL: ``events`` partitioned by day, on its id; created ahead, dropped whole.

The partition key is the primary key itself: ids are ULIDs (``store.ids``) whose first
ten characters are the millisecond they were minted, so the events of one UTC day are
the id range ``[id_floor(day start), id_floor(next day start))``. ``id`` stays the
primary key (a partitioned table's unique keys must contain the partition key, and
this one is nothing else), the foreign key of ``handler_runs`` keeps pointing at it,
and a lookup by id reads one partition.

Every insert path mints the id when it stores the row (``store.events.prepare``),
after the time it records as ``received_at`` (the receiver's request time, a
reconciliation page's repair time): so every row of a day's partition was received
before that day's end, which is what lets a whole partition be judged by its range.

Names: ``events_pYYYYMMDD`` for a day's partition, ``events_default`` for the
default partition, which takes any id no partition covers so that an insert never
fails; it stays empty as long as partitions exist ahead (``ensure``).

- ``ensure`` creates the partitions of yesterday, today and ``AHEAD_DAYS`` days
  ahead that are missing (``hookd db upgrade``, the start of ``serve`` and
  ``worker``, their maintenance schedule, and every ``hookd prune``). A new partition
  is created on its own and then attached (``ATTACH PARTITION`` does not block
  inserts into ``events``; claims, which read every partition, wait the moment the
  default partition is locked). Rows that a missing day left in the default partition
  (a clock ahead, a week without any hookd process running) are moved into the new
  partition in the same transaction.
- ``drop_expired`` (from ``store.prune``, under the prune lease) drops a past day's
  partition once every row in it is past its source's retention for its status and
  none is pending, retrying or processing: first every key is marked in
  ``event_keys`` (``final_status``, ``pruned_at``) and the ledger rows deleted, in
  batches, as row-level prune does; then, in one short transaction that holds
  ``events`` exclusively (``lock_timeout`` bounded), the rows are checked again, the
  last ledger rows deleted and the partition detached (and renamed
  ``…_dropping``); then the keys of rows that changed meanwhile (a replay) are
  marked again, the rows counted into ``prune_totals``, and the table dropped. A
  process that stops between detach and drop leaves an ``…_dropping`` table, which
  the next prune finishes. ``DETACH … CONCURRENTLY`` is not used: PostgreSQL refuses
  it while a default partition exists.

Rows of sources whose retention is shorter than a partition's age are pruned row by
row (``store.prune``), as on SQLite; a partition holding rows of a source that has no
policy (no longer configured, or not chosen with ``--source``) is left alone.

For later migrations: a partition made by ``ensure`` holds its own copies of the
CHECK constraints of ``events`` (``LIKE … INCLUDING CONSTRAINTS``, which ``ATTACH``
requires), so dropping or changing one on ``events`` must do the same on every
partition; indexes and the foreign key are attached ones and follow ``events``.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store.events import mark_pruned
from store.ids import id_floor, id_time_ms
from store.models import EVENTS, PRUNE_TOTALS
from store.status import EventStatus

log = logging.getLogger("hookd.partitions")

PARENT = "events"
DEFAULT = "events_default"
PREFIX = "events_p"
DROPPING = "_dropping"
_NAME = re.compile(r"events_p(\d{8})")
_LEFTOVER = re.compile(r"events_p(\d{8})_dropping")
_BOUND = re.compile(r"FOR VALUES FROM \((.+)\) TO \((.+)\)")
AHEAD_DAYS = 7
BEHIND_DAYS = 1
# A partition is dropped only once its day ended this long ago by the clock (whatever
# ``--as-of`` says): no receiver, even one whose clock runs a little behind, still
# mints ids in its range.
SETTLED = timedelta(days=1)
# How long a partition's DDL waits for the lock it needs before giving up until the
# next run: everything queued behind it waits as long.
LOCK_TIMEOUT_MS = 2_000
# A replay between the marking of a partition's keys and its detach is marked again:
# rows updated since the marking started, less this for the clocks of other hosts.
CLOCK_SKEW = timedelta(minutes=5)
# pg_advisory_xact_lock key for creating partitions: one process at a time.
CREATE_LOCK = 0x686F6F6B64_01
# migration 0005's early vacuum, per partition (a partitioned table takes none itself).
STORAGE = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "10000",
    "autovacuum_vacuum_insert_scale_factor": "0.05",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_vacuum_cost_delay": "0",
}
NOT_FINAL = (EventStatus.PENDING, EventStatus.RETRYING, EventStatus.PROCESSING)
COLUMNS = ", ".join(c.name for c in EVENTS.columns)
# The row of prune_totals that counts the partitions dropped: no source, "day".
DROPPED = "day"
LOCK_NOT_AVAILABLE = "55P03"

Tx = Callable[[], contextlib.AbstractAsyncContextManager[AsyncConnection]]


def storage_clause() -> str:
    return ", ".join(f"{k} = {v}" for k, v in STORAGE.items())


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), UTC)


def bounds(day: date) -> tuple[str, str]:
    """The id range of a UTC day: ``[lo, hi)``."""
    start = day_start(day)
    return _floor(start), _floor(start + timedelta(days=1))


def name_of(day: date) -> str:
    return f"{PREFIX}{day:%Y%m%d}"


def _floor(moment: datetime) -> str:
    return id_floor(int(moment.timestamp() * 1000))


def _quoted(name: str) -> str:
    """A table name as SQL (names come from the catalog or from ``name_of``)."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    lo: str | None  # None: MINVALUE, or the default partition
    hi: str | None  # None: MAXVALUE, or the default partition
    default: bool = False

    def overlaps(self, lo: str, hi: str) -> bool:
        if self.default:
            return False
        return (self.lo is None or self.lo < hi) and (self.hi is None or lo < self.hi)

    @property
    def day(self) -> date | None:
        """The day of one of hookd's own partitions (named and bounded as ``ensure``
        makes them); None for the default and any partition an operator made."""
        found = _NAME.fullmatch(self.name)
        if found is None:
            return None
        try:
            day = datetime.strptime(found.group(1), "%Y%m%d").date()
        except ValueError:
            return None
        return day if (self.lo, self.hi) == bounds(day) else None

    @property
    def end(self) -> datetime | None:
        ms = None if self.hi is None else id_time_ms(self.hi)
        return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


@dataclass(slots=True)
class Ensured:
    created: list[str] = field(default_factory=list)
    moved: int = 0  # rows moved out of the default partition
    postponed: list[str] = field(default_factory=list)  # the lock was not free in time


@dataclass(slots=True)
class Dropped:
    names: list[str] = field(default_factory=list)
    events: dict[str, int] = field(default_factory=dict)  # per source
    kept: dict[str, str] = field(default_factory=dict)  # past partitions kept, and why


@dataclass(frozen=True, slots=True)
class Horizon:
    """One source's retention as moments: rows received before them may go."""

    processed: datetime
    dead: datetime


async def is_partitioned(conn: AsyncConnection) -> bool:
    if conn.dialect.name != "postgresql":
        return False
    kind = (
        await conn.execute(
            sa.text("SELECT relkind::text FROM pg_class WHERE oid = to_regclass(:t)"), {"t": PARENT}
        )
    ).scalar()
    return kind == "p"


async def list_partitions(conn: AsyncConnection) -> list[Partition]:
    """The partitions of ``events``, by lower bound (the default last)."""
    result = await conn.execute(
        sa.text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:t)"
        ),
        {"t": PARENT},
    )
    out = []
    for name, bound in result:
        if bound == "DEFAULT":
            out.append(Partition(name, None, None, default=True))
            continue
        found = _BOUND.fullmatch(bound)
        if found is None:
            raise RuntimeError(f"events: partition {name} has unexpected bounds {bound}")
        out.append(Partition(name, _bound_value(found.group(1)), _bound_value(found.group(2))))
    return sorted(out, key=lambda p: (p.default, p.lo or ""))


def _bound_value(text: str) -> str | None:
    if text in ("MINVALUE", "MAXVALUE"):
        return None
    if not (text.startswith("'") and text.endswith("'")):
        raise RuntimeError(f"events: unexpected partition bound {text}")
    return text[1:-1].replace("''", "'")


async def leftovers(conn: AsyncConnection) -> list[str]:
    """Partitions detached by a drop that stopped before the table was dropped."""
    result = await conn.execute(
        sa.text(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname LIKE :p "
            "AND NOT c.relispartition"
        ),
        {"p": f"{PREFIX}%{DROPPING}"},
    )
    return sorted(r[0] for r in result if _LEFTOVER.fullmatch(r[0]))


def _lock_timeout(exc: sa.exc.DBAPIError) -> bool:
    return getattr(exc.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE


async def _set_lock_timeout(conn: AsyncConnection) -> None:
    await conn.exec_driver_sql(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")


# -- creating ------------------------------------------------------------------------


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
    if engine.dialect.name != "postgresql":
        return done
    async with engine.connect() as conn:
        if not await is_partitioned(conn):
            return done
        parts = await list_partitions(conn)
    for day in wanted_days(now or datetime.now(UTC)):
        lo, hi = bounds(day)
        if any(p.overlaps(lo, hi) for p in parts):
            continue
        try:
            moved = await _create(engine, day)
        except sa.exc.DBAPIError as exc:
            if not _lock_timeout(exc):
                raise
            done.postponed.append(name_of(day))
            continue
        if moved is None:
            continue  # another process creates partitions right now, or did
        done.created.append(name_of(day))
        done.moved += moved
    if done.created:
        log.info("partitions created", extra={"partitions": done.created, "moved": done.moved})
    if done.postponed:
        log.warning("partitions postponed: lock not free", extra={"partitions": done.postponed})
    return done


async def _create(engine: AsyncEngine, day: date) -> int | None:
    """One day's partition; the rows moved out of the default partition (None: another
    process holds the creation lock, or made it meanwhile)."""
    lo, hi = bounds(day)
    name = name_of(day)
    async with engine.begin() as conn:
        await _set_lock_timeout(conn)
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
                sa.text(f"SELECT 1 FROM {_quoted(default)} WHERE id >= :lo AND id < :hi LIMIT 1"),  # noqa: S608 - a quoted catalog name
                {"lo": lo, "hi": hi},
            )
            if strays.first() is not None:
                return await _move_from_default(conn, name, lo, hi, default)
        # Created apart, then attached: ATTACH locks events in a mode that lets the
        # receivers' inserts go on (CREATE … PARTITION OF would block them); what
        # reads every partition (a claim) waits the milliseconds the default
        # partition is held.
        await conn.exec_driver_sql(
            f"CREATE TABLE {_quoted(name)} (LIKE {PARENT} INCLUDING DEFAULTS "
            f"INCLUDING CONSTRAINTS) WITH ({storage_clause()})"
        )
        await conn.exec_driver_sql(
            f"ALTER TABLE {PARENT} ATTACH PARTITION {_quoted(name)} "
            f"FOR VALUES FROM ('{lo}') TO ('{hi}')"
        )
        return 0


async def _move_from_default(
    conn: AsyncConnection, name: str, lo: str, hi: str, default: str
) -> int:
    """Create the partition ``[lo, hi)`` while the default partition holds rows of that
    range: PostgreSQL refuses a partition whose rows are in the default, so they are
    set aside (with their ledger rows, which deleting them would cascade away), deleted,
    and inserted again once the partition exists; all in this one transaction, with
    ``events`` held exclusively, so nobody sees them missing."""
    await conn.exec_driver_sql(f"LOCK TABLE {PARENT} IN ACCESS EXCLUSIVE MODE")
    params = {"lo": lo, "hi": hi}
    await conn.execute(
        sa.text(
            f"CREATE TEMP TABLE _hookd_moved ON COMMIT DROP AS SELECT {COLUMNS} "  # noqa: S608 - fixed names
            f"FROM {_quoted(default)} WHERE id >= :lo AND id < :hi"
        ),
        params,
    )
    await conn.execute(
        sa.text(
            "CREATE TEMP TABLE _hookd_moved_runs ON COMMIT DROP AS SELECT event_id, handler, "
            "finished_at FROM handler_runs WHERE event_id >= :lo AND event_id < :hi"
        ),
        params,
    )
    moved = (
        await conn.execute(
            sa.text(f"DELETE FROM {_quoted(default)} WHERE id >= :lo AND id < :hi"),  # noqa: S608 - a quoted catalog name
            params,
        )
    ).rowcount
    await conn.exec_driver_sql(
        f"CREATE TABLE {_quoted(name)} PARTITION OF {PARENT} "
        f"FOR VALUES FROM ('{lo}') TO ('{hi}') WITH ({storage_clause()})"
    )
    await conn.exec_driver_sql(
        f"INSERT INTO {PARENT} ({COLUMNS}) SELECT {COLUMNS} FROM _hookd_moved"  # noqa: S608 - fixed names
    )
    await conn.exec_driver_sql(
        "INSERT INTO handler_runs (event_id, handler, finished_at) "
        "SELECT event_id, handler, finished_at FROM _hookd_moved_runs"
    )
    log.warning(
        "events moved out of the default partition",
        extra={"partition": name, "events": moved},
    )
    return int(moved)


# -- dropping ------------------------------------------------------------------------


async def _first(conn: AsyncConnection, sql: str, **params: Any) -> Any:
    return (await conn.execute(sa.text(sql), params)).scalar()


async def _unfinished(conn: AsyncConnection, table: str) -> str | None:
    """A status of ``NOT_FINAL`` that a row of ``table`` has; each probe reads the
    ``(status, next_attempt_at)`` index in its order, one entry at most."""
    for status in NOT_FINAL:
        found = await _first(
            conn,
            f"SELECT 1 FROM {table} WHERE status = :s ORDER BY status, next_attempt_at LIMIT 1",  # noqa: S608 - a quoted catalog name
            s=status.value,
        )
        if found is not None:
            return status.value
    return None


async def _sources(conn: AsyncConnection, table: str) -> list[str]:
    """The sources that have rows in ``table``: one probe of the ``(source, id)`` index
    per source (a skip scan), not a read of the rows."""
    out: list[str] = []
    source = await _first(conn, f"SELECT min(source) FROM {table}")  # noqa: S608 - a quoted catalog name
    while source is not None:
        out.append(source)
        source = await _first(
            conn,
            f"SELECT min(source) FROM {table} WHERE source > :s",  # noqa: S608 - a quoted catalog name
            s=source,
        )
    return out


async def blocker(
    conn: AsyncConnection, part: Partition, horizons: Mapping[str, Horizon]
) -> str | None:
    """Why ``part`` cannot be dropped yet; None when every row in it may go."""
    table = _quoted(part.name)
    end = part.end
    assert end is not None
    status = await _unfinished(conn, table)
    if status is not None:
        return f"holds {status} events"
    for source in await _sources(conn, table):
        horizon = horizons.get(source)
        if horizon is None:
            return f"holds events of source {source!r}, which has no retention policy here"
        for status, until in (
            (EventStatus.PROCESSED, horizon.processed),
            (EventStatus.DEAD, horizon.dead),
        ):
            if end <= until:
                continue
            # In the (status, next_attempt_at) index's order: the rows of that status
            # only, never a read of the whole day for a status it does not hold.
            held = await _first(
                conn,
                f"SELECT 1 FROM {table} WHERE status = :st AND source = :s "  # noqa: S608 - a quoted catalog name
                "ORDER BY status, next_attempt_at LIMIT 1",
                s=source,
                st=status.value,
            )
            if held is not None:
                return f"holds {status.value} events of source {source!r} still kept"
    return None


async def candidates(conn: AsyncConnection, wall: datetime) -> list[Partition]:
    """hookd's own partitions whose day ended at least ``SETTLED`` before ``wall``."""
    return [
        p
        for p in await list_partitions(conn)
        if p.day is not None and p.end is not None and p.end <= wall - SETTLED
    ]


async def would_drop(
    engine: AsyncEngine, horizons: Mapping[str, Horizon], wall: datetime
) -> Dropped:
    """A dry run: the partitions ``drop_expired`` would drop, and why the others stay."""
    out = Dropped()
    async with engine.connect() as conn:
        if not await is_partitioned(conn):
            return out
        for part in await candidates(conn, wall):
            reason = await blocker(conn, part, horizons)
            if reason is None:
                out.names.append(part.name)
            else:
                out.kept[part.name] = reason
    return out


class _Dropper:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        now: datetime,
        tx: Tx,
        stopping: Callable[[], bool],
        batch: int,
    ) -> None:
        self.engine = engine
        self.now = now
        self.tx = tx
        self.stopping = stopping
        self.batch = batch

    async def mark(self, name: str) -> bool:
        """Mark the key of every row of ``name`` and delete its ledger rows, a batch a
        transaction; False when stopped before the end."""
        table = _quoted(name)
        after = ""
        while not self.stopping():
            async with self.tx() as conn:
                rows = (
                    await conn.execute(
                        sa.text(
                            f"SELECT id, source, dedupe_key, status FROM {table} "  # noqa: S608 - a quoted catalog name
                            "WHERE id > :after ORDER BY id LIMIT :n"
                        ),
                        {"after": after, "n": self.batch},
                    )
                ).all()
                if not rows:
                    return True
                await self._mark_rows(conn, rows)
            after = rows[-1].id
            if len(rows) < self.batch:
                return True
        return False

    async def _mark_rows(self, conn: AsyncConnection, rows: Sequence[Any]) -> None:
        await mark_pruned(conn, [(r.source, r.dedupe_key, r.status) for r in rows], self.now)
        # By the id range of the batch (read in id order): a range of the ledger's
        # primary key, which no planner estimate turns into a scan of the ledger.
        ids = sorted(r.id for r in rows)
        await conn.execute(
            sa.text("DELETE FROM handler_runs WHERE event_id >= :lo AND event_id <= :hi"),
            {"lo": ids[0], "hi": ids[-1]},
        )

    async def detach(self, part: Partition) -> str | None:
        """Detach ``part`` (renamed ``…_dropping``) if its rows are still all final;
        None when they are not, or when ``events`` could not be locked in time."""
        try:
            async with self.tx() as conn:
                await _set_lock_timeout(conn)
                # DETACH needs this lock; taken first, so the check below sees the rows
                # as they will be detached.
                await conn.exec_driver_sql(f"LOCK TABLE {PARENT} IN ACCESS EXCLUSIVE MODE")
                table = _quoted(part.name)
                await _still_final(conn, table)
                # Ledger rows a replay wrote since the marking: the foreign key would
                # refuse the detach.
                await conn.execute(
                    sa.text("DELETE FROM handler_runs WHERE event_id >= :lo AND event_id < :hi"),
                    {"lo": part.lo, "hi": part.hi},
                )
                await conn.exec_driver_sql(f"ALTER TABLE {PARENT} DETACH PARTITION {table}")
                leftover = part.name + DROPPING
                await conn.exec_driver_sql(f"ALTER TABLE {table} RENAME TO {_quoted(leftover)}")
                return leftover
        except _Changed:
            return None
        except sa.exc.DBAPIError as exc:
            if not _lock_timeout(exc):
                raise
            log.warning("partition drop postponed: events is busy", extra={"partition": part.name})
            return None

    async def finish(self, leftover: str, changed_since: datetime | None) -> dict[str, int]:
        """Mark again the keys of rows changed since ``changed_since`` (a replay during
        the drop), count the rows into ``prune_totals`` and drop the table, in one
        transaction; the rows per source."""
        table = _quoted(leftover)
        async with self.tx() as conn:
            if changed_since is not None:
                changed = (
                    await conn.execute(
                        sa.text(
                            f"SELECT id, source, dedupe_key, status FROM {table} "  # noqa: S608 - a quoted catalog name
                            "WHERE updated_at >= :t"
                        ),
                        {"t": changed_since},
                    )
                ).all()
                if changed:
                    await self._mark_rows(conn, changed)
            counts = {
                r[0]: int(r[1])
                for r in await conn.execute(
                    sa.text(f"SELECT source, count(*) FROM {table} GROUP BY source")  # noqa: S608 - a quoted catalog name
                )
            }
            for source, n in counts.items():
                await add_total(conn, source, "event", n)
            await add_total(conn, "", DROPPED, 1)
            await conn.exec_driver_sql(f"DROP TABLE {table}")
        return counts


class _Changed(Exception):
    """A row of the partition is not final any more (replayed): keep it."""


async def _still_final(conn: AsyncConnection, table: str) -> None:
    if await _unfinished(conn, table) is not None:
        raise _Changed


async def add_total(conn: AsyncConnection, source: str, what: str, n: int) -> None:
    """Add to ``prune_totals`` (PostgreSQL); partitions dropped count as ('', ``DROPPED``)."""
    if not n:
        return
    stmt = postgresql.insert(PRUNE_TOTALS).values(source=source, what=what, count=n)
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["source", "what"],
            set_={"count": PRUNE_TOTALS.c.count + stmt.excluded.count},
        )
    )


async def drop_expired(
    engine: AsyncEngine,
    horizons: Mapping[str, Horizon],
    *,
    now: datetime,
    wall: datetime,
    tx: Tx,
    stopping: Callable[[], bool],
    batch: int,
) -> Dropped:
    """Drop every partition that may go (see the module's text), oldest first; first
    finish the drops a stopped prune left. ``now`` is the prune's time (``--as-of``:
    the retention and ``pruned_at``), ``wall`` the clock (which partitions are past)."""
    done = Dropped()
    async with engine.connect() as conn:
        if not await is_partitioned(conn):
            return done
        left = await leftovers(conn)
        parts = await candidates(conn, wall)
    dropper = _Dropper(engine, now=now, tx=tx, stopping=stopping, batch=batch)

    def count(counts: dict[str, int]) -> None:
        for source, n in counts.items():
            done.events[source] = done.events.get(source, 0) + n

    for leftover in left:
        if not await dropper.mark(leftover):
            return done
        count(await dropper.finish(leftover, None))
        done.names.append(leftover.removesuffix(DROPPING))
    for part in parts:
        if stopping():
            break
        async with engine.connect() as conn:
            reason = await blocker(conn, part, horizons)
        if reason is not None:
            done.kept[part.name] = reason
            continue
        started = datetime.now(UTC)
        if not await dropper.mark(part.name):
            break
        detached = await dropper.detach(part)
        if detached is None:
            done.kept[part.name] = "changed or busy while it was dropped: tried again next time"
            continue
        count(await dropper.finish(detached, started - CLOCK_SKEW))
        done.names.append(part.name)
    if done.names:
        log.info("partitions dropped", extra={"partitions": done.names})
    return done
