"""Retention at full rate: the body step reads only the rows that still have a body
(a second prune reads none, on an index, without statistics), a day's keys are
marked in a few large batches, and a replay racing a prune either wins (its event,
key and ledger stay) or is refused as pruned: never a replay of an event whose
ledger a prune has deleted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd.errors import NotFound
from hookd.ops import EventOps
from hookd.ops import policies as retention_policies
from hookd.sources import Sources
from store.claims import claiming
from store.crypto import BodyCipher
from store.intake.events import get_tombstone, insert_events
from store.retention import analyze, partition_catalog, partition_create, partition_drop
from store.retention import prune as store_prune
from store.retention import steps as prune_steps
from store.status import EventStatus
from tests.support.data import engine_of, new_event, scalar
from tests.support.partitions import day_name, homes, noon, plain_tx, store_at

pytestmark = pytest.mark.anyio
DAY = timedelta(days=1)
PLAIN = BodyCipher("")


async def nothing() -> None:
    return None


@pytest.fixture
def no_analyze(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prune ends by analyzing stale tables: not here, so plans are made without
    statistics, as on a database whose autovacuum has not caught up."""

    async def skip(_engine: AsyncEngine) -> list[str]:
        return []

    monkeypatch.setattr(analyze, "analyze_stale", skip)


async def fill_day(
    url: str, day: date, n: int, *, status: str = "processed", prefix: str = "bulk-"
) -> None:
    """``n`` events of source github received at noon of ``day``, in its partition
    (ids minted then), with their keys and a ledger row each; autovacuum off on every
    table they are in, and no statistics taken."""
    moment = datetime.combine(day, time(12), UTC)
    lo = partition_catalog.bounds(day)[0][:10]
    async with engine_of(url) as engine:
        await partition_create.ensure(engine, moment)
        async with engine.begin() as conn:
            leaves = [
                r[0]
                for r in await conn.execute(
                    sa.text(
                        "SELECT relid::regclass::text FROM pg_partition_tree('events') WHERE isleaf"
                    )
                )
            ]
            for table in [*leaves, "handler_runs", "event_keys"]:
                await conn.execute(sa.text(f"ALTER TABLE {table} SET (autovacuum_enabled = off)"))
            params = {"lo": lo, "p": prefix, "n": n, "t": moment, "s": status}
            await conn.execute(
                sa.text(
                    "INSERT INTO events (id, source, provider, dedupe_key, type, origin, "
                    "received_at, verified_with, headers, body, body_encrypted, status, "
                    "attempts, next_attempt_at, created_at, updated_at, processed_at) "
                    "SELECT CAST(:lo AS text) || lpad(g::text, 16, '0'), 'github', 'github', "
                    "CAST(:p AS text) || g, 'push', 'webhook', CAST(:t AS timestamptz), 'v', "
                    "'{}', CAST('{\"x\": 1}' AS bytea), false, CAST(:s AS text), 1, "
                    "CAST(:t AS timestamptz), CAST(:t AS timestamptz), "
                    "CAST(:t AS timestamptz), CAST(:t AS timestamptz) "
                    "FROM generate_series(1, CAST(:n AS int)) AS g"
                ),
                params,
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO event_keys (source, dedupe_key, event_id, received_at) "
                    "SELECT source, dedupe_key, id, received_at FROM events "
                    "WHERE dedupe_key LIKE CAST(:p AS text) || '%'"
                ),
                params,
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO handler_runs (event_id, handler, finished_at) "
                    "SELECT id, 'a', received_at FROM events "
                    "WHERE dedupe_key LIKE CAST(:p AS text) || '%'"
                ),
                params,
            )


class Captured:
    """The statements an engine sends that contain ``marker``, with their parameters."""

    def __init__(self, engine: AsyncEngine, marker: str) -> None:
        self.marker = marker
        self.sent: list[tuple[str, Any]] = []
        sa.event.listen(engine.sync_engine, "before_cursor_execute", self._grab)

    def _grab(self, _c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _m: bool) -> None:
        if self.marker in statement:
            self.sent.append((statement, params))


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for p in plan.get("Plans", []) for n in plan_nodes(p))]


