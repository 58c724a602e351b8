"""Pauses, circuit breakers and parked events: the state that lets every process agree
on whether a source is processed and a destination delivered to.

A *parked* event waits for something that is not a time: a paused destination, or the
probe of a half-open breaker. It stays ``retrying`` with ``next_attempt_at`` moved
``PARK_SHIFT`` past its receipt, far beyond any real retry, so claims never reach it
(they read due events in due order and stop after a batch). ``unpark`` puts it back
at its receipt time: due at once, in the order the events were received.

A park and the switch that ends it are ordered by the switch's row: the park takes
it ``FOR SHARE`` and looks again (``still_blocked``), the switch updates it and then
unparks, so an event parked just as its destination resumed is never left behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import dialect
from store.models import DESTINATION_BREAKERS, EVENTS, HANDLER_RUNS, PAUSES
from store.status import RUNNABLE_STATUSES, BreakerState, EventStatus, LedgerOutcome

# The ``destination`` of a pause row that pauses its whole source.
WHOLE_SOURCE = ""
# How far past its receipt a parked event's next attempt is put: any next_attempt_at
# from PARKED_FROM on is a parked event's.
PARK_SHIFT = timedelta(days=2000 * 365)
PARKED_FROM = datetime(3000, 1, 1, tzinfo=UTC)
NOT_DONE = (*RUNNABLE_STATUSES, EventStatus.PROCESSING)


class PauseRow(NamedTuple):
    source: str
    destination: str
    paused: bool
    changed_by: str
    reason: str | None
    changed_at: datetime


class BreakerRow(NamedTuple):
    source: str
    destination: str
    state: str  # a BreakerState's value
    failures: int
    opened_at: datetime | None
    retry_at: datetime | None
    probe_owner: str | None
    reason: str | None
    updated_at: datetime


PAUSE_COLUMNS = [PAUSES.c[name] for name in PauseRow._fields]
BREAKER_COLUMNS = [DESTINATION_BREAKERS.c[name] for name in BreakerRow._fields]


def paused_sources() -> sa.Select[tuple[str]]:
    """The sources paused whole: what claims leave alone."""
    return sa.select(PAUSES.c.source).where(
        PAUSES.c.destination == WHOLE_SOURCE, PAUSES.c.paused.is_(True)
    )


# -- pauses -------------------------------------------------------------------------


async def set_pause(
    conn: AsyncConnection,
    source: str,
    destination: str,
    *,
    paused: bool,
    by: str,
    reason: str | None,
    now: datetime,
) -> tuple[PauseRow, bool]:
    """Pause or resume; (the row as it is now, whether this changed it).

    Resuming a destination unparks the source's parked events in the same
    transaction, after the row's update (see the module docstring)."""
    before = (
        await conn.execute(
            sa.select(*PAUSE_COLUMNS).where(
                PAUSES.c.source == source, PAUSES.c.destination == destination
            )
        )
    ).first()
    was_paused = before is not None and bool(before.paused)
    values = {"paused": paused, "changed_by": by[:128], "reason": reason, "changed_at": now}
    if before is not None and was_paused == paused:
        return PauseRow._make(before), False
    stmt = dialect.insert(conn, PAUSES).values(source=source, destination=destination, **values)
    await conn.execute(
        stmt.on_conflict_do_update(index_elements=["source", "destination"], set_=values)
    )
    if not paused and destination != WHOLE_SOURCE:
        await unpark(conn, source, now)
    return PauseRow(source, destination, paused, by[:128], reason, now), True


async def source_pause(conn: AsyncConnection, source: str) -> PauseRow | None:
    """The switch that pauses ``source`` whole, while it is paused; else None."""
    row = (
        await conn.execute(
            sa.select(*PAUSE_COLUMNS).where(
                PAUSES.c.source == source,
                PAUSES.c.destination == WHOLE_SOURCE,
                PAUSES.c.paused.is_(True),
            )
        )
    ).first()
    return None if row is None else PauseRow._make(row)


async def all_pauses(conn: AsyncConnection) -> dict[tuple[str, str], PauseRow]:
    result = await conn.execute(sa.select(*PAUSE_COLUMNS))
    return {(r.source, r.destination): PauseRow._make(r) for r in result}


# -- breakers -----------------------------------------------------------------------


async def all_breakers(conn: AsyncConnection) -> dict[tuple[str, str], BreakerRow]:
    result = await conn.execute(sa.select(*BREAKER_COLUMNS))
    return {(r.source, r.destination): BreakerRow._make(r) for r in result}


