"""Reconciliation state: per-source lease, cursor, schedule; run records."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from store.models import EVENTS, RECONCILE_RUNS, RECONCILE_STATE


async def ensure_state(conn: AsyncConnection, source: str, now: datetime) -> None:
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    await conn.execute(
        insert(RECONCILE_STATE)
        .values(
            source=source,
            disabled=False,
            auth_failures=0,
            error_count=0,
            meta={},
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["source"])
    )


async def get_state(conn: AsyncConnection, source: str) -> sa.Row[Any] | None:
    result = await conn.execute(
        sa.select(RECONCILE_STATE).where(RECONCILE_STATE.c.source == source)
    )
    return result.first()


async def all_states(conn: AsyncConnection) -> dict[str, sa.Row[Any]]:
    return {r.source: r for r in await conn.execute(sa.select(RECONCILE_STATE))}


async def acquire_lease(
    conn: AsyncConnection, source: str, owner: str, ttl_s: float, now: datetime
) -> bool:
    """Take the source's run lease if free or expired: one run at a time, everywhere.

    Not even the lease's own holder takes it again: two runs started in one
    process (a schedule and an API call) would otherwise overlap.
    """
    result = await conn.execute(
        sa.update(RECONCILE_STATE)
        .where(
            RECONCILE_STATE.c.source == source,
            sa.or_(
                RECONCILE_STATE.c.lease_owner.is_(None),
                RECONCILE_STATE.c.lease_expires_at < now,
            ),
        )
        .values(lease_owner=owner, lease_expires_at=now + timedelta(seconds=ttl_s), updated_at=now)
    )
    return bool(result.rowcount)


async def renew_lease(
    conn: AsyncConnection, source: str, owner: str, ttl_s: float, now: datetime
) -> bool:
    result = await conn.execute(
        sa.update(RECONCILE_STATE)
        .where(RECONCILE_STATE.c.source == source, RECONCILE_STATE.c.lease_owner == owner)
        .values(lease_expires_at=now + timedelta(seconds=ttl_s))
    )
    return bool(result.rowcount)


async def update_state(
    conn: AsyncConnection, source: str, owner: str | None, **values: Any
) -> bool:
    """Change the state; with ``owner``, only while that owner holds the lease."""
    query = sa.update(RECONCILE_STATE).where(RECONCILE_STATE.c.source == source)
    if owner is not None:
        query = query.where(RECONCILE_STATE.c.lease_owner == owner)
    result = await conn.execute(query.values(**values))
    return bool(result.rowcount)


async def create_run(conn: AsyncConnection, **values: Any) -> None:
    defaults = {
        "items_checked": 0,
        "items_missing": 0,
        "items_repaired": 0,
        "pages": 0,
        "api_calls": 0,
        "rate_limited": 0,
    }
    await conn.execute(sa.insert(RECONCILE_RUNS).values({**defaults, **values}))


async def add_run_counts(conn: AsyncConnection, run_id: str, **deltas: int) -> None:
    """Counters move in the same transaction as the repairs they describe."""
    values = {name: RECONCILE_RUNS.c[name] + delta for name, delta in deltas.items() if delta}
    if values:
        await conn.execute(
            sa.update(RECONCILE_RUNS).where(RECONCILE_RUNS.c.id == run_id).values(values)
        )


async def update_run(conn: AsyncConnection, run_id: str, **values: Any) -> None:
    await conn.execute(
        sa.update(RECONCILE_RUNS).where(RECONCILE_RUNS.c.id == run_id).values(values)
    )


UNFINISHED = ("queued", "running")


async def fail_unfinished_run(
    conn: AsyncConnection, run_id: str, error: str, now: datetime
) -> bool:
    """Record a run as failed unless it already ended (an end that won the race stays)."""
    result = await conn.execute(
        sa.update(RECONCILE_RUNS)
        .where(RECONCILE_RUNS.c.id == run_id, RECONCILE_RUNS.c.status.in_(UNFINISHED))
        .values(status="failed", finished_at=now, error=error)
    )
    return bool(result.rowcount)


async def close_abandoned_runs(
    conn: AsyncConnection, source: str, now: datetime, keep: str | None = None
) -> list[str]:
    """Fail the source's runs still ``running`` once its lease could be taken again.

    Call with the lease just acquired: a live run holds the lease (and renews it
    per page), so a ``running`` run without it belongs to a process that died
    (SIGKILL, OOM, a lost node) before it could record its end.
    """
    result = await conn.execute(
        sa.update(RECONCILE_RUNS)
        .where(
            RECONCILE_RUNS.c.source == source,
            RECONCILE_RUNS.c.status == "running",
            RECONCILE_RUNS.c.id != (keep or ""),
        )
        .values(status="failed", finished_at=now, error="abandoned: lease expired")
        .returning(RECONCILE_RUNS.c.id)
    )
    return [row[0] for row in result]


async def get_run(conn: AsyncConnection, run_id: str) -> sa.Row[Any] | None:
    result = await conn.execute(sa.select(RECONCILE_RUNS).where(RECONCILE_RUNS.c.id == run_id))
    return result.first()


async def list_runs(
    conn: AsyncConnection, source: str | None = None, limit: int = 50
) -> list[sa.Row[Any]]:
    query = sa.select(RECONCILE_RUNS).order_by(RECONCILE_RUNS.c.id.desc()).limit(limit)
    if source is not None:
        query = query.where(RECONCILE_RUNS.c.source == source)
    return list((await conn.execute(query)).all())


async def existing_keys(conn: AsyncConnection, source: str, keys: Iterable[str]) -> set[str]:
    wanted = list(set(keys))
    found: set[str] = set()
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        result = await conn.execute(
            sa.select(EVENTS.c.dedupe_key).where(
                EVENTS.c.source == source, EVENTS.c.dedupe_key.in_(chunk)
            )
        )
        found.update(row[0] for row in result)
    return found


async def run_totals(conn: AsyncConnection) -> Sequence[sa.Row[Any]]:
    """Per source and status: run count and summed counters (for metrics)."""
    result = await conn.execute(
        sa.select(
            RECONCILE_RUNS.c.source,
            RECONCILE_RUNS.c.status,
            RECONCILE_RUNS.c.dry_run,
            sa.func.count().label("runs"),
            sa.func.coalesce(sa.func.sum(RECONCILE_RUNS.c.items_missing), 0).label("missing"),
            sa.func.coalesce(sa.func.sum(RECONCILE_RUNS.c.rate_limited), 0).label("rate_limited"),
        ).group_by(RECONCILE_RUNS.c.source, RECONCILE_RUNS.c.status, RECONCILE_RUNS.c.dry_run)
    )
    return result.all()


def run_resource(row: sa.Row[Any]) -> dict[str, Any]:
    m = row._mapping
    return {
        "name": f"reconcile-runs/{m['id']}",
        "id": m["id"],
        "source": m["source"],
        "status": m["status"],
        "done": m["status"] in ("succeeded", "failed", "lease_held"),
        "trigger": m["trigger"],
        "dry_run": m["dry_run"],
        "started_at": _iso(m["started_at"]),
        "finished_at": _iso(m["finished_at"]),
        "items_checked": m["items_checked"],
        "items_missing": m["items_missing"],
        "items_repaired": m["items_repaired"],
        "pages": m["pages"],
        "api_calls": m["api_calls"],
        "rate_limited": m["rate_limited"],
        "cursor_before": m["cursor_before"],
        "cursor_after": m["cursor_after"],
        "error": m["error"],
    }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")
