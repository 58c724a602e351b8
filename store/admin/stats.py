"""What the tables hold, for the metrics read at scrape time: rows and bytes per
table, the oldest event kept per source, and what prune removed.

Each query is bounded, whatever the size of the tables: PostgreSQL's rows and sizes
come from its catalog (``pg_class.reltuples``, the planner's estimate, and
``pg_total_relation_size``: indexes and TOAST included; for ``events``, summed over
its partitions); the oldest event of a source
is the first entry of the ``(source, id)`` index. SQLite has no catalog of counts:
its rows are counted and its bytes summed from ``dbstat`` (when the library has it),
both of which read every page, so the caller keeps them for a while
(``hookd.metrics.db``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import dialect, queries
from store.models import EVENTS, PRUNE_TOTALS

SQL = queries.load("stats")

# The tables that grow with traffic, and the small ones beside them.
TABLES = (
    "events",
    "event_keys",
    "handler_runs",
    "reconcile_runs",
    "reconcile_state",
    "reconcile_run_totals",
    "prune_totals",
    "maintenance_state",
)


class TableSize(NamedTuple):
    table: str
    rows: float
    bytes: float | None  # None: not known (SQLite without dbstat)


async def table_sizes(conn: AsyncConnection) -> list[TableSize]:
    if dialect.is_postgres(conn):
        result = await conn.execute(
            sa.text(SQL["table_sizes_pg"]),
            {"names": list(TABLES)},
        )
        found = {r[0]: TableSize(r[0], float(r[1]), float(r[2])) for r in result}
        return [found[t] for t in TABLES if t in found]
    sizes = await _sqlite_bytes(conn)
    out = []
    for table in TABLES:
        rows = (await conn.execute(sa.text(f"SELECT count(*) FROM {table}"))).scalar_one()  # noqa: S608 - fixed names
        out.append(TableSize(table, float(rows), sizes.get(table) if sizes else None))
    return out


async def _sqlite_bytes(conn: AsyncConnection) -> dict[str, float] | None:
    """Bytes per table, its indexes included, from ``dbstat``; None without it."""
    try:
        result = await conn.execute(sa.text(SQL["table_bytes_sqlite"]))
    except sa.exc.OperationalError:  # SQLite built without SQLITE_ENABLE_DBSTAT_VTAB
        return None
    return {r[0]: float(r[1]) for r in result}


async def oldest_events(conn: AsyncConnection, sources: Iterable[str]) -> dict[str, datetime]:
    """Per source, when its oldest kept event was received (sources with none left out)."""
    out: dict[str, datetime] = {}
    for source in sources:
        row = (
            await conn.execute(
                sa.select(EVENTS.c.received_at)
                .where(EVENTS.c.source == source)
                .order_by(EVENTS.c.id)
                .limit(1)
            )
        ).first()
        if row is not None:
            out[source] = row[0]
    return out


async def pruned_totals(conn: AsyncConnection) -> dict[tuple[str, str], int]:
    """(source, what) -> what prune removed, ever (the partitions apart: no source)."""
    result = await conn.execute(
        sa.select(PRUNE_TOTALS.c.source, PRUNE_TOTALS.c.what, PRUNE_TOTALS.c.count).where(
            PRUNE_TOTALS.c.source != ""
        )
    )
    return {(r[0], r[1]): int(r[2]) for r in result}


async def partitions_dropped(conn: AsyncConnection) -> int:
    """Day partitions of ``events`` that retention dropped, ever (PostgreSQL)."""
    result = await conn.execute(
        sa.select(PRUNE_TOTALS.c.count).where(
            PRUNE_TOTALS.c.source == "", PRUNE_TOTALS.c.what == "day"
        )
    )
    return int(result.scalar() or 0)
