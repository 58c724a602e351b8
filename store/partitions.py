"""PostgreSQL: ``events`` partitioned by day, on its id; created ahead, dropped whole
or compacted.

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
  batches (``store.prune.MARK_BATCH``), each locking its rows: a replay waits for
  the batch and then refuses the event, its key a tombstone and its ledger gone
  (``store.claims.being_pruned``); one that locked the event first makes it pending,
  and the batch leaves its key and ledger alone. Then, in one short transaction that holds
  ``events`` exclusively (``lock_timeout`` bounded), the rows are checked again, the
  last ledger rows deleted and the partition detached (and renamed
  ``…_dropping``); then the keys of rows that changed meanwhile (a replay) are
  marked again, the rows counted into ``prune_totals``, and the table dropped. A
  process that stops between detach and drop leaves an ``…_dropping`` table, which
  the next prune finishes. ``DETACH … CONCURRENTLY`` is not used: PostgreSQL refuses
  it while a default partition exists. The locks are taken in an order that cannot
  deadlock with a worker's commit (``_hold``); not free, the detach is tried again
  (``BUSY_TRIES``), then left to the next prune.
- ``compact`` (from ``drop_expired``) rebuilds a past day that cannot go whole only
  because some of its rows are kept longer than its processed ones (dead events kept
  ``keep_dead_days``, unfinished ones kept until they finish): once every processed
  row in it is past its source's ``keep_events_days`` (and at least
  ``COMPACT_MIN_GOING`` of them, at most ``COMPACT_MAX_KEPT`` rows staying), the rows
  that stay are copied into a new table (``…_compacting``) while the keys of the others
  are marked and their ledger rows deleted, in batches, as for a drop; then, in one
  short transaction holding ``events`` (``lock_timeout`` bounded), the rows that
  changed since they were copied (by ``xmin``: a replay, a retry, a claim) are copied
  again, the rows of other tables that refer to the ones staying are set aside, the
  day's partition detached (``…_dropping``, without the rows that stay) and the new
  table attached in its place, under the same name and bounds, and the set-aside rows
  put back; then ``finish`` counts and drops the old table as for a drop. The ids,
  the rows' contents and what refers to them are the same before and after; the
  space of the day's processed rows goes back to the file system at once, instead of
  staying in a partition no insert reuses until its dead rows' retention passes.

Tables that refer to ``events`` by a foreign key (the handler ledger, and any other
found in the catalog) have their rows of a partition's events deleted before it is
detached (the foreign key refuses a detach otherwise), by id range: such a table
needs an index that starts with its referring column.

Rows of sources whose retention is shorter than a partition's age are pruned row by
row (``store.prune``), as on SQLite; a partition holding rows of a source that has no
policy (no longer configured, or not chosen with ``--source``) is left alone.

For later migrations: a partition made by ``ensure`` holds its own copies of the
CHECK constraints of ``events`` (``LIKE … INCLUDING CONSTRAINTS``, which ``ATTACH``
requires), so dropping or changing one on ``events`` must do the same on every
partition; indexes and the foreign key are attached ones and follow ``events``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from time import monotonic
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
# A detach (drop or compaction) that could not have its locks is tried again this many
# times, after this many seconds times the attempt, before it is left to the next prune.
BUSY_TRIES = 5
BUSY_WAIT_S = 0.2
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
# A day is compacted only when it frees at least this many processed rows (fewer are
# cheaper to delete row by row) and keeps at most this many (copied twice at worst,
# and read again while ``events`` is held: 100 events/s with 1% dead is 86,400 a day).
COMPACT_MIN_GOING = 1_000
COMPACT_MAX_KEPT = 200_000
COMPACTING = "_compacting"

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
    compacted: list[str] = field(default_factory=list)  # kept, rebuilt with their kept rows

    def add(self, events: Mapping[str, int]) -> None:
        for source, n in events.items():
            self.events[source] = self.events.get(source, 0) + n


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


async def _hold(conn: AsyncConnection, refs: Sequence[Reference]) -> None:
    """The locks a detach takes, in an order that cannot deadlock with processing:
    ``events`` first (waiting at most ``LOCK_TIMEOUT_MS``, holding nothing else), then
    the tables that refer to it, which DETACH holds in SHARE mode, without waiting (a
    worker's commit writes the ledger before ``events`` and its history after: waiting
    for either while holding ``events`` could close a cycle with it). Not free: the
    lock error, and the transaction is given up, to be tried again (``BUSY_TRIES``)."""
    await _set_lock_timeout(conn)
    await conn.exec_driver_sql(f"LOCK TABLE {PARENT} IN ACCESS EXCLUSIVE MODE")
    if refs:
        tables = ", ".join(r.table for r in refs)
        await conn.exec_driver_sql(f"LOCK TABLE {tables} IN SHARE MODE NOWAIT")


# -- what refers to events ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reference:
    """A table whose foreign key (one column) refers to ``events``: both as SQL."""

    table: str
    column: str


async def references(conn: AsyncConnection) -> list[Reference]:
    """Every table that refers to ``events`` (the handler ledger, and whatever later
    migrations add), read from the catalog so that none is forgotten."""
    result = await conn.execute(
        sa.text(
            "SELECT c.conrelid::regclass::text, quote_ident(a.attname) FROM pg_constraint c "
            "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] "
            "WHERE c.contype = 'f' AND c.confrelid = to_regclass(:t) "
            "AND cardinality(c.conkey) = 1 ORDER BY 1, 2"
        ),
        {"t": PARENT},
    )
    return [Reference(r[0], r[1]) for r in result]


async def _columns(conn: AsyncConnection, table: str) -> str:
    """The stored columns of ``table`` (by the catalog, in its order) as a SQL list:
    what a copy names, whatever migrations added since this code was written."""
    found = await conn.execute(
        sa.text(
            "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute "
            "WHERE attrelid = to_regclass(:t) AND attnum > 0 AND NOT attisdropped "
            "AND attgenerated = ''"
        ),
        {"t": table},
    )
    columns = found.scalar()
    if not columns:
        raise RuntimeError(f"{table}: no columns found in the catalog")
    return str(columns)


async def _forget(
    conn: AsyncConnection,
    refs: Sequence[Reference],
    lo: str,
    hi: str,
    *,
    through: bool,
    keep: Sequence[str] = (),
) -> None:
    """Delete the rows of ``refs`` that refer to events of ids ``[lo, hi)`` (``through``:
    ``[lo, hi]``) but those in ``keep``: a range of each table's referring index."""
    below = "<=" if through else "<"
    for ref in refs:
        sql = f"DELETE FROM {ref.table} WHERE {ref.column} >= :lo AND {ref.column} {below} :hi"  # noqa: S608 - names from the catalog
        params: dict[str, Any] = {"lo": lo, "hi": hi}
        if keep:
            sql += f" AND {ref.column} <> ALL(CAST(:keep AS text[]))"
            params["keep"] = list(keep)
        await conn.execute(sa.text(sql), params)


