"""PostgreSQL: ``events`` partitioned by day, on its id; created ahead, dropped whole
or compacted.

The partition key is the primary key itself: ids are ULIDs (``store.ids``) whose first
ten characters are the millisecond they were minted, so the events of one UTC day are
the id range ``[id_floor(day start), id_floor(next day start))``. ``id`` stays the
primary key (a partitioned table's unique keys must contain the partition key, and
this one is nothing else), the foreign key of ``handler_runs`` keeps pointing at it,
and a lookup by id reads one partition.

Every insert path mints the id when it stores the row (``store.intake.events.prepare``),
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
- ``drop_expired`` (from ``store.retention.prune``, under the prune lease) drops a past day's
  partition once every row in it is past its source's retention for its status and
  none is pending, retrying or processing: first every key is marked in
  ``event_keys`` (``final_status``, ``pruned_at``) and the ledger rows deleted, in
  batches (``store.retention.prune.MARK_BATCH``), each locking its rows: a replay waits for
  the batch and then refuses the event, its key a tombstone and its ledger gone
  (``store.claims.claiming.being_pruned``); one that locked the event first makes it pending,
  and the batch leaves its key and ledger alone. Then, in one short transaction that holds
  ``events`` exclusively (``lock_timeout`` bounded), the rows are checked again, the
  last ledger rows deleted and the partition detached (and renamed
  ``…_dropping``); then the keys of rows that changed meanwhile (a replay) are
  marked again, the rows counted into ``prune_totals``, and the table dropped. A
  process that stops between detach and drop leaves an ``…_dropping`` table, which
  the next prune finishes. ``DETACH … CONCURRENTLY`` is not used: PostgreSQL refuses
  it while a default partition exists. The locks are taken in an order that cannot
  deadlock with a worker's commit (``partition_sql.hold_events``); not free, the
  detach is tried again (``BUSY_TRIES``), then left to the next prune.
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
row (``store.retention.prune``), as on SQLite; a partition holding rows of a source
that has no policy (no longer configured, or not chosen with ``--source``) is left alone.

The parts, each a module beside this one in ``store.retention``: ``partition_catalog``
(names, bounds, what the catalog says: the partitions, what refers to ``events``, what
a partition holds), ``partition_sql`` (the statements: locks, references deleted, set
aside and put back, rows copied, totals), ``partition_create`` (``ensure``),
``partition_drop`` (``blocker``, ``Dropper``) and ``partition_compact``
(``compactable``, ``Compactor``); this module runs a prune's round of them
(``drop_expired``, ``would_drop``).

For later migrations: a partition made by ``ensure`` holds its own copies of the
CHECK constraints of ``events`` (``LIKE … INCLUDING CONSTRAINTS``, which ``ATTACH``
requires), so dropping or changing one on ``events`` must do the same on every
partition; indexes and the foreign key are attached ones and follow ``events``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from store.retention.partition_catalog import (
    DROPPING,
    Partition,
    Tx,
    is_partitioned,
    leftovers,
    quoted,
    stale_staging,
)
from store.retention.partition_compact import Compactor, compactable
from store.retention.partition_drop import CLOCK_SKEW, Dropper, Horizon, blocker, candidates

log = logging.getLogger("hookd.partitions")


@dataclass(slots=True)
class Dropped:
    names: list[str] = field(default_factory=list)
    events: dict[str, int] = field(default_factory=dict)  # per source
    kept: dict[str, str] = field(default_factory=dict)  # past partitions kept, and why
    compacted: list[str] = field(default_factory=list)  # kept, rebuilt with their kept rows

    def add(self, events: Mapping[str, int]) -> None:
        for source, n in events.items():
            self.events[source] = self.events.get(source, 0) + n


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


async def _take(
    worker: Compactor, part: Partition, horizons: Mapping[str, Horizon], done: Dropped
) -> bool:
    """Drop ``part`` if every row in it may go, else compact it if that is worth it,
    else leave it (``done`` says which and why); False when stopped."""
    async with worker.engine.connect() as conn:
        reason = await blocker(conn, part, horizons)
        worth = reason is not None and await compactable(conn, part, horizons)
    if reason is None:
        return await _drop(worker, part, done)
    done.kept[part.name] = reason
    if worth:
        compacted = await worker.compact(part, horizons)
        if compacted is not None:
            done.add(compacted)
            done.compacted.append(part.name)
    return True


async def _drop(worker: Dropper, part: Partition, done: Dropped) -> bool:
    """Drop ``part``, whose rows may all go: marked, detached, counted and dropped;
    False when stopped."""
    started = datetime.now(UTC)
    if not await worker.mark(part.name):
        return False
    detached = await worker.retrying(part.name, lambda: worker.detach(part))
    if detached is None:
        done.kept[part.name] = "changed or busy while it was dropped: tried again next time"
        return True
    done.add(await worker.finish(detached, started - CLOCK_SKEW))
    done.names.append(part.name)
    return True


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
    worker = Compactor(engine, now=now, tx=tx, stopping=stopping, batch=batch)
    for name in stale:
        async with tx() as conn:
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quoted(name)}")

    for leftover in left:
        if not await worker.mark(leftover, attached=False):
            return done
        done.add(await worker.finish(leftover, None))
        done.names.append(leftover.removesuffix(DROPPING))
    for part in parts:
        if stopping() or not await _take(worker, part, horizons, done):
            break
    if done.names:
        log.info("partitions dropped", extra={"partitions": done.names})
    if done.compacted:
        log.info("partitions compacted", extra={"partitions": done.compacted})
    return done
