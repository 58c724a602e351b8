"""Retention: what ``hookd prune`` (and the schedule of ``serve`` and ``worker``) removes.

Per source and in this order, each step in batches of ``BATCH`` rows, one short
transaction a batch followed by a pause as long (``PAUSE_RATIO``), so a prune never
holds a long lock, never blocks ingest (which writes only new rows and new keys),
leaves most of the machine to ingest and processing, and can be stopped at any
point and run again:

1. ``event``: processed events received more than ``keep_events_days`` ago, and dead
   ones more than ``keep_dead_days`` ago. In one transaction per batch: their
   handler ledger rows and their history (``event_history``, counted with its event,
   not apart) are deleted, the rows deleted (``RETURNING`` their status,
   re-checked by the ``DELETE`` itself, so an event replayed meanwhile stays), and
   their keys in ``event_keys`` marked with ``final_status`` and ``pruned_at``: the
   key stays, as the tombstone that keeps answering redeliveries as duplicates.
2. ``body``: bodies and headers of processed events received more than
   ``keep_body_days`` ago are set to NULL and ``{}``. Dead events keep theirs until
   their row goes: they are there to be replayed. Found by the partial index
   ``ix_events_body`` (rows that still have a body): a prune reads only the rows it
   clears, never again those an earlier prune cleared.
3. ``key``: tombstones of events received more than ``keep_keys_days`` ago. A key is
   never deleted while its event row exists.
4. ``run``: finished reconcile runs started more than ``keep_events_days`` ago (never
   a source's last run), their counters first added to ``reconcile_run_totals``.

Events pending, retrying or being processed are never touched, nor their bodies.

The age of a row is the time it was received (``received_at``); the time-ordered id
minted when it was stored is the index that finds the old rows (``(source, id)``),
so a row goes once both are older than the cutoff. Not ``processed_at``: a dead row
has none, and a key's horizon runs from delivery, not from processing.

On PostgreSQL, whose ``events`` is partitioned by day (``store.partitions``), a
prune first makes the partitions ahead that are missing and drops every past day
whose rows may all go (their keys marked and ledger deleted as in step 1, then the
partition detached and dropped), and rebuilds a past day whose processed rows may go
but whose dead or unfinished ones stay with only those (compacted); the steps above
then take what is left, row by row.
It ends by analyzing the tables whose statistics went stale (``store.analyze``).

Each batch adds what it removed to ``prune_totals`` in its own transaction (the
counter ``hookd_pruned_total``). One process prunes at a time: ``prune`` takes the
lease in ``maintenance_state`` first, and each batch renews it (and stops if another
process took it over).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store import analyze, db
from store import partitions as parts
from store.claims import one_of
from store.events import mark_pruned
from store.ids import id_floor
from store.models import (
    EVENT_HISTORY,
    EVENT_KEYS,
    EVENTS,
    HANDLER_RUNS,
    MAINTENANCE_STATE,
    PRUNE_TOTALS,
    RECONCILE_RUN_TOTALS,
    RECONCILE_RUNS,
    RECONCILE_STATE,
)
from store.sqlite_write import SQLITE_PRAGMAS
from store.status import DONE_RUN_STATUSES, EventStatus

log = logging.getLogger("hookd.prune")

BATCH = 500
# A day's partition marks its keys and deletes its ledger rows in batches of this
# many events (``store.partitions``): one locking read of the batch, one ``UPDATE …
# FROM unnest`` of its keys and one ``DELETE`` of its id range in the ledger, each a
# walk of a primary key. At 100 events a second that is about 1,700 batches a day
# instead of 17,000 at ``BATCH``, and 40% less time in all (a transaction, the
# lease's renewal and the round trips paid a tenth as often); a batch holds only
# its own rows, all of a past day, for a few hundred milliseconds, and the pause
# after it stays ``PAUSE_RATIO`` times as long.
MARK_BATCH = 5_000
TASK = "prune"
# The prune lease, renewed by every batch: a process that died holding it delays the
# next prune by at most this long.
LEASE_S = 300.0
RELEASE_S = 2.0
# After each batch, prune waits this many times as long as the batch took (at most
# PAUSE_MAX_S): on a busy machine it takes at most about half of what one database
# connection can do, and ingest and processing keep the rest; idle, a prune takes
# about twice as long as it would flat out (bench/prune_load.py).
PAUSE_RATIO = 1.0
PAUSE_MAX_S = 1.0
# What a prune counts, as hookd_pruned_total's ``what`` label says it.
WHATS = ("body", "event", "key", "run")
# Pages handed back to the file system per statement after a prune (SQLite, 4 KiB
# each): each statement is a short write transaction of its own.
VACUUM_PAGES = 2_000


@dataclass(frozen=True, slots=True)
class Policy:
    """One source's retention, in days (``hookd.sources.RetentionConfig``)."""

    keep_body_days: float
    keep_events_days: float
    keep_dead_days: float
    keep_keys_days: float