async def _set_aside(
    conn: AsyncConnection,
    refs: Sequence[Reference],
    *,
    lo: str | None = None,
    hi: str | None = None,
    ids: Sequence[str] = (),
) -> list[tuple[Reference, str, str]]:
    """Copy the rows of ``refs`` that refer to events of ids ``[lo, hi)``, or to the
    events ``ids`` (a probe of the referring index each, ``LATERAL … OFFSET 0``:
    never planned as a scan of the table), into temporary tables dropped at commit;
    (reference, table, columns) each, for ``_put_back``."""
    aside = []
    for n, ref in enumerate(refs):
        temp = f"_hookd_refs_{n}"
        columns = await _columns(conn, ref.table)
        if lo is not None and hi is not None:
            col = ref.column
            rows = f"SELECT {columns} FROM {ref.table} WHERE {col} >= :lo AND {col} < :hi"  # noqa: S608 - names from the catalog
            params: dict[str, Any] = {"lo": lo, "hi": hi}
        else:
            rows = (
                "SELECT r.* FROM unnest(CAST(:ids AS text[])) AS k(id) CROSS JOIN LATERAL "  # noqa: S608 - names from the catalog
                f"(SELECT {columns} FROM {ref.table} WHERE {ref.column} = k.id OFFSET 0) AS r"
            )
            params = {"ids": list(ids)}
        await conn.execute(sa.text(f"CREATE TEMP TABLE {temp} ON COMMIT DROP AS {rows}"), params)
        aside.append((ref, temp, columns))
    return aside


