"""The prune lease: one prune at a time, everywhere (``store.retention.prune``). The
same rows serve other tasks done once per cluster at a time (``task``: the alerts'
evaluation, ``hookd.runtime.alerts``).

A row of ``maintenance_state`` (task ``prune``) says who prunes and until when:
``acquire`` takes it if nobody holds it (or it expired), every batch renews it
(``renew``), and ``release`` gives it back, recording a prune that went to its end.
A process that died holding it delays the next prune by at most ``LEASE_S``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store import dialect
from store.models import MAINTENANCE_STATE

TASK = "prune"
# The prune lease, renewed by every batch: a process that died holding it delays the
# next prune by at most this long.
LEASE_S = 300.0
# A prune cancelled or failed gives its lease back within this long, or leaves it.
RELEASE_S = 2.0


class LeaseLost(Exception):
    """Another process took the prune lease over (ours expired): stop here."""


def wall_clock() -> datetime:
    return datetime.now(UTC)


async def acquire(
    engine: AsyncEngine,
    owner: str,
    lease_s: float,
    now: datetime,
    *,
    due_before: datetime | None = None,
    task: str = TASK,
) -> bool:
    """Take the prune lease if nobody holds it (or it expired): one prune at a time,
    everywhere. With ``due_before``, only if the last prune finished before that
    moment (or never ran): what the schedules of every process share."""
    async with engine.begin() as conn:
        await conn.execute(
            dialect.insert(conn, MAINTENANCE_STATE)
            .values(task=task, updated_at=now)
            .on_conflict_do_nothing(index_elements=["task"])
        )
        free = sa.or_(
            MAINTENANCE_STATE.c.lease_owner.is_(None), MAINTENANCE_STATE.c.lease_expires_at < now
        )
        query = sa.update(MAINTENANCE_STATE).where(MAINTENANCE_STATE.c.task == task, free)
        if due_before is not None:
            query = query.where(
                sa.or_(
                    MAINTENANCE_STATE.c.last_finished_at.is_(None),
                    MAINTENANCE_STATE.c.last_finished_at < due_before,
                )
            )
        result = await conn.execute(
            query.values(
                lease_owner=owner,
                lease_expires_at=now + timedelta(seconds=lease_s),
                last_started_at=now,
                updated_at=now,
            )
        )
        return bool(result.rowcount)


async def renew(conn: AsyncConnection, owner: str, lease_s: float, now: datetime) -> bool:
    result = await conn.execute(
        sa.update(MAINTENANCE_STATE)
        .where(MAINTENANCE_STATE.c.task == TASK, MAINTENANCE_STATE.c.lease_owner == owner)
        .values(lease_expires_at=now + timedelta(seconds=lease_s))
    )
    return bool(result.rowcount)


async def release(
    engine: AsyncEngine, owner: str, *, finished_at: datetime | None, task: str = TASK
) -> None:
    """Give the lease back; ``finished_at`` records a prune that went to its end."""
    values: dict[str, datetime | None] = {
        "lease_owner": None,
        "lease_expires_at": None,
        "updated_at": wall_clock(),
    }
    if finished_at is not None:
        values["last_finished_at"] = finished_at
    async with engine.begin() as conn:
        await conn.execute(
            sa.update(MAINTENANCE_STATE)
            .where(MAINTENANCE_STATE.c.task == task, MAINTENANCE_STATE.c.lease_owner == owner)
            .values(values)
        )


async def last_finished(engine: AsyncEngine) -> datetime | None:
    async with engine.connect() as conn:
        return (
            await conn.execute(
                sa.select(MAINTENANCE_STATE.c.last_finished_at).where(
                    MAINTENANCE_STATE.c.task == TASK
                )
            )
        ).scalar()


async def lease_holder(engine: AsyncEngine) -> tuple[str | None, datetime | None]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(
                    MAINTENANCE_STATE.c.lease_owner, MAINTENANCE_STATE.c.lease_expires_at
                ).where(MAINTENANCE_STATE.c.task == TASK)
            )
        ).first()
    return (None, None) if row is None else (row.lease_owner, row.lease_expires_at)
