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
5. ``rejected``: refused requests (``rejected_requests``) received more than 7 days
   ago, and beyond the 1,000 newest of their source (``store.intake.rejected``); a
   source no longer configured is pruned the same way.

Events pending, retrying or being processed are never touched, nor their bodies.

The age of a row is the time it was received (``received_at``); the time-ordered id
minted when it was stored is the index that finds the old rows (``(source, id)``),
so a row goes once both are older than the cutoff. Not ``processed_at``: a dead row
has none, and a key's horizon runs from delivery, not from processing.

On PostgreSQL, whose ``events`` is partitioned by day (``store.retention.partitions``), a
prune first makes the partitions ahead that are missing and drops every past day
whose rows may all go (their keys marked and ledger deleted as in step 1, then the
partition detached and dropped), and rebuilds a past day whose processed rows may go
but whose dead or unfinished ones stay with only those (compacted); the steps above
then take what is left, row by row.
It ends by analyzing the tables whose statistics went stale (``store.retention.analyze``).

The steps are ``store.retention.steps``; the lease, ``store.retention.lease``.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store import db, dialect
from store.intake import rejected as rejected_rows
from store.intake.sqlite_write import SQLITE_PRAGMAS
from store.models import EVENT_KEYS, EVENTS, RECONCILE_RUNS, RECONCILE_STATE
from store.retention import analyze, partition_catalog, partition_create, partition_drop
from store.retention import partitions as parts
from store.retention.lease import LEASE_S, RELEASE_S, LeaseLost, acquire, release, wall_clock
from store.retention.steps import (
    PAUSE_RATIO,
    Cutoffs,
    Pruner,
    bodies_of,
    events_of,
    keys_of,
    runs_of,
)
from store.status import EventStatus

log = logging.getLogger("hookd.prune")

BATCH = 500
# A day's partition marks its keys and deletes its ledger rows in batches of this
# many events (``store.retention.partitions``): one locking read of the batch, one ``UPDATE …
# FROM unnest`` of its keys and one ``DELETE`` of its id range in the ledger, each a
# walk of a primary key. At 100 events a second that is about 1,700 batches a day
# instead of 17,000 at ``BATCH``, and 40% less time in all (a transaction, the
# lease's renewal and the round trips paid a tenth as often); a batch holds only
# its own rows, all of a past day, for a few hundred milliseconds, and the pause
# after it stays ``PAUSE_RATIO`` times as long.
MARK_BATCH = 5_000
# What a prune counts, as hookd_pruned_total's ``what`` label says it.
WHATS = ("body", "event", "key", "run", "rejected")
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
    rejected: int = 0

    def total(self) -> int:
        return self.body + self.event + self.key + self.run + self.rejected

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


def cutoffs(policy: Policy, now: datetime) -> Cutoffs:
    """``policy`` as moments, if the time were ``now``."""
    return Cutoffs(
        events=now - timedelta(days=policy.keep_events_days),
        dead=now - timedelta(days=policy.keep_dead_days),
        body=now - timedelta(days=policy.keep_body_days),
        keys=now - timedelta(days=policy.keep_keys_days),
    )


def _horizon(policy: Policy, now: datetime) -> partition_drop.Horizon:
    cuts = cutoffs(policy, now)
    return partition_drop.Horizon(processed=cuts.events, dead=cuts.dead)


