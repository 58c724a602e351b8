"""Migration 0020 on a database whose coverage ledger holds records: they are kept,
``silent`` becomes an outcome the ledger takes (and nothing else new), the index is
there again; the downgrade drops the silent records and the watch's table, and the
ledger refuses ``silent`` again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.exc import IntegrityError

from store import migrate
from tests.support import services
from tests.support.data import engine_of

STAMP = "2026-12-01 08:00:00"


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


def inspected(url: str) -> tuple[set[str], set[str]]:
    """The tables, and the indexes of reconcile_coverage."""

    async def go() -> tuple[set[str], set[str]]:
        async with engine_of(url) as engine, engine.connect() as conn:

            def read(c: sa.Connection) -> tuple[set[str], set[str]]:
                inspector = sa.inspect(c)
                indexes = {i["name"] for i in inspector.get_indexes("reconcile_coverage")}
                return set(inspector.get_table_names()), {i for i in indexes if i}

            return await conn.run_sync(read)

    return asyncio.run(go())


def row(id_: str, outcome: str) -> str:
    return (
        "INSERT INTO reconcile_coverage (id, source, run_id, start_at, end_at, outcome, "
        f"repaired, reason, recorded_at) VALUES ('{id_}', 'acme', NULL, '{STAMP}', "
        f"'{STAMP}', '{outcome}', 0, 'why', '{STAMP}')"
    )


def test_0020_allows_silent_keeps_the_ledger_and_downgrades_cleanly(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0019")
    run_sql(empty_url, row("01JAAAAAAAAAAAAAAAAAAAAAA1", "failed"))
    with pytest.raises(IntegrityError):
        run_sql(empty_url, row("01JAAAAAAAAAAAAAAAAAAAAAA2", "silent"))

    migrate.upgrade(empty_url)
    tables, indexes = inspected(empty_url)
    assert "source_watch" in tables
    assert "ix_reconcile_coverage_source_start" in indexes
    run_sql(empty_url, row("01JAAAAAAAAAAAAAAAAAAAAAA2", "silent"))
    with pytest.raises(IntegrityError):
        run_sql(empty_url, row("01JAAAAAAAAAAAAAAAAAAAAAA3", "quiet"))
    assert run_sql(empty_url, "SELECT id, outcome, reason FROM reconcile_coverage ORDER BY id") == [
        ("01JAAAAAAAAAAAAAAAAAAAAAA1", "failed", "why"),
        ("01JAAAAAAAAAAAAAAAAAAAAAA2", "silent", "why"),
    ]

    command.downgrade(migrate.alembic_config(empty_url), "0019")
    tables, indexes = inspected(empty_url)
    assert "source_watch" not in tables
    assert "ix_reconcile_coverage_source_start" in indexes
    assert run_sql(empty_url, "SELECT id FROM reconcile_coverage") == [
        ("01JAAAAAAAAAAAAAAAAAAAAAA1",)
    ]
    with pytest.raises(IntegrityError):
        run_sql(empty_url, row("01JAAAAAAAAAAAAAAAAAAAAAA4", "silent"))