async def _breaker_for_update(
    conn: AsyncConnection, source: str, destination: str, now: datetime
) -> BreakerRow:
    """The breaker's row, locked until the transaction ends (made closed if missing)."""
    await conn.execute(
        dialect.insert(conn, DESTINATION_BREAKERS)
        .values(
            source=source,
            destination=destination,
            state=BreakerState.CLOSED,
            failures=0,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["source", "destination"])
    )
    select = sa.select(*BREAKER_COLUMNS).where(
        DESTINATION_BREAKERS.c.source == source,
        DESTINATION_BREAKERS.c.destination == destination,
    )
    return BreakerRow._make((await conn.execute(dialect.locked(conn, select))).one())


async def _write_breaker(conn: AsyncConnection, row: BreakerRow) -> None:
    await conn.execute(
        sa.update(DESTINATION_BREAKERS)
        .where(
            DESTINATION_BREAKERS.c.source == row.source,
            DESTINATION_BREAKERS.c.destination == row.destination,
        )
        .values({k: v for k, v in row._asdict().items() if k not in ("source", "destination")})
    )


async def record_failure(
    conn: AsyncConnection,
    source: str,
    destination: str,
    *,
    now: datetime,
    threshold: int,
    cooldown_s: float,
    reason: str,
    trip: bool = False,
) -> tuple[BreakerRow, bool]:
    """One more failed delivery; (the row after it, whether this opened the breaker).

    It opens when ``threshold`` failures in a row are reached, when ``trip`` says so
    (the failure rate), or when the failure is a half-open breaker's probe. A breaker
    that opens again unparks the events its probe held back, due when the cool-down
    ends: some delivery has to probe then, whatever became of the probe's own event."""
    row = await _breaker_for_update(conn, source, destination, now)
    failures = row.failures + 1
    opens = row.state == BreakerState.HALF_OPEN or (
        row.state == BreakerState.CLOSED and (trip or failures >= threshold)
    )
    if opens:
        retry_at = now + timedelta(seconds=cooldown_s)
        new = row._replace(
            state=BreakerState.OPEN,
            failures=failures,
            opened_at=now,
            retry_at=retry_at,
            probe_owner=None,
            reason=reason[:255],
            updated_at=now,
        )
        await _write_breaker(conn, new)
        if row.state == BreakerState.HALF_OPEN:
            await unpark(conn, source, now, at=retry_at)
        return new, True
    new = row._replace(failures=failures, updated_at=now)
    await _write_breaker(conn, new)
    return new, False


async def record_success(
    conn: AsyncConnection, source: str, destination: str, *, now: datetime
) -> tuple[BreakerRow, bool]:
    """A delivery went through; (the row after it, whether this closed the breaker).

    Closing it unparks the source's parked events (the deliveries it held back)."""
    row = await _breaker_for_update(conn, source, destination, now)
    if row.state == BreakerState.CLOSED and row.failures == 0:
        return row, False
    closes = row.state != BreakerState.CLOSED
    new = row._replace(
        state=BreakerState.CLOSED, failures=0, probe_owner=None, retry_at=None, updated_at=now
    )
    await _write_breaker(conn, new)
    if closes:
        await unpark(conn, source, now)
    return new, closes


async def take_probe(
    conn: AsyncConnection,
    source: str,
    destination: str,
    *,
    owner: str,
    now: datetime,
    probe_s: float,
) -> bool:
    """Make this delivery the breaker's probe: an open breaker whose cool-down ended, or a
    half-open one whose probe's claim ran out (its process died). One process wins."""
    result = await conn.execute(
        sa.update(DESTINATION_BREAKERS)
        .where(
            DESTINATION_BREAKERS.c.source == source,
            DESTINATION_BREAKERS.c.destination == destination,
            DESTINATION_BREAKERS.c.state.in_((BreakerState.OPEN, BreakerState.HALF_OPEN)),
            DESTINATION_BREAKERS.c.retry_at <= now,
        )
        .values(
            state=BreakerState.HALF_OPEN,
            probe_owner=owner[:64],
            retry_at=now + timedelta(seconds=probe_s),
            updated_at=now,
        )
    )
    return bool(result.rowcount)


# -- parking ------------------------------------------------------------------------


class Blocker(NamedTuple):
    """What a parked delivery waits for: ``kind`` is ``paused`` or ``breaker``."""

    kind: str
    source: str
    destination: str


