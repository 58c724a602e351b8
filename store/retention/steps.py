"""The steps of a prune, per source and table, each in batches (``store.retention.prune``).

``Pruner`` removes, a batch a transaction (each renewing the prune lease, then a
pause ``PAUSE_RATIO`` times as long as it took): processed, superseded and dead
events past their retention (``events``), bodies past ``keep_body_days``
(``bodies``), tombstones past ``keep_keys_days`` (``keys``), finished reconcile
runs (``runs``) and refused requests past their age or their source's cap
(``rejected``). The conditions below say which rows each step takes; a dry run
counts them (``store.retention.prune``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store import dialect, queries
from store.dialect import one_of
from store.ids import id_floor
from store.intake import rejected as rejected_rows
from store.intake.events import mark_pruned
from store.models import (
    EVENT_HISTORY,
    EVENT_KEYS,
    EVENTS,
    HANDLER_RUNS,
    PRUNE_TOTALS,
    RECONCILE_RUN_TOTALS,
    RECONCILE_RUNS,
    RECONCILE_STATE,
)
from store.retention.lease import TASK, LeaseLost, renew, wall_clock
from store.status import DONE_RUN_STATUSES, EventStatus

SQL = queries.load("prune")
LIVE_EVENTS_PG = sa.text(SQL["live_events_pg"])
DELETE_KEYS_PG = sa.text(SQL["delete_keys_pg"]).bindparams(
    sa.bindparam("cut", type_=EVENT_KEYS.c.received_at.type)
)

# After each batch, prune waits this many times as long as the batch took (at most
# PAUSE_MAX_S): on a busy machine it takes at most about half of what one database
# connection can do, and ingest and processing keep the rest; idle, a prune takes
# about twice as long as it would flat out (bench/prune_load.py).
PAUSE_RATIO = 1.0
PAUSE_MAX_S = 1.0


@dataclass(frozen=True, slots=True)
class Cutoffs:
    """One source's retention as moments (``store.retention.prune.cutoffs``): rows received
    before them may go."""

    events: datetime
    dead: datetime
    body: datetime
    keys: datetime


def _floor(moment: datetime) -> str:
    return id_floor(int(moment.timestamp() * 1000))


def _older(
    id_col: sa.ColumnElement[str], time_col: sa.ColumnElement[datetime], cut: datetime
) -> sa.ColumnElement[bool]:
    """Received before ``cut``: by the time-ordered id (what the index walks) and by
    the recorded time."""
    return sa.and_(id_col < _floor(cut), time_col < cut)


def events_of(source: str, status: EventStatus, cut: datetime) -> sa.ColumnElement[bool]:
    return sa.and_(
        EVENTS.c.source == source,
        EVENTS.c.status == status,
        _older(EVENTS.c.id, EVENTS.c.received_at, cut),
    )


def bodies_of(source: str, cuts: Cutoffs) -> sa.ColumnElement[bool]:
    """Processed events past ``keep_body_days`` with a body, and not past
    ``keep_events_days`` (those go whole, in the step before).

    ``body IS NOT NULL`` is the predicate of the partial index ``ix_events_body``
    (source, id), written as a literal so that every plan matches it: the step walks
    the rows that still have a body, not the window of rows cleared at earlier
    prunes (migration 0015 says why an index rather than a stored watermark)."""
    return sa.and_(
        events_of(source, EventStatus.PROCESSED, cuts.body),
        EVENTS.c.body.is_not(None),
        sa.not_(_older(EVENTS.c.id, EVENTS.c.received_at, cuts.events)),
    )


def keys_of(source: str, cut: datetime) -> sa.ColumnElement[bool]:
    return sa.and_(
        EVENT_KEYS.c.source == source,
        EVENT_KEYS.c.pruned_at.is_not(None),
        EVENT_KEYS.c.received_at < cut,
    )


def runs_of(source: str, cut: datetime, last_run: str | None) -> sa.ColumnElement[bool]:
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
    if dialect.is_postgres(conn):
        result = await conn.execute(LIVE_EVENTS_PG, {"ids": event_ids})
    else:
        result = await conn.execute(sa.select(EVENTS.c.id).where(EVENTS.c.id.in_(event_ids)))
    return {r[0] for r in result}


async def _delete_keys(conn: AsyncConnection, source: str, cut: datetime, keys: list[str]) -> int:
    """Delete these tombstones of ``source`` (still past ``cut``); how many went. On
    PostgreSQL a join to the primary key, a unique probe per key whatever the
    statistics."""
    if not keys:
        return 0
    if dialect.is_postgres(conn):
        result = await conn.execute(DELETE_KEYS_PG, {"keys": keys, "source": source, "cut": cut})
    else:
        result = await conn.execute(
            sa.delete(EVENT_KEYS).where(keys_of(source, cut), EVENT_KEYS.c.dedupe_key.in_(keys))
        )
    return int(result.rowcount)


def _pick(conn: AsyncConnection, query: sa.Select[Any]) -> sa.Select[Any]:
    """On PostgreSQL, rows another transaction holds (a replay) are left to the next run."""
    return dialect.locked(conn, query, skip_locked=True)


async def _count(conn: AsyncConnection, source: str, what: str, n: int) -> None:
    if not n:
        return
    stmt = dialect.insert(conn, PRUNE_TOTALS).values(source=source, what=what, count=n)
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["source", "what"],
            set_={"count": PRUNE_TOTALS.c.count + stmt.excluded.count},
        )
    )


@dataclass(eq=False)
class Pruner:
    """A prune's steps, under the prune lease of ``owner``, as if the time were ``now``."""

    engine: AsyncEngine
    _: KW_ONLY
    now: datetime
    batch: int
    owner: str
    lease_s: float
    stop: asyncio.Event | None
    pause_ratio: float = PAUSE_RATIO

    def stopping(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    @contextlib.asynccontextmanager
    async def tx(self) -> AsyncIterator[AsyncConnection]:
        """One batch's transaction, beginning with the renewal of the lease: a write
        first, so that on SQLite the batch holds the write lock from its start (a read
        first could not write any more once ingest committed in between). Committed,
        it pauses ``pause_ratio`` times as long as it took (``PAUSE_RATIO``)."""
        started = time.monotonic()
        async with self.engine.begin() as conn:
            if not await renew(conn, self.owner, self.lease_s, wall_clock()):
                raise LeaseLost(TASK)
            yield conn
        if self.pause_ratio > 0 and not self.stopping():
            took = time.monotonic() - started
            await asyncio.sleep(min(PAUSE_MAX_S, took * self.pause_ratio))

    async def _batch_of(
        self, conn: AsyncConnection, query: sa.Select[Any]
    ) -> Sequence[sa.Row[Any]]:
        """The first ``batch`` rows of ``query``, picked (``_pick``)."""
        rows: Sequence[sa.Row[Any]] = (
            await conn.execute(_pick(conn, query.limit(self.batch)))
        ).all()
        return rows

    async def _picked(
        self, conn: AsyncConnection, where: sa.ColumnElement[bool], after: str
    ) -> list[str]:
        """The ids of the next batch of events, after ``after``, that ``where`` takes."""
        query = sa.select(EVENTS.c.id).where(where, EVENTS.c.id > after).order_by(EVENTS.c.id)
        return [r[0] for r in await self._batch_of(conn, query)]

    async def events(self, source: str, status: EventStatus, cut: datetime) -> int:
        done = 0
        after = ""
        while not self.stopping():
            async with self.tx() as conn:
                ids = await self._picked(conn, events_of(source, status, cut), after)
                if not ids:
                    return done
                after = ids[-1]
                gone = await self._delete_events(conn, source, status, ids)
            done += gone
            if len(ids) < self.batch:
                return done
        return done

    async def _delete_events(
        self, conn: AsyncConnection, source: str, status: EventStatus, ids: Sequence[str]
    ) -> int:
        """Delete the events ``ids`` still of ``status``, with their ledger and history,
        their keys marked as tombstones; how many went."""
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
        if gone and not dialect.is_postgres(conn):
            # ON DELETE CASCADE did it already where foreign keys are enforced
            # (always on PostgreSQL, where an ``= ANY`` list of ids could be
            # planned as a scan of the whole ledger without statistics). The
            # history goes with its event, as the ledger does.
            for table in (HANDLER_RUNS, EVENT_HISTORY):
                await conn.execute(
                    sa.delete(table).where(one_of(conn, table.c.event_id, [r.id for r in gone]))
                )
        if gone:
            await mark_pruned(conn, [(source, k, status) for k in keys], self.now)
        await _count(conn, source, "event", len(keys))
        return len(keys)

    async def bodies(self, source: str, cuts: Cutoffs) -> int:
        done = 0
        after = ""
        while not self.stopping():
            async with self.tx() as conn:
                ids = await self._picked(conn, bodies_of(source, cuts), after)
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
            async with self.tx() as conn:
                picked = await self._batch_of(
                    conn,
                    sa.select(EVENT_KEYS.c.dedupe_key, EVENT_KEYS.c.event_id)
                    .where(keys_of(source, cut))
                    .order_by(EVENT_KEYS.c.received_at),
                )
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
            async with self.tx() as conn:
                last_run = (
                    await conn.execute(
                        sa.select(RECONCILE_STATE.c.last_run_id).where(
                            RECONCILE_STATE.c.source == source
                        )
                    )
                ).scalar()
                picked = await self._batch_of(
                    conn,
                    sa.select(
                        RECONCILE_RUNS.c.id,
                        RECONCILE_RUNS.c.status,
                        RECONCILE_RUNS.c.dry_run,
                        RECONCILE_RUNS.c.items_missing,
                        RECONCILE_RUNS.c.rate_limited,
                        RECONCILE_RUNS.c.items_late,
                    )
                    .where(runs_of(source, cut, last_run))
                    .order_by(RECONCILE_RUNS.c.id),
                )
                if not picked:
                    return done
                await _add_run_totals(conn, source, picked)
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

    async def rejected(self, source: str) -> int:
        """Refused requests of ``source`` past ``store.intake.rejected``'s age or cap."""
        done = 0
        while not self.stopping():
            async with self.tx() as conn:
                gone = await rejected_rows.prune_batch(conn, source, self.now, self.batch)
                await _count(conn, source, "rejected", gone)
            done += gone
            if gone < self.batch:
                return done
        return done


def _run_counts(run: Any) -> dict[str, int]:
    """What one run adds to the counters of its row of ``reconcile_run_totals``."""
    return {
        "runs": 1,
        "missing": run.items_missing,
        "rate_limited": run.rate_limited,
        "late": run.items_late,
    }


async def _add_run_totals(conn: AsyncConnection, source: str, picked: Sequence[Any]) -> None:
    """Add the counters of the runs ``picked`` to ``reconcile_run_totals``, per status
    and dry run, before they go."""
    sums: dict[tuple[str, bool], collections.Counter[str]] = {}
    for run in picked:
        sums.setdefault((run.status, bool(run.dry_run)), collections.Counter()).update(
            _run_counts(run)
        )
    for (status, dry_run), counts in sums.items():
        stmt = dialect.insert(conn, RECONCILE_RUN_TOTALS).values(
            source=source, status=status, dry_run=dry_run, **counts
        )
        await conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["source", "status", "dry_run"],
                set_={name: RECONCILE_RUN_TOTALS.c[name] + stmt.excluded[name] for name in counts},
            )
        )
