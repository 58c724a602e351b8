"""PostgreSQL: a past day of ``events`` dropped whole (``store.retention.partitions`` describes
the whole): why a partition cannot go yet (``blocker``), and ``Dropper``, which marks
its keys and deletes its ledger in batches, detaches it under a short lock and drops
it, counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store.intake.events import mark_pruned
from store.retention.partition_catalog import (
    DROPPING,
    NOT_FINAL,
    PARENT,
    Partition,
    Reference,
    Tx,
    distinct_in,
    first_value,
    list_partitions,
    quoted,
    references,
    unfinished,
)
from store.retention.partition_sql import add_total, forget, hold_events, is_lock_timeout
from store.status import EventStatus

log = logging.getLogger("hookd.partitions")

# A partition is dropped only once its day ended this long ago by the clock (whatever
# ``--as-of`` says): no receiver, even one whose clock runs a little behind, still
# mints ids in its range.
SETTLED = timedelta(days=1)
# A detach (drop or compaction) that could not have its locks is tried again this many
# times, after this many seconds times the attempt, before it is left to the next prune.
BUSY_TRIES = 5
BUSY_WAIT_S = 0.2
# A replay between the marking of a partition's keys and its detach is marked again:
# rows updated since the marking started, less this for the clocks of other hosts.
CLOCK_SKEW = timedelta(minutes=5)
# The row of prune_totals that counts the partitions dropped: no source, "day".
DROPPED = "day"


@dataclass(frozen=True, slots=True)
class Horizon:
    """One source's retention as moments: rows received before them may go."""

    processed: datetime
    dead: datetime


async def blocker(
    conn: AsyncConnection, part: Partition, horizons: Mapping[str, Horizon]
) -> str | None:
    """Why ``part`` cannot be dropped yet; None when every row in it may go."""
    table = quoted(part.name)
    end = part.end
    assert end is not None
    status = await unfinished(conn, table)
    if status is not None:
        return f"holds {status} events"
    for source in await distinct_in(conn, table, "source"):
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
            held = await first_value(
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


@dataclass(eq=False)
class Dropper:
    """Drops past days of ``events``, a transaction (``tx``) a batch of ``batch`` rows,
    as a prune at ``now`` that stops when ``stopping``."""

    engine: AsyncEngine
    _: KW_ONLY
    now: datetime
    tx: Tx
    stopping: Callable[[], bool]
    batch: int
    _refs: list[Reference] | None = field(default=None, init=False)
    busy: bool = field(default=False, init=False)  # the last detach could not have its locks

    async def refs(self, conn: AsyncConnection) -> list[Reference]:
        if self._refs is None:
            self._refs = await references(conn)
        return self._refs

    async def batch_after(
        self, conn: AsyncConnection, table: str, after: str, *, lock: bool
    ) -> Sequence[Row[Any]]:
        """The next ``batch`` rows of ``table`` (quoted) after the id ``after``, in id
        order: id, source, dedupe_key, status; ``lock``: locked (FOR UPDATE)."""
        locking = " FOR UPDATE" if lock else ""
        return (
            await conn.execute(
                sa.text(
                    f"SELECT id, source, dedupe_key, status FROM {table} "  # noqa: S608 - a quoted catalog name
                    f"WHERE id > :after ORDER BY id LIMIT :n{locking}"
                ),
                {"after": after, "n": self.batch},
            )
        ).all()

    async def mark(self, name: str, *, attached: bool = True) -> bool:
        """Mark the key of every row of ``name`` and (``attached``: a partition still
        in ``events``) delete what refers to them, a batch a transaction; False when
        stopped before the end. Nothing can refer to the rows of a detached table: the
        foreign key refused the detach while anything did, and refuses new rows since;
        and a range of ids there may hold rows that a compaction kept in ``events``."""
        table = quoted(name)
        after = ""
        while not self.stopping():
            async with self.tx() as conn:
                # Locked (attached: a replay may hold one; it is waited for), so the
                # statuses read are those the batch commits with: a row a replay made
                # pending first keeps its key and its ledger, and its day stays
                # (``detach``). A replay after this batch finds the tombstone and
                # refuses (``store.claims.claiming.being_pruned``).
                rows = await self.batch_after(conn, table, after, lock=attached)
                if not rows:
                    return True
                await self._mark_batch(conn, rows, attached=attached)
            after = rows[-1].id
            if len(rows) < self.batch:
                return True
        return False

    async def _mark_batch(
        self, conn: AsyncConnection, rows: Sequence[Row[Any]], *, attached: bool
    ) -> None:
        """The keys of a batch's final rows marked, and (``attached``) what refers to
        its rows but the unfinished ones deleted."""
        final = [r for r in rows if r.status not in NOT_FINAL]
        await mark_pruned(conn, [(r.source, r.dedupe_key, r.status) for r in final], self.now)
        if attached:
            # By the id range of the batch (read in id order): a range of the
            # ledger's primary key, which no planner estimate turns into a scan.
            await forget(
                conn,
                await self.refs(conn),
                rows[0].id,
                rows[-1].id,
                through=True,
                keep=[r.id for r in rows if r.status in NOT_FINAL],
            )

    async def detach(self, part: Partition) -> str | None:
        """Detach ``part`` (renamed ``…_dropping``) if its rows are still all final;
        None when they are not, or when ``events`` could not be locked in time."""
        try:
            async with self.tx() as conn:
                # DETACH needs these locks; taken first, so the check below sees the
                # rows as they will be detached.
                await hold_events(conn, await self.refs(conn))
                table = quoted(part.name)
                await _still_final(conn, table)
                # Ledger rows a replay wrote since the marking: the foreign key would
                # refuse the detach.
                assert part.lo is not None
                assert part.hi is not None
                await forget(conn, await self.refs(conn), part.lo, part.hi, through=False)
                await conn.exec_driver_sql(f"ALTER TABLE {PARENT} DETACH PARTITION {table}")
                leftover = part.name + DROPPING
                await conn.exec_driver_sql(f"ALTER TABLE {table} RENAME TO {quoted(leftover)}")
                return leftover
        except _Changed:
            return None
        except sa.exc.DBAPIError as exc:
            if not is_lock_timeout(exc):
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
        table = quoted(leftover)
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


class _Changed(Exception):
    """A row of the partition is not final any more (replayed): keep it."""


async def _still_final(conn: AsyncConnection, table: str) -> None:
    if await unfinished(conn, table) is not None:
        raise _Changed