async def explain(
    engine: AsyncEngine, statement: str, params: Any, *, generic: bool
) -> list[dict[str, Any]]:
    """The statement's plan as run (``EXPLAIN ANALYZE``, rolled back), custom or generic."""

    def run(conn: sa.Connection) -> list[dict[str, Any]]:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        mode = "force_generic_plan" if generic else "force_custom_plan"
        cursor.execute(f"SET plan_cache_mode = {mode}")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
        found = cursor.fetchone()[0]
        cursor.close()
        plan = found if isinstance(found, list) else json.loads(found)
        return plan_nodes(plan[0]["Plan"])

    async with engine.connect() as conn:
        nodes = await conn.run_sync(run)
        await conn.rollback()
    return nodes


async def body_index_names(engine: AsyncEngine) -> set[str]:
    """ix_events_body and its copies on every partition."""
    async with engine.connect() as conn:
        result = await conn.execute(
            sa.text(
                "SELECT inhrelid::regclass::text FROM pg_inherits "
                "WHERE inhparent = to_regclass('ix_events_body')"
            )
        )
        return {"ix_events_body", *(r[0] for r in result)}


@pytest.mark.postgres
async def test_a_second_prune_reads_no_row_for_bodies_on_an_index_without_statistics(
    pg_url: str, sources: Sources, no_analyze: None
) -> None:
    n = 20_000
    today = datetime.now(UTC)
    await fill_day(pg_url, today.date(), n)
    policies = retention_policies(sources, "github")
    async with engine_of(pg_url) as engine:
        captured = Captured(engine, "body IS NOT NULL")
        first = await store_prune.prune(
            engine, policies, now=today + 8 * DAY, owner="t", pause_ratio=0
        )
        assert first.counts["github"].body == n
        captured.sent.clear()
        second = await store_prune.prune(
            engine, policies, now=today + 9 * DAY, owner="t", pause_ratio=0
        )
        assert second.counts["github"].body == 0
        assert await scalar(pg_url, "SELECT count(*) FROM events WHERE body IS NOT NULL") == 0
        assert (
            await scalar(pg_url, "SELECT count(*) FROM pg_stats WHERE tablename LIKE 'events%'")
            == 0
        )
        selects = [(s, p) for s, p in captured.sent if s.lstrip().startswith("SELECT")]
        assert len(selects) == 1, selects  # one batch, which finds nothing
        indexes = await body_index_names(engine)
        today_part = partition_catalog.name_of(today.date())
        for generic in (False, True):
            nodes = await explain(engine, *selects[0], generic=generic)
            scans = [n for n in nodes if "Relation Name" in n or "Index Name" in n]
            on_today = [n for n in scans if n.get("Relation Name") == today_part]
            assert on_today, nodes
            # On the partial index, not a walk of the day's rows: none read at all.
            assert all(n["Node Type"] != "Seq Scan" for n in on_today), on_today
            assert all(n.get("Index Name") in indexes for n in on_today), on_today
            # Rows read from the table (an index's entries of cleared rows are not rows).
            touched = sum(
                int(n.get("Actual Rows", 0)) + int(n.get("Rows Removed by Filter", 0))
                for n in scans
                if "Relation Name" in n
            )
            assert touched == 0, (generic, scans)


async def test_sqlite_body_step_walks_the_partial_index(sqlite_url: str, sources: Sources) -> None:
    async with engine_of(sqlite_url) as engine:
        async with engine.begin() as conn:
            stored = await insert_events(conn, [new_event(f"k-{i}") for i in range(300)], PLAIN)
            await conn.execute(
                sa.text("UPDATE events SET status = 'processed'"),
            )
        assert len(stored) == 300
        captured = Captured(engine, "body IS NOT NULL")
        policies = retention_policies(sources, "github")
        now = datetime.now(UTC)
        first = await store_prune.prune(engine, policies, now=now + 8 * DAY, owner="t")
        assert first.counts["github"].body == 300
        second = await store_prune.prune(engine, policies, now=now + 9 * DAY, owner="t")
        assert second.counts["github"].body == 0
        statement, params = next(
            (s, p) for s, p in captured.sent if s.lstrip().startswith("SELECT")
        )
        async with engine.connect() as conn:
            plan = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)).all()
        assert any("ix_events_body" in str(row[-1]) for row in plan), plan


