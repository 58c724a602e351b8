"""Small database helpers shared by the integration tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from store import db
from store.intake.events import NewEvent


@contextlib.asynccontextmanager
async def engine_of(url: str) -> AsyncIterator[AsyncEngine]:
    """hookd's engine on ``url``, disposed when the block ends: for a test that reads or
    writes what another engine (a process, the app) works on, or that needs a database
    other than the ``engine`` fixture's."""
    engine = db.create_engine(url)
    try:
        yield engine
    finally:
        await engine.dispose()


async def scalar(url: str, sql: str) -> int:
    """One integer from a query on a fresh engine (tests read what processes wrote)."""
    async with engine_of(url) as engine, engine.connect() as conn:
        return int((await conn.execute(sa.text(sql))).scalar() or 0)


def new_event(key: str, source: str = "github", body: bytes = b"{}") -> NewEvent:
    """A GitHub-shaped event as the receiver would hand it to the store."""
    return NewEvent(
        source=source,
        provider="github",
        dedupe_key=key,
        type="push",
        origin="webhook",
        received_at=datetime.now(UTC),
        occurred_at=None,
        verified_with="github-sha256;key=0",
        headers={"x-github-event": "push"},
        body=body,
    )
