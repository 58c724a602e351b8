"""Alembic driven from code: ``hookd db upgrade`` and the schema check at start."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import ConfigError
from store import db, partitions

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate; a database that cannot be opened is one ``ConfigError`` line, not a traceback.

    Then, on a PostgreSQL ``events`` partitioned by day (0008), create the partitions
    missing from yesterday to a week ahead (``store.partitions.ensure``)."""
    path = db.sqlite_path(url)
    if path is not None and not os.path.isdir(os.path.dirname(path)):
        # Said before any connection: a failed aiosqlite connect can leave its thread
        # writing a traceback to stderr after the loop closed, behind the one line.
        raise ConfigError(db.missing_folder(path))
    db.start_sqlite_file(url)
    with db.opening(url):
        command.upgrade(alembic_config(url), revision)
        if db.check_url(url).get_backend_name() == "postgresql":
            asyncio.run(_ensure_partitions(url))


async def _ensure_partitions(url: str) -> None:
    engine = db.create_engine(url)
    try:
        await partitions.ensure(engine)
    finally:
        await engine.dispose()


def head_revision(url: str) -> str:
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    assert head is not None
    return head


async def current_revision(engine: AsyncEngine) -> str | None:
    def read(conn: sa.Connection) -> str | None:
        return MigrationContext.configure(conn).get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(read)
