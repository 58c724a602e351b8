"""Claiming events for processing, the handler ledger, and the state changes after.

A claim is one atomic ``UPDATE … RETURNING``: on PostgreSQL over rows picked
with ``FOR UPDATE SKIP LOCKED``, on SQLite under its single writer. Every later
state change is fenced on ``lease_owner``, so a worker whose lease was taken
over cannot overwrite the new owner's outcome.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import dialect, queries
from store.claims.history import UNKNOWN, Requester, record_replays
from store.delivery import objects
from store.delivery.destinations import paused_sources
from store.intake.sqlite_write import processed_sql
from store.models import EVENT_KEYS, EVENTS, HANDLER_RUNS, utc_binder
from store.rows import EventRow
from store.status import RUNNABLE_STATUSES, EventStatus
from store.values import safe_text

one_of = dialect.one_of
SQL = queries.load("claims")


@dataclass(frozen=True, slots=True)
class Share:
    """One source's part in a claim: how many of its events the claimer holds already
    (running or read ahead) and the most it may take now."""

    source: str
    held: int
    room: int


def alone(sources: Sequence[str], room: int) -> list[Share]:
    """Shares for a claimer that holds nothing: each source may give up to ``room``."""
    return [Share(source, 0, room) for source in sources]


async def claim_due(
    conn: AsyncConnection,
    owner: str,
    lease_s: float,
    limit: int,
    now: datetime,
    *,
    shares: Sequence[Share],
) -> list[EventRow]:
    """Take up to ``limit`` due events of no object for ``owner``; attempts += 1.

    Fair between sources: each source of ``shares`` with room has its own pick, read in
    due order from its part of ``ix_events_runnable`` (``source, next_attempt_at``) and
    cut at its room, so a backlog of one source is never walked to reach another's
    events. Of all the picks, ``limit`` are taken by level: a source's k-th event ranks
    ``held + k``, so the source that holds fewest gets the next one, ties to the event
    due first. Expired leases are ``claim_expired``'s.
    """
    arms = []
    for index, share in enumerate(s for s in shares if s.room > 0):
        pick = (
            sa.select(EVENTS.c.id, EVENTS.c.next_attempt_at)
            .where(
                EVENTS.c.source == share.source,
                EVENTS.c.status.in_(RUNNABLE_STATUSES),
                EVENTS.c.next_attempt_at <= now,
                # Events of an object are store.delivery.objects.claim's (not in
                # ix_events_runnable).
                EVENTS.c.object_key.is_(None),
                _not_paused(),
            )
            .order_by(EVENTS.c.next_attempt_at)
            .limit(min(share.room, limit))
        )
        arm = dialect.locked(conn, pick, skip_locked=True).cte(f"s{index}")
        rank = sa.literal(share.held) + sa.func.row_number().over(order_by=arm.c.next_attempt_at)
        arms.append(sa.select(arm.c.id, arm.c.next_attempt_at, rank.label("rank")))
    if not arms or limit <= 0:
        return []
    picked = (arms[0] if len(arms) == 1 else sa.union_all(*arms)).subquery("picked")
    chosen = sa.select(picked.c.id).order_by(picked.c.rank, picked.c.next_attempt_at).limit(limit)
    return await objects.take(conn, _among(chosen), owner, lease_s, now)


async def claim_orphans(
    conn: AsyncConnection,
    owner: str,
    lease_s: float,
    limit: int,
    now: datetime,
    *,
    known: Sequence[str],
) -> list[EventRow]:
    """Take up to ``limit`` due events of sources not in ``known`` (no longer
    configured): a processor records them dead with that reason rather than leave
    them pending for ever. Rare, and looked for rarely: the pick walks the runnable
    events of every other source."""
    pick = (
        sa.select(EVENTS.c.id)
        .where(
            EVENTS.c.source.not_in(list(known)),
            EVENTS.c.status.in_(RUNNABLE_STATUSES),
            EVENTS.c.next_attempt_at <= now,
            _not_paused(),
        )
        .limit(limit)
    )
    picked = dialect.locked(conn, pick, skip_locked=True)
    return await objects.take(conn, _among(picked), owner, lease_s, now)


async def claim_expired(
    conn: AsyncConnection,
    owner: str,
    lease_s: float,
    limit: int,
    now: datetime,
    *,
    spare: Sequence[str] = (),
) -> list[EventRow]:
    """Take over up to ``limit`` events whose claim's lease ran out (their worker died
    or stalled); attempts += 1. By ``ix_events_lease``: a caller looks every few
    seconds, not at every claim (until vacuum runs, that index holds an entry for the
    dead "processing" version of every event processed more than a lease ago).

    None of ``spare``: the caller's own events whose outcome it writes after this
    claim, in the same transaction (their lease may have run out meanwhile)."""
    leases = (
        sa.select(EVENTS.c.id)
        .where(
            EVENTS.c.status == EventStatus.PROCESSING,
            EVENTS.c.lease_expires_at < now,
            _not_paused(),
        )
        .order_by(EVENTS.c.lease_expires_at)
        .limit(limit)
    )
    if spare:
        leases = leases.where(sa.not_(one_of(conn, EVENTS.c.id, spare)))
    picked = dialect.locked(conn, leases, skip_locked=True)
    return await objects.take(conn, _among(picked), owner, lease_s, now)


def _not_paused() -> sa.ColumnElement[bool]:
    """Not an event of a paused source (``hookd sources pause``): read in the claim's own
    statement, so a pause committed before it is never crossed. Its events stay where
    they are, due in the order they came, and are claimed once the source resumes."""
    return EVENTS.c.source.not_in(paused_sources())


def _among(chosen: sa.Select[Any]) -> sa.ColumnElement[bool]:
    """The rows ``chosen`` selects (by id), for the claim's one write (``objects.take``)."""
    return EVENTS.c.id.in_(chosen.scalar_subquery())


