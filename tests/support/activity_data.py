"""Events and reconciliation runs with chosen times, for the admin charts' tests: rows
as the receiver and the poller write them, with ids minted at the times given."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from store.crypto import BodyCipher
from store.ids import new_id
from store.intake.events import key_row, prepare
from store.models import EVENT_KEYS, EVENTS, RECONCILE_RUNS
from store.status import EventStatus
from tests.support.data import new_event


def event_row(
    source: str, received_at: datetime, processed_at: datetime | None, seq: int
) -> dict[str, Any]:
    row: dict[str, Any] = dict(
        prepare([new_event(f"seed-{seq}-{received_at.timestamp()}", source)], BodyCipher("")).rows[
            0
        ]
    )
    row.update(
        id=new_id(int(received_at.timestamp() * 1000)),
        received_at=received_at,
        next_attempt_at=received_at,
        created_at=received_at,
        updated_at=processed_at or received_at,
        processed_at=None,
    )
    if processed_at is not None:
        row.update(status=EventStatus.PROCESSED, processed_at=processed_at, attempts=1)
    return row


async def insert_rows(engine: AsyncEngine, rows: list[dict[str, Any]]) -> None:
    async with engine.begin() as conn:
        for start in range(0, len(rows), 500):
            chunk = rows[start : start + 500]
            await conn.execute(sa.insert(EVENT_KEYS), [key_row(r) for r in chunk])  # type: ignore[arg-type]
            await conn.execute(sa.insert(EVENTS), chunk)


async def insert_run(
    engine: AsyncEngine,
    source: str,
    started_at: datetime,
    *,
    missing: int,
    late: int,
    status: str = "succeeded",
    error: str | None = None,
) -> str:
    run_id = new_id(int(started_at.timestamp() * 1000))
    values: dict[str, Any] = {
        "id": run_id,
        "source": source,
        "status": status,
        "error": error,
        "trigger": "schedule",
        "dry_run": False,
        "started_at": started_at,
        "finished_at": started_at,
        "items_checked": 100,
        "items_missing": missing,
        "items_repaired": missing,
        "pages": 1,
        "api_calls": 1,
        "rate_limited": 0,
    }
    if "items_late" in RECONCILE_RUNS.c:
        values["items_late"] = late
    async with engine.begin() as conn:
        await conn.execute(sa.insert(RECONCILE_RUNS).values(values))
    return run_id
