"""``hookd wait``, ``hookd replay`` and ``hookd events`` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from store import db
from store.crypto import BodyCipher
from store.events import insert_events
from store.models import EVENTS
from tests.support.data import new_event
from tests.support.server import ROOT

pytestmark = pytest.mark.anyio


def hookd(
    url: str, *args: str, timeout: float = 60, **extra: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOOKD_DATABASE_URL": url, "PYTHONPATH": str(ROOT), **extra}
    return subprocess.run(
        [sys.executable, "-m", "ingest.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


async def add(url: str, status: str, error: str | None = None) -> str:
    engine = db.create_engine(url)
    try:
        async with engine.begin() as conn:
            [stored] = await insert_events(
                conn, [new_event(f"k-{time.monotonic_ns()}")], BodyCipher("")
            )
            await conn.execute(
                sa.update(EVENTS)
                .where(EVENTS.c.id == stored.event_id)
                .values(status=status, last_error=error, attempts=0 if status == "pending" else 8)
            )
        return stored.event_id
    finally:
        await engine.dispose()


async def snapshot(url: str) -> list[tuple[object, ...]]:
    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            return [tuple(r) for r in await conn.execute(sa.select(EVENTS).order_by(EVENTS.c.id))]
    finally:
        await engine.dispose()


async def test_wait_exits_0_when_processed(db_url: str) -> None:
    event_id = await add(db_url, "processed")
    result = hookd(db_url, "wait", event_id, "--timeout", "5")
    assert (result.returncode, result.stdout.strip()) == (0, f"{event_id} processed")


async def test_wait_exits_1_when_dead_and_prints_the_error(db_url: str) -> None:
    event_id = await add(db_url, "dead", "h: RuntimeError: boom")
    result = hookd(db_url, "wait", event_id, "--timeout", "5")
    assert result.returncode == 1
    assert "boom" in result.stdout


async def test_wait_exits_3_at_the_deadline_and_changes_nothing(db_url: str) -> None:
    event_id = await add(db_url, "pending")
    before = await snapshot(db_url)
    started = time.monotonic()
    result = hookd(db_url, "wait", event_id, "--timeout", "1.5", "--interval", "0.2")
    elapsed = time.monotonic() - started
    assert result.returncode == 3
    assert result.stdout.strip().startswith(f"{event_id} pending")
    assert 1.5 <= elapsed < 15
    assert await snapshot(db_url) == before, "wait must not touch or resubmit anything"


async def test_wait_exits_4_for_an_unknown_event(sqlite_url: str) -> None:
    result = hookd(sqlite_url, "wait", "01J0000000000000000000000A", "--timeout", "5")
    assert result.returncode == 4


@pytest.mark.parametrize(
    "args",
    [
        ["--timeout", "0"],
        ["--timeout", "-1"],
        ["--timeout", "inf"],
        ["--timeout", "nan"],
        ["--interval", "0"],
        ["--interval", "abc"],
    ],
)
def test_wait_refuses_bad_durations_with_exit_2(sqlite_url: str, args: list[str]) -> None:
    result = hookd(sqlite_url, "wait", "01J0000000000000000000000A", *args)
    assert result.returncode == 2
    assert "must be finite and positive" in result.stderr or "not a number" in result.stderr


async def test_replay_cli_resets_dead_events_of_a_source(db_url: str) -> None:
    dead = [await add(db_url, "dead", "x") for _ in range(3)]
    done = await add(db_url, "processed")
    result = hookd(db_url, "replay", "--source", "github", "--status", "dead")
    assert result.returncode == 0, result.stderr
    assert sorted(line.split()[0] for line in result.stdout.splitlines()) == sorted(dead)
    rows = {r[0]: r for r in await snapshot(db_url)}
    status_col = [c.name for c in EVENTS.c].index("status")
    assert {rows[i][status_col] for i in dead} == {"pending"}
    assert rows[done][status_col] == "processed"


async def test_replay_cli_reports_unknown_ids(sqlite_url: str) -> None:
    result = hookd(sqlite_url, "replay", "01J0000000000000000000000A")
    assert result.returncode == 1
    assert "no event" in result.stderr


def test_replay_cli_needs_ids_or_a_source_and_status(sqlite_url: str) -> None:
    assert hookd(sqlite_url, "replay").returncode == 2
    assert hookd(sqlite_url, "replay", "--source", "github").returncode == 2


async def test_events_list_and_show(sqlite_url: str, tmp_path: Path) -> None:
    event_id = await add(sqlite_url, "pending")
    listed = hookd(sqlite_url, "events", "list", "--json", "--limit", "5")
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [event_id]
    table = hookd(sqlite_url, "events", "list")
    assert event_id in table.stdout
    assert table.stdout.startswith("ID")
    shown = json.loads(hookd(sqlite_url, "events", "show", event_id, "--json").stdout)
    assert shown["name"] == f"events/{event_id}"
    assert hookd(sqlite_url, "events", "show", "nope").returncode == 1
    assert hookd(sqlite_url, "events", "list", "--limit", "0").returncode == 2


def test_worker_without_redis_is_a_clear_error(sqlite_url: str) -> None:
    result = hookd(sqlite_url, "worker")
    assert result.returncode == 2
    assert "HOOKD_REDIS_URL" in result.stderr


def test_serve_refuses_an_unmigrated_database(tmp_path: Path, sources_file: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    result = hookd(url, "serve", "--port", "1", HOOKD_CONFIG=str(sources_file))
    assert result.returncode == 2
    assert "hookd db upgrade" in result.stderr


def test_sources_enable_refuses_a_source_without_reconciliation(
    sqlite_url: str, sources_file: Path
) -> None:
    result = hookd(sqlite_url, "sources", "enable", "github", HOOKD_CONFIG=str(sources_file))
    assert result.returncode == 2
    assert "has no [sources.reconcile] table" in result.stderr
    unknown = hookd(sqlite_url, "sources", "enable", "nope", HOOKD_CONFIG=str(sources_file))
    assert unknown.returncode == 2
    assert "no source named 'nope'" in unknown.stderr
