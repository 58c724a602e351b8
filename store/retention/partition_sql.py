"""PostgreSQL: the statements partition maintenance is made of (``store.retention.partitions``
describes the whole): the locks a detach takes, the rows that refer to a partition's
events deleted, set aside and put back, rows copied by id, tombstones unmarked, and
the totals of what went.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from store.models import PRUNE_TOTALS
from store.retention.partition_catalog import PARENT, Reference, columns_of

# How long a partition's DDL waits for the lock it needs before giving up until the
# next run: everything queued behind it waits as long.
LOCK_TIMEOUT_MS = 2_000
LOCK_NOT_AVAILABLE = "55P03"


def is_lock_timeout(exc: sa.exc.DBAPIError) -> bool:
    return getattr(exc.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE


async def set_lock_timeout(conn: AsyncConnection) -> None:
    await conn.exec_driver_sql(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")


async def hold_events(conn: AsyncConnection, refs: Sequence[Reference]) -> None:
    """The locks a detach takes, in an order that cannot deadlock with processing:
    ``events`` first (waiting at most ``LOCK_TIMEOUT_MS``, holding nothing else), then
    the tables that refer to it, which DETACH holds in SHARE mode, without waiting (a
    worker's commit writes the ledger before ``events`` and its history after: waiting
    for either while holding ``events`` could close a cycle with it). Not free: the
    lock error, and the transaction is given up, to be tried again (``BUSY_TRIES``)."""
    await set_lock_timeout(conn)
    await conn.exec_driver_sql(f"LOCK TABLE {PARENT} IN ACCESS EXCLUSIVE MODE")
    if refs:
        tables = ", ".join(r.table for r in refs)
        await conn.exec_driver_sql(f"LOCK TABLE {tables} IN SHARE MODE NOWAIT")


async def forget(
    conn: AsyncConnection,
    refs: Sequence[Reference],
    lo: str,
    hi: str,
    *,
    through: bool,
    keep: Sequence[str] = (),
) -> None:
    """Delete the rows of ``refs`` that refer to events of ids ``[lo, hi)`` (``through``:
    ``[lo, hi]``) but those in ``keep``: a range of each table's referring index."""
    below = "<=" if through else "<"
    for ref in refs:
        sql = f"DELETE FROM {ref.table} WHERE {ref.column} >= :lo AND {ref.column} {below} :hi"  # noqa: S608 - names from the catalog
        params: dict[str, str | list[str]] = {"lo": lo, "hi": hi}
        if keep:
            sql += f" AND {ref.column} <> ALL(CAST(:keep AS text[]))"
            params["keep"] = list(keep)
        await conn.execute(sa.text(sql), params)


async def set_aside(
    conn: AsyncConnection,
    refs: Sequence[Reference],
    *,
    lo: str | None = None,
    hi: str | None = None,
    ids: Sequence[str] = (),
) -> list[tuple[Reference, str, str]]:
    """Copy the rows of ``refs`` that refer to events of ids ``[lo, hi)``, or to the
    events ``ids`` (a probe of the referring index each, ``LATERAL … OFFSET 0``:
    never planned as a scan of the table), into temporary tables dropped at commit;
    (reference, table, columns) each, for ``put_back``."""
    aside = []
    for n, ref in enumerate(refs):
        temp = f"_hookd_refs_{n}"
        columns = await columns_of(conn, ref.table)
        if lo is not None and hi is not None:
            col = ref.column
            rows = f"SELECT {columns} FROM {ref.table} WHERE {col} >= :lo AND {col} < :hi"  # noqa: S608 - names from the catalog
            params: dict[str, str | list[str]] = {"lo": lo, "hi": hi}
        else:
            rows = (
                "SELECT r.* FROM unnest(CAST(:ids AS text[])) AS k(id) CROSS JOIN LATERAL "  # noqa: S608 - names from the catalog
                f"(SELECT {columns} FROM {ref.table} WHERE {ref.column} = k.id OFFSET 0) AS r"
            )
            params = {"ids": list(ids)}
        await conn.execute(sa.text(f"CREATE TEMP TABLE {temp} ON COMMIT DROP AS {rows}"), params)
        aside.append((ref, temp, columns))
    return aside


async def put_back(conn: AsyncConnection, aside: Sequence[tuple[Reference, str, str]]) -> None:
    for ref, temp, columns in aside:
        await conn.exec_driver_sql(
            f"INSERT INTO {ref.table} ({columns}) OVERRIDING SYSTEM VALUE "  # noqa: S608 - names from the catalog
            f"SELECT {columns} FROM {temp}"
        )


def by_ids(table: str, columns: str) -> sa.TextClause:
    """The rows of ``table`` whose ids are ``:ids``: a probe of its primary key each
    (``LATERAL … OFFSET 0``), whatever the statistics say."""
    return sa.text(
        f"SELECT t.* FROM unnest(CAST(:ids AS text[])) AS k(id) CROSS JOIN LATERAL "  # noqa: S608 - a quoted catalog name
        f"(SELECT {columns} FROM {table} AS e WHERE e.id = k.id OFFSET 0) AS t"
    )


async def copy_rows(
    conn: AsyncConnection, source: str, target: str, ids: Sequence[str], columns: str
) -> dict[str, str]:
    """Copy the rows ``ids`` of ``source`` into ``target`` in one statement (one
    snapshot); their ids and versions (``xmin``) as copied."""
    picked = ", ".join(f"e.{c}" for c in columns.split(", "))
    sql = (
        "WITH picked AS (SELECT t.* FROM unnest(CAST(:ids AS text[])) AS k(id) "  # noqa: S608 - quoted catalog names
        f"CROSS JOIN LATERAL (SELECT e.xmin::text AS hookd_version, {picked} "
        f"FROM {source} AS e WHERE e.id = k.id OFFSET 0) AS t), "
        f"copied AS (INSERT INTO {target} ({columns}) SELECT {columns} FROM picked) "
        "SELECT id, hookd_version FROM picked"
    )
    result = await conn.execute(sa.text(sql), {"ids": list(ids)})
    return {r[0]: r[1] for r in result}


async def unmark(conn: AsyncConnection, keys: Sequence[tuple[str, str]]) -> None:
    """Clear the tombstone marks of these (source, dedupe_key): their rows stay."""
    if not keys:
        return
    await conn.execute(
        sa.text(
            "UPDATE event_keys AS k SET final_status = NULL, pruned_at = NULL "
            "FROM unnest(CAST(:sources AS text[]), CAST(:keys AS text[])) AS v(source, dedupe_key) "
            "WHERE k.source = v.source AND k.dedupe_key = v.dedupe_key AND k.pruned_at IS NOT NULL"
        ),
        {"sources": [k[0] for k in keys], "keys": [k[1] for k in keys]},
    )


async def add_total(conn: AsyncConnection, source: str, what: str, n: int) -> None:
    """Add to ``prune_totals`` (PostgreSQL); partitions dropped count as ('', ``DROPPED``)."""
    if not n:
        return
    stmt = postgresql.insert(PRUNE_TOTALS).values(source=source, what=what, count=n)
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["source", "what"],
            set_={"count": PRUNE_TOTALS.c.count + stmt.excluded.count},
        )
    )