LEDGER_PG = sa.text(SQL["ledger_pg"])


async def finished_handlers_many(
    conn: AsyncConnection, event_ids: Sequence[str]
) -> dict[str, set[str]]:
    """The ledger of a batch: event id -> handlers that already finished for it.

    On PostgreSQL, one probe of the ledger's primary key per id (a ``LATERAL``
    subquery the planner may not flatten, ``OFFSET 0``): ``event_id = ANY(…)`` with a
    batch of ids is estimated, without statistics on ``event_id``, at half the table,
    and planned as a scan of the whole ledger (240 ms a batch at a few million rows).
    Per probe, a scan of the table can never be cheaper than its index."""
    if not event_ids:
        return {}
    if dialect.is_postgres(conn):
        result = await conn.execute(LEDGER_PG, {"ids": list(event_ids)})
    else:
        result = await conn.execute(
            sa.select(HANDLER_RUNS.c.event_id, HANDLER_RUNS.c.handler).where(
                one_of(conn, HANDLER_RUNS.c.event_id, event_ids)
            )
        )
    ledger: dict[str, set[str]] = {}
    for event_id, handler in result:
        ledger.setdefault(event_id, set()).add(handler)
    return ledger


LEDGER_INSERT_PG = sa.text(SQL["ledger_insert_pg"])

LEDGER_INSERT_SQLITE = SQL["ledger_insert_sqlite"]


async def record_handlers(
    conn: AsyncConnection, finished: Sequence[tuple[str, str]], now: datetime
) -> None:
    """Add (event id, handler) pairs to the ledger; one that is there already stays."""
    if not finished:
        return
    if dialect.is_postgres(conn):
        # One statement over two arrays: a batch's pairs (a hundred and more) cost one
        # execution, where an executemany binds and executes each pair on its own.
        await conn.execute(
            LEDGER_INSERT_PG,
            {"e": [e for e, _ in finished], "h": [h for _, h in finished], "now": now},
        )
        return
    # As the driver takes it: SQLAlchemy's per-row parameter processing (a dict and a
    # datetime conversion per pair) was most of this statement's time in the write lock.
    at = utc_binder(conn.dialect)(now)
    await conn.exec_driver_sql(LEDGER_INSERT_SQLITE, [(e, h, at) for e, h in finished])


