"""A source's recent activity, per minute, for the admin UI's charts: events received,
events processed and how long they waited, and its reconciliation runs.

Every query reads one bounded index range: a source's events from the smallest id
minted at the range's start (ids begin with their time, so ``(source, id)`` holds
them in time order, and on PostgreSQL the day partitions before it are pruned), and
its runs through ``(source, id)`` likewise. They group by minute in the database and
return at most one row per minute. Processed events are those received since
``LAG_LOOKBACK`` before the range: an event received earlier but processed inside it
(a replay of an old one) is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import dialect
from store.ids import id_floor
from store.models import RECONCILE_RUNS

LAG_LOOKBACK = timedelta(hours=1)
MAX_RUNS = 500

_PG_MINUTE = "floor(extract(epoch FROM {col}) / 60)::bigint"
_PG_LAG = "extract(epoch FROM processed_at - received_at)"
_SQLITE_MINUTE = "CAST(strftime('%s', {col}) AS INTEGER) / 60"
_SQLITE_LAG = "(julianday(processed_at) - julianday(received_at)) * 86400.0"


@dataclass(slots=True)
class Minutes:
    """Per unix minute (``epoch seconds // 60``): only minutes with something in them."""

    received: dict[int, int] = field(default_factory=dict)
    processed: dict[int, int] = field(default_factory=dict)
    lag_max_s: dict[int, float] = field(default_factory=dict)
    lag_avg_s: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunPoint:
    id: str
    started_at: datetime
    status: str  # a store.status.RunStatus
    missing: int
    late: int | None  # None: this schema keeps no late count
    error: str | None = None  # why it failed


def keeps_late() -> bool:
    """Whether runs record the events they stored whose webhook came later."""
    return "items_late" in RECONCILE_RUNS.c


def _floor_ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


async def minutes(conn: AsyncConnection, source: str, since: datetime) -> Minutes:
    """Events of ``source`` received and processed per minute from ``since`` on."""
    pg = dialect.is_postgres(conn)
    minute, lag = (_PG_MINUTE, _PG_LAG) if pg else (_SQLITE_MINUTE, _SQLITE_LAG)
    # The bounds are bound as strings on SQLite, where the column holds naive UTC text.
    bound = since if pg else since.replace(tzinfo=None).isoformat(sep=" ")
    received = await conn.execute(
        sa.text(
            f"SELECT {minute.format(col='received_at')} AS m, count(*) FROM events "  # noqa: S608 - fixed fragments
            "WHERE source = :source AND id >= :floor AND received_at >= :since GROUP BY m"
        ),
        {"source": source, "floor": id_floor(_floor_ms(since)), "since": bound},
    )
    out = Minutes(received={int(m): int(n) for m, n in received})
    processed = await conn.execute(
        sa.text(
            f"SELECT {minute.format(col='processed_at')} AS m, count(*), max({lag}), avg({lag}) "  # noqa: S608 - fixed fragments
            "FROM events WHERE source = :source AND id >= :floor "
            "AND processed_at IS NOT NULL AND processed_at >= :since GROUP BY m"
        ),
        {"source": source, "floor": id_floor(_floor_ms(since - LAG_LOOKBACK)), "since": bound},
    )
    for m, n, lag_max, lag_avg in processed:
        out.processed[int(m)] = int(n)
        out.lag_max_s[int(m)] = max(0.0, float(lag_max or 0))
        out.lag_avg_s[int(m)] = max(0.0, float(lag_avg or 0))
    return out


async def runs(conn: AsyncConnection, source: str, since: datetime) -> list[RunPoint]:
    """The source's reconciliation runs started since ``since``, oldest first."""
    late = RECONCILE_RUNS.c.get("items_late")
    columns = [
        RECONCILE_RUNS.c.id,
        RECONCILE_RUNS.c.started_at,
        RECONCILE_RUNS.c.status,
        RECONCILE_RUNS.c.items_missing,
        RECONCILE_RUNS.c.error,
    ]
    result = await conn.execute(
        sa.select(*columns, *([late] if late is not None else []))
        .where(RECONCILE_RUNS.c.source == source)
        .where(RECONCILE_RUNS.c.id >= id_floor(_floor_ms(since)))
        .order_by(RECONCILE_RUNS.c.id.desc())
        .limit(MAX_RUNS)
    )
    points = [
        RunPoint(
            id=row[0],
            started_at=row[1],
            status=row[2],
            missing=int(row[3] or 0),
            late=None if late is None else int(row[5] or 0),
            error=row[4],
        )
        for row in result
    ]
    return points[::-1]