@pytest.mark.postgres
async def test_a_day_is_marked_in_few_large_batches(
    pg_url: str, sources: Sources, no_analyze: None
) -> None:
    """A whole day dropped: its keys are marked (and its ledger deleted) in batches of
    ``MARK_BATCH`` events, one ``UPDATE … FROM unnest`` of the keys each, not in
    batches of ``BATCH``."""
    n = 12_000
    day = noon(40)
    await fill_day(pg_url, day.date(), n)
    async with engine_of(pg_url) as engine:
        captured = Captured(engine, "UPDATE event_keys AS k SET final_status")
        done = await store_prune.prune(
            engine,
            retention_policies(sources, "github"),
            now=datetime.now(UTC),
            owner="t",
            pause_ratio=0,
        )
    assert day_name(day) in done.partitions_dropped
    assert done.counts["github"].event == n
    assert len(captured.sent) == math.ceil(n / store_prune.MARK_BATCH) == 3
    sizes = [len(p[1]) for _, p in captured.sent]  # (now, sources, keys, statuses)
    assert sizes == [5_000, 5_000, 2_000]
    assert (
        await scalar(pg_url, "SELECT count(*) FROM event_keys WHERE final_status = 'processed'")
        == n
    )
    assert await scalar(pg_url, "SELECT count(*) FROM handler_runs") == 0


# -- a replay racing a prune ---------------------------------------------------------


class Held:
    """A prune's batch transaction that stops before its commit until let go."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.holding = asyncio.Event()
        self.go = asyncio.Event()

    @contextlib.asynccontextmanager
    async def tx(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.begin() as conn:
            yield conn
            self.holding.set()
            await self.go.wait()


async def ledger_of(url: str, event_id: str) -> int:
    return await scalar(url, f"SELECT count(*) FROM handler_runs WHERE event_id = '{event_id}'")


async def status_of(url: str, event_id: str) -> str | None:
    async with engine_of(url) as engine, engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT status FROM events WHERE id = :i"), {"i": event_id}
        )
        return found.scalar()


async def dead_with_ledger(url: str, moment: datetime, keys: list[str]) -> list[str]:
    """Dead events received at ``moment``, handler "a" of each already succeeded."""
    ids = await store_at(url, moment, keys, status="dead")
    async with engine_of(url) as engine, engine.begin() as conn:
        await claiming.record_handlers(conn, [(i, "a") for i in ids], moment)
    return ids


@pytest.mark.postgres
async def test_a_replay_during_a_days_marking_is_refused_as_pruned(pg_url: str) -> None:
    """The day's batch has marked the keys and deleted the ledger, not yet committed:
    a replay waits for it, then is refused (404, pruned), the event stays dead, and
    the day goes."""
    day = noon(100)
    dead = await dead_with_ledger(pg_url, day, ["d-0", "d-1"])
    now = datetime.now(UTC)
    async with engine_of(pg_url) as engine:
        held = Held(engine)
        dropper = partition_drop.Dropper(
            engine, now=now, tx=held.tx, stopping=lambda: False, batch=10
        )
        marking = asyncio.create_task(dropper.mark(day_name(day)))
        await asyncio.wait_for(held.holding.wait(), 10)
        ops = EventOps(engine, wake=nothing)
        replay = asyncio.create_task(ops.replay(dead[0]))
        await asyncio.sleep(0.5)
        assert not replay.done(), "the replay did not wait for the prune's batch"
        held.go.set()
        assert await marking
        with pytest.raises(NotFound) as refused:
            await replay
        assert "was pruned" in refused.value.said
        # The bulk paths say the same, and change nothing.
        many = await ops.replay_many(dead)
        assert (many.replayed, sorted(many.pruned)) == ([], sorted(dead))
        assert await status_of(pg_url, dead[0]) == "dead"
        async with engine.connect() as conn:
            parts = {p.name: p for p in await partition_catalog.list_partitions(conn)}
        leftover = await dropper.detach(parts[day_name(day)])
        assert leftover is not None
        await dropper.finish(leftover, None)
        async with engine.connect() as conn:
            tomb = await get_tombstone(conn, dead[0])
        assert tomb is not None and tomb.final_status == "dead"
        with pytest.raises(NotFound) as gone:
            await ops.replay(dead[0])
        assert "was pruned" in gone.value.said
    assert await homes(pg_url, dead) == {}


@pytest.mark.postgres
async def test_a_replay_first_keeps_its_event_key_and_ledger_and_the_day(pg_url: str) -> None:
    """The replay's claim holds the row when the day's marking comes: the marking
    waits, then leaves that event's key and ledger alone, and the day is not dropped."""
    day = noon(100)
    dead = await dead_with_ledger(pg_url, day, ["d-0", "d-1"])
    now = datetime.now(UTC)
    async with engine_of(pg_url) as engine:
        dropper = partition_drop.Dropper(
            engine, now=now, tx=lambda: plain_tx(engine), stopping=lambda: False, batch=10
        )
        async with engine.begin() as conn:
            assert await claiming.replay(conn, [dead[0]], now) == [dead[0]]
            marking = asyncio.create_task(dropper.mark(day_name(day)))
            await asyncio.sleep(0.5)
            assert not marking.done(), "the marking did not wait for the replay"
        assert await marking
        async with engine.connect() as conn:
            parts = {p.name: p for p in await partition_catalog.list_partitions(conn)}
            assert await get_tombstone(conn, dead[0]) is None
            assert await get_tombstone(conn, dead[1]) is not None
        assert await dropper.detach(parts[day_name(day)]) is None  # pending: it stays
    assert await status_of(pg_url, dead[0]) == "pending"
    assert await ledger_of(pg_url, dead[0]) == 1
    assert await homes(pg_url, dead) == dict.fromkeys(dead, day_name(day))


