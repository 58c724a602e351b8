"""Alembic environment: runs migrations over the async engine hookd uses."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from store.db import create_engine
from store.models import EVENTS

target_metadata = EVENTS.metadata


def _run(connection: Connection) -> None:
    if connection.dialect.name == "sqlite":
        # A migration that rebuilds a table (0007) drops the old one; with foreign keys
        # on, that would delete the rows referring to it (ON DELETE CASCADE). The pragma
        # takes effect only outside a transaction: here, before the first statement.
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _main() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    assert url
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_run)
            await conn.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("hookd migrations run online only: use `hookd db upgrade`")
asyncio.run(_main())
