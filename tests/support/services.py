"""Real PostgreSQL for tests: a migrated template database cloned per test."""

from __future__ import annotations

import asyncio
import os
import uuid

import asyncpg
import pytest

PG_DSN = os.environ.get("HOOKD_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")

# The ``db_url`` fixture (and ``engine`` on it) runs a test on SQLite and PostgreSQL;
# these narrow it to one, as a test's decorator or in a module's ``pytestmark``.
ONLY_SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
ONLY_POSTGRES = pytest.mark.parametrize("db_url", ["postgres"], indirect=True)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pg_unavailable_reason() -> str | None:
    async def probe() -> None:
        conn = await asyncpg.connect(PG_DSN, timeout=3)
        await conn.close()

    try:
        asyncio.run(probe())
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        return f"PostgreSQL not reachable at {PG_DSN}: {type(exc).__name__}"
    return None


def require_pg() -> None:
    """Skip without PostgreSQL on a laptop; fail under CI, where it must be there."""
    reason = pg_unavailable_reason()
    if reason is None:
        return
    if in_ci():
        pytest.fail(reason + " (CI=true: services must be up)")
    pytest.skip(reason)


def sqlalchemy_url(database: str) -> str:
    base = PG_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    return f"{base}/{database}"


async def admin(sql: str) -> None:
    conn = await asyncpg.connect(PG_DSN, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def create_database(template: str | None = None) -> str:
    name = f"hookd_t_{uuid.uuid4().hex[:12]}"
    tpl = f" TEMPLATE {template}" if template else ""
    asyncio.run(admin(f'CREATE DATABASE "{name}"{tpl}'))
    return name


def drop_database(name: str) -> None:
    asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def require_tool(name: str) -> str:
    """Path of a system tool (scripts/system-deps.sh installs them); skip without it, fail in CI."""
    import shutil

    path = shutil.which(name)
    if path is not None:
        return path
    reason = f"{name} not installed (run scripts/system-deps.sh)"
    if in_ci():
        pytest.fail(reason + " (CI=true: system tools must be installed)")
    pytest.skip(reason)
