"""The SQLModel tables and the Alembic migrations describe the same schema.

A fresh database is migrated to head with ``store.migrate.upgrade`` and then
compared by Alembic's autogenerate with the metadata the migrations env targets;
any difference is a model or a migration that drifted from the other.

compare_metadata does not look at CHECK constraints (0001 and 0003 create
them; the models declare none), at partial-index predicates (ix_events_runnable's
WHERE), nor at table storage parameters (0005's autovacuum settings on
PostgreSQL), so those are not covered here.
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

from store import db, migrate
from store.models import EVENTS
from tests.support import services

# What store/migrations/env.py passes as target_metadata (it cannot be imported:
# it runs the migrations when loaded).
TARGET_METADATA = EVENTS.metadata


def migrated_schema_diff(url: str) -> tuple[str | None, list[Any]]:
    """Migrate ``url`` to head, then return its revision and its diff from the models."""
    migrate.upgrade(url)

    def compare(conn: sa.Connection) -> tuple[str | None, list[Any]]:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        return context.get_current_revision(), compare_metadata(context, TARGET_METADATA)

    async def run() -> tuple[str | None, list[Any]]:
        engine = db.create_engine(url)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(compare)
        finally:
            await engine.dispose()

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
