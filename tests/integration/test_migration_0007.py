"""Migration 0007 on a database that holds rows: every event keeps its row, gets its
key in ``event_keys``, and nothing is lost or doubled (handler ledger included, which
SQLite's rebuild of ``events`` must not cascade away)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from store import db, migrate
from store.crypto import BodyCipher
from store.intake.events import insert_events
from tests.support import services
from tests.support.data import engine_of, new_event

EVENT_COLUMNS = (
    "id, source, provider, dedupe_key, type, origin, received_at, occurred_at, verified_with, "
    "headers, body, body_encrypted, status, attempts, next_attempt_at, lease_owner, "
    "lease_expires_at, last_error, processed_at, created_at, updated_at, last_error_handler, "
    "last_error_type"
)


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
        return
    services.require_pg()
    name = services.create_database()
    yield services.sqlalchemy_url(name)
    services.drop_database(name)


def rows_at_0006(n: int) -> list[dict[str, Any]]:
    """Events as a 0006 database holds them: every status, bodies, errors, leases."""
    base = datetime(2026, 11, 1, tzinfo=UTC)
    statuses = ("pending", "processing", "retrying", "processed", "dead")
    out = []
    for i in range(n):
        received = base + timedelta(seconds=i)
        out.append(
            {
                "id": f"01JD{i:022d}",
                "source": ("github", "stripe")[i % 2],
                "provider": ("github", "stripe")[i % 2],
                "dedupe_key": f"key-{i}",
                "type": "push" if i % 3 else None,
                "origin": ("webhook", "reconcile")[i % 2],
                "received_at": received,
                "occurred_at": received - timedelta(seconds=1) if i % 4 else None,
                "verified_with": "github-sha256;key=0",
                "headers": {"x-n": str(i)},
                "body": bytes([i % 256]) * (i % 50) if i % 7 else None,
                "body_encrypted": False,
                "status": statuses[i % 5],
                "attempts": i % 4,
                "next_attempt_at": received,
                "lease_owner": "w:1" if statuses[i % 5] == "processing" else None,
                "lease_expires_at": received if statuses[i % 5] == "processing" else None,
                "last_error": "boom" if statuses[i % 5] == "dead" else None,
                "processed_at": received if statuses[i % 5] == "processed" else None,
                "created_at": received,
                "updated_at": received,
                "last_error_handler": "h" if statuses[i % 5] == "dead" else None,
                "last_error_type": "ValueError" if statuses[i % 5] == "dead" else None,
            }
        )
    return out


async def fill(url: str, rows: list[dict[str, Any]]) -> None:
    meta = sa.MetaData()
    async with engine_of(url) as engine, engine.begin() as conn:
        await conn.run_sync(meta.reflect, only=["events", "handler_runs"])
        events, ledger = meta.tables["events"], meta.tables["handler_runs"]
        await conn.execute(sa.insert(events), rows)
        finished = [
            {"event_id": r["id"], "handler": h, "finished_at": r["received_at"]}
            for r in rows
            if r["status"] in ("processed", "retrying")
            for h in ("a", "b")
        ]
        await conn.execute(sa.insert(ledger), finished)


async def dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    async with engine_of(url) as engine, engine.connect() as conn:
        out = {}
        for name, sql in {
            "events": f"SELECT {EVENT_COLUMNS} FROM events ORDER BY id",
            "handler_runs": "SELECT event_id, handler, finished_at FROM handler_runs "
            "ORDER BY event_id, handler",
        }.items():
            out[name] = [tuple(r) for r in await conn.execute(sa.text(sql))]
        if await conn.run_sync(lambda c: sa.inspect(c).has_table("event_keys")):
            result = await conn.execute(
                sa.text(
                    "SELECT source, dedupe_key, event_id, received_at, final_status, "
                    "pruned_at FROM event_keys ORDER BY event_id"
                )
            )
            out["event_keys"] = [tuple(r) for r in result]
        return out


def test_0007_upgrades_a_database_with_rows(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0006")
    rows = rows_at_0006(503)
    asyncio.run(fill(empty_url, rows))
    before = asyncio.run(dump(empty_url))
    ledgered = [r for r in rows if r["status"] in ("processed", "retrying")]
    assert len(before["handler_runs"]) == 2 * len(ledgered) > 0

    migrate.upgrade(empty_url)
    after = asyncio.run(dump(empty_url))
    assert after["events"] == before["events"]
    assert after["handler_runs"] == before["handler_runs"]
    # One key per event, exactly: its source, key, id and time of receipt.
    assert len(after["event_keys"]) == len(rows)
    by_id = {r["id"]: r for r in rows}
    for source, key, event_id, received, final_status, pruned_at in after["event_keys"]:
        row = by_id[event_id]
        assert (source, key) == (row["source"], row["dedupe_key"])
        assert db_time(received) == row["received_at"]
        assert (final_status, pruned_at) == (None, None)

    # The old keys are duplicates to the new insert path, new ones are stored.
    async def insert_again() -> list[tuple[str, bool]]:
        async with engine_of(empty_url) as engine:
            async with engine.begin() as conn:
                stored = await insert_events(
                    conn,
                    [new_event("key-0"), new_event("key-1", "stripe"), new_event("key-new")],
                    BodyCipher(""),
                )
            return [(s.event_id, s.created) for s in stored]

    again = asyncio.run(insert_again())
    assert again[:2] == [(rows[0]["id"], False), (rows[1]["id"], False)]
    assert again[2][1] is True


def db_time(value: Any) -> datetime:
    """A time as read by raw SQL: SQLite's text, PostgreSQL's aware datetime."""
    if isinstance(value, str):
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    assert isinstance(value, datetime)
    return value.astimezone(UTC)


def test_0007_downgrades_back_to_the_unique_constraint(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0006")
    asyncio.run(fill(empty_url, rows_at_0006(40)))
    before = asyncio.run(dump(empty_url))
    migrate.upgrade(empty_url)
    from alembic import command

    with db.opening(empty_url):
        command.downgrade(migrate.alembic_config(empty_url), "0006")
    after = asyncio.run(dump(empty_url))
    assert after == before  # event_keys gone, rows and ledger as they were
    migrate.upgrade(empty_url)  # and up again
    assert len(asyncio.run(dump(empty_url))["event_keys"]) == 40