async def _put_back(conn: AsyncConnection, aside: Sequence[tuple[Reference, str, str]]) -> None:
    for ref, temp, columns in aside:
        await conn.exec_driver_sql(
            f"INSERT INTO {ref.table} ({columns}) OVERRIDING SYSTEM VALUE "  # noqa: S608 - names from the catalog
            f"SELECT {columns} FROM {temp}"
        )


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
    set aside (with the rows that refer to them, the ledger's, which deleting them would
    cascade away), deleted, and inserted again once the partition exists; all in this
    one transaction, with
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
    refs = await references(conn)
    aside = await _set_aside(conn, refs, lo=lo, hi=hi)
    await _forget(conn, refs, lo, hi, through=False)
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
    await _put_back(conn, aside)
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
            (EventStatus.SUPERSEDED, horizon.processed),
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
                if await compactable(conn, part, horizons):
                    out.compacted.append(part.name)
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
        self._refs: list[Reference] | None = None
        self.busy = False  # the last detach could not have its locks

    async def refs(self, conn: AsyncConnection) -> list[Reference]:
        if self._refs is None:
            self._refs = await references(conn)
        return self._refs

    async def mark(self, name: str, *, attached: bool = True) -> bool:
        """Mark the key of every row of ``name`` and (``attached``: a partition still
        in ``events``) delete what refers to them, a batch a transaction; False when
        stopped before the end. Nothing can refer to the rows of a detached table: the
        foreign key refused the detach while anything did, and refuses new rows since;
        and a range of ids there may hold rows that a compaction kept in ``events``."""
        table = _quoted(name)
        after = ""
        while not self.stopping():
            async with self.tx() as conn:
                # Locked (attached: a replay may hold one; it is waited for), so the
                # statuses read are those the batch commits with: a row a replay made
                # pending first keeps its key and its ledger, and its day stays
                # (``detach``). A replay after this batch finds the tombstone and
                # refuses (``store.claims.being_pruned``).
                lock = " FOR UPDATE" if attached else ""
                rows = (
                    await conn.execute(
                        sa.text(
                            f"SELECT id, source, dedupe_key, status FROM {table} "  # noqa: S608 - a quoted catalog name
                            f"WHERE id > :after ORDER BY id LIMIT :n{lock}"
                        ),
                        {"after": after, "n": self.batch},
                    )
                ).all()
                if not rows:
                    return True
                final = [r for r in rows if r.status not in NOT_FINAL]
                await mark_pruned(
                    conn, [(r.source, r.dedupe_key, r.status) for r in final], self.now
                )
                if attached:
                    # By the id range of the batch (read in id order): a range of the
                    # ledger's primary key, which no planner estimate turns into a scan.
                    await _forget(
                        conn,
                        await self.refs(conn),
                        rows[0].id,
                        rows[-1].id,
                        through=True,
                        keep=[r.id for r in rows if r.status in NOT_FINAL],
                    )
            after = rows[-1].id
            if len(rows) < self.batch:
                return True
        return False

    async def detach(self, part: Partition) -> str | None:
        """Detach ``part`` (renamed ``…_dropping``) if its rows are still all final;
        None when they are not, or when ``events`` could not be locked in time."""
        try:
            async with self.tx() as conn:
                # DETACH needs these locks; taken first, so the check below sees the
                # rows as they will be detached.
                await _hold(conn, await self.refs(conn))
                table = _quoted(part.name)
                await _still_final(conn, table)
                # Ledger rows a replay wrote since the marking: the foreign key would
                # refuse the detach.
                assert part.lo is not None
                assert part.hi is not None
                await _forget(conn, await self.refs(conn), part.lo, part.hi, through=False)
                await conn.exec_driver_sql(f"ALTER TABLE {PARENT} DETACH PARTITION {table}")
                leftover = part.name + DROPPING
                await conn.exec_driver_sql(f"ALTER TABLE {table} RENAME TO {_quoted(leftover)}")
                return leftover
        except _Changed:
            return None
        except sa.exc.DBAPIError as exc:
            if not _lock_timeout(exc):
                raise
            self.busy = True
            return None

    async def retrying(self, name: str, step: Callable[[], Awaitable[str | None]]) -> str | None:
        """``step`` (a detach), tried again while it could not have its locks."""
        for attempt in range(1, BUSY_TRIES + 1):
            self.busy = False
            done = await step()
            if done is not None or not self.busy or self.stopping():
                return done
            if attempt < BUSY_TRIES:
                await asyncio.sleep(BUSY_WAIT_S * attempt)
        log.warning(
            "partition left for the next prune: events is busy",
            extra={"partition": name, "tries": BUSY_TRIES},
        )
        return None

    async def finish(
        self, leftover: str, changed_since: datetime | None, *, whole: bool = True
    ) -> dict[str, int]:
        """Mark again the keys of rows changed since ``changed_since`` (a replay during
        the drop), count the rows into ``prune_totals`` (``whole``: and the partition
        into the partitions dropped) and drop the table, in one transaction; the rows
        per source."""
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
                    await mark_pruned(
                        conn, [(r.source, r.dedupe_key, r.status) for r in changed], self.now
                    )
            counts = {
                r[0]: int(r[1])
                for r in await conn.execute(
                    sa.text(f"SELECT source, count(*) FROM {table} GROUP BY source")  # noqa: S608 - a quoted catalog name
                )
            }
            for source, n in counts.items():
                await add_total(conn, source, "event", n)
            if whole:
                await add_total(conn, "", DROPPED, 1)
            await conn.exec_driver_sql(f"DROP TABLE {table}")
        return counts

    async def take(self, part: Partition, horizons: Mapping[str, Horizon], done: Dropped) -> bool:
        """Drop ``part`` if every row in it may go, else compact it if that is worth it,
        else leave it (``done`` says which and why); False when stopped."""
        async with self.engine.connect() as conn:
            reason = await blocker(conn, part, horizons)
            worth = reason is not None and await compactable(conn, part, horizons)
        if reason is not None:
            done.kept[part.name] = reason
            if worth:
                compacted = await self.compact(part, horizons)
                if compacted is not None:
                    done.add(compacted)
                    done.compacted.append(part.name)
            return True
        started = datetime.now(UTC)
        if not await self.mark(part.name):
            return False
        detached = await self.retrying(part.name, lambda: self.detach(part))
        if detached is None:
            done.kept[part.name] = "changed or busy while it was dropped: tried again next time"
            return True
        done.add(await self.finish(detached, started - CLOCK_SKEW))
        done.names.append(part.name)
        return True

    # -- compacting ------------------------------------------------------------------

    async def compact(
        self, part: Partition, horizons: Mapping[str, Horizon]
    ) -> dict[str, int] | None:
        """Rebuild ``part`` with only the rows that stay (see the module's text); the
        rows that went, per source. None when it was not done (stopped, more rows stay
        than ``COMPACT_MAX_KEPT``, or ``events`` was busy): ``part`` is as it was, its
        rows pruned row by row meanwhile."""
        started = datetime.now(UTC)
        staging = part.name + COMPACTING
        copied = await self.copy_staying(part, staging, horizons)
        leftover = None
        if copied is not None:
            leftover = await self.retrying(
                part.name, lambda: self.swap(part, staging, horizons, copied)
            )
        if leftover is None:
            async with self.tx() as conn:
                await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_quoted(staging)}")
            return None
        return await self.finish(leftover, started - CLOCK_SKEW, whole=False)

    async def copy_staying(
        self, part: Partition, staging: str, horizons: Mapping[str, Horizon]
    ) -> dict[str, str] | None:
        """Copy the rows of ``part`` that stay into a new table ``staging``, and mark the
        keys of the others and delete what refers to them, a batch a transaction; the
        copied ids with their row versions (``xmin``), None when stopped or too many."""
        table = _quoted(part.name)
        end = part.end
        assert end is not None
        async with self.tx() as conn:
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_quoted(staging)}")
            await conn.exec_driver_sql(
                f"CREATE TABLE {_quoted(staging)} (LIKE {PARENT} INCLUDING DEFAULTS "
                f"INCLUDING CONSTRAINTS INCLUDING INDEXES) WITH ({storage_clause()})"
            )
            columns = await _columns(conn, PARENT)
        copied: dict[str, str] = {}
        after = ""
        while not self.stopping():
            async with self.tx() as conn:
                rows = (
                    await conn.execute(
                        sa.text(
                            f"SELECT id, source, dedupe_key, status FROM {table} "  # noqa: S608 - a quoted catalog name
                            # Locked, as ``mark`` does: a row replayed first stays.
                            "WHERE id > :after ORDER BY id LIMIT :n FOR UPDATE"
                        ),
                        {"after": after, "n": self.batch},
                    )
                ).all()
                if not rows:
                    return copied
                stay = [r.id for r in rows if not _goes(r.source, r.status, end, horizons)]
                if len(copied) + len(stay) > COMPACT_MAX_KEPT:
                    log.info(
                        "partition not compacted: too many rows stay",
                        extra={"partition": part.name, "limit": COMPACT_MAX_KEPT},
                    )
                    return None
                kept = set(stay)
                gone = [r for r in rows if r.id not in kept]
                await mark_pruned(
                    conn, [(r.source, r.dedupe_key, r.status) for r in gone], self.now
                )
                await _forget(
                    conn, await self.refs(conn), rows[0].id, rows[-1].id, through=True, keep=stay
                )
                if stay:
                    copied |= await _copy_rows(conn, table, _quoted(staging), stay, columns)
            after = rows[-1].id
            if len(rows) < self.batch:
                return copied
        return None

    async def swap(
        self,
        part: Partition,
        staging: str,
        horizons: Mapping[str, Horizon],
        copied: Mapping[str, str],
    ) -> str | None:
        """In one transaction holding ``events``: bring ``staging`` up to date with the
        rows of ``part`` that stay, detach ``part`` (renamed ``…_dropping``, the rows
        that stay deleted from it) and attach ``staging`` in its place, what refers to
        the rows that stay set aside and put back; the detached table's name, None
        when ``events`` was busy."""
        table = _quoted(part.name)
        end = part.end
        assert end is not None
        assert part.lo is not None
        assert part.hi is not None
        leftover = part.name + DROPPING
        try:
            async with self.tx() as conn:
                await _hold(conn, await self.refs(conn))
                held = monotonic()
                columns = await _columns(conn, PARENT)
                staying = await _staying(conn, table, end, horizons)
                # Copied, then changed (a retry, a claim, a replay): copied again. Copied,
                # then gone (processed meanwhile): out of staging, its key marked.
                changed = [i for i, r in staying.items() if copied.get(i) != r.version]
                gone = [i for i in copied if i not in staying]
                if changed or gone:
                    stale = f"DELETE FROM {_quoted(staging)} WHERE id = ANY(CAST(:ids AS text[]))"  # noqa: S608 - a quoted catalog name
                    await conn.execute(sa.text(stale), {"ids": changed + gone})
                if changed:
                    await _copy_rows(conn, table, _quoted(staging), changed, columns)
                    # Judged gone when first read, its key marked; replayed since: it stays.
                    await unmark(
                        conn, [(staying[i].source, staying[i].dedupe_key) for i in changed]
                    )
                if gone:
                    rows = (
                        await conn.execute(
                            _by_ids(table, "id, source, dedupe_key, status"), {"ids": gone}
                        )
                    ).all()
                    await mark_pruned(
                        conn, [(r.source, r.dedupe_key, r.status) for r in rows], self.now
                    )
                refs = await self.refs(conn)
                aside = await _set_aside(conn, refs, ids=list(staying))
                await _forget(conn, refs, part.lo, part.hi, through=False)
                await conn.exec_driver_sql(f"ALTER TABLE {PARENT} DETACH PARTITION {table}")
                await conn.exec_driver_sql(f"ALTER TABLE {table} RENAME TO {_quoted(leftover)}")
                await conn.exec_driver_sql(f"ALTER TABLE {_quoted(staging)} RENAME TO {table}")
                await conn.exec_driver_sql(
                    f"ALTER TABLE {PARENT} ATTACH PARTITION {table} "
                    f"FOR VALUES FROM ('{part.lo}') TO ('{part.hi}')"
                )
                if staying:
                    moved = (
                        f"DELETE FROM {_quoted(leftover)} "  # noqa: S608 - a quoted catalog name
                        "WHERE ctid = ANY(CAST(CAST(:at AS text[]) AS tid[]))"
                    )
                    await conn.execute(sa.text(moved), {"at": [r.place for r in staying.values()]})
                await _put_back(conn, aside)
        except sa.exc.DBAPIError as exc:
            if not _lock_timeout(exc):
                raise
            self.busy = True
            return None
        log.info(
            "partition compacted",
            extra={
                "partition": part.name,
                "kept": len(staying),
                "recopied": len(changed),
                "held_ms": round((monotonic() - held) * 1000, 1),
            },
        )
        return leftover