def _held(conn: AsyncConnection, event_ids: Sequence[str], owner: str) -> sa.ColumnElement[bool]:
    """Rows of ``event_ids`` whose claim ``owner`` still holds: the fence on every outcome.

    Found by the primary key only. On PostgreSQL the status is compared as
    ``status || ''``, which no index covers: otherwise, without statistics, the
    planner may AND the primary key with ``ix_events_lease``'s "processing" entries,
    which until vacuum include a dead one for every event processed since."""
    status: sa.ColumnElement[str] = EVENTS.c.status
    if dialect.is_postgres(conn):
        status = EVENTS.c.status.concat(sa.literal_column("''"))
    return sa.and_(
        one_of(conn, EVENTS.c.id, event_ids),
        EVENTS.c.lease_owner == owner,
        status == EventStatus.PROCESSING,
    )


_NO_ERROR: dict[str, None] = dict.fromkeys(("last_error", "last_error_handler", "last_error_type"))


def _unleased(now: datetime) -> dict[str, datetime | None]:
    return {"lease_owner": None, "lease_expires_at": None, "updated_at": now}


_processed_sqlite = functools.lru_cache(maxsize=16)(processed_sql)


async def mark_processed(
    conn: AsyncConnection, event_ids: Sequence[str], owner: str, now: datetime
) -> set[str]:
    """Mark events processed where ``owner`` still holds the lease; the ids it did."""
    if not event_ids:
        return set()
    if not dialect.is_postgres(conn):
        # The same statement as the driver takes it: SQLAlchemy's rendering of the id
        # list and its parameters, per batch, was a third of this statement's time in
        # the write lock.
        at = utc_binder(conn.dialect)(now)
        result = await conn.exec_driver_sql(
            _processed_sqlite(len(event_ids)),
            (EventStatus.PROCESSED.value, at, at, *event_ids, owner, EventStatus.PROCESSING.value),
        )
        return {row[0] for row in result}
    result = await conn.execute(
        sa.update(EVENTS)
        .where(_held(conn, event_ids, owner))
        .values(status=EventStatus.PROCESSED, processed_at=now, **_NO_ERROR, **_unleased(now))
        .returning(EVENTS.c.id)
    )
    return {row[0] for row in result}


async def renew(
    conn: AsyncConnection, event_ids: Sequence[str], owner: str, lease_s: float, now: datetime
) -> set[str]:
    """The heartbeat of a live claimer: the leases ``owner`` still holds of ``event_ids``
    run until ``now + lease_s`` again. The ids it still held; one missing was taken over
    (its lease had run out) and is no longer this owner's to finish."""
    if not event_ids:
        return set()
    result = await conn.execute(
        sa.update(EVENTS)
        .where(_held(conn, event_ids, owner))
        .values(lease_expires_at=now + timedelta(seconds=lease_s))
        .returning(EVENTS.c.id)
    )
    return {row[0] for row in result}


async def release(
    conn: AsyncConnection, event_ids: Sequence[str], owner: str, now: datetime
) -> set[str]:
    """Give back claims still held by ``owner``, due at once (a clean shutdown); the
    ids it gave back.

    The attempt is given back too: it was cut short, not failed, and counting it
    would let a few restarts use up an event's last attempts (an event claimed
    past ``max_attempts`` goes dead without running).
    """
    result = await conn.execute(
        sa.update(EVENTS)
        .where(_held(conn, event_ids, owner))
        .values(
            status=EventStatus.RETRYING,
            next_attempt_at=now,
            attempts=EVENTS.c.attempts - 1,  # >= 1 while held: claiming added it
            **_unleased(now),
        )
        .returning(EVENTS.c.id)
    )
    return {row[0] for row in result}