@dataclass(slots=True)
class Counts:
    """What was (or, in a dry run, would be) removed from one source."""

    body: int = 0
    event: int = 0
    key: int = 0
    run: int = 0

    def total(self) -> int:
        return self.body + self.event + self.key + self.run

    def as_dict(self) -> dict[str, int]:
        return {what: getattr(self, what) for what in WHATS}


@dataclass(slots=True)
class Pruned:
    """A prune's outcome: counts per source, whether it was stopped before the end
    (shutdown, or the lease lost), the SQLite pages handed back, and on a partitioned
    PostgreSQL ``events`` the partitions created and dropped (would be, in a dry run)
    and the past ones kept, with why."""

    counts: dict[str, Counts] = field(default_factory=dict)
    stopped: bool = False
    vacuumed_pages: int = 0
    lease_held: bool = False  # another process was pruning: nothing was done
    partitioned: bool = False
    partitions_created: list[str] = field(default_factory=list)
    partitions_dropped: list[str] = field(default_factory=list)
    partitions_kept: dict[str, str] = field(default_factory=dict)
    # Past ones kept, rebuilt with only their rows still kept (dead, unfinished).
    partitions_compacted: list[str] = field(default_factory=list)
    analyzed: list[str] = field(default_factory=list)  # tables whose statistics were stale


class LeaseLost(Exception):
    """Another process took the prune lease over (ours expired): stop here."""


@dataclass(frozen=True, slots=True)
class _Cutoffs:
    events: datetime
    dead: datetime
    body: datetime
    keys: datetime

    @classmethod
    def of(cls, policy: Policy, now: datetime) -> _Cutoffs:
        return cls(
            events=now - timedelta(days=policy.keep_events_days),
            dead=now - timedelta(days=policy.keep_dead_days),
            body=now - timedelta(days=policy.keep_body_days),
            keys=now - timedelta(days=policy.keep_keys_days),
        )


def _horizon(policy: Policy, now: datetime) -> parts.Horizon:
    cuts = _Cutoffs.of(policy, now)
    return parts.Horizon(processed=cuts.events, dead=cuts.dead)


def _floor(moment: datetime) -> str:
    return id_floor(int(moment.timestamp() * 1000))


def _older(
    id_col: sa.ColumnElement[str], time_col: sa.ColumnElement[datetime], cut: datetime
) -> sa.ColumnElement[bool]:
    """Received before ``cut``: by the time-ordered id (what the index walks) and by
    the recorded time."""
    return sa.and_(id_col < _floor(cut), time_col < cut)


def _events_of(source: str, status: EventStatus, cut: datetime) -> sa.ColumnElement[bool]:
    return sa.and_(
        EVENTS.c.source == source,
        EVENTS.c.status == status,
        _older(EVENTS.c.id, EVENTS.c.received_at, cut),
    )


def _bodies_of(source: str, cuts: _Cutoffs) -> sa.ColumnElement[bool]:
    """Processed events past ``keep_body_days`` with a body, and not past
    ``keep_events_days`` (those go whole, in the step before).

    ``body IS NOT NULL`` is the predicate of the partial index ``ix_events_body``
    (source, id), written as a literal so that every plan matches it: the step walks
    the rows that still have a body, not the window of rows cleared at earlier
    prunes (migration 0015 says why an index rather than a stored watermark)."""
    return sa.and_(
        _events_of(source, EventStatus.PROCESSED, cuts.body),
        EVENTS.c.body.is_not(None),
        sa.not_(_older(EVENTS.c.id, EVENTS.c.received_at, cuts.events)),
    )


