"""PostgreSQL: a past day of ``events`` rebuilt with only the rows that stay
(``store.retention.partitions`` describes the whole): whether that is worth it
(``compactable``), and ``Compactor``, which copies the rows that stay into a new
table, swaps it in under a short lock and drops the old one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from time import monotonic
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from store.intake.events import mark_pruned
from store.retention.partition_catalog import (
    COMPACTING,
    DROPPING,
    NOT_FINAL,
    PARENT,
    Partition,
    columns_of,
    distinct_in,
    first_value,
    quoted,
    storage_clause,
)
from store.retention.partition_drop import CLOCK_SKEW, Dropper, Horizon
from store.retention.partition_sql import (
    by_ids,
    copy_rows,
    forget,
    hold_events,
    is_lock_timeout,
    put_back,
    set_aside,
    unmark,
)
from store.status import EventStatus

log = logging.getLogger("hookd.partitions")

# A day is compacted only when it frees at least this many processed rows (fewer are
# cheaper to delete row by row) and keeps at most this many (copied twice at worst,
# and read again while ``events`` is held: 100 events/s with 1% dead is 86,400 a day).
COMPACT_MIN_GOING = 1_000
COMPACT_MAX_KEPT = 200_000


class Compactor(Dropper):
    """A ``Dropper`` that also rebuilds a past day with only its rows that stay."""

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
                await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quoted(staging)}")
            return None
        return await self.finish(leftover, started - CLOCK_SKEW, whole=False)

    async def copy_staying(
        self, part: Partition, staging: str, horizons: Mapping[str, Horizon]
    ) -> dict[str, str] | None:
        """Copy the rows of ``part`` that stay into a new table ``staging``, and mark the
        keys of the others and delete what refers to them, a batch a transaction; the
        copied ids with their row versions (``xmin``), None when stopped or too many."""
        table = quoted(part.name)
        end = part.end
        assert end is not None
        columns = await self._create_staging(staging)
        copied: dict[str, str] = {}
        after = ""
        while not self.stopping():
            async with self.tx() as conn:
                # Locked, as ``mark`` does: a row replayed first stays.
                rows = await self.batch_after(conn, table, after, lock=True)
                if not rows:
                    return copied
                stay = [r.id for r in rows if not _goes(r.source, r.status, end, horizons)]
                if len(copied) + len(stay) > COMPACT_MAX_KEPT:
                    log.info(
                        "partition not compacted: too many rows stay",
                        extra={"partition": part.name, "limit": COMPACT_MAX_KEPT},
                    )
                    return None
                await self._sort_batch(conn, rows, stay)
                if stay:
                    copied |= await copy_rows(conn, table, quoted(staging), stay, columns)
            after = rows[-1].id
            if len(rows) < self.batch:
                return copied
        return None

    async def _create_staging(self, staging: str) -> str:
        """The table ``staging``, new, as ``events`` is; the columns a copy names."""
        async with self.tx() as conn:
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quoted(staging)}")
            await conn.exec_driver_sql(
                f"CREATE TABLE {quoted(staging)} (LIKE {PARENT} INCLUDING DEFAULTS "
                f"INCLUDING CONSTRAINTS INCLUDING INDEXES) WITH ({storage_clause()})"
            )
            return await columns_of(conn, PARENT)

    async def _sort_batch(
        self, conn: AsyncConnection, rows: Sequence[Row[Any]], stay: Sequence[str]
    ) -> None:
        """Of a batch, the keys of the rows that go marked and what refers to them
        deleted; those that ``stay`` left as they are."""
        kept = set(stay)
        gone = [r for r in rows if r.id not in kept]
        await mark_pruned(conn, [(r.source, r.dedupe_key, r.status) for r in gone], self.now)
        await forget(conn, await self.refs(conn), rows[0].id, rows[-1].id, through=True, keep=stay)

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
        leftover = part.name + DROPPING
        try:
            async with self.tx() as conn:
                await hold_events(conn, await self.refs(conn))
                held = monotonic()
                staying, changed = await self._catch_up(conn, part, staging, horizons, copied)
                await self._exchange(conn, part, staging, leftover, staying)
        except sa.exc.DBAPIError as exc:
            if not is_lock_timeout(exc):
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

    async def _catch_up(
        self,
        conn: AsyncConnection,
        part: Partition,
        staging: str,
        horizons: Mapping[str, Horizon],
        copied: Mapping[str, str],
    ) -> tuple[dict[str, _Staying], list[str]]:
        """``staging`` brought up to date with the rows of ``part`` that stay, while
        ``events`` is held: the rows that stay, and the ids copied again."""
        table = quoted(part.name)
        end = part.end
        assert end is not None
        columns = await columns_of(conn, PARENT)
        staying = await _staying(conn, table, end, horizons)
        # Copied, then changed (a retry, a claim, a replay): copied again. Copied,
        # then gone (processed meanwhile): out of staging, its key marked.
        changed = [i for i, r in staying.items() if copied.get(i) != r.version]
        gone = [i for i in copied if i not in staying]
        if changed or gone:
            stale = f"DELETE FROM {quoted(staging)} WHERE id = ANY(CAST(:ids AS text[]))"  # noqa: S608 - a quoted catalog name
            await conn.execute(sa.text(stale), {"ids": changed + gone})
        if changed:
            await copy_rows(conn, table, quoted(staging), changed, columns)
            # Judged gone when first read, its key marked; replayed since: it stays.
            await unmark(conn, [(staying[i].source, staying[i].dedupe_key) for i in changed])
        if gone:
            await self._mark_gone(conn, table, gone)
        return staying, changed

    async def _mark_gone(self, conn: AsyncConnection, table: str, gone: Sequence[str]) -> None:
        """The keys of the rows ``gone`` from ``table`` since they were copied marked."""
        rows = (
            await conn.execute(by_ids(table, "id, source, dedupe_key, status"), {"ids": gone})
        ).all()
        await mark_pruned(conn, [(r.source, r.dedupe_key, r.status) for r in rows], self.now)

    async def _exchange(
        self,
        conn: AsyncConnection,
        part: Partition,
        staging: str,
        leftover: str,
        staying: Mapping[str, _Staying],
    ) -> None:
        """``part`` detached (renamed ``leftover``, the rows that stay deleted from it)
        and ``staging`` attached in its place under its name, what refers to the rows
        that stay set aside and put back."""
        table = quoted(part.name)
        assert part.lo is not None
        assert part.hi is not None
        refs = await self.refs(conn)
        aside = await set_aside(conn, refs, ids=list(staying))
        await forget(conn, refs, part.lo, part.hi, through=False)
        await conn.exec_driver_sql(f"ALTER TABLE {PARENT} DETACH PARTITION {table}")
        await conn.exec_driver_sql(f"ALTER TABLE {table} RENAME TO {quoted(leftover)}")
        await conn.exec_driver_sql(f"ALTER TABLE {quoted(staging)} RENAME TO {table}")
        await conn.exec_driver_sql(
            f"ALTER TABLE {PARENT} ATTACH PARTITION {table} "
            f"FOR VALUES FROM ('{part.lo}') TO ('{part.hi}')"
        )
        if staying:
            moved = (
                f"DELETE FROM {quoted(leftover)} "  # noqa: S608 - a quoted catalog name
                "WHERE ctid = ANY(CAST(CAST(:at AS text[]) AS tid[]))"
            )
            await conn.execute(sa.text(moved), {"at": [r.place for r in staying.values()]})
        await put_back(conn, aside)


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


async def _staying(
    conn: AsyncConnection, table: str, end: datetime, horizons: Mapping[str, Horizon]
) -> dict[str, _Staying]:
    """The rows of ``table`` that stay when it is compacted, by id: its unfinished and
    dead ones (the status index's entries of those statuses only), less dead ones past
    their retention."""
    out: dict[str, _Staying] = {}
    for status in await distinct_in(conn, table, "status"):
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
    table = quoted(part.name)
    end = part.end
    assert end is not None
    for source in await distinct_in(conn, table, "source"):
        horizon = horizons.get(source)
        if horizon is None or end > horizon.processed:
            return False
    going = await first_value(
        conn,
        f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE status = :s "  # noqa: S608 - a quoted catalog name
        "ORDER BY status, next_attempt_at LIMIT :n) AS x",
        s=EventStatus.PROCESSED.value,
        n=COMPACT_MIN_GOING,
    )
    if int(going) < COMPACT_MIN_GOING:
        return False
    staying = 0
    for status in await distinct_in(conn, table, "status"):
        if status not in NOT_FINAL and status != EventStatus.DEAD:
            continue
        staying += int(
            await first_value(
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
