"""Engines for SQLite (WAL, synchronous=FULL) and PostgreSQL (synchronous_commit=on).

A 2xx means the event is on disk, so neither database is allowed a weaker
durability setting than its safe default; group commit pays for the fsync.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ingest.errors import ConfigError

SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=FULL",
    "PRAGMA busy_timeout=5000",
    "PRAGMA foreign_keys=ON",
)


def check_url(url: str) -> sa.URL:
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError:
        raise ConfigError(
            f"environment: HOOKD_DATABASE_URL: cannot parse {redact(url)!r}"
        ) from None
    if parsed.drivername not in ("sqlite+aiosqlite", "postgresql+asyncpg"):
        raise ConfigError(
            "environment: HOOKD_DATABASE_URL: use sqlite+aiosqlite:///PATH or "
            "postgresql+asyncpg://USER@HOST/DB"
        )
    return parsed


def redact(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<unparseable>"


def create_engine(url: str, *, pool_size: int = 10, connect_timeout_s: float = 5.0) -> AsyncEngine:
    parsed = check_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_async_engine(parsed, connect_args={"timeout": 5})

        @sa.event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            for pragma in SQLITE_PRAGMAS:
                cursor.execute(pragma)
            cursor.close()

        return engine
    return create_async_engine(
        parsed,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_timeout=connect_timeout_s,
        connect_args={
            "timeout": connect_timeout_s,
            "command_timeout": 30,
            "server_settings": {
                "synchronous_commit": "on",
                "application_name": "hookd",
                # asyncpg prepares every statement; after five runs PostgreSQL may
                # switch to a generic plan that cannot see the batch's id array and
                # settles a batch by walking every "processing" index entry (dead
                # ones included) instead of 128 primary-key lookups.
                "plan_cache_mode": "force_custom_plan",
            },
        },
    )


async def ping(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        await conn.execute(sa.text("SELECT 1"))


async def autovacuum_on(engine: AsyncEngine) -> bool:
    """False only for a PostgreSQL server that runs with ``autovacuum = off``."""
    if engine.dialect.name != "postgresql":
        return True
    async with engine.connect() as conn:
        value = (await conn.execute(sa.text("SHOW autovacuum"))).scalar()
    return str(value).lower() != "off"