@dataclass(frozen=True, slots=True)
class _Staying:
    source: str
    dedupe_key: str
    version: str  # xmin: changes with every update of the row
    place: str  # ctid, while events is held


def _goes(source: str, status: str, end: datetime, horizons: Mapping[str, Horizon]) -> bool:
    """Whether a row of ``source`` and ``status`` in a partition ending at ``end`` may go:
    dead ones by ``keep_dead_days``, unfinished ones never, the others (processed) by
    ``keep_events_days``; a source without a policy keeps its rows."""
    horizon = horizons.get(source)
    if horizon is None or status in NOT_FINAL:
        return False
    if status == EventStatus.DEAD:
        return end <= horizon.dead
    return end <= horizon.processed


def _by_ids(table: str, columns: str) -> sa.TextClause:
    """The rows of ``table`` whose ids are ``:ids``: a probe of its primary key each
    (``LATERAL … OFFSET 0``), whatever the statistics say."""
    return sa.text(
        f"SELECT t.* FROM unnest(CAST(:ids AS text[])) AS k(id) CROSS JOIN LATERAL "  # noqa: S608 - a quoted catalog name
        f"(SELECT {columns} FROM {table} AS e WHERE e.id = k.id OFFSET 0) AS t"
    )


async def _copy_rows(
    conn: AsyncConnection, source: str, target: str, ids: Sequence[str], columns: str
) -> dict[str, str]:
    """Copy the rows ``ids`` of ``source`` into ``target`` in one statement (one
    snapshot); their ids and versions (``xmin``) as copied."""
    picked = ", ".join(f"e.{c}" for c in columns.split(", "))
    sql = (
        "WITH picked AS (SELECT t.* FROM unnest(CAST(:ids AS text[])) AS k(id) "  # noqa: S608 - quoted catalog names
        f"CROSS JOIN LATERAL (SELECT e.xmin::text AS hookd_version, {picked} "
        f"FROM {source} AS e WHERE e.id = k.id OFFSET 0) AS t), "
        f"copied AS (INSERT INTO {target} ({columns}) SELECT {columns} FROM picked) "
        "SELECT id, hookd_version FROM picked"
    )
    result = await conn.execute(sa.text(sql), {"ids": list(ids)})
    return {r[0]: r[1] for r in result}


