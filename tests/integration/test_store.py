"""The insert path: one statement per batch, the unique constraint decides."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from store.crypto import BodyCipher
from store.intake.events import insert_events, list_events
from store.models import EVENTS
from tests.support.data import engine_of, new_event

pytestmark = pytest.mark.anyio
PLAIN = BodyCipher("")


ev = new_event


async def test_batch_with_inner_duplicates_creates_one_row_each(db_url: str) -> None:
    async with engine_of(db_url) as engine:
        async with engine.begin() as conn:
            out = await insert_events(conn, [ev("a"), ev("b"), ev("a"), ev("a", "other")], PLAIN)
        assert [s.created for s in out] == [True, True, False, True]
        assert out[0].event_id == out[2].event_id
        assert out[0].event_id != out[3].event_id
        async with engine.begin() as conn:
            again = await insert_events(conn, [ev("b"), ev("c")], PLAIN)
        assert [s.created for s in again] == [False, True]
        assert again[0].event_id == out[1].event_id
        async with engine.connect() as conn:
            count = (await conn.execute(sa.select(sa.func.count()).select_from(EVENTS))).scalar()
        assert count == 4


async def test_concurrent_batches_sharing_keys_neither_deadlock_nor_double(db_url: str) -> None:
    """Two transactions inserting overlapping keys in opposite orders both commit."""
    keys = [f"k{i}" for i in range(50)]
    async with engine_of(db_url) as engine:

        async def batch(order: list[str]) -> list[str]:
            async with engine.begin() as conn:
                return [
                    s.event_id for s in await insert_events(conn, [ev(k) for k in order], PLAIN)
                ]

        results = await asyncio.gather(*(batch(keys if i % 2 else keys[::-1]) for i in range(6)))
        assert all(len(set(r)) == 50 for r in results)
        assert len({frozenset(r) for r in results}) == 1, "every batch sees the same 50 ids"
        async with engine.connect() as conn:
            count = (await conn.execute(sa.select(sa.func.count()).select_from(EVENTS))).scalar()
        assert count == 50


async def test_list_is_newest_first_and_keyset_paged(db_url: str) -> None:
    async with engine_of(db_url) as engine:
        for key in ("one", "two", "three"):
            async with engine.begin() as conn:
                await insert_events(conn, [ev(key)], PLAIN)
            await asyncio.sleep(0.002)
        async with engine.connect() as conn:
            first = await list_events(conn, limit=2)
            rest = await list_events(conn, limit=2, before_id=first[-1].id)
        assert [r.dedupe_key for r in first] == ["three", "two"]
        assert [r.dedupe_key for r in rest] == ["one"]


async def test_sqlite_runs_in_wal_with_full_sync(sqlite_url: str) -> None:
    async with engine_of(sqlite_url) as engine:
        async with engine.connect() as conn:
            mode = (await conn.execute(sa.text("PRAGMA journal_mode"))).scalar()
            sync = (await conn.execute(sa.text("PRAGMA synchronous"))).scalar()
        assert (mode, sync) == ("wal", 2)


async def test_postgres_sessions_commit_synchronously(pg_url: str) -> None:
    async with engine_of(pg_url) as engine:
        async with engine.connect() as conn:
            value = (await conn.execute(sa.text("SHOW synchronous_commit"))).scalar()
        assert value == "on"