def _keys_of(source: str, cut: datetime) -> sa.ColumnElement[bool]:
    return sa.and_(
        EVENT_KEYS.c.source == source,
        EVENT_KEYS.c.pruned_at.is_not(None),
        EVENT_KEYS.c.received_at < cut,
    )


def _runs_of(source: str, cut: datetime, last_run: str | None) -> sa.ColumnElement[bool]:
    return sa.and_(
        RECONCILE_RUNS.c.source == source,
        RECONCILE_RUNS.c.status.in_(DONE_RUN_STATUSES),
        _older(RECONCILE_RUNS.c.id, RECONCILE_RUNS.c.started_at, cut),
        RECONCILE_RUNS.c.id != (last_run or ""),
    )


async def live_events(conn: AsyncConnection, event_ids: list[str]) -> set[str]:
    """Those of ``event_ids`` whose row is in ``events``. On PostgreSQL one probe of the
    primary key per id (``LATERAL … OFFSET 0``: never planned as a scan of events)."""
    if not event_ids:
        return set()
    if conn.dialect.name == "postgresql":
        result = await conn.execute(
            sa.text(
                "SELECT k.id FROM unnest(CAST(:ids AS text[])) AS k(id) CROSS JOIN LATERAL "
                "(SELECT 1 FROM events AS e WHERE e.id = k.id OFFSET 0) AS found"
            ),
            {"ids": event_ids},
        )
    else:
        result = await conn.execute(sa.select(EVENTS.c.id).where(EVENTS.c.id.in_(event_ids)))
    return {r[0] for r in result}


async def _delete_keys(conn: AsyncConnection, source: str, cut: datetime, keys: list[str]) -> int:
    """Delete these tombstones of ``source`` (still past ``cut``); how many went. On
    PostgreSQL a join to the primary key, a unique probe per key whatever the
    statistics."""
    if not keys:
        return 0
    if conn.dialect.name == "postgresql":
        result = await conn.execute(
            sa.text(
                "DELETE FROM event_keys AS k USING unnest(CAST(:keys AS text[])) AS v(key) "
                "WHERE k.source = :source AND k.dedupe_key = v.key "
                "AND k.pruned_at IS NOT NULL AND k.received_at < :cut"
            ).bindparams(sa.bindparam("cut", type_=EVENT_KEYS.c.received_at.type)),
            {"keys": keys, "source": source, "cut": cut},
        )
    else:
        result = await conn.execute(
            sa.delete(EVENT_KEYS).where(_keys_of(source, cut), EVENT_KEYS.c.dedupe_key.in_(keys))
        )
    return int(result.rowcount)


def _insert(conn: AsyncConnection, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)


def _pick(conn: AsyncConnection, query: sa.Select[Any]) -> sa.Select[Any]:
    """On PostgreSQL, rows another transaction holds (a replay) are left to the next run."""
    if conn.dialect.name == "postgresql":
        return query.with_for_update(skip_locked=True)
    return query


async def _count(conn: AsyncConnection, source: str, what: str, n: int) -> None:
    if not n:
        return
    stmt = _insert(conn, PRUNE_TOTALS).values(source=source, what=what, count=n)
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["source", "what"],
            set_={"count": PRUNE_TOTALS.c.count + stmt.excluded.count},
        )
    )