async def still_blocked(conn: AsyncConnection, blockers: Iterable[Blocker]) -> bool:
    """Whether any of ``blockers`` still holds, reading each one's row ``FOR SHARE``: a
    resume or a breaker closing waits for this transaction, and so unparks what it parks.

    SQLite has no row locks, and its driver starts a transaction at the first write, so
    a read before it sees a state that may end before the park is written. A write that
    changes nothing takes the database's write lock first: the read then sees the last
    switch, and any later one waits for this park and unparks it."""
    held = False
    ordered = sorted(set(blockers))
    if ordered and not dialect.is_postgres(conn):
        first = ordered[0]
        await conn.execute(
            sa.update(DESTINATION_BREAKERS)
            .where(
                DESTINATION_BREAKERS.c.source == first.source,
                DESTINATION_BREAKERS.c.destination == first.destination,
            )
            .values(state=DESTINATION_BREAKERS.c.state)
        )
    for blocker in ordered:
        if blocker.kind == "paused":
            select = sa.select(PAUSES.c.paused).where(
                PAUSES.c.source == blocker.source, PAUSES.c.destination == blocker.destination
            )
            held |= bool((await conn.execute(dialect.locked(conn, select, read=True))).scalar())
        else:
            select = sa.select(DESTINATION_BREAKERS.c.state).where(
                DESTINATION_BREAKERS.c.source == blocker.source,
                DESTINATION_BREAKERS.c.destination == blocker.destination,
            )
            state = (await conn.execute(dialect.locked(conn, select, read=True))).scalar()
            held |= state is not None and state != BreakerState.CLOSED
    return held


def parked_at(received_at: datetime) -> datetime:
    return received_at + PARK_SHIFT


async def unpark(
    conn: AsyncConnection, source: str, now: datetime, *, at: datetime | None = None
) -> int:
    """Make the source's parked events due: at their receipt time (in the order they
    came), or ``at``. The number unparked."""
    result = await conn.execute(
        sa.update(EVENTS)
        .where(
            EVENTS.c.source == source,
            EVENTS.c.status == EventStatus.RETRYING,
            EVENTS.c.next_attempt_at >= PARKED_FROM,
        )
        .values(
            next_attempt_at=EVENTS.c.received_at if at is None else at,
            updated_at=now,
        )
    )
    return int(result.rowcount or 0)


# -- the ledger's skipped entries, and what waits per destination --------------------


async def record_skipped(
    conn: AsyncConnection, skipped: Sequence[tuple[str, str]], now: datetime
) -> None:
    """(event id, handler) pairs whose filter did not select the event: in the ledger, so
    the filter is not evaluated again and a replay of an unfinished event skips them too."""
    if not skipped:
        return
    await conn.execute(
        dialect.insert(conn, HANDLER_RUNS).on_conflict_do_nothing(
            index_elements=["event_id", "handler"]
        ),
        [
            {"event_id": e, "handler": h, "finished_at": now, "outcome": LedgerOutcome.SKIPPED}
            for e, h in skipped
        ],
    )


async def ledger_of(conn: AsyncConnection, event_id: str) -> dict[str, str | None]:
    """An event's ledger: handler -> its outcome (None: it ran and finished)."""
    result = await conn.execute(
        sa.select(HANDLER_RUNS.c.handler, HANDLER_RUNS.c.outcome).where(
            HANDLER_RUNS.c.event_id == event_id
        )
    )
    return {str(handler): outcome for handler, outcome in result}


async def waiting(
    conn: AsyncConnection, targets: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """Per (source, destination): the source's events not done yet that the destination
    has neither delivered nor skipped (its queue)."""
    counts: dict[tuple[str, str], int] = {}
    for source, destination in targets:
        done = (
            sa.select(sa.literal(1))
            .select_from(HANDLER_RUNS)
            .where(HANDLER_RUNS.c.event_id == EVENTS.c.id, HANDLER_RUNS.c.handler == destination)
        )
        counts[(source, destination)] = (
            await conn.execute(
                sa.select(sa.func.count())
                .select_from(EVENTS)
                .where(EVENTS.c.source == source, EVENTS.c.status.in_(NOT_DONE), ~done.exists())
            )
        ).scalar_one()
    return counts


async def parked_count(conn: AsyncConnection) -> dict[str, int]:
    """Per source, its parked events."""
    result = await conn.execute(
        sa.select(EVENTS.c.source, sa.func.count())
        .where(EVENTS.c.status == EventStatus.RETRYING, EVENTS.c.next_attempt_at >= PARKED_FROM)
        .group_by(EVENTS.c.source)
    )
    return {str(source): int(n) for source, n in result}
