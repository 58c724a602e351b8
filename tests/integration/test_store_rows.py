"""The store's queries return typed rows that say what the database holds: the same
values, under the same names, as a plain ``SELECT`` of the table's columns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from hookd.ops.resources import event_of, run_of
from store.claims import claiming
from store.crypto import BodyCipher
from store.intake.events import get_event, insert_events, list_events
from store.models import EVENTS, RECONCILE_RUNS, RECONCILE_STATE
from store.reconcile import runs as rstate
from store.rows import EventRow, RunRow, RunTotalsRow, SourceStateRow
from store.status import EventOrigin, EventStatus, RunStatus, RunTrigger
from tests.support.data import engine_of, new_event

# A claim as a lone claimer makes it: events of github, up to 10.
GITHUB = claiming.alone(["github"], 10)

pytestmark = pytest.mark.anyio
PLAIN = BodyCipher("")


async def test_event_rows_hold_every_column_as_stored(db_url: str) -> None:
    async with engine_of(db_url) as engine:
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
        assert event_of(bodiless).answer()["status"] == "pending"
        assert event_of(bodiless).done is False

        now = datetime.now(UTC)
        async with engine.begin() as conn:
            (claimed,) = await claiming.claim_due(conn, "w", 60, 10, now, shares=GITHUB)
        assert type(claimed) is EventRow
        assert claimed.id == stored.event_id and claimed.body == full.body
        assert claimed.status == EventStatus.PROCESSING and claimed.attempts == 1
        assert claimed.lease_owner == "w"


async def test_reconcile_rows_hold_every_column_as_stored(db_url: str) -> None:
    now = datetime.now(UTC)
    async with engine_of(db_url) as engine:
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
        # The resource (a run id is a ULID: these rows' short ids are not).
        assert run_of(run._replace(id="0" * 26)).done is True
        assert run_of(runs[0]._replace(id="0" * 26)).done is False
        assert sorted(totals) == [
            RunTotalsRow("stripe", "queued", False, 1, 0, 0, 0),
            RunTotalsRow("stripe", "succeeded", False, 1, 3, 2, 0),
        ]


async def test_the_driver_level_writes_store_what_sqlalchemy_would(db_url: str) -> None:
    """The ledger's and the history's batch inserts hand the driver their parameters as
    they are (on SQLite): the stored values, timestamps to the character (whole seconds,
    another zone), are those SQLAlchemy's own insert of the same rows stores."""
    from store.claims import history
    from store.models import EVENT_HISTORY, HANDLER_RUNS

    at = datetime(2026, 12, 1, 23, 2, 9, tzinfo=UTC)  # no microseconds
    finished = datetime(2026, 12, 2, 1, 2, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    async with engine_of(db_url) as engine:
        async with engine.begin() as conn:
            mine, theirs = await insert_events(conn, [new_event("a"), new_event("b")], PLAIN)
            await claiming.record_handlers(conn, [(mine.event_id, "h")], finished)
            await conn.execute(
                sa.insert(HANDLER_RUNS),
                {"event_id": theirs.event_id, "handler": "h", "finished_at": finished},
            )
            attempt = history.Attempt(
                event_id=mine.event_id,
                attempt=2,
                worker="w",
                at=at,
                outcome="retry",
                finished_at=finished,
                duration_s=0.5,
                handler="h",
                error="e",
                error_type="E",
            )
            await history.record_attempts(conn, [attempt])
            row = history._attempt_row(attempt) | {"event_id": theirs.event_id}
            await conn.execute(sa.insert(EVENT_HISTORY), row)

        def as_text(table: sa.Table, *skip: str) -> sa.Select[Any]:
            columns = [sa.cast(c, sa.Text) for c in table.c if c.name not in skip]
            return sa.select(*columns).order_by(table.c.event_id)

        async with engine.connect() as conn:
            ledger = (await conn.execute(as_text(HANDLER_RUNS, "event_id"))).all()
            attempts = (await conn.execute(as_text(EVENT_HISTORY, "id", "event_id"))).all()
    assert ledger[0] == ledger[1]
    assert attempts[0] == attempts[1]
    assert "09" in str(attempts[0])  # the timestamps are there, not NULL


async def test_mark_processed_sets_the_same_columns_on_both_databases(db_url: str) -> None:
    """On SQLite the statement is written out for the driver: it sets what the
    statement built for PostgreSQL sets, and only where the owner still holds the
    lease."""
    from store.models import EVENTS

    now = datetime.now(UTC)  # the events are due from the time they were made
    async with engine_of(db_url) as engine:
        async with engine.begin() as conn:
            events = [new_event(k) for k in ("mine", "theirs", "other")]
            stored = await insert_events(conn, events, PLAIN)
            ids = [s.event_id for s in stored]
            claimed = await claiming.claim_due(
                conn, "w", 60, 10, now + timedelta(hours=1), shares=GITHUB
            )
            assert {r.id for r in claimed} == set(ids)
            # As a retried event would be: its last failure recorded.
            await conn.execute(
                sa.update(EVENTS)
                .where(EVENTS.c.id.in_(ids))
                .values(last_error="x", last_error_handler="h", last_error_type="E")
            )
            await conn.execute(
                sa.update(EVENTS).where(EVENTS.c.id == ids[2]).values(lease_owner="someone")
            )
            done = await claiming.mark_processed(conn, [ids[0], ids[2]], "w", now)
            # What it must set, written out, on the second event.
            await conn.execute(
                sa.update(EVENTS)
                .where(EVENTS.c.id == ids[1])
                .values(
                    status=EventStatus.PROCESSED,
                    processed_at=now,
                    last_error=None,
                    last_error_handler=None,
                    last_error_type=None,
                    lease_owner=None,
                    lease_expires_at=None,
                    updated_at=now,
                )
            )
        async with engine.connect() as conn:
            rows = {
                r.id: r
                for r in await conn.execute(
                    sa.select(*[sa.cast(c, sa.Text).label(c.name) for c in EVENTS.c])
                )
            }
    assert done == {ids[0]}, "the event held by another owner is fenced off"
    varies = {"id", "dedupe_key", "body", "received_at", "next_attempt_at", "created_at"}

    def same(row: Any) -> dict[str, Any]:
        return {k: v for k, v in row._mapping.items() if k not in varies}

    assert same(rows[ids[0]]) == same(rows[ids[1]])
    assert rows[ids[0]].status == "processed" and rows[ids[2]].status == "processing"
