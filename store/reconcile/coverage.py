"""The coverage ledger (``reconcile_coverage``) and late deliveries.

A reconciliation run records the interval it checked, and what it found there, in the
transaction that moves the source's cursor (or records its failure); the interval a
disabled source was not checked is recorded when it is enabled again. ``records``
reads them back for ``reconcile.coverage`` to merge.

A late delivery is a webhook that arrives for a key a reconcile run stored first: the
run marks the keys it stored (``mark_repaired``), and a duplicate answer of the
receiver for such a key marks it late, once, and counts it on that run
(``record_late``, a batch at a time: ``reconcile.late``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import dialect
from store.ids import new_id
from store.models import EVENT_KEYS, RECONCILE_COVERAGE, RECONCILE_RUN_TOTALS, RECONCILE_RUNS
from store.status import RunStatus

# Keys per statement when marking a page's repairs (a page is at most a few hundred).
MARK_CHUNK = 500


class CoverageRow(NamedTuple):
    """``reconcile_coverage``: one recorded interval of one source."""

    id: str
    source: str
    run_id: str | None
    start_at: datetime
    end_at: datetime
    outcome: str  # a CoverageOutcome's value
    repaired: int
    reason: str | None
    recorded_at: datetime


COVERAGE_COLUMNS = [RECONCILE_COVERAGE.c[name] for name in CoverageRow._fields]


async def record(
    conn: AsyncConnection,
    *,
    source: str,
    start: datetime,
    end: datetime,
    outcome: str,
    now: datetime,
    run_id: str | None = None,
    repaired: int = 0,
    reason: str | None = None,
) -> None:
    """One interval of ``source`` and its outcome; an empty one records nothing."""
    if end <= start:
        return
    await conn.execute(
        sa.insert(RECONCILE_COVERAGE).values(
            id=new_id(),
            source=source,
            run_id=run_id,
            start_at=start,
            end_at=end,
            outcome=outcome,
            repaired=repaired,
            reason=reason,
            recorded_at=now,
        )
    )


async def records(
    conn: AsyncConnection, source: str, since: datetime, until: datetime
) -> list[CoverageRow]:
    """The intervals of ``source`` that overlap ``[since, until)``, oldest first."""
    result = await conn.execute(
        sa.select(*COVERAGE_COLUMNS)
        .where(
            RECONCILE_COVERAGE.c.source == source,
            RECONCILE_COVERAGE.c.start_at < until,
            RECONCILE_COVERAGE.c.end_at > since,
        )
        .order_by(RECONCILE_COVERAGE.c.start_at, RECONCILE_COVERAGE.c.id)
    )
    return list(map(CoverageRow._make, result))


async def first_start(conn: AsyncConnection, source: str) -> datetime | None:
    """Where the ledger of ``source`` begins (None before its first record)."""
    result = await conn.execute(
        sa.select(sa.func.min(RECONCILE_COVERAGE.c.start_at)).where(
            RECONCILE_COVERAGE.c.source == source
        )
    )
    found: datetime | None = result.scalar()
    return found


async def mark_repaired(
    conn: AsyncConnection, source: str, keys: Sequence[str], run_id: str
) -> None:
    """The keys ``run_id`` just stored (in its transaction): a webhook for one of them
    from now on is late, and counted on that run."""
    for start in range(0, len(keys), MARK_CHUNK):
        chunk = list(keys[start : start + MARK_CHUNK])
        await conn.execute(
            sa.update(EVENT_KEYS)
            .where(EVENT_KEYS.c.source == source, EVENT_KEYS.c.dedupe_key.in_(chunk))
            .values(repaired_by=run_id)
        )


async def record_late(
    conn: AsyncConnection, deliveries: Sequence[tuple[str, str]], now: datetime
) -> dict[str, int]:
    """Webhooks answered as duplicates, as (source, dedupe_key): each key a reconcile run
    stored and no webhook brought before is marked late, once, and counted on that run.
    Returns how many per run id (keys not stored by a run, or already late, count none)."""
    pairs = sorted(set(deliveries))  # one lock order for every writer
    found: dict[tuple[str, str], int] = {}  # (source, run id) -> keys
    for start in range(0, len(pairs), MARK_CHUNK):
        marked = await conn.execute(
            sa.update(EVENT_KEYS)
            .where(
                sa.tuple_(EVENT_KEYS.c.source, EVENT_KEYS.c.dedupe_key).in_(
                    pairs[start : start + MARK_CHUNK]
                ),
                EVENT_KEYS.c.repaired_by.is_not(None),
                EVENT_KEYS.c.late_at.is_(None),
            )
            .values(late_at=now)
            .returning(EVENT_KEYS.c.source, EVENT_KEYS.c.repaired_by)
        )
        for source, run_id in marked:
            found[source, run_id] = found.get((source, run_id), 0) + 1
    by_run: dict[str, int] = {}
    for (source, run_id), count in sorted(found.items()):
        await _count_late(conn, source, run_id, count)
        by_run[run_id] = by_run.get(run_id, 0) + count
    return by_run


async def _count_late(conn: AsyncConnection, source: str, run_id: str, count: int) -> None:
    counted = await conn.execute(
        sa.update(RECONCILE_RUNS)
        .where(RECONCILE_RUNS.c.id == run_id)
        .values(items_late=RECONCILE_RUNS.c.items_late + count)
    )
    if counted.rowcount:
        return
    # The run's record was pruned (its counters carried to the totals): count it there,
    # so that hookd_reconcile_late_total still goes up.
    stmt = dialect.insert(conn, RECONCILE_RUN_TOTALS).values(
        source=source,
        status=RunStatus.SUCCEEDED,
        dry_run=False,
        runs=0,
        missing=0,
        rate_limited=0,
        late=count,
    )
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["source", "status", "dry_run"],
            set_={"late": RECONCILE_RUN_TOTALS.c.late + stmt.excluded.late},
        )
    )