async def _statuses(conn: AsyncConnection, table: str) -> list[str]:
    """The statuses rows of ``table`` have: a skip scan of its ``(status, …)`` index."""
    out: list[str] = []
    status = await _first(conn, f"SELECT min(status) FROM {table}")  # noqa: S608 - a quoted catalog name
    while status is not None:
        out.append(status)
        status = await _first(
            conn,
            f"SELECT min(status) FROM {table} WHERE status > :s",  # noqa: S608 - a quoted catalog name
            s=status,
        )
    return out


async def _staying(
    conn: AsyncConnection, table: str, end: datetime, horizons: Mapping[str, Horizon]
) -> dict[str, _Staying]:
    """The rows of ``table`` that stay when it is compacted, by id: its unfinished and
    dead ones (the status index's entries of those statuses only), less dead ones past
    their retention."""
    out: dict[str, _Staying] = {}
    for status in await _statuses(conn, table):
        if status not in NOT_FINAL and status != EventStatus.DEAD:
            continue
        result = await conn.execute(
            sa.text(
                f"SELECT id, source, dedupe_key, status, xmin::text AS version, "  # noqa: S608 - a quoted catalog name
                f"ctid::text AS place FROM {table} WHERE status = :s "
                "ORDER BY status, next_attempt_at"
            ),
            {"s": status},
        )
        for r in result:
            if not _goes(r.source, r.status, end, horizons):
                out[r.id] = _Staying(r.source, r.dedupe_key, r.version, r.place)
    return out


