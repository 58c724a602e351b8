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
from store import db
from store.retention import partition_create

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate; a database that cannot be opened is one ``ConfigError`` line, not a traceback.

    Then, on a PostgreSQL ``events`` partitioned by day (0008), create the partitions
    missing from yesterday to a week ahead (``store.retention.partition_create.ensure``)."""
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
        await partition_create.ensure(engine)
    finally:
        await engine.dispose()


# How many of a database's other tables a refusal names.
NAMED_TABLES = 3


def check_target(url: str, *, other_tables_ok: bool = False) -> None:
    """Refuse to migrate a database that is not hookd's: one that holds tables but no
    hookd schema (no Alembic version of hookd's), unless ``other_tables_ok`` (``hookd
    db upgrade --yes``); and, whatever it says, one at another application's Alembic
    revision. A wrong URL would otherwise put hookd's tables beside another
    application's (or in ``postgres``) and say only that it was done.

    Connection failures are left to ``upgrade``, which says them in one line."""
    path = db.sqlite_path(url)
    if path is not None and not os.path.exists(path):
        return  # the file db upgrade creates
    with db.opening(url):
        tables, revision = asyncio.run(_contents(url))
    if revision is not None and revision in _revisions(url):
        return
    where = _named(url)
    if revision is not None:
        raise ConfigError(
            f"database {where} is at Alembic revision {revision!r}, which is not one of "
            "hookd's: it is another application's database; set HOOKD_DATABASE_URL to "
            "hookd's own (create an empty one for it)"
        )
    if not tables or other_tables_ok:
        return
    shown = ", ".join(tables[:NAMED_TABLES]) + (", ..." if len(tables) > NAMED_TABLES else "")
    count = f"{len(tables)} table" + ("" if len(tables) == 1 else "s")
    empty = "a new file" if path is not None else "an empty database (e.g. `createdb hookd`)"
    raise ConfigError(
        f"database {where} holds {count} ({shown}) and no hookd schema: it looks like "
        f"another application's database; set HOOKD_DATABASE_URL to {empty} for hookd, "
        "or pass --yes to add hookd's tables to this one"
    )


def _named(url: str) -> str:
    """A database as a refusal names it: the SQLite file, or the PostgreSQL database
    and its server (never the user or password)."""
    path = db.sqlite_path(url)
    if path is not None:
        return f"SQLite file {path}"
    parsed = db.check_url(url)
    server = f"{parsed.host}:{parsed.port or 5432}" if parsed.host else "the local socket"
    return f"{parsed.database!r} on {server}"


async def _contents(url: str) -> tuple[list[str], str | None]:
    """The tables of the database (schema-qualified outside the default schema),
    but Alembic's own; and the revision in its Alembic version table, if any."""

    def read(conn: sa.Connection) -> tuple[list[str], str | None]:
        inspector = sa.inspect(conn)
        default = inspector.default_schema_name
        schemas: list[str | None] = [None]
        if conn.dialect.name == "postgresql":
            schemas += [
                name
                for name in inspector.get_schema_names()
                if name not in (default, "information_schema") and not name.startswith("pg_")
            ]
        tables = [
            table if schema is None else f"{schema}.{table}"
            for schema in schemas
            for table in inspector.get_table_names(schema=schema)
            if table != "alembic_version"
        ]
        revision = None
        if inspector.has_table("alembic_version"):
            revision = MigrationContext.configure(conn).get_current_revision()
        return sorted(tables), revision

    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(read)
    finally:
        await engine.dispose()


def _revisions(url: str) -> set[str]:
    return {r.revision for r in ScriptDirectory.from_config(alembic_config(url)).walk_revisions()}


def head_revision(url: str) -> str:
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    assert head is not None
    return head


async def current_revision(engine: AsyncEngine) -> str | None:
    def read(conn: sa.Connection) -> str | None:
        return MigrationContext.configure(conn).get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(read)
