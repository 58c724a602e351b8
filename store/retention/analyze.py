"""Planner statistics of the busy tables, refreshed by hookd when nothing else does.

PostgreSQL plans from statistics that only ``ANALYZE`` (autovacuum's, usually)
gathers. A table that grew a hundredfold since its last ``ANALYZE`` (or that never
had one: autovacuum off, or far behind) is planned from guesses, and a guess can
turn a lookup of a batch into a scan of the whole table. hookd's hot queries are
written so that no guess makes them scan (``store.claims.claiming``, ``store.intake.events``,
``store.intake.fastpath``); this keeps the statistics fresh for everything else (the API's
lists, the metrics, prune's picks).

``analyze_stale`` runs ``ANALYZE`` on each of ``events``' partitions (the whole
table when it is not partitioned), ``handler_runs`` and ``event_keys`` whose rows
changed by more than ``FRACTION`` of the table (and at least ``MIN_ROWS``) since
their last analyze. That is far past the point where autovacuum, when it runs,
analyzes them (migration 0005 and the partitions ask it to at 2%), so on a server
with autovacuum on this does nothing. Tables the database user does not own are
skipped (PostgreSQL would refuse). Each ``ANALYZE`` reads a sample (30,000 rows at
the default statistics target) and takes a lock that lets reads and writes go on;
one process at a time (an advisory lock), each table given up after
``LOCK_TIMEOUT_MS`` if vacuum holds it.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from store import dialect, queries

log = logging.getLogger("hookd.analyze")

# And each partition of events (events itself before migration 0008).
TABLES = ("events", "handler_runs", "event_keys")
MIN_ROWS = 10_000
FRACTION = 0.2
LOCK_TIMEOUT_MS = 1_000
# pg_advisory_xact_lock key: one process analyzes at a time.
ANALYZE_LOCK = 0x686F6F6B64_02

STALE = sa.text(queries.load("stats")["stale_tables_pg"])


async def stale(engine: AsyncEngine) -> list[str]:
    """The tables ``analyze_stale`` would analyze now (none on SQLite)."""
    if not dialect.is_postgres(engine):
        return []
    async with engine.connect() as conn:
        result = await conn.execute(
            STALE, {"tables": list(TABLES), "min_rows": MIN_ROWS, "fraction": FRACTION}
        )
        return [r[0] for r in result]


async def analyze_stale(engine: AsyncEngine) -> list[str]:
    """``ANALYZE`` the tables whose statistics are stale (see the module's text);
    the ones analyzed."""
    done: list[str] = []
    for table in await stale(engine):
        try:
            async with engine.begin() as conn:
                await conn.exec_driver_sql(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
                got = await conn.execute(
                    sa.text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": ANALYZE_LOCK}
                )
                if not got.scalar():
                    return done  # another process is at it
                quoted = conn.dialect.identifier_preparer.quote(table)
                await conn.exec_driver_sql(f"ANALYZE {quoted}")
        except sa.exc.DBAPIError as exc:
            # Held by a vacuum (or dropped by prune meanwhile): the next look retries.
            log.info("analyze skipped", extra={"table": table, "error": type(exc.orig).__name__})
            continue
        done.append(table)
    if done:
        log.info("analyzed", extra={"tables": done})
    return done