class _Pruner:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        now: datetime,
        batch: int,
        owner: str,
        lease_s: float,
        stop: asyncio.Event | None,
        pause_ratio: float = PAUSE_RATIO,
    ) -> None:
        self.engine = engine
        self.now = now
        self.batch = batch
        self.owner = owner
        self.lease_s = lease_s
        self.stop = stop
        self.pause_ratio = pause_ratio

    def stopping(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    @contextlib.asynccontextmanager
    async def _tx(self) -> AsyncIterator[AsyncConnection]:
        """One batch's transaction, beginning with the renewal of the lease: a write
        first, so that on SQLite the batch holds the write lock from its start (a read
        first could not write any more once ingest committed in between). Committed,
        it pauses ``pause_ratio`` times as long as it took (``PAUSE_RATIO``)."""
        started = time.monotonic()
        async with self.engine.begin() as conn:
            if not await renew(conn, self.owner, self.lease_s, _wall_clock()):
                raise LeaseLost(TASK)
            yield conn
        if self.pause_ratio > 0 and not self.stopping():
            took = time.monotonic() - started
            await asyncio.sleep(min(PAUSE_MAX_S, took * self.pause_ratio))

    async def events(self, source: str, status: EventStatus, cut: datetime) -> int:
        done = 0
        after = ""
        while not self.stopping():
            async with self._tx() as conn:
                ids = [
                    r[0]
                    for r in await conn.execute(
                        _pick(
                            conn,
                            sa.select(EVENTS.c.id)
                            .where(_events_of(source, status, cut), EVENTS.c.id > after)
                            .order_by(EVENTS.c.id)
                            .limit(self.batch),
                        )
                    )
                ]
                if not ids:
                    return done
                after = ids[-1]
                # The status is checked again by the DELETE itself (PostgreSQL's rows are
                # locked since they were picked; SQLite's writer is this transaction).
                gone = (
                    await conn.execute(
                        sa.delete(EVENTS)
                        .where(one_of(conn, EVENTS.c.id, ids), EVENTS.c.status == status)
                        .returning(EVENTS.c.id, EVENTS.c.dedupe_key)
                    )
                ).all()
                keys = [r.dedupe_key for r in gone]
                if gone and conn.dialect.name != "postgresql":
                    # ON DELETE CASCADE did it already where foreign keys are enforced
                    # (always on PostgreSQL, where an ``= ANY`` list of ids could be
                    # planned as a scan of the whole ledger without statistics). The
                    # history goes with its event, as the ledger does.
                    for table in (HANDLER_RUNS, EVENT_HISTORY):
                        await conn.execute(
                            sa.delete(table).where(
                                one_of(conn, table.c.event_id, [r.id for r in gone])
                            )
                        )
                if gone:
                    await mark_pruned(conn, [(source, k, status) for k in keys], self.now)
                await _count(conn, source, "event", len(keys))
            done += len(keys)
            if len(ids) < self.batch:
                return done
        return done

    async def bodies(self, source: str, cuts: _Cutoffs) -> int:
        done = 0
        after = ""
        while not self.stopping():
            async with self._tx() as conn:
                ids = [
                    r[0]
                    for r in await conn.execute(
                        _pick(
                            conn,
                            sa.select(EVENTS.c.id)
                            .where(_bodies_of(source, cuts), EVENTS.c.id > after)
                            .order_by(EVENTS.c.id)
                            .limit(self.batch),
                        )
                    )
                ]
                if not ids:
                    return done
                after = ids[-1]
                result = await conn.execute(
                    sa.update(EVENTS)
                    .where(
                        one_of(conn, EVENTS.c.id, ids),
                        EVENTS.c.status == EventStatus.PROCESSED,
                        EVENTS.c.body.is_not(None),
                    )
                    .values(body=None, headers={})
                )
                await _count(conn, source, "body", result.rowcount)
            done += result.rowcount
            if len(ids) < self.batch:
                return done
        return done

    async def keys(self, source: str, cut: datetime) -> int:
        done = 0
        while not self.stopping():
            async with self._tx() as conn:
                picked = (
                    await conn.execute(
                        _pick(
                            conn,
                            sa.select(EVENT_KEYS.c.dedupe_key, EVENT_KEYS.c.event_id)
                            .where(_keys_of(source, cut))
                            .order_by(EVENT_KEYS.c.received_at)
                            .limit(self.batch),
                        )
                    )
                ).all()
                if not picked:
                    return done
                # Never a key whose row is still there: a day partition whose drop
                # was given up after its keys were marked (an event replayed meanwhile)
                # keeps its rows. Such keys are unmarked, to be marked again when their
                # rows go.
                live = await live_events(conn, [r.event_id for r in picked])
                if live:
                    await conn.execute(
                        sa.update(EVENT_KEYS)
                        .where(EVENT_KEYS.c.source == source, EVENT_KEYS.c.event_id.in_(live))
                        .values(final_status=None, pruned_at=None)
                    )
                keys = [r.dedupe_key for r in picked if r.event_id not in live]
                removed = await _delete_keys(conn, source, cut, keys)
                await _count(conn, source, "key", removed)
            done += removed
            if len(picked) < self.batch or not (removed or live):
                return done
        return done

    async def runs(self, source: str, cut: datetime) -> int:
        done = 0
        while not self.stopping():
            async with self._tx() as conn:
                last_run = (
                    await conn.execute(
                        sa.select(RECONCILE_STATE.c.last_run_id).where(
                            RECONCILE_STATE.c.source == source
                        )
                    )
                ).scalar()
                picked = (
                    await conn.execute(
                        _pick(
                            conn,
                            sa.select(
                                RECONCILE_RUNS.c.id,
                                RECONCILE_RUNS.c.status,
                                RECONCILE_RUNS.c.dry_run,
                                RECONCILE_RUNS.c.items_missing,
                                RECONCILE_RUNS.c.rate_limited,
                                RECONCILE_RUNS.c.items_late,
                            )
                            .where(_runs_of(source, cut, last_run))
                            .order_by(RECONCILE_RUNS.c.id)
                            .limit(self.batch),
                        )
                    )
                ).all()
                if not picked:
                    return done
                sums: dict[tuple[str, bool], list[int]] = {}
                for run in picked:
                    total = sums.setdefault((run.status, bool(run.dry_run)), [0, 0, 0, 0])
                    total[0] += 1
                    total[1] += run.items_missing
                    total[2] += run.rate_limited
                    total[3] += run.items_late
                for (status, dry_run), (runs, missing, limited, late) in sums.items():
                    stmt = _insert(conn, RECONCILE_RUN_TOTALS).values(
                        source=source,
                        status=status,
                        dry_run=dry_run,
                        runs=runs,
                        missing=missing,
                        rate_limited=limited,
                        late=late,
                    )
                    await conn.execute(
                        stmt.on_conflict_do_update(
                            index_elements=["source", "status", "dry_run"],
                            set_={
                                "runs": RECONCILE_RUN_TOTALS.c.runs + stmt.excluded.runs,
                                "missing": RECONCILE_RUN_TOTALS.c.missing + stmt.excluded.missing,
                                "rate_limited": RECONCILE_RUN_TOTALS.c.rate_limited
                                + stmt.excluded.rate_limited,
                                "late": RECONCILE_RUN_TOTALS.c.late + stmt.excluded.late,
                            },
                        )
                    )
                await conn.execute(
                    sa.delete(RECONCILE_RUNS).where(
                        one_of(conn, RECONCILE_RUNS.c.id, [r.id for r in picked])
                    )
                )
                await _count(conn, source, "run", len(picked))
            done += len(picked)
            if len(picked) < self.batch:
                return done
        return done

    async def source(self, source: str, policy: Policy) -> Counts:
        cuts = _Cutoffs.of(policy, self.now)
        counts = Counts()
        counts.event += await self.events(source, EventStatus.PROCESSED, cuts.events)
        # Superseded ([sources.order]): final like processed, kept as long.
        counts.event += await self.events(source, EventStatus.SUPERSEDED, cuts.events)
        counts.event += await self.events(source, EventStatus.DEAD, cuts.dead)
        counts.body += await self.bodies(source, cuts)
        counts.key += await self.keys(source, cuts.keys)
        counts.run += await self.runs(source, cuts.events)
        return counts


async def prune(
    engine: AsyncEngine,
    policies: Mapping[str, Policy],
    *,
    now: datetime,
    owner: str,
    dry_run: bool = False,
    batch: int = BATCH,
    lease_s: float = LEASE_S,
    stop: asyncio.Event | None = None,
    due_before: datetime | None = None,
    pause_ratio: float = PAUSE_RATIO,
    mark_batch: int = MARK_BATCH,
) -> Pruned:
    """Apply each source's policy as if the time were ``now``; see the module's text.
    Each batch is followed by a pause of ``pause_ratio`` times its own time (0: none);
    ``mark_batch``: the batch of a partition's marking (``MARK_BATCH``).

    Takes the prune lease for ``owner`` first (with ``due_before``: only if the last
    prune finished before then, see ``acquire``) and gives it back at the end; every
    batch renews it. Held by another process: nothing is done (``Pruned.lease_held``).
    A lost lease or ``stop`` ends the prune between two batches, with what was done
    so far (``Pruned.stopped``). ``dry_run`` counts what would go and changes nothing
    (it takes no lease)."""
    horizons = {s: _horizon(p, now) for s, p in policies.items()}
    if dry_run:
        async with engine.connect() as conn:
            done = Pruned({s: await _would(conn, s, p, now) for s, p in policies.items()})
            done.partitioned = await parts.is_partitioned(conn)
        would = await parts.would_drop(engine, horizons, _wall_clock())
        done.partitions_dropped, done.partitions_kept = would.names, would.kept
        done.partitions_compacted = would.compacted
        return done
    if not await acquire(engine, owner, lease_s, _wall_clock(), due_before=due_before):
        return Pruned(lease_held=True)
    pruner = _Pruner(
        engine,
        now=now,
        batch=batch,
        owner=owner,
        lease_s=lease_s,
        stop=stop,
        pause_ratio=pause_ratio,
    )
    done = Pruned()
    try:
        async with engine.connect() as conn:
            done.partitioned = await parts.is_partitioned(conn)
        if done.partitioned:
            # Whole partitions first: what they hold then needs no row-level delete. A
            # failure there (a privilege missing, say) leaves the rows to the steps below.
            try:
                done.partitions_created = (await parts.ensure(engine)).created
                dropped = await parts.drop_expired(
                    engine,
                    horizons,
                    now=now,
                    wall=_wall_clock(),
                    tx=pruner._tx,
                    stopping=pruner.stopping,
                    batch=mark_batch,
                )
            except sa.exc.DBAPIError as exc:
                log.warning(
                    "partitions not maintained", extra={"error": " ".join(str(exc.orig).split())}
                )
            else:
                done.partitions_dropped, done.partitions_kept = dropped.names, dropped.kept
                done.partitions_compacted = dropped.compacted
                for source, n in dropped.events.items():
                    done.counts.setdefault(source, Counts()).event += n
        for source, policy in policies.items():
            if pruner.stopping():
                break
            counts = await pruner.source(source, policy)
            counts.event += done.counts.get(source, Counts()).event
            done.counts[source] = counts
        if any(c.total() for c in done.counts.values()):
            done.vacuumed_pages = await incremental_vacuum(engine, stop)
        # PostgreSQL: statistics a prune (or the traffic since the last) left stale.
        done.analyzed = await analyze.analyze_stale(engine)
    except LeaseLost:
        done.stopped = True
        return done  # not ours any more: nothing to give back
    except BaseException:
        # Cancelled (a shutdown) or failed (the database went away): give the lease
        # back if that can be done quickly, so the next prune need not wait it out.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(release(engine, owner, finished_at=None), RELEASE_S)
        raise
    done.stopped = pruner.stopping()
    await release(engine, owner, finished_at=None if done.stopped else _wall_clock())
    return done


async def _would(conn: AsyncConnection, source: str, policy: Policy, now: datetime) -> Counts:
    """A dry run: what ``_Pruner.source`` would remove, counted in the same order (a
    key goes in the same run as its row when both are old enough)."""
    cuts = _Cutoffs.of(policy, now)

    async def count(table: sa.Table, where: sa.ColumnElement[bool]) -> int:
        query = sa.select(sa.func.count()).select_from(table).where(where)
        return int((await conn.execute(query)).scalar_one())

    going = sa.or_(
        _events_of(source, EventStatus.PROCESSED, cuts.events),
        _events_of(source, EventStatus.SUPERSEDED, cuts.events),
        _events_of(source, EventStatus.DEAD, cuts.dead),
    )
    last_run = (
        await conn.execute(
            sa.select(RECONCILE_STATE.c.last_run_id).where(RECONCILE_STATE.c.source == source)
        )
    ).scalar()
    return Counts(
        body=await count(EVENTS, _bodies_of(source, cuts)),
        event=await count(EVENTS, going),
        key=await count(EVENT_KEYS, _keys_of(source, cuts.keys))
        + await count(EVENTS, sa.and_(going, EVENTS.c.received_at < cuts.keys)),
        run=await count(RECONCILE_RUNS, _runs_of(source, cuts.events, last_run)),
    )


async def incremental_vacuum(engine: AsyncEngine, stop: asyncio.Event | None = None) -> int:
    """SQLite with ``auto_vacuum = INCREMENTAL``: hand the free pages back to the file
    system, ``VACUUM_PAGES`` a statement; the pages handed back. Anything else: 0
    (PostgreSQL's autovacuum reuses the space; a SQLite file made before hookd set
    the mode keeps its size and reuses its free pages, see docs/operations.md)."""
    if engine.dialect.name != "sqlite":
        return 0
    path = db.sqlite_path(engine.url.render_as_string(hide_password=False))
    if path is None:
        return 0
    return await asyncio.to_thread(_vacuum_file, path, stop)


def _vacuum_file(path: str, stop: asyncio.Event | None) -> int:
    conn = sqlite3.connect(path, timeout=5, isolation_level=None)
    try:
        for pragma in SQLITE_PRAGMAS:
            conn.execute(pragma)
        if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:  # 2: INCREMENTAL
            return 0
        freed = 0
        while not (stop is not None and stop.is_set()):
            before = conn.execute("PRAGMA freelist_count").fetchone()[0]
            if not before:
                break
            # Each step of the statement frees one page: read it to the end.
            conn.execute(f"PRAGMA incremental_vacuum({VACUUM_PAGES})").fetchall()
            after = conn.execute("PRAGMA freelist_count").fetchone()[0]
            freed += before - after
            if after >= before:
                break
        return freed
    finally:
        conn.close()


# -- the lease -----------------------------------------------------------------------


def _wall_clock() -> datetime:
    return datetime.now(UTC)


async def acquire(
    engine: AsyncEngine,
    owner: str,
    lease_s: float,
    now: datetime,
    *,
    due_before: datetime | None = None,
) -> bool:
    """Take the prune lease if nobody holds it (or it expired): one prune at a time,
    everywhere. With ``due_before``, only if the last prune finished before that
    moment (or never ran): what the schedules of every process share."""
    async with engine.begin() as conn:
        await conn.execute(
            _insert(conn, MAINTENANCE_STATE)
            .values(task=TASK, updated_at=now)
            .on_conflict_do_nothing(index_elements=["task"])
        )
        free = sa.or_(
            MAINTENANCE_STATE.c.lease_owner.is_(None), MAINTENANCE_STATE.c.lease_expires_at < now
        )
        query = sa.update(MAINTENANCE_STATE).where(MAINTENANCE_STATE.c.task == TASK, free)
        if due_before is not None:
            query = query.where(
                sa.or_(
                    MAINTENANCE_STATE.c.last_finished_at.is_(None),
                    MAINTENANCE_STATE.c.last_finished_at < due_before,
                )
            )
        result = await conn.execute(
            query.values(
                lease_owner=owner,
                lease_expires_at=now + timedelta(seconds=lease_s),
                last_started_at=now,
                updated_at=now,
            )
        )
        return bool(result.rowcount)


async def renew(conn: AsyncConnection, owner: str, lease_s: float, now: datetime) -> bool:
    result = await conn.execute(
        sa.update(MAINTENANCE_STATE)
        .where(MAINTENANCE_STATE.c.task == TASK, MAINTENANCE_STATE.c.lease_owner == owner)
        .values(lease_expires_at=now + timedelta(seconds=lease_s))
    )
    return bool(result.rowcount)


async def release(engine: AsyncEngine, owner: str, *, finished_at: datetime | None) -> None:
    """Give the lease back; ``finished_at`` records a prune that went to its end."""
    values: dict[str, datetime | None] = {
        "lease_owner": None,
        "lease_expires_at": None,
        "updated_at": _wall_clock(),
    }
    if finished_at is not None:
        values["last_finished_at"] = finished_at
    async with engine.begin() as conn:
        await conn.execute(
            sa.update(MAINTENANCE_STATE)
            .where(MAINTENANCE_STATE.c.task == TASK, MAINTENANCE_STATE.c.lease_owner == owner)
            .values(values)
        )


async def last_finished(engine: AsyncEngine) -> datetime | None:
    async with engine.connect() as conn:
        return (
            await conn.execute(
                sa.select(MAINTENANCE_STATE.c.last_finished_at).where(
                    MAINTENANCE_STATE.c.task == TASK
                )
            )
        ).scalar()


async def lease_holder(engine: AsyncEngine) -> tuple[str | None, datetime | None]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(
                    MAINTENANCE_STATE.c.lease_owner, MAINTENANCE_STATE.c.lease_expires_at
                ).where(MAINTENANCE_STATE.c.task == TASK)
            )
        ).first()
    return (None, None) if row is None else (row.lease_owner, row.lease_expires_at)