async def defer(
    conn: AsyncConnection, event_id: str, *, owner: str, now: datetime, until: datetime
) -> bool:
    """Put off an attempt that did not run (a destination paused, rate-limited, or held by
    its circuit breaker): ``retrying``, due at ``until``, the attempt given back as
    ``release`` does (it was not a failure), the last error left as it was."""
    result = await conn.execute(
        sa.update(EVENTS)
        .where(_held(conn, [event_id], owner))
        .values(
            status=EventStatus.RETRYING,
            next_attempt_at=until,
            attempts=EVENTS.c.attempts - 1,  # >= 1 while held: claiming added it
            **_unleased(now),
        )
    )
    return bool(result.rowcount)


async def mark_failed(
    conn: AsyncConnection,
    event_id: str,
    *,
    owner: str,
    error: str,
    handler: str | None = None,
    error_type: str | None = None,
    now: datetime,
    retry_at: datetime | None,
) -> bool:
    """``retrying`` until ``retry_at``, or ``dead`` when there is no retry left.

    The error is written at every failed attempt, not only the last, so why an
    event is retrying can be seen while it does: ``error`` is the one-line
    summary, ``handler`` the handler that raised (None outside the handlers) and
    ``error_type`` the exception's type name.
    """
    values: dict[str, object] = {
        "last_error": safe_text(error, 2000),  # it may quote a payload (store.values)
        "last_error_handler": None if handler is None else handler[:255],
        "last_error_type": None if error_type is None else error_type[:128],
        **_unleased(now),
    }
    if retry_at is None:
        values["status"] = EventStatus.DEAD
    else:
        values |= {"status": EventStatus.RETRYING, "next_attempt_at": retry_at}
    result = await conn.execute(
        sa.update(EVENTS).where(_held(conn, [event_id], owner)).values(values)
    )
    return bool(result.rowcount)


async def replay(
    conn: AsyncConnection,
    event_ids: Sequence[str],
    now: datetime,
    *,
    only_handler: str | None = None,
    by: Requester = UNKNOWN,
) -> list[str]:
    """Make events runnable again on the same row: pending, attempts reset.

    The ledger is kept for handlers of an unfinished event (a fixed handler
    runs, the ones that already succeeded do not); a processed event is
    replayed whole, so its ledger is cleared. Events being processed, those
    whose body was pruned (``without_body``), and those a prune has begun to take
    (``being_pruned``: their ledger may be gone) are left as they are. On
    PostgreSQL the rows are locked before anything is decided: a prune either
    finished with them first (then they are refused, or gone) or waits for this
    transaction and finds them pending.

    ``only_handler`` (a destination's name) clears that one ledger entry instead,
    of every replayed event: of a processed event, only it runs again.

    The origin stays the first one, and what the replay resets is kept: each event
    the update made pending gets a replay marker in its history (``store.claims.history``:
    ``by``, the status it found, the attempts it reset), in this transaction. The
    ids returned are those: one claimed since it was read is not among them.
    """
    if not event_ids:
        return []
    rows = await _replayable_rows(conn, event_ids, only_handler)
    # A processed event whose body retention removed cannot be run again.
    ids = [r.id for r in rows if r.status != EventStatus.PROCESSING and not r.bodiless]
    processed = [r.id for r in rows if r.status == EventStatus.PROCESSED]
    await _clear_ledgers(conn, ids, processed, only_handler)
    if not ids:
        return ids
    made = await _reset_pending(conn, ids, now)
    await record_replays(
        conn, [(r.id, r.attempts, r.status) for r in rows if r.id in made], by, now
    )
    # In the order asked for (the rows were read, and locked, in id order).
    return [i for i in dict.fromkeys(event_ids) if i in made]


