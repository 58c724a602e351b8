"""Migration 0008 on a PostgreSQL database that holds rows: ``events`` becomes
partitioned by day with every row (and ledger row) kept once, in its day's
partition; the downgrade gives the plain table back, as it was. SQLite: nothing
changes (``test_migration_0007`` runs through it to head)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from store import db, migrate
from store.ids import id_time_ms, new_id
from store.retention import partition_catalog, partition_create
from tests.integration.test_migration_0007 import dump, fill, rows_at_0006
from tests.support import services
from tests.support.data import engine_of

pytestmark = pytest.mark.postgres


@pytest.fixture
def empty_pg() -> Iterator[str]:
    services.require_pg()
    name = services.create_database()
    yield services.sqlalchemy_url(name)
    services.drop_database(name)


def rows_over_days(n: int) -> list[dict[str, Any]]:
    """0006-shaped events whose ids were minted every 5 hours, back from two days ago,
    and one row whose id is not an id hookd mints."""
    base = datetime.now(UTC) - timedelta(days=2)
    rows = rows_at_0006(n)
    for i, row in enumerate(rows):
        minted = base - timedelta(hours=5 * i)
        row["id"] = new_id(int(minted.timestamp() * 1000))
    rows[-1]["id"] = "legacy-row-not-an-ulid"
    return rows


def read(url: str, sql: str) -> list[tuple[Any, ...]]:
    async def run() -> list[tuple[Any, ...]]:
        async with engine_of(url) as engine, engine.connect() as conn:
            return [tuple(r) for r in await conn.execute(sa.text(sql))]

    return asyncio.run(run())


EVENTS_SHAPE = (
    "SELECT c.relkind::text, coalesce(c.reloptions, '{}'), "
    "(SELECT array_agg(indexdef ORDER BY indexname) FROM pg_indexes "
    "WHERE tablename = 'events'), "
    "(SELECT array_agg(pg_get_constraintdef(k.oid) ORDER BY conname) FROM pg_constraint k "
    "WHERE k.conrelid = c.oid OR (k.confrelid = c.oid AND k.conparentid = 0)) "
    "FROM pg_class c WHERE c.oid = to_regclass('events')"
)


def test_0008_partitions_a_database_with_rows_and_downgrades_back(empty_pg: str) -> None:
    migrate.upgrade(empty_pg, "0007")
    rows = rows_over_days(120)  # 25 days
    asyncio.run(fill(empty_pg, rows))
    before = asyncio.run(dump(empty_pg))
    shape_0007 = read(empty_pg, EVENTS_SHAPE)
    assert shape_0007[0][0] == "r"

    migrate.upgrade(empty_pg)
    after = asyncio.run(dump(empty_pg))
    assert after == before  # every event, ledger row and key, once
    homes = dict(read(empty_pg, "SELECT id, tableoid::regclass::text FROM events"))
    for row in rows[:-1]:
        ms = id_time_ms(row["id"])
        assert ms is not None
        day = datetime.fromtimestamp(ms / 1000, UTC).date()
        assert homes[row["id"]] == partition_catalog.name_of(day)
    assert homes[rows[-1]["id"]] == partition_catalog.DEFAULT
    # A partition per day with rows, and the days ahead: nothing in between.
    days_with_rows = {homes[r["id"]] for r in rows[:-1]}
    ahead = {partition_catalog.name_of(d) for d in partition_create.wanted_days(datetime.now(UTC))}
    made = {
        r[0]
        for r in read(
            empty_pg,
            "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'events'::regclass",
        )
    }
    assert made == days_with_rows | ahead | {partition_catalog.DEFAULT}
    # The foreign key still cascades from a partition to the ledger.
    ledgered = next(r["id"] for r in rows if r["status"] == "processed")
    assert read(empty_pg, f"SELECT count(*) FROM handler_runs WHERE event_id = '{ledgered}'")[
        0
    ] == (2,)
    read(empty_pg, f"SELECT 1 FROM events WHERE id = '{ledgered}'")

    async def delete_one() -> None:
        async with engine_of(empty_pg) as engine, engine.begin() as conn:
            await conn.execute(sa.text("DELETE FROM events WHERE id = :i"), {"i": ledgered})

    asyncio.run(delete_one())
    assert read(empty_pg, f"SELECT count(*) FROM handler_runs WHERE event_id = '{ledgered}'")[
        0
    ] == (0,)
    kept = asyncio.run(dump(empty_pg))

    with db.opening(empty_pg):
        command.downgrade(migrate.alembic_config(empty_pg), "0007")
    assert asyncio.run(dump(empty_pg)) == kept
    # The plain table as 0007 had it: kind, autovacuum settings, indexes, constraints.
    assert read(empty_pg, EVENTS_SHAPE) == shape_0007
    assert read(empty_pg, "SELECT count(*) FROM pg_inherits") == [(0,)]

    migrate.upgrade(empty_pg)  # and up again
    assert asyncio.run(dump(empty_pg)) == kept


def test_0008_on_an_empty_database_makes_only_the_days_ahead(empty_pg: str) -> None:
    """A fresh database: the partitions ahead and the default, no others."""
    migrate.upgrade(empty_pg)
    made = {
        r[0]
        for r in read(
            empty_pg,
            "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'events'::regclass",
        )
    }
    ahead = {partition_catalog.name_of(d) for d in partition_create.wanted_days(datetime.now(UTC))}
    assert made == ahead | {partition_catalog.DEFAULT}