async def compactable(
    conn: AsyncConnection, part: Partition, horizons: Mapping[str, Horizon]
) -> bool:
    """Whether ``part``, which cannot go whole, is worth compacting: every source in it
    has a policy whose ``keep_events_days`` it is past, at least ``COMPACT_MIN_GOING``
    processed rows would go and at most ``COMPACT_MAX_KEPT`` rows stay (counted as the
    rows unfinished or dead: a few index probes, never a read of the day)."""
    table = _quoted(part.name)
    end = part.end
    assert end is not None
    for source in await _sources(conn, table):
        horizon = horizons.get(source)
        if horizon is None or end > horizon.processed:
            return False
    going = await _first(
        conn,
        f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE status = :s "  # noqa: S608 - a quoted catalog name
        "ORDER BY status, next_attempt_at LIMIT :n) AS x",
        s=EventStatus.PROCESSED.value,
        n=COMPACT_MIN_GOING,
    )
    if int(going) < COMPACT_MIN_GOING:
        return False
    staying = 0
    for status in await _statuses(conn, table):
        if status not in NOT_FINAL and status != EventStatus.DEAD:
            continue
        staying += int(
            await _first(
                conn,
                f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE status = :s "  # noqa: S608 - a quoted catalog name
                "ORDER BY status, next_attempt_at LIMIT :n) AS x",
                s=status,
                n=COMPACT_MAX_KEPT + 1 - staying,
            )
        )
        if staying > COMPACT_MAX_KEPT:
            return False
    return True


