"""A park and the switch that ends it are ordered, on both databases: a delivery that
found its breaker half-open and parks its event, while the probe's success closes the
breaker in another transaction, is unparked by that close whichever commits first.

SQLite has no row locks and its driver starts a transaction only at the first write;
without ``still_blocked`` taking the write lock first, the close could commit between
the park's read and its write, and leave the event parked behind a closed breaker
(seen as a test that waited 30 s for one event, once in a few runs).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from store.delivery import destinations as state
from store.delivery.destinations import PARKED_FROM, Blocker
from store.models import EVENTS
from store.status import EventStatus
from tests.support.in_process import mixed, store

pytestmark = [pytest.mark.anyio]


async def half_open(engine: AsyncEngine) -> None:
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        _, opened = await state.record_failure(
            conn, "stripe", "crm", now=now, threshold=1, cooldown_s=0.0, reason="503"
        )
        assert opened
    async with engine.begin() as conn:
        later = now + timedelta(seconds=1)
        assert await state.take_probe(conn, "stripe", "crm", owner="p", now=later, probe_s=30)


async def test_a_park_written_while_the_breaker_closes_is_unparked_by_the_close(
    engine: AsyncEngine,
) -> None:
    [event_id] = await store(engine, mixed(1))
    await half_open(engine)
    closed = asyncio.Event()

    async def close() -> bool:
        async with engine.begin() as conn:
            _, closes = await state.record_success(conn, "stripe", "crm", now=datetime.now(UTC))
        closed.set()
        return closes

    async with engine.begin() as conn:
        assert await state.still_blocked(conn, [Blocker("breaker", "stripe", "crm")])
        closing = asyncio.create_task(close())
        # The close has to wait for this transaction: it read the breaker as held.
        await asyncio.sleep(0.5)
        assert not closed.is_set()
        received = (
            await conn.execute(sa.select(EVENTS.c.received_at).where(EVENTS.c.id == event_id))
        ).scalar_one()
        await conn.execute(
            sa.update(EVENTS)
            .where(EVENTS.c.id == event_id)
            .values(status=EventStatus.RETRYING, next_attempt_at=state.parked_at(received))
        )
    assert await asyncio.wait_for(closing, 10)
    async with engine.connect() as conn:
        due = (
            await conn.execute(sa.select(EVENTS.c.next_attempt_at).where(EVENTS.c.id == event_id))
        ).scalar_one()
    if due.tzinfo is None:
        due = due.replace(tzinfo=UTC)
    assert due < PARKED_FROM
