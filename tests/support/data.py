"""Small database helpers shared by the integration tests."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from store import db
from store.events import NewEvent


async def scalar(url: str, sql: str) -> int:
    """One integer from a query on a fresh engine (tests read what processes wrote)."""
    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            return int((await conn.execute(sa.text(sql))).scalar() or 0)
    finally:
        await engine.dispose()


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