@pytest.mark.postgres
async def test_row_by_row_a_replay_waiting_for_the_delete_is_refused_as_pruned(
    pg_url: str,
) -> None:
    """Row-level prune (a day not dropped whole): a replay that comes while the batch
    deleting its dead event holds it answers 404 pruned, not "being processed"; one
    that holds the event first keeps it, its key and its ledger."""
    now = datetime.now(UTC)
    dead = await dead_with_ledger(pg_url, now, ["d-0", "d-1", "d-2"])
    later = now + 100 * DAY
    async with engine_of(pg_url) as engine:
        ops = EventOps(engine, wake=nothing)
        held = Held(engine)
        pruner = prune_steps.Pruner(
            engine, now=later, batch=10, owner="t", lease_s=60, stop=None, pause_ratio=0
        )
        pruner.tx = held.tx  # type: ignore[method-assign]
        # The replay holds d-2 first: the prune passes it by.
        async with engine.begin() as conn:
            assert await claiming.replay(conn, [dead[2]], now) == [dead[2]]
            deleting = asyncio.create_task(pruner.events("github", EventStatus.DEAD, later))
            await asyncio.wait_for(held.holding.wait(), 10)
            # The prune's batch holds d-0 and d-1 now: a replay of d-0 waits for it.
            replay = asyncio.create_task(ops.replay(dead[0]))
            await asyncio.sleep(0.5)
            assert not replay.done()
        held.go.set()
        assert await deleting == 2
        with pytest.raises(NotFound) as refused:
            await replay
        assert "was pruned" in refused.value.said
        assert "final status was dead" in refused.value.said
    assert await homes(pg_url, dead) == {dead[2]: partition_catalog.name_of(now.date())}
    assert await status_of(pg_url, dead[2]) == "pending"
    assert await ledger_of(pg_url, dead[2]) == 1
    assert await scalar(pg_url, "SELECT count(*) FROM event_keys WHERE pruned_at IS NULL") == 1


async def test_a_replay_of_a_pruned_event_is_not_found_on_both_databases(
    db_url: str, sources: Sources
) -> None:
    async with engine_of(db_url) as engine:
        async with engine.begin() as conn:
            stored = await insert_events(conn, [new_event("gone"), new_event("kept")], PLAIN)
            await conn.execute(sa.text("UPDATE events SET status = 'dead'"))
            await claiming.record_handlers(conn, [(s.event_id, "a") for s in stored], now_())
        ids = [s.event_id for s in stored]
        ops = EventOps(engine, wake=nothing)
        replayed = await ops.replay(ids[1])
        assert replayed.status == "pending"
        done = await store_prune.prune(
            engine, retention_policies(sources, "github"), now=now_() + 91 * DAY, owner="t"
        )
        assert done.counts["github"].event == 1
        with pytest.raises(NotFound) as refused:
            await ops.replay(ids[0])
        assert "was pruned" in refused.value.said
        many = await ops.replay_many(ids)
        assert (many.unknown, many.pruned) == ([ids[0]], [ids[0]])
    assert await ledger_of(db_url, ids[1]) == 1


def now_() -> datetime:
    return datetime.now(UTC)
