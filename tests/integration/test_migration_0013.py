"""Migration 0013 on a database that holds reconciliation state: a source disabled
before it (after authentication failures, then the only way) is recorded as such,
with its last update as when; the downgrade removes exactly what it added."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from store import migrate
from tests.support import services
from tests.support.data import engine_of

UPDATED = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"
        return
    services.require_pg()
    name = services.create_database()
    yield services.sqlalchemy_url(name)
    services.drop_database(name)


def run_sql(url: str, *statements: str) -> list[tuple[Any, ...]]:
    async def go() -> list[tuple[Any, ...]]:
        async with engine_of(url) as engine, engine.begin() as conn:
            rows: list[tuple[Any, ...]] = []
            for sql in statements:
                result = await conn.execute(sa.text(sql))
                if result.returns_rows:
                    rows = [tuple(r) for r in result]
            return rows

    return asyncio.run(go())


def columns(url: str, table: str) -> set[str]:
    async def go() -> set[str]:
        async with engine_of(url) as engine, engine.connect() as conn:
            return await conn.run_sync(
                lambda c: {col["name"] for col in sa.inspect(c).get_columns(table)}
            )

    return asyncio.run(go())


def test_0013_records_earlier_disabled_sources_and_downgrades_cleanly(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0012")
    state_before = columns(empty_url, "reconcile_state")
    runs_before = columns(empty_url, "reconcile_runs")
    stamp = UPDATED.isoformat(sep=" ")
    insert = (
        "INSERT INTO reconcile_state (source, disabled, disabled_reason, auth_failures, "
        "error_count, meta, updated_at) VALUES "
        f"('off', true, '3 authentication failures in a row', 3, 0, '{{}}', '{stamp}'), "
        f"('on', false, NULL, 0, 0, '{{}}', '{stamp}')"
    )
    run_sql(empty_url, insert)
    migrate.upgrade(empty_url)
    rows = run_sql(
        empty_url,
        "SELECT source, disabled_by, disabled_at, registration_ok FROM reconcile_state "
        "ORDER BY source",
    )
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("off", "hookd auth-failures", None),
        ("on", None, None),
    ]
    off_at = rows[0][2]
    assert off_at is not None and str(off_at).startswith("2026-11-30 08:00:00")
    assert rows[1][2] is None
    assert columns(empty_url, "ack_violations") >= {"source", "dedupe_key", "run_id"}

    command.downgrade(migrate.alembic_config(empty_url), "0012")
    assert columns(empty_url, "reconcile_state") == state_before
    assert columns(empty_url, "reconcile_runs") == runs_before
    assert run_sql(empty_url, "SELECT count(*) FROM reconcile_state") == [(2,)]
