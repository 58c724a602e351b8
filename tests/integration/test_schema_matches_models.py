"""The SQLModel tables and the Alembic migrations describe the same schema.

A fresh database is migrated to head with ``store.migrate.upgrade`` and then
compared by Alembic's autogenerate with the metadata the migrations env targets;
any difference is a model or a migration that drifted from the other.

compare_metadata does not look at CHECK constraints (0001 and 0003 create
them; the models declare none), at partial-index predicates (ix_events_runnable's
WHERE), nor at table storage parameters (0005's autovacuum settings on
PostgreSQL), so those are not covered by it.

On PostgreSQL ``events`` is partitioned (0008, ``store.retention.partitions``): its partitions
are tables the models do not declare, and each carries a clone of every index of
``events`` and of the foreign key of ``handler_runs``. Autogenerate compares
``events`` itself (columns, primary key, indexes, the foreign key) and is kept away
from the partitions, which are checked apart instead: ``events`` is partitioned as the
model's ``postgresql_partition_by`` says, every partition carries exactly the
indexes of ``events`` (attached to them) and the autovacuum settings, each partition's
foreign-key clone belongs to ``handler_runs``' one foreign key, and the partitions
cover yesterday to a week ahead, plus a default.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from pprint import pformat
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from store import migrate
from store.models import EVENTS
from tests.support import services
from tests.support.data import engine_of

# What store/migrations/env.py passes as target_metadata (it cannot be imported:
# it runs the migrations when loaded).
TARGET_METADATA = EVENTS.metadata


def partition_names(conn: sa.Connection) -> set[str]:
    """The partitions of ``events`` (none on SQLite, or before 0008)."""
    if conn.dialect.name != "postgresql":
        return set()
    result = conn.exec_driver_sql(
        "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = to_regclass('events')"
    )
    return {r[0] for r in result}


def migrated_schema_diff(url: str) -> tuple[str | None, list[Any]]:
    """Migrate ``url`` to head, then return its revision and its diff from the models."""
    migrate.upgrade(url)

    def compare(conn: sa.Connection) -> tuple[str | None, list[Any]]:
        partitions = partition_names(conn)

        def include_name(name: str | None, type_: str, _parents: Any) -> bool:
            return not (type_ == "table" and name in partitions)

        def include_object(
            obj: Any, name: str | None, type_: str, _reflected: bool, _other: Any
        ) -> bool:
            # The clones of handler_runs' foreign key, one per partition: checked apart.
            if type_ == "foreign_key_constraint":
                return obj.referred_table.name not in partitions
            return True

        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "compare_server_default": True,
                "include_name": include_name,
                "include_object": include_object,
            },
        )
        return context.get_current_revision(), compare_metadata(context, TARGET_METADATA)

    async def run() -> tuple[str | None, list[Any]]:
        async with engine_of(url) as engine, engine.connect() as conn:
            return await conn.run_sync(compare)

    return asyncio.run(run())


def assert_schema_matches_models(url: str) -> None:
    revision, diff = migrated_schema_diff(url)
    assert revision == migrate.head_revision(url)
    assert diff == [], "migrated schema differs from store.models:\n" + pformat(diff)


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    services.require_pg()
    name = services.create_database()
    yield services.sqlalchemy_url(name)
    services.drop_database(name)


def test_sqlite_migrated_to_head_matches_models(tmp_path: Path) -> None:
    """A fresh SQLite database migrated to head has exactly the models' schema."""
    assert_schema_matches_models(f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}")


@pytest.mark.postgres
def test_postgres_migrated_to_head_matches_models(fresh_pg_url: str) -> None:
    """A fresh PostgreSQL database migrated to head has exactly the models' schema."""
    assert_schema_matches_models(fresh_pg_url)


