"""Reconciliation state: per-source lease, cursor, schedule; run records."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TypedDict, Unpack

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import dialect
from store.models import EVENT_KEYS, RECONCILE_RUN_TOTALS, RECONCILE_RUNS, RECONCILE_STATE
from store.rows import (
    RUN_COLUMNS,
    SOURCE_STATE_COLUMNS,
    RegistrationRecord,
    RunRow,
    RunTotalsRow,
    SourceStateRow,
)
from store.status import UNFINISHED_RUN_STATUSES, RunStatus


class StateChange(TypedDict, total=False):
    """Columns of ``reconcile_state`` that ``update_state`` may set."""

    cursor: float | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    disabled: bool
    disabled_reason: str | None
    auth_failures: int
    error_count: int
    interval_s: float | None
    next_run_at: datetime | None
    last_run_id: str | None
    meta: dict[str, str]
    updated_at: datetime
    disabled_at: datetime | None
    disabled_by: str | None
    registration_ok: bool | None
    registration_checked_at: datetime | None
    registration: RegistrationRecord | None


class _RunProgress(TypedDict, total=False):
    """Columns of ``reconcile_runs`` a run sets as it goes and at its end."""

    finished_at: datetime | None
    items_checked: int
    items_missing: int
    items_repaired: int
    pages: int
    api_calls: int
    rate_limited: int
    cursor_before: float | None
    cursor_after: float | None
    error: str | None
    items_late: int
    ack_violations: int
    registration_ok: bool | None
    registration_problems: list[str] | None


class NewRun(_RunProgress):
    """A run record as ``create_run`` inserts it: these given, the counters 0 unless given."""

    id: str
    source: str
    status: str  # a RunStatus
    trigger: str  # a RunTrigger
    dry_run: bool
    started_at: datetime


class RunChange(_RunProgress, total=False):
    """Columns of ``reconcile_runs`` that ``update_run`` may set: all but the id."""

    source: str
    status: str  # a RunStatus
    trigger: str  # a RunTrigger
    dry_run: bool
    started_at: datetime


async def ensure_state(conn: AsyncConnection, source: str, now: datetime) -> None:
    await conn.execute(
        dialect.insert(conn, RECONCILE_STATE)
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


async def get_state(conn: AsyncConnection, source: str) -> SourceStateRow | None:
    result = await conn.execute(
        sa.select(*SOURCE_STATE_COLUMNS).where(RECONCILE_STATE.c.source == source)
    )
    row = result.first()
    return None if row is None else SourceStateRow._make(row)


async def all_states(conn: AsyncConnection) -> dict[str, SourceStateRow]:
    result = await conn.execute(sa.select(*SOURCE_STATE_COLUMNS))
    return {state.source: state for state in map(SourceStateRow._make, result)}


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
    conn: AsyncConnection, source: str, owner: str | None, **values: Unpack[StateChange]
) -> bool:
    """Change the state; with ``owner``, only while that owner holds the lease."""
    query = sa.update(RECONCILE_STATE).where(RECONCILE_STATE.c.source == source)
    if owner is not None:
        query = query.where(RECONCILE_STATE.c.lease_owner == owner)
    result = await conn.execute(query.values(**values))
    return bool(result.rowcount)


async def create_run(conn: AsyncConnection, **values: Unpack[NewRun]) -> None:
    defaults = {
        "items_checked": 0,
        "items_missing": 0,
        "items_repaired": 0,
        "items_late": 0,
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


async def update_run(conn: AsyncConnection, run_id: str, **values: Unpack[RunChange]) -> None:
    await conn.execute(
        sa.update(RECONCILE_RUNS).where(RECONCILE_RUNS.c.id == run_id).values(values)
    )


async def fail_unfinished_run(
    conn: AsyncConnection, run_id: str, error: str, now: datetime
) -> bool:
    """Record a run as failed unless it already ended (an end that won the race stays)."""
    result = await conn.execute(
        sa.update(RECONCILE_RUNS)
        .where(RECONCILE_RUNS.c.id == run_id, RECONCILE_RUNS.c.status.in_(UNFINISHED_RUN_STATUSES))
        .values(status=RunStatus.FAILED, finished_at=now, error=error)
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
            RECONCILE_RUNS.c.status == RunStatus.RUNNING,
            RECONCILE_RUNS.c.id != (keep or ""),
        )
        .values(status=RunStatus.FAILED, finished_at=now, error="abandoned: lease expired")
        .returning(RECONCILE_RUNS.c.id)
    )
    return [row[0] for row in result]


async def get_run(conn: AsyncConnection, run_id: str) -> RunRow | None:
    result = await conn.execute(sa.select(*RUN_COLUMNS).where(RECONCILE_RUNS.c.id == run_id))
    row = result.first()
    return None if row is None else RunRow._make(row)


async def list_runs(
    conn: AsyncConnection, source: str | None = None, limit: int = 50
) -> list[RunRow]:
    query = sa.select(*RUN_COLUMNS).order_by(RECONCILE_RUNS.c.id.desc()).limit(limit)
    if source is not None:
        query = query.where(RECONCILE_RUNS.c.source == source)
    return list(map(RunRow._make, await conn.execute(query)))


async def existing_keys(conn: AsyncConnection, source: str, keys: Iterable[str]) -> set[str]:
    """The keys of ``source`` that are stored: in ``event_keys``, where a key stays after
    its event row was pruned, so that a pass over a pruned range repairs nothing."""
    wanted = list(set(keys))
    found: set[str] = set()
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        result = await conn.execute(
            sa.select(EVENT_KEYS.c.dedupe_key).where(
                EVENT_KEYS.c.source == source, EVENT_KEYS.c.dedupe_key.in_(chunk)
            )
        )
        found.update(row[0] for row in result)
    return found


async def run_totals(conn: AsyncConnection) -> list[RunTotalsRow]:
    """Per source and status: run count and summed counters (for metrics), the pruned
    runs' (``reconcile_run_totals``) included, so that a counter never goes down."""
    result = await conn.execute(
        sa.select(
            RECONCILE_RUNS.c.source,
            RECONCILE_RUNS.c.status,
            RECONCILE_RUNS.c.dry_run,
            sa.func.count().label("runs"),
            sa.func.coalesce(sa.func.sum(RECONCILE_RUNS.c.items_missing), 0).label("missing"),
            sa.func.coalesce(sa.func.sum(RECONCILE_RUNS.c.rate_limited), 0).label("rate_limited"),
            sa.func.coalesce(sa.func.sum(RECONCILE_RUNS.c.items_late), 0).label("late"),
        ).group_by(RECONCILE_RUNS.c.source, RECONCILE_RUNS.c.status, RECONCILE_RUNS.c.dry_run)
    )
    carried = await conn.execute(
        sa.select(
            RECONCILE_RUN_TOTALS.c.source,
            RECONCILE_RUN_TOTALS.c.status,
            RECONCILE_RUN_TOTALS.c.dry_run,
            RECONCILE_RUN_TOTALS.c.runs,
            RECONCILE_RUN_TOTALS.c.missing,
            RECONCILE_RUN_TOTALS.c.rate_limited,
            RECONCILE_RUN_TOTALS.c.late,
        )
    )
    return [*map(RunTotalsRow._make, result), *map(RunTotalsRow._make, carried)]
