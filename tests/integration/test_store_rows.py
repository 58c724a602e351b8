"""The store's queries return typed rows that say what the database holds: the same
values, under the same names, as a plain ``SELECT`` of the table's columns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from store import claims, db
from store import reconcile as rstate
from store.crypto import BodyCipher
from store.events import event_resource, get_event, insert_events, list_events
from store.models import EVENTS, RECONCILE_RUNS, RECONCILE_STATE
from store.rows import EventRow, RunRow, RunTotalsRow, SourceStateRow
from store.status import EventOrigin, EventStatus, RunStatus, RunTrigger
from tests.support.data import new_event

pytestmark = pytest.mark.anyio
PLAIN = BodyCipher("")


async def test_event_rows_hold_every_column_as_stored(db_url: str) -> None:
    engine = db.create_engine(db_url)
    try:
        async with engine.begin() as conn:
            (stored,) = await insert_events(conn, [new_event("k", body=b'{"a":1}')], PLAIN)
        async with engine.connect() as conn:
            plain = (await conn.execute(sa.select(EVENTS))).one()._mapping
            full = await get_event(conn, stored.event_id, with_body=True)
            bodiless = await get_event(conn, stored.event_id)
            (listed,) = await list_events(conn)
            assert await get_event(conn, "0" * 26) is None
        assert type(full) is EventRow and type(listed) is EventRow
        assert full._asdict() == dict(plain)
        assert full.body == b'{"a":1}'
        # Without the body: NULL read in its place, every other column the same.
        assert bodiless == listed == full._replace(body=None)
        assert full.status == EventStatus.PENDING and full.origin == EventOrigin.WEBHOOK
        assert event_resource(bodiless)["status"] == "pending"
        assert event_resource(bodiless)["done"] is False

        now = datetime.now(UTC)
        async with engine.begin() as conn:
            (claimed,) = await claims.claim_due(conn, "w", 60, 10, now)
        assert type(claimed) is EventRow
        assert claimed.id == stored.event_id and claimed.body == full.body
        assert claimed.status == EventStatus.PROCESSING and claimed.attempts == 1
        assert claimed.lease_owner == "w"
    finally:
        await engine.dispose()


async def test_reconcile_rows_hold_every_column_as_stored(db_url: str) -> None:
    engine = db.create_engine(db_url)
    now = datetime.now(UTC)
    try:
        async with engine.begin() as conn:
            await rstate.ensure_state(conn, "stripe", now)
            await rstate.update_state(conn, "stripe", None, cursor=12.5, meta={"team_id": "T1"})
            for run_id, status in (("01RUNA", RunStatus.SUCCEEDED), ("01RUNB", RunStatus.QUEUED)):
                await rstate.create_run(
                    conn,
                    id=run_id,
                    source="stripe",
                    status=status,
                    trigger=RunTrigger.API,
                    dry_run=False,
                    started_at=now - timedelta(minutes=1),
                )
            await rstate.add_run_counts(conn, "01RUNA", items_missing=3, rate_limited=2)
        async with engine.connect() as conn:
            plain_state = (await conn.execute(sa.select(RECONCILE_STATE))).one()._mapping
            plain_runs = (
                await conn.execute(sa.select(RECONCILE_RUNS).order_by(RECONCILE_RUNS.c.id.desc()))
            ).all()
            state = await rstate.get_state(conn, "stripe")
            states = await rstate.all_states(conn)
            run = await rstate.get_run(conn, "01RUNA")
            runs = await rstate.list_runs(conn, "stripe")
            totals = await rstate.run_totals(conn)
            assert await rstate.get_state(conn, "nope") is None
            assert await rstate.get_run(conn, "nope") is None
        assert type(state) is SourceStateRow and state._asdict() == dict(plain_state)
        assert states == {"stripe": state}
        assert state.cursor == 12.5 and state.meta == {"team_id": "T1"}
        assert all(type(r) is RunRow for r in runs)
        assert [r._asdict() for r in runs] == [dict(r._mapping) for r in plain_runs]
        assert run == runs[1] and run is not None and run.status == RunStatus.SUCCEEDED
        assert rstate.run_resource(run)["done"] is True
        assert rstate.run_resource(runs[0])["done"] is False
        assert sorted(totals) == [
            RunTotalsRow("stripe", "queued", False, 1, 0, 0, 0),
            RunTotalsRow("stripe", "succeeded", False, 1, 3, 2, 0),
        ]
    finally:
        await engine.dispose()
