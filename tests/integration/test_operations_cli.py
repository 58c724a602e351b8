"""``hookd replay --since …`` and ``hookd operations`` as a user runs them, and a
``kill -9`` of the process running an operation: another process resumes it and no
event is replayed twice by it (counted by a trigger on PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from store.crypto import BodyCipher
from store.intake.events import insert_events
from store.models import EVENTS, OPERATIONS
from tests.support.cli import hookd
from tests.support.data import engine_of, new_event
from tests.support.server import HookdProcess, HookdServer

pytestmark = pytest.mark.anyio
HOUR_AGO = datetime.now(UTC) - timedelta(hours=1)


async def seed(url: str, count: int, received_at: datetime) -> list[str]:
    """``count`` processed events, received one millisecond apart from ``received_at``."""
    async with engine_of(url) as engine:
        async with engine.begin() as conn:
            stored = await insert_events(
                conn,
                [new_event(f"{received_at.timestamp()}-{i}") for i in range(count)],
                BodyCipher(""),
            )
            ids = [s.event_id for s in stored]
            await conn.execute(
                sa.update(EVENTS)
                .where(EVENTS.c.id == sa.bindparam("event_id"))
                .values(received_at=sa.bindparam("at"), status="processed", attempts=1),
                [
                    {"event_id": e, "at": received_at + timedelta(milliseconds=i)}
                    for i, e in enumerate(ids)
                ],
            )
        return ids


async def pending(url: str) -> int:
    async with engine_of(url) as engine, engine.connect() as conn:
        query = sa.select(sa.func.count()).where(EVENTS.c.status == "pending")
        return int(await conn.scalar(query) or 0)


async def test_replay_dry_run_prints_the_estimate_and_changes_nothing(sqlite_url: str) -> None:
    await seed(sqlite_url, 40, HOUR_AGO)
    since = (HOUR_AGO - timedelta(minutes=1)).isoformat()
    done = await asyncio.to_thread(hookd, sqlite_url, "replay", "--since", since, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "dry run: 40 event(s) would be replayed; nothing changed\n"
    assert await pending(sqlite_url) == 0


async def test_replay_wait_runs_a_time_range_to_its_end_and_operations_show_it(
    sqlite_url: str,
) -> None:
    inside = await seed(sqlite_url, 120, HOUR_AGO)
    await seed(sqlite_url, 30, HOUR_AGO + timedelta(minutes=30))  # after --until
    until = (HOUR_AGO + timedelta(minutes=10)).isoformat()
    ran = await asyncio.to_thread(
        hookd, sqlite_url, "replay", "--since", "2h", "--until", until, "--wait"
    )
    assert ran.returncode == 0, ran.stderr
    first, *_, last = ran.stdout.splitlines()
    operation_id = first.split(":")[0].removeprefix("operations/")
    assert first == f"operations/{operation_id}: replay of 120 event(s) (estimate) asked"
    assert last == (
        f"operations/{operation_id} replay succeeded: 120 of 120 events gone over, "
        "120 changed, 0 skipped"
    )
    assert await pending(sqlite_url) == len(inside)
    listed = await asyncio.to_thread(hookd, sqlite_url, "operations", "list")
    shown = await asyncio.to_thread(hookd, sqlite_url, "operations", "show", operation_id, "--json")
    cancel = await asyncio.to_thread(hookd, sqlite_url, "operations", "cancel", operation_id)
    assert listed.returncode == 0 and operation_id in listed.stdout and "120/120" in listed.stdout
    resource = json.loads(shown.stdout)
    assert (resource["status"], resource["trigger"]) == ("succeeded", "cli")
    assert resource["filter"]["until"] is not None
    assert cancel.returncode == 1
    assert (
        cancel.stderr
        == f"hookd: operation {operation_id}: the operation already ended: succeeded\n"
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--source", "github", "--status", "processed"], "a bulk replay needs --since"),
        (["--since", "1h", "--destination", "nowhere"], "destination 'nowhere'"),
    ],
)
def test_a_bad_bulk_replay_is_one_line_and_exit_2(
    sqlite_url: str, sources_file: Path, args: list[str], said: str
) -> None:
    refused = hookd(sqlite_url, "replay", *args, HOOKD_CONFIG=str(sources_file))
    assert refused.returncode == 2, refused.stdout
    assert refused.stderr.count("\n") == 1 and said in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr


TRIGGER = """
CREATE TABLE replay_counts (event_id text NOT NULL);
CREATE FUNCTION count_replay() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO replay_counts VALUES (NEW.id); RETURN NULL; END $$;
CREATE TRIGGER count_replay AFTER UPDATE ON events FOR EACH ROW
  WHEN (NEW.status = 'pending' AND NEW.attempts = 0) EXECUTE FUNCTION count_replay();
"""
KILLED_AT = 300  # events gone over when the first runner is killed (at least)
KILL_COUNT = 2_000


async def operation_row(engine: AsyncEngine) -> sa.Row[tuple[str, int, int]] | None:
    async with engine.connect() as conn:
        query = sa.select(OPERATIONS.c.status, OPERATIONS.c.done_count, OPERATIONS.c.total)
        return (await conn.execute(query)).first()


@pytest.mark.postgres
async def test_kill_9_of_the_runner_is_resumed_by_another_process_without_a_second_replay(
    pg_url: str, sources_file: Path, tmp_path: Path
) -> None:
    ids = await seed(pg_url, KILL_COUNT, HOUR_AGO)
    async with engine_of(pg_url) as engine:
        async with engine.begin() as conn:
            for statement in TRIGGER.split(";\n"):
                if statement.strip():
                    await conn.exec_driver_sql(statement)
        env = {
            "HOOKD_DATABASE_URL": pg_url,
            "HOOKD_CONFIG": str(sources_file),
            # Small batches, so that the kill lands mid-operation; a short lease to resume.
            "HOOKD_OPERATION_BATCH": "5",
            "HOOKD_OPERATION_LEASE_S": "2",
        }
        first = HookdProcess(["replay", "--since", "2h", "--wait"], env, tmp_path)
        first.launch()
        deadline = time.monotonic() + 30
        while (row := await operation_row(engine)) is None or row.done_count < KILLED_AT:
            assert first.alive(), first.log()
            assert time.monotonic() < deadline, f"no progress: {row}"
            await asyncio.sleep(0.01)
        first.kill9()
        killed = await operation_row(engine)
        assert killed is not None and killed.status == "running", first.log()
        assert KILLED_AT <= killed.done_count < KILL_COUNT, "killed mid-operation"
        # Its operations schedule takes it over (in batches of the default size).
        with HookdServer({**env, "HOOKD_OPERATION_BATCH": "500"}, tmp_path):
            deadline = time.monotonic() + 60
            while (row := await operation_row(engine)) is not None and row.status == "running":
                assert time.monotonic() < deadline, f"not resumed: {row}"
                await asyncio.sleep(0.1)
        assert row is not None
        assert (row.status, row.done_count, row.total) == ("succeeded", KILL_COUNT, KILL_COUNT)
        async with engine.connect() as conn:
            counts = (
                await conn.execute(
                    sa.text("SELECT count(*), count(DISTINCT event_id) FROM replay_counts")
                )
            ).one()
    assert tuple(counts) == (KILL_COUNT, KILL_COUNT), "every event replayed exactly once"
    assert len(ids) == KILL_COUNT
