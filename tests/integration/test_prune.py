"""Retention: ``hookd prune`` removes old bodies, rows, keys and runs, and a pruned
event's key keeps answering redeliveries and reconciliation as "already stored"."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from hookd.errors import Conflict, NotFound
from hookd.metrics import db as dbmetrics
from hookd.ops import EventOps, prune_sources
from hookd.ops import policies as retention_policies
from hookd.sources import Sources, parse_sources
from store import db
from store.claims import claiming
from store.crypto import BodyCipher
from store.ids import new_id, new_ids
from store.intake import events as store_events
from store.intake.events import insert_events
from store.models import (
    EVENT_KEYS,
    EVENTS,
    HANDLER_RUNS,
    MAINTENANCE_STATE,
    PRUNE_TOTALS,
    RECONCILE_RUNS,
)
from store.reconcile import runs as rstate
from store.retention import lease as prune_lease
from store.retention import prune as store_prune
from tests.support import handlers
from tests.support.asgi import running_app
from tests.support.cli import hookd_with_config as hookd
from tests.support.data import engine_of, new_event, scalar
from tests.support.emulators import StripeEmulator
from tests.support.http import serve_app
from tests.support.stripe_source import STRIPE_KEY, deliver, stripe_source
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio
TOKEN = "admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PLAIN = BodyCipher("")
DAY = timedelta(days=1)


async def prune_at(url: str, sources: Sources, days: float, **options: Any) -> store_prune.Pruned:
    async with engine_of(url) as engine:
        return await prune_sources(
            engine, sources, owner="test", now=datetime.now(UTC) + days * DAY, **options
        )


@dataclass
class World:
    emulator: StripeEmulator
    client: httpx.AsyncClient
    sources: Sources
    db_url: str

    async def scalar(self, sql: str) -> int:
        return await scalar(self.db_url, sql)

    async def reconcile(self, dry_run: bool = False) -> dict[str, Any]:
        query = "?dry_run=true" if dry_run else ""
        started = await self.client.post(f"/api/sources/stripe/reconcile{query}", headers=AUTH)
        assert started.status_code == 202, started.text
        run_id = started.json()["id"]

        async def finished() -> dict[str, Any] | None:
            run = (await self.client.get(f"/api/reconcile-runs/{run_id}", headers=AUTH)).json()
            return run if run["done"] else None

        run: dict[str, Any] = await wait_for(finished, timeout_s=60, interval_s=0.1)
        return run


@pytest.fixture
async def world(db_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[World]:
    monkeypatch.setenv("HOOKD_DATABASE_URL", db_url)
    await handlers.prepare(db_url)
    emulator = StripeEmulator(STRIPE_KEY)
    async with serve_app(emulator.app) as api_url:
        sources = parse_sources(stripe_source(api_url), Path("hookd.toml"), env={})
        async with running_app(
            sources,
            db_url,
            admin_token=TOKEN,
            sweep_s=0.1,
            reconcile_schedule=False,
            prune_every_s=0,
        ) as (_, client):
            yield World(emulator, client, sources, db_url)


async def test_a_pruned_event_redelivered_or_reconciled_stays_one_event_one_effect(
    world: World,
) -> None:
    emulator = world.emulator
    emulator.add_events(20, start=time.time() - 600, step_s=1.0)
    first = [await deliver(world.client, event) for event in emulator.events]
    assert [r.status_code for r in first] == [202] * 20
    original = {e["id"]: r.json()["event_id"] for e, r in zip(emulator.events, first, strict=True)}

    async def processed() -> bool:
        done = await world.scalar("SELECT count(*) FROM events WHERE status = 'processed'")
        return done == 20

    await wait_for(processed, timeout_s=60, interval_s=0.1)
    assert await world.scalar("SELECT count(*) FROM effects") == 20

    pruned = await prune_at(world.db_url, world.sources, 31)
    assert pruned.counts["stripe"].as_dict() == {
        "body": 0,
        "event": 20,
        "key": 0,
        "run": 0,
        "rejected": 0,
    }
    assert await world.scalar("SELECT count(*) FROM events") == 0
    assert (
        await world.scalar(
            "SELECT count(*) FROM event_keys WHERE final_status = 'processed' "
            "AND pruned_at IS NOT NULL"
        )
        == 20
    )

    # The provider delivers every one of them again: duplicates, with the original ids.
    again = [await deliver(world.client, event) for event in emulator.events]
    assert [r.status_code for r in again] == [200] * 20
    for event, answer in zip(emulator.events, again, strict=True):
        assert answer.json() == {"event_id": original[event["id"]], "status": "duplicate"}

    # A reconciliation pass over the pruned range finds every event stored: a dry run
    # reports what it found missing, a real one what it stored.
    for dry_run in (True, False):
        run = await world.reconcile(dry_run=dry_run)
        assert (run["status"], run["items_checked"], run["items_missing"]) == (
            "succeeded",
            20,
            0,
        ), run

    await asyncio.sleep(0.5)  # two sweeps: anything stored would be processed by now
    assert await world.scalar("SELECT count(*) FROM events") == 0
    assert await world.scalar("SELECT count(*) FROM event_keys") == 20
    assert await world.scalar("SELECT count(*) FROM calls") == 20, "a handler ran again"

    # The API says what became of a pruned event.
    some_id = next(iter(original.values()))
    gone = await world.client.get(f"/api/events/{some_id}", headers=AUTH)
    assert gone.status_code == 404
    detail = gone.json()["detail"]
    assert gone.json()["error"] == "not_found"
    assert f"event {some_id} was pruned at " in detail
    assert detail.endswith("its final status was processed")
    unknown = await world.client.get(f"/api/events/{new_id()}", headers=AUTH)
    assert unknown.json() == {"error": "not_found"}

    metrics = (await world.client.get("/metrics", headers=AUTH)).text
    assert 'hookd_pruned_total{source="stripe",what="event"} 20.0' in metrics
    assert 'hookd_oldest_event_seconds{source="stripe"} 0.0' in metrics
    assert 'hookd_table_rows{table="event_keys"}' in metrics


async def test_redeliveries_racing_a_prune_never_make_a_second_row(pg_url: str) -> None:
    """Many deliveries of the same events while prune deletes their rows, in small
    batches, over and over: every answer is a 2xx duplicate carrying the original id,
    and no event is stored twice."""
    sources = parse_sources(stripe_source(handler=False), Path("hookd.toml"), env={})
    emulator = StripeEmulator(STRIPE_KEY)
    emulator.add_events(120, start=time.time() - 600, step_s=1.0)
    async with running_app(sources, pg_url, sweep_s=0.05, prune_every_s=0) as (_, client):
        first = [await deliver(client, event) for event in emulator.events]
        assert {r.status_code for r in first} == {202}
        original = {
            e["id"]: r.json()["event_id"] for e, r in zip(emulator.events, first, strict=True)
        }

        async def processed() -> bool:
            n = await scalar(pg_url, "SELECT count(*) FROM events WHERE status = 'processed'")
            return n == 120

        await wait_for(processed, timeout_s=60, interval_s=0.1)

        engine = db.create_engine(pg_url)
        stop = asyncio.Event()
        passes = 0

        async def prune_loop() -> None:
            nonlocal passes
            policy = retention_policies(sources)
            while not stop.is_set():
                await store_prune.prune(
                    engine, policy, now=datetime.now(UTC) + 31 * DAY, owner="racer", batch=3
                )
                passes += 1

        answers: list[httpx.Response] = []

        async def redeliver(order: int) -> None:
            events = emulator.events[order:] + emulator.events[:order]
            for event in events:
                answers.append(await deliver(client, event))

        pruning = asyncio.create_task(prune_loop())
        try:
            await asyncio.gather(*(redeliver(i * 15) for i in range(8)))
        finally:
            stop.set()
            await pruning
            await engine.dispose()
        assert passes >= 1
        assert len(answers) == 8 * 120
        for answer in answers:
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "duplicate"
        by_key = {json.loads(a.request.content)["id"]: a.json()["event_id"] for a in answers}
        assert by_key == original
    assert await scalar(pg_url, "SELECT count(*) FROM events") == 0
    assert await scalar(pg_url, "SELECT count(*) FROM event_keys") == 120
    assert await scalar(pg_url, "SELECT count(DISTINCT event_id) FROM event_keys") == 120


# -- the policy, on rows made directly ------------------------------------------------


async def add_events(
    url: str, source: str, statuses: dict[str, int], *, days_ago: float = 0
) -> dict[str, list[str]]:
    """Events of ``source`` in each status (with a body, headers and, for the processed
    ones, a ledger row), received ``days_ago`` (their ids minted then); status -> ids."""
    out: dict[str, list[str]] = {}
    now = datetime.now(UTC) - timedelta(days=days_ago)
    ms = int(now.timestamp() * 1000)
    async with engine_of(url) as engine:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(store_events, "new_ids", lambda n: new_ids(n, ms))
            async with engine.begin() as conn:
                await _add(conn, source, statuses, now, out)
    return out


async def _add(
    conn: AsyncConnection,
    source: str,
    statuses: dict[str, int],
    now: datetime,
    out: dict[str, list[str]],
) -> None:
    for status, n in statuses.items():
        stored = await insert_events(
            conn,
            [
                dataclasses.replace(
                    new_event(f"{source}-{status}-{i}", source=source, body=b"x" * 300),
                    received_at=now,
                )
                for i in range(n)
            ],
            PLAIN,
        )
        ids = [s.event_id for s in stored]
        out[status] = ids
        if status != "pending":
            await conn.execute(sa.update(EVENTS).where(EVENTS.c.id.in_(ids)).values(status=status))
        if status == "processed":
            await claiming.record_handlers(conn, [(i, "h") for i in ids], now)


async def snapshot(url: str) -> dict[str, list[tuple[Any, ...]]]:
    tables = {
        "events": EVENTS,
        "event_keys": EVENT_KEYS,
        "handler_runs": HANDLER_RUNS,
        "reconcile_runs": RECONCILE_RUNS,
        "prune_totals": PRUNE_TOTALS,
    }
    async with engine_of(url) as engine, engine.connect() as conn:
        return {
            name: [
                tuple(r)
                for r in await conn.execute(sa.select(table).order_by(*table.primary_key.columns))
            ]
            for name, table in tables.items()
        }


async def add_runs(url: str, source: str, n: int) -> list[str]:
    """``n`` finished reconcile runs of ``source``, the last one its ``last_run_id``."""
    ids = [new_id() for _ in range(n)]
    now = datetime.now(UTC)
    async with engine_of(url) as engine, engine.begin() as conn:
        await rstate.ensure_state(conn, source, now)
        for run_id in ids:
            await rstate.create_run(
                conn,
                id=run_id,
                source=source,
                status="succeeded",
                trigger="schedule",
                dry_run=False,
                started_at=now,
                finished_at=now,
                items_missing=2,
                rate_limited=1,
            )
        await rstate.update_state(conn, source, None, last_run_id=ids[-1])
    return ids


async def test_policy_step_by_step(db_url: str, sources: Sources) -> None:
    statuses = {"pending": 3, "retrying": 3, "processing": 3, "processed": 4, "dead": 2}
    ids = await add_events(db_url, "github", statuses)
    other = await add_events(db_url, "stripe", {"processed": 2})
    await add_runs(db_url, "github", 3)
    before = await snapshot(db_url)
    totals_before = await run_totals(db_url)

    # A dry run counts, in the order a prune would, and changes nothing.
    for days, expected in [
        (8, {"body": 4, "event": 0, "key": 0, "run": 0, "rejected": 0}),
        (31, {"body": 0, "event": 4, "key": 0, "run": 2, "rejected": 0}),
        (91, {"body": 0, "event": 6, "key": 0, "run": 2, "rejected": 0}),
        (401, {"body": 0, "event": 6, "key": 6, "run": 2, "rejected": 0}),
    ]:
        dry = await prune_at(db_url, sources, days, dry_run=True, only="github")
        assert dry.counts["github"].as_dict() == expected, days
    assert await snapshot(db_url) == before

    # Now: past keep_body_days, processed bodies and headers go; nothing else does.
    done = await prune_at(db_url, sources, 8, only="github")
    assert done.counts == {"github": store_prune.Counts(body=4)}
    rows = await event_rows(db_url)
    for event_id in ids["processed"]:
        assert (rows[event_id]["body"], rows[event_id]["headers"]) == (None, {})
    for status in ("pending", "retrying", "processing", "dead"):
        for event_id in ids[status]:
            assert rows[event_id]["body"] == b"x" * 300, status
            assert rows[event_id]["headers"] == {"x-github-event": "push"}
    for event_id in other["processed"]:  # --source: the other source is untouched
        assert rows[event_id]["body"] == b"x" * 300

    # A processed event without its body cannot be replayed.
    async with engine_of(db_url) as engine:
        events = EventOps(engine, wake=nothing)
        with pytest.raises(Conflict) as refused:
            await events.replay(ids["processed"][0])
        assert refused.value.reason == "body_pruned"

    # Past keep_events_days: processed rows and their ledger go, their keys stay.
    done = await prune_at(db_url, sources, 31, only="github")
    assert done.counts["github"].as_dict() == {
        "body": 0,
        "event": 4,
        "key": 0,
        "run": 2,
        "rejected": 0,
    }
    rows = await event_rows(db_url)
    assert not set(ids["processed"]) & set(rows)
    assert set(ids["dead"]) <= set(rows)
    keys = await key_rows(db_url)
    for event_id in ids["processed"]:
        assert keys[event_id]["final_status"] == "processed"
        assert keys[event_id]["pruned_at"] is not None
    assert await scalar(db_url, "SELECT count(*) FROM handler_runs") == 2  # stripe's
    # The source's last run stays (the sources overview shows it); counters carry on.
    assert await scalar(db_url, "SELECT count(*) FROM reconcile_runs") == 1
    assert await run_totals(db_url) == totals_before

    # Past keep_dead_days: dead rows too.
    done = await prune_at(db_url, sources, 91, only="github")
    assert done.counts["github"].event == 2
    # Past keep_keys_days: the keys of pruned events; never one whose row lives.
    done = await prune_at(db_url, sources, 401, only="github")
    assert done.counts["github"].key == 6
    rows, keys = await event_rows(db_url), await key_rows(db_url)
    for status in ("pending", "retrying", "processing"):
        for event_id in ids[status]:
            assert rows[event_id]["status"] == status
            assert rows[event_id]["body"] == b"x" * 300
            assert keys[event_id]["pruned_at"] is None
    assert set(rows) == {*ids["pending"], *ids["retrying"], *ids["processing"], *other["processed"]}

    # Run again: nothing left to do. The counters say what went.
    again = await prune_at(db_url, sources, 401, only="github")
    assert again.counts["github"].total() == 0
    async with engine_of(db_url) as engine:
        families = {f.name: f for f in await dbmetrics.collect(engine, sources)}
    pruned = {tuple(s.labels.values()): s.value for s in families["hookd_pruned"].samples}
    assert pruned[("github", "body")] == 4
    assert pruned[("github", "event")] == 6
    assert pruned[("github", "key")] == 6
    assert pruned[("github", "run")] == 2
    assert pruned[("stripe", "event")] == 0
    tables = {s.labels["table"]: s.value for s in families["hookd_table_rows"].samples}
    assert set(tables) >= {"events", "event_keys", "handler_runs", "reconcile_runs"}


async def nothing() -> None:
    return None


async def event_rows(url: str) -> dict[str, dict[str, Any]]:
    async with engine_of(url) as engine, engine.connect() as conn:
        return {r.id: dict(r._mapping) for r in await conn.execute(sa.select(EVENTS))}


async def key_rows(url: str) -> dict[str, dict[str, Any]]:
    async with engine_of(url) as engine, engine.connect() as conn:
        result = await conn.execute(sa.select(EVENT_KEYS))
        return {r.event_id: dict(r._mapping) for r in result}


async def run_totals(url: str) -> dict[tuple[str, str, bool], tuple[int, int, int]]:
    async with engine_of(url) as engine, engine.connect() as conn:
        out: dict[tuple[str, str, bool], tuple[int, int, int]] = {}
        for row in await rstate.run_totals(conn):
            key = (row.source, row.status, bool(row.dry_run))
            old = out.get(key, (0, 0, 0))
            out[key] = (old[0] + row.runs, old[1] + row.missing, old[2] + row.rate_limited)
        return out


async def test_prune_stops_between_batches_and_gives_the_lease_back(
    sqlite_url: str, sources: Sources
) -> None:
    await add_events(sqlite_url, "github", {"processed": 400})
    stop = asyncio.Event()
    policy = retention_policies(sources, "github")
    async with engine_of(sqlite_url) as engine:
        task = asyncio.create_task(
            store_prune.prune(
                engine, policy, now=datetime.now(UTC) + 31 * DAY, owner="a", batch=1, stop=stop
            )
        )

        async def started() -> bool:
            return await scalar(sqlite_url, "SELECT count(*) FROM prune_totals") > 0

        await wait_for(started, timeout_s=30, interval_s=0.01)
        # Another process finds the lease held and does nothing.
        held = await store_prune.prune(engine, policy, now=datetime.now(UTC) + 31 * DAY, owner="b")
        assert held.lease_held and not held.counts
        stop.set()
        first = await task
        assert first.stopped
        assert 0 < first.counts["github"].event < 400
        assert await prune_lease.lease_holder(engine) == (None, None)
        # Run again: it goes on where the first stopped.
        second = await store_prune.prune(
            engine, policy, now=datetime.now(UTC) + 31 * DAY, owner="b"
        )
        assert not second.stopped
        assert first.counts["github"].event + second.counts["github"].event == 400
        assert await prune_lease.last_finished(engine) is not None
    assert await scalar(sqlite_url, "SELECT count(*) FROM events") == 0


async def test_sqlite_gives_freed_pages_back(tmp_path: Path, sources: Sources) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"
    from store import migrate

    await asyncio.to_thread(migrate.upgrade, url)
    assert await scalar(url, "PRAGMA auto_vacuum") == 2  # INCREMENTAL, set before any table
    await add_events(url, "github", {"processed": 300})
    # Every connection is closed: the write-ahead log is in the file, and gone.
    size = file_size(tmp_path / "fresh.db")
    done = await prune_at(url, sources, 31, only="github")
    assert done.counts["github"].event == 300
    assert done.vacuumed_pages > 0
    assert await scalar(url, "PRAGMA freelist_count") == 0
    assert file_size(tmp_path / "fresh.db") < size - done.vacuumed_pages * 4096 // 2


def file_size(path: Path) -> int:
    return os.path.getsize(path)


async def test_sqlite_file_stops_growing_at_steady_state(tmp_path: Path, sources: Sources) -> None:
    """Round after round of traffic and prunes (rows and keys past retention), the file
    goes back to the same size: what a round adds, the prune hands back."""
    path = tmp_path / "steady.db"
    url = f"sqlite+aiosqlite:///{path}"
    from store import migrate

    await asyncio.to_thread(migrate.upgrade, url)
    after: list[int] = []
    grown: list[int] = []
    for round_ in range(5):
        async with engine_of(url) as engine, engine.begin() as conn:
            stored = await insert_events(
                conn,
                [new_event(f"r{round_}-{i}", body=b"x" * 2000) for i in range(300)],
                PLAIN,
            )
            ids = [s.event_id for s in stored]
            await conn.execute(
                sa.update(EVENTS).where(EVENTS.c.id.in_(ids)).values(status="processed")
            )
            await claiming.record_handlers(conn, [(i, "h") for i in ids], datetime.now(UTC))
        grown.append(file_size(path))
        done = await prune_at(url, sources, 401, only="github")
        assert (done.counts["github"].event, done.counts["github"].key) == (300, 300)
        after.append(file_size(path))
    assert min(grown) > after[0] + 150 * 4096  # each round added well over 600 KB
    assert max(after) <= after[0] + 4 * 4096, after  # and each prune gave it back
    assert await scalar(url, "SELECT count(*) FROM events") == 0
    assert await scalar(url, "PRAGMA freelist_count") == 0


# -- the schedule of hookd serve ---------------------------------------------------------


async def test_serve_prunes_on_its_schedule_and_stops_at_shutdown(db_url: str) -> None:
    # A tiny retention (about a second) so the schedule finds something to prune.
    retention = (
        "[sources.retention]\nkeep_body_days = 0.00001\nkeep_events_days = 0.00001\n"
        "keep_dead_days = 0.00001\n"
    )
    sources = parse_sources(stripe_source(handler=False, extra=retention), Path("x"), env={})
    emulator = StripeEmulator(STRIPE_KEY)
    emulator.add_events(5, start=time.time() - 60, step_s=1.0)
    async with running_app(sources, db_url, sweep_s=0.05, prune_every_s=0.2) as (_, client):
        answers = [await deliver(client, event) for event in emulator.events]
        assert {a.status_code for a in answers} == {202}

        async def all_pruned() -> bool:
            left = await scalar(db_url, "SELECT count(*) FROM events")
            gone = await scalar(
                db_url, "SELECT count(*) FROM event_keys WHERE final_status = 'processed'"
            )
            return left == 0 and gone == 5

        await wait_for(all_pruned, timeout_s=60, interval_s=0.1)
        again = await deliver(client, emulator.events[0])
        assert (again.status_code, again.json()["event_id"]) == (
            200,
            answers[0].json()["event_id"],
        )
        started = time.monotonic()
    assert time.monotonic() - started < 10  # the shutdown did not wait for a period
    async with engine_of(db_url) as engine, engine.connect() as conn:
        state = (
            await conn.execute(
                sa.select(MAINTENANCE_STATE).where(MAINTENANCE_STATE.c.task == "prune")
            )
        ).one()
    assert state.last_finished_at is not None
    assert state.lease_owner is None  # given back


# -- hookd prune ------------------------------------------------------------------------


def prune_cli(url: str, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return hookd(url, config, "prune", *args)


async def test_hookd_prune_command(sqlite_url: str, sources_file: Path) -> None:
    await add_events(sqlite_url, "github", {"processed": 3, "pending": 2}, days_ago=31)
    await add_events(sqlite_url, "stripe", {"dead": 1}, days_ago=31)
    later = str(int(time.time()))  # now, as a user would copy it

    dry = prune_cli(sqlite_url, sources_file, "--dry-run", "--json", "--as-of", later)
    assert dry.returncode == 0, dry.stderr
    lines = [json.loads(line) for line in dry.stdout.splitlines()]
    assert [line["source"] for line in lines] == ["github", "stripe", "slack", "standard"]
    assert lines[0] | {"as_of": None} == {
        "source": "github",
        "body": 0,
        "event": 3,
        "key": 0,
        "run": 0,
        "rejected": 0,
        "as_of": None,
        "dry_run": True,
    }
    assert await scalar(sqlite_url, "SELECT count(*) FROM events") == 6

    only = prune_cli(sqlite_url, sources_file, "--source", "github", "--as-of", later)
    assert only.returncode == 0, only.stderr
    out = only.stdout.splitlines()
    assert out[0].split() == ["SOURCE", "BODY", "EVENT", "KEY", "RUN", "REJECTED"]
    assert out[1].split() == ["github", "0", "3", "0", "0", "0"]
    assert out[-1].endswith(": removed")
    assert await scalar(sqlite_url, "SELECT count(*) FROM events") == 3

    now = prune_cli(sqlite_url, sources_file)  # as of now: nothing is old enough
    assert now.returncode == 0, now.stderr
    assert all(
        line.split()[1:] == ["0", "0", "0", "0", "0"] for line in now.stdout.splitlines()[1:-1]
    )

    for args, said in [
        (("--as-of", "next tuesday"), "hookd: prune: --as-of: 'next tuesday' is neither"),
        (("--source", "nope"), "no source named 'nope'"),
    ]:
        refused = prune_cli(sqlite_url, sources_file, *args)
        assert refused.returncode == 2, refused
        assert len(refused.stderr.splitlines()) == 1, refused.stderr
        assert said in refused.stderr
        assert refused.stdout == ""


async def test_hookd_prune_refuses_a_time_in_the_future(
    sqlite_url: str, sources_file: Path
) -> None:
    """`--as-of` a month ahead would delete what the policy keeps today: refused, and
    nothing deleted; with --dry-run it only counts."""
    await add_events(sqlite_url, "github", {"processed": 3})
    ahead = datetime.now(UTC) + timedelta(days=31)
    for when in (str(int(ahead.timestamp())), ahead.isoformat()):
        refused = prune_cli(sqlite_url, sources_file, "--as-of", when)
        assert refused.returncode == 2, refused
        [line] = refused.stderr.splitlines()
        assert line.startswith("hookd: prune: --as-of: ")
        assert "is in the future (now " in line and "give a past time" in line
        assert refused.stdout == ""
    assert await scalar(sqlite_url, "SELECT count(*) FROM events") == 3
    counted = prune_cli(sqlite_url, sources_file, "--dry-run", "--json", "--as-of", when)
    assert counted.returncode == 0, counted.stderr
    assert json.loads(counted.stdout.splitlines()[0])["event"] == 3
    assert await scalar(sqlite_url, "SELECT count(*) FROM events") == 3
    # A few seconds ahead (another machine's clock) is still now.
    soon = str(int(time.time()) + 20)
    assert prune_cli(sqlite_url, sources_file, "--as-of", soon).returncode == 0
    assert await scalar(sqlite_url, "SELECT count(*) FROM events") == 3


async def test_show_and_wait_of_a_pruned_event_say_how_it_ended(
    sqlite_url: str, sources: Sources, sources_file: Path
) -> None:
    ids = await add_events(sqlite_url, "github", {"processed": 1})
    await prune_at(sqlite_url, sources, 31)
    async with engine_of(sqlite_url) as engine:
        with pytest.raises(NotFound) as gone:
            await EventOps(engine, nothing).show(ids["processed"][0])
        assert "was pruned at" in gone.value.said
    event_id = ids["processed"][0]
    waited = hookd(sqlite_url, sources_file, "wait", event_id, "--timeout", "5")
    assert waited.returncode == 0, waited
    assert waited.stdout.startswith(f"{event_id} processed (event {event_id} was pruned at ")
    shown = hookd(sqlite_url, sources_file, "events", "show", event_id)
    assert shown.returncode == 1
    assert shown.stderr.startswith(f"hookd: event {event_id} was pruned at ")