async def _replayable_rows(
    conn: AsyncConnection, event_ids: Sequence[str], only_handler: str | None
) -> list[sa.Row[Any]]:
    """The rows of ``event_ids`` (locked on PostgreSQL), but those being pruned."""
    query = sa.select(
        EVENTS.c.id,
        EVENTS.c.status,
        EVENTS.c.attempts,
        EVENTS.c.body.is_(None).label("bodiless"),
    ).where(EVENTS.c.id.in_(list(event_ids)))
    if dialect.is_postgres(conn):
        # Locked first, in id order (as prune locks them): a prune batch holding one
        # of them is waited for, and what follows reads what it committed.
        query = query.order_by(EVENTS.c.id).with_for_update()
    rows = (await conn.execute(query)).all()
    # Being pruned: the key is already a tombstone and the ledger gone (a day's
    # partition marks and deletes in batches before its detach). Run again, every
    # handler would, even those that had succeeded: left alone (``being_pruned``).
    # A processed event replayed whole loses its ledger anyway.
    pruning = set(
        await being_pruned(
            conn,
            [r.id for r in rows if r.status != EventStatus.PROCESSED or only_handler is not None],
        )
    )
    return [r for r in rows if r.id not in pruning]


async def _clear_ledgers(
    conn: AsyncConnection, ids: list[str], processed: list[str], only_handler: str | None
) -> None:
    """One handler's ledger entry of every replayed event, or the whole ledger of the
    processed ones (replayed whole)."""
    if only_handler is not None and ids:
        await conn.execute(
            sa.delete(HANDLER_RUNS).where(
                HANDLER_RUNS.c.event_id.in_(ids), HANDLER_RUNS.c.handler == only_handler
            )
        )
    elif processed:
        await conn.execute(sa.delete(HANDLER_RUNS).where(HANDLER_RUNS.c.event_id.in_(processed)))


async def _reset_pending(conn: AsyncConnection, ids: list[str], now: datetime) -> set[str]:
    """Make ``ids`` pending with attempts reset; the ids the update changed (one
    claimed since it was read is not among them)."""
    result = await conn.execute(
        sa.update(EVENTS)
        .where(EVENTS.c.id.in_(ids), EVENTS.c.status != EventStatus.PROCESSING)
        .values(
            status=EventStatus.PENDING,
            attempts=0,
            next_attempt_at=now,
            processed_at=None,
            **_NO_ERROR,
            lease_owner=None,
            lease_expires_at=None,
            updated_at=now,
        )
        .returning(EVENTS.c.id)
    )
    return {r[0] for r in result}


async def being_pruned(conn: AsyncConnection, event_ids: Sequence[str]) -> list[str]:
    """Those of ``event_ids`` whose key is a tombstone (``pruned_at``): pruned, or
    being pruned (their row still there, their ledger gone). By the partial index
    ``ix_event_keys_pruned_event``."""
    if not event_ids:
        return []
    result = await conn.execute(
        sa.select(EVENT_KEYS.c.event_id).where(
            EVENT_KEYS.c.event_id.in_(list(event_ids)), EVENT_KEYS.c.pruned_at.is_not(None)
        )
    )
    return [row[0] for row in result]


async def without_body(conn: AsyncConnection, event_ids: Sequence[str]) -> list[str]:
    """Those of ``event_ids`` whose body the retention policy removed (``keep_body_days``)."""
    if not event_ids:
        return []
    result = await conn.execute(
        sa.select(EVENTS.c.id).where(EVENTS.c.id.in_(list(event_ids)), EVENTS.c.body.is_(None))
    )
    return [row[0] for row in result]


async def ids_with_status(conn: AsyncConnection, source: str, status: str) -> list[str]:
    result = await conn.execute(
        sa.select(EVENTS.c.id).where(EVENTS.c.source == source, EVENTS.c.status == status)
    )
    return [row[0] for row in result]