def partition_layout(url: str) -> dict[str, Any]:
    """How the migrated ``events`` is partitioned, read from PostgreSQL's catalog."""

    def read(conn: sa.Connection) -> dict[str, Any]:
        key = conn.exec_driver_sql("SELECT pg_get_partkeydef(to_regclass('events'))").scalar()
        parts = conn.exec_driver_sql(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), "
            "coalesce(c.reloptions, '{}') FROM pg_inherits i JOIN pg_class c "
            "ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass('events')"
        ).all()
        # Each index of events and, per partition, the index attached to it.
        attached = conn.exec_driver_sql(
            "SELECT p.relname, t.relname FROM pg_index x "
            "JOIN pg_class p ON p.oid = x.indexrelid "
            "JOIN pg_inherits i ON i.inhparent = p.oid "
            "JOIN pg_class ci ON ci.oid = i.inhrelid "
            "JOIN pg_index cx ON cx.indexrelid = ci.oid "
            "JOIN pg_class t ON t.oid = cx.indrelid "
            "WHERE x.indrelid = to_regclass('events')"
        ).all()
        parent_indexes = conn.exec_driver_sql(
            "SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid "
            "WHERE x.indrelid = to_regclass('events')"
        ).all()
        partition_indexes = conn.exec_driver_sql(
            "SELECT t.relname, count(*) FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_inherits i ON i.inhrelid = t.oid AND i.inhparent = to_regclass('events') "
            "GROUP BY t.relname"
        ).all()
        fk_clones = conn.exec_driver_sql(
            "SELECT c.conrelid::regclass::text, c.confrelid::regclass::text, "
            "p.conname FROM pg_constraint c LEFT JOIN pg_constraint p ON p.oid = c.conparentid "
            "WHERE c.contype = 'f' AND c.conrelid = to_regclass('handler_runs')"
        ).all()
        return {
            "key": key,
            "parts": parts,
            "attached": attached,
            "parent_indexes": {r[0] for r in parent_indexes},
            "partition_indexes": dict(partition_indexes),
            "fk_clones": fk_clones,
        }

    async def run() -> dict[str, Any]:
        async with engine_of(url) as engine, engine.connect() as conn:
            return await conn.run_sync(read)

    return asyncio.run(run())


@pytest.mark.postgres
def test_postgres_events_partitions_match_the_model(fresh_pg_url: str) -> None:
    """What autogenerate is kept from: the partitions of events, one by one."""
    from datetime import UTC, datetime

    from store.retention import partition_catalog, partition_create

    migrate.upgrade(fresh_pg_url)
    layout = partition_layout(fresh_pg_url)
    assert layout["key"] == EVENTS.dialect_options["postgresql"]["partition_by"]
    names = {r[0] for r in layout["parts"]}
    days = partition_create.wanted_days(datetime.now(UTC))
    assert names == {partition_catalog.name_of(d) for d in days} | {partition_catalog.DEFAULT}
    settings = sorted(f"{k}={v}" for k, v in partition_catalog.STORAGE.items())
    for name, bound, options in layout["parts"]:
        assert sorted(options) == settings, name
        if name == partition_catalog.DEFAULT:
            assert bound == "DEFAULT"
            continue
        lo, hi = partition_catalog.bounds(datetime.strptime(name[-8:], "%Y%m%d").date())
        assert bound == f"FOR VALUES FROM ('{lo}') TO ('{hi}')"
    # Every index of events (the models' indexes and primary key) has one attached
    # index on every partition, and the partitions have no other index.
    model_indexes = {i.name for i in EVENTS.indexes} | {"events_pkey"}
    assert layout["parent_indexes"] == model_indexes
    for index in model_indexes:
        assert {t for i, t in layout["attached"] if i == index} == names, index
    assert layout["partition_indexes"] == dict.fromkeys(names, len(model_indexes))
    # handler_runs has one foreign key (autogenerate compared it); the others are its
    # clones, one per partition.
    fks = layout["fk_clones"]
    assert [(a, b) for a, b, parent in fks if parent is None] == [("handler_runs", "events")]
    clones = {b for _, b, parent in fks if parent is not None}
    assert clones == names
    assert {parent for _, _, parent in fks if parent is not None} == {"fk_handler_runs_event"}
