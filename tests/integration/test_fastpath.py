"""The receiver's ORM-free insert gives the same rows and answers as ``insert_events``."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.runtime import sqlite_writer
from store.crypto import BodyCipher
from store.intake import fastpath, sqlite_write
from store.intake.events import get_event, insert_events
from store.models import EVENTS
from tests.support.data import engine_of, new_event

pytestmark = pytest.mark.anyio
PLAIN = BodyCipher("")


# Set by ``db_url``: SQLite's insert on a thread of this process, or in a writer process.
SQLITE_PROCESS = False


@pytest.fixture(params=["sqlite-thread", "sqlite-process", "postgres"])
def db_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(sys.modules[__name__], "SQLITE_PROCESS", request.param == "sqlite-process")
    url: str = request.getfixturevalue("pg_url" if request.param == "postgres" else "sqlite_url")
    return url


def inserter(url: str, cipher: BodyCipher = PLAIN) -> fastpath.Inserter:
    made = sqlite_writer.inserter_for(
        url, cipher, committers=4, timeout_s=5, sqlite_process=SQLITE_PROCESS
    )
    expected = sqlite_writer.SqliteProcessInserter if SQLITE_PROCESS else type(made)
    assert isinstance(made, expected)
    return made


async def count(url: str) -> int:
    async with engine_of(url) as engine, engine.connect() as conn:
        return int(
            (await conn.execute(sa.select(sa.func.count()).select_from(EVENTS))).scalar_one()
        )


async def test_same_answers_as_the_orm_path(db_url: str, engine: AsyncEngine) -> None:
    fast = inserter(db_url)
    try:
        out = await fast.insert(
            [new_event("a"), new_event("b"), new_event("a"), new_event("a", "other")]
        )
        assert [s.created for s in out] == [True, True, False, True]
        assert out[0].event_id == out[2].event_id
        # A key stored by the ORM path is a duplicate to the fast path, and the reverse.
        async with engine.begin() as conn:
            [orm] = await insert_events(conn, [new_event("c")], PLAIN)
        again = await fast.insert([new_event("b"), new_event("c"), new_event("d")])
        assert [s.created for s in again] == [False, False, True]
        assert again[0].event_id == out[1].event_id
        assert again[1].event_id == orm.event_id
        async with engine.begin() as conn:
            [back] = await insert_events(conn, [new_event("d")], PLAIN)
        assert (back.created, back.event_id) == (False, again[2].event_id)
        assert await count(db_url) == 5
    finally:
        await fast.close()


async def test_rows_read_back_exactly_through_the_orm(db_url: str, engine: AsyncEngine) -> None:
    fast = inserter(db_url)
    received = datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=UTC)
    event = replace(
        new_event("read-back", body=b'{"k": "v\\u00e9"}'),
        received_at=received,
        occurred_at=received - timedelta(seconds=3),
        type=None,
        headers={"x-github-event": "push", "user-agent": "GitHub-Hookshot/1 é"},
    )
    try:
        [stored] = await fast.insert([event])
        async with engine.connect() as conn:
            row = await get_event(conn, stored.event_id, with_body=True)
        assert row is not None
        assert row.received_at == received
        assert row.next_attempt_at == received
        assert row.occurred_at == received - timedelta(seconds=3)
        assert row.type is None
        assert row.headers == event.headers
        assert row.body == event.body
        assert (row.status, row.attempts, row.origin, row.body_encrypted) == (
            "pending",
            0,
            "webhook",
            False,
        )
        assert row.created_at.tzinfo is not None
    finally:
        await fast.close()


async def test_encrypted_bodies_are_sealed(db_url: str, engine: AsyncEngine) -> None:
    from cryptography.fernet import Fernet

    cipher = BodyCipher(Fernet.generate_key().decode())
    fast = inserter(db_url, cipher)
    try:
        [stored] = await fast.insert([new_event("secret-body", body=b'{"card": "4242"}')])
        async with engine.connect() as conn:
            row = await get_event(conn, stored.event_id, with_body=True)
        assert row is not None and row.body_encrypted
        assert b"4242" not in row.body
        assert cipher.open(row.body, True) == b'{"card": "4242"}'
    finally:
        await fast.close()


async def test_batches_larger_than_one_sqlite_statement(db_url: str) -> None:
    fast = inserter(db_url)
    n = sqlite_write.SQLITE_ROWS * 2 + 7
    try:
        out = await fast.insert([new_event(f"big-{i}") for i in range(n)] + [new_event("big-0")])
        assert sum(s.created for s in out) == n
        assert out[-1].event_id == out[0].event_id
        assert await count(db_url) == n
    finally:
        await fast.close()


async def test_concurrent_overlapping_batches_store_each_key_once(db_url: str) -> None:
    fast = inserter(db_url)
    keys = [f"k{i}" for i in range(200)]
    try:
        results = await asyncio.gather(
            *(
                fast.insert([new_event(k) for k in (keys if i % 2 else keys[::-1])])
                for i in range(8)
            )
        )
        assert sum(s.created for r in results for s in r) == 200
        assert len({frozenset(s.event_id for s in r) for r in results}) == 1
        assert await count(db_url) == 200
    finally:
        await fast.close()


async def test_a_failed_batch_raises_and_the_next_one_works(pg_url: str) -> None:
    fast = inserter(pg_url)  # SQLite does not enforce VARCHAR lengths
    try:
        with pytest.raises(Exception):  # noqa: B017 - the driver's own error type
            await fast.insert([replace(new_event("x"), source="s" * 5000)])
        [ok] = await fast.insert([new_event("after")])
        assert ok.created
    finally:
        await fast.close()


async def test_probe_commits_a_write_and_leaves_no_row(db_url: str) -> None:
    """The readiness probe writes through the receiver's own path and leaves nothing:
    no row for the worker, the API or the metrics to see, before or after."""
    fast = inserter(db_url, BodyCipher(Fernet.generate_key().decode()))
    try:
        await fast.insert([new_event("kept")])
        for _ in range(3):
            await fast.probe()
        assert await count(db_url) == 1
        assert [s.created for s in await fast.insert([new_event("kept")])] == [False]
    finally:
        await fast.close()