async def _source(pruner: Pruner, source: str, policy: Policy) -> Counts:
    """Every step for one source, in order."""
    cuts = cutoffs(policy, pruner.now)
    counts = Counts()
    counts.event += await pruner.events(source, EventStatus.PROCESSED, cuts.events)
    # Superseded ([sources.order]): final like processed, kept as long.
    counts.event += await pruner.events(source, EventStatus.SUPERSEDED, cuts.events)
    counts.event += await pruner.events(source, EventStatus.DEAD, cuts.dead)
    counts.body += await pruner.bodies(source, cuts)
    counts.key += await pruner.keys(source, cuts.keys)
    counts.run += await pruner.runs(source, cuts.events)
    counts.rejected += await pruner.rejected(source)
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
    if dry_run:
        return await _dry_run(engine, policies, now)
    horizons = {s: _horizon(p, now) for s, p in policies.items()}
    if not await acquire(engine, owner, lease_s, wall_clock(), due_before=due_before):
        return Pruned(lease_held=True)
    pruner = Pruner(
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
        await _prune(pruner, policies, horizons, done, mark_batch=mark_batch)
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
    await release(engine, owner, finished_at=None if done.stopped else wall_clock())
    return done


async def _dry_run(engine: AsyncEngine, policies: Mapping[str, Policy], now: datetime) -> Pruned:
    """What a prune would remove, and the partitions it would drop, keep and compact."""
    horizons = {s: _horizon(p, now) for s, p in policies.items()}
    async with engine.connect() as conn:
        done = Pruned({s: await _would(conn, s, p, now) for s, p in policies.items()})
        for source, n in (await rejected_rows.would_prune(conn, now)).items():
            done.counts.setdefault(source, Counts()).rejected = n
        done.partitioned = await partition_catalog.is_partitioned(conn)
    would = await parts.would_drop(engine, horizons, wall_clock())
    done.partitions_dropped, done.partitions_kept = would.names, would.kept
    done.partitions_compacted = would.compacted
    return done


async def _prune(
    pruner: Pruner,
    policies: Mapping[str, Policy],
    horizons: Mapping[str, partition_drop.Horizon],
    done: Pruned,
    *,
    mark_batch: int,
) -> None:
    """The prune under its lease, into ``done``: whole partitions, each source's
    steps, the SQLite file's free pages, the stale statistics."""
    engine = pruner.engine
    async with engine.connect() as conn:
        done.partitioned = await partition_catalog.is_partitioned(conn)
    if done.partitioned:
        await _partitions(pruner, horizons, done, mark_batch=mark_batch)
    for source, policy in policies.items():
        if pruner.stopping():
            break
        counts = await _source(pruner, source, policy)
        counts.event += done.counts.get(source, Counts()).event
        done.counts[source] = counts
    async with engine.connect() as conn:
        others = [s for s in await rejected_rows.sources_with_rows(conn) if s not in policies]
    for source in others:  # refusals filed under a source no longer configured
        if pruner.stopping():
            break
        gone = await pruner.rejected(source)
        if gone:
            done.counts[source] = Counts(rejected=gone)
    if any(c.total() for c in done.counts.values()):
        done.vacuumed_pages = await incremental_vacuum(engine, pruner.stop)
    # PostgreSQL: statistics a prune (or the traffic since the last) left stale.
    done.analyzed = await analyze.analyze_stale(engine)


async def _partitions(
    pruner: Pruner, horizons: Mapping[str, partition_drop.Horizon], done: Pruned, *, mark_batch: int
) -> None:
    """Whole partitions first: what they hold then needs no row-level delete. A failure
    there (a privilege missing, say) leaves the rows to the steps after."""
    engine = pruner.engine
    try:
        done.partitions_created = (await partition_create.ensure(engine)).created
        dropped = await parts.drop_expired(
            engine,
            horizons,
            now=pruner.now,
            wall=wall_clock(),
            tx=pruner.tx,
            stopping=pruner.stopping,
            batch=mark_batch,
        )
    except sa.exc.DBAPIError as exc:
        log.warning("partitions not maintained", extra={"error": " ".join(str(exc.orig).split())})
        return
    done.partitions_dropped, done.partitions_kept = dropped.names, dropped.kept
    done.partitions_compacted = dropped.compacted
    for source, n in dropped.events.items():
        done.counts.setdefault(source, Counts()).event += n


async def _would(conn: AsyncConnection, source: str, policy: Policy, now: datetime) -> Counts:
    """A dry run: what ``_source`` would remove, counted in the same order (a
    key goes in the same run as its row when both are old enough)."""
    cuts = cutoffs(policy, now)

    async def count(table: sa.Table, where: sa.ColumnElement[bool]) -> int:
        query = sa.select(sa.func.count()).select_from(table).where(where)
        return int((await conn.execute(query)).scalar_one())

    going = sa.or_(
        events_of(source, EventStatus.PROCESSED, cuts.events),
        events_of(source, EventStatus.SUPERSEDED, cuts.events),
        events_of(source, EventStatus.DEAD, cuts.dead),
    )
    last_run = (
        await conn.execute(
            sa.select(RECONCILE_STATE.c.last_run_id).where(RECONCILE_STATE.c.source == source)
        )
    ).scalar()
    return Counts(
        body=await count(EVENTS, bodies_of(source, cuts)),
        event=await count(EVENTS, going),
        key=await count(EVENT_KEYS, keys_of(source, cuts.keys))
        + await count(EVENTS, sa.and_(going, EVENTS.c.received_at < cuts.keys)),
        run=await count(RECONCILE_RUNS, runs_of(source, cuts.events, last_run)),
    )


async def incremental_vacuum(engine: AsyncEngine, stop: asyncio.Event | None = None) -> int:
    """SQLite with ``auto_vacuum = INCREMENTAL``: hand the free pages back to the file
    system, ``VACUUM_PAGES`` a statement; the pages handed back. Anything else: 0
    (PostgreSQL's autovacuum reuses the space; a SQLite file made before hookd set
    the mode keeps its size and reuses its free pages, see docs/operations.md)."""
    if dialect.is_postgres(engine):
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