async def unmark(conn: AsyncConnection, keys: Sequence[tuple[str, str]]) -> None:
    """Clear the tombstone marks of these (source, dedupe_key): their rows stay."""
    if not keys:
        return
    await conn.execute(
        sa.text(
            "UPDATE event_keys AS k SET final_status = NULL, pruned_at = NULL "
            "FROM unnest(CAST(:sources AS text[]), CAST(:keys AS text[])) AS v(source, dedupe_key) "
            "WHERE k.source = v.source AND k.dedupe_key = v.dedupe_key AND k.pruned_at IS NOT NULL"
        ),
        {"sources": [k[0] for k in keys], "keys": [k[1] for k in keys]},
    )


async def stale_staging(conn: AsyncConnection) -> list[str]:
    """Tables a compaction stopped while copying left (never attached): dropped."""
    result = await conn.execute(
        sa.text(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname LIKE :p "
            "AND NOT c.relispartition"
        ),
        {"p": f"{PREFIX}%{COMPACTING}"},
    )
    return sorted(r[0] for r in result)


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
        stale = await stale_staging(conn)
    dropper = _Dropper(engine, now=now, tx=tx, stopping=stopping, batch=batch)
    for name in stale:
        async with tx() as conn:
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_quoted(name)}")

    for leftover in left:
        if not await dropper.mark(leftover, attached=False):
            return done
        done.add(await dropper.finish(leftover, None))
        done.names.append(leftover.removesuffix(DROPPING))
    for part in parts:
        if stopping() or not await dropper.take(part, horizons, done):
            break
    if done.names:
        log.info("partitions dropped", extra={"partitions": done.names})
    if done.compacted:
        log.info("partitions compacted", extra={"partitions": done.compacted})
    return done
