"""Processing does not depend on autovacuum having run: with autovacuum off on the
tables and a few hundred thousand rows written since their statistics were taken
(or with none ever taken), every statement of the hot paths (the receiver's insert,
claims, the handler ledger, the outcomes, reconciliation's insert, prune's key
marking) is planned on an index, never as a scan of ``events``, ``handler_runs`` or
``event_keys``. And hookd's own maintenance analyzes the tables that went stale."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.event import Event
from hookd.sources import parse_sources
from processing.attempt import RetryPolicy
from processing.processor import Processor
from store import db
from store.claims import claiming
from store.crypto import BodyCipher
from store.intake.events import insert_events, mark_pruned, prepare
from store.intake.fastpath import PG_EXISTING, PG_INSERT, _pg_payload
from store.intake.sqlite_write import WHOLE_SOURCE
from store.reconcile import runs as rstate
from store.retention import analyze, partition_catalog
from tests.support.data import new_event

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]
BULK = 200_000
BIG = ("events_", "handler_runs", "event_keys")
MIN_PAGES = 10
SOURCES = '[[sources]]\nname = "github"\nprovider = "github"\nsecrets = ["s"]\n'


def raw_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def bulk_fill(url: str, *, analyzed_small: bool) -> None:
    """``BULK`` events (processed, each claimed and settled once: a dead version in
    every status index), their keys and two ledger rows each, in today's partition,
    with autovacuum off on every table; after an ``ANALYZE`` at 1,000 rows, or none."""
    conn = await asyncpg.connect(raw_dsn(url))
    try:
        leaves = [
            r[0]
            for r in await conn.fetch(
                "SELECT relid::regclass::text FROM pg_partition_tree('events') WHERE isleaf"
            )
        ]
        for table in [*leaves, "handler_runs", "event_keys"]:
            await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        lo = partition_catalog.bounds(datetime.now(UTC).date())[0][:10]

        async def add(first: int, n: int) -> None:
            await conn.execute(
                "INSERT INTO events (id, source, provider, dedupe_key, type, origin, "
                "received_at, verified_with, headers, body, body_encrypted, status, attempts, "
                "next_attempt_at, lease_owner, lease_expires_at, created_at, updated_at) "
                "SELECT $1 || lpad(g::text, 16, '0'), 'github', 'github', 'bulk-' || g, "
                "'push', 'webhook', now(), 'v', '{}', '{}', false, 'processing', 1, now(), "
                "'w', now() + interval '1 minute', now(), now() "
                "FROM generate_series($2::int, $3::int) AS g",
                lo,
                first,
                first + n - 1,
            )
            await conn.execute(
                "INSERT INTO event_keys (source, dedupe_key, event_id, received_at) "
                "SELECT source, dedupe_key, id, received_at FROM events "
                "WHERE dedupe_key LIKE 'bulk-%' AND status = 'processing'"
            )
            await conn.execute(
                "INSERT INTO handler_runs SELECT id, h, now() FROM events, "
                "(VALUES ('ok'), ('other')) AS v(h) WHERE status = 'processing'"
            )
            await conn.execute(
                "UPDATE events SET status = 'processed', lease_owner = NULL, "
                "lease_expires_at = NULL, processed_at = now() WHERE status = 'processing'"
            )

        if analyzed_small:
            await add(1, 1_000)
            await conn.execute("ANALYZE events, handler_runs, event_keys")
            await add(1_001, BULK - 1_000)
        else:
            await add(1, BULK)
        await conn.execute("SELECT pg_stat_force_next_flush()")
    finally:
        await conn.close()


class Captured:
    """The statements an engine sends, with their parameters."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.statements: dict[str, Any] = {}
        sa.event.listen(engine.sync_engine, "before_cursor_execute", self._grab)

    def _grab(
        self,
        _conn: Any,
        _cursor: Any,
        statement: str,
        parameters: Any,
        _context: Any,
        executemany: bool,
    ) -> None:
        if statement.lstrip().upper().startswith(("EXPLAIN", "SELECT 1", "SET ", "ANALYZE")):
            return
        # An executemany is a list of parameter sets (one statement each); a batch of
        # insertmanyvalues is one statement with its parameters flat.
        many = executemany and isinstance(parameters, list)
        self.statements.setdefault(statement, parameters[0] if many else parameters)


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for p in plan.get("Plans", []) for n in nodes(p))]


def scans(plan_json: Any) -> list[tuple[str, str, str | None]]:
    plan = plan_json if isinstance(plan_json, list) else json.loads(plan_json)
    # (node, table, index): a bitmap index scan names its index only.
    return [
        (n["Node Type"], n.get("Relation Name", ""), n.get("Index Name"))
        for n in nodes(plan[0]["Plan"])
        if "Relation Name" in n or "Index Name" in n
    ]


def seq_scans(found: list[tuple[str, str, str | None]], pages: dict[str, int]) -> list[str]:
    """The tables among ``BIG`` a plan reads whole: an empty partition of events (a day
    ahead) may be, a table with rows may not."""
    return [
        rel
        for kind, rel, _ in found
        if kind == "Seq Scan" and rel.startswith(BIG) and pages.get(rel, 0) >= MIN_PAGES
    ]


async def table_pages(engine: AsyncEngine) -> dict[str, int]:
    """The real size of each table in pages (what the planner sees without statistics)."""
    async with engine.connect() as conn:
        result = await conn.execute(
            sa.text(
                "SELECT relname, pg_relation_size(oid) / 8192 FROM pg_class "
                "WHERE relkind = 'r' AND relnamespace = current_schema()::regnamespace"
            )
        )
        return {r[0]: int(r[1]) for r in result}


async def ok(_: Event) -> None:
    return None


async def flaky(event: Event) -> None:
    if event.dedupe_key.endswith("7"):
        raise ValueError("fails for keys ending in 7")


@pytest.fixture(params=["never_analyzed", "analyzed_when_small"])
async def filled(request: pytest.FixtureRequest, pg_url: str) -> str:
    await bulk_fill(pg_url, analyzed_small=request.param == "analyzed_when_small")
    return pg_url


async def test_hot_statements_use_indexes_without_statistics(filled: str) -> None:
    url = filled
    sources = parse_sources(SOURCES, Path("hookd.toml"), env={})
    cipher = BodyCipher("")
    engine = db.create_engine(url)
    captured = Captured(engine)
    now = datetime.now(UTC)
    try:
        # Processing as a worker does it: 600 new events claimed in batches of 128, the
        # ledger read, handlers recorded, settled as processed or failed.
        async with engine.begin() as conn:
            await insert_events(conn, [new_event(f"new-{i}") for i in range(600)], cipher)
        processor = Processor(
            engine,
            sources,
            {"github": [("ok", ok), ("flaky", flaky)]},
            cipher,
            retry=RetryPolicy(base_s=60.0, cap_s=60.0),
            batch_size=128,
            rng=random.Random(7),
        )
        assert await processor.run_once() == 128
        await processor.drain()
        async with engine.begin() as conn:
            held = await claiming.claim_due(
                conn,
                "w2",
                60,
                16,
                now + timedelta(minutes=5),
                shares=claiming.alone(["github"], 16),
            )
            await claiming.release(conn, [r.id for r in held], "w2", now)
            # Reconciliation: keys checked, a page stored (half of it already there).
            await rstate.existing_keys(conn, "github", [f"bulk-{i}" for i in range(1, 500)])
            await insert_events(
                conn,
                [new_event(f"bulk-{i}") for i in range(1, 100)]
                + [new_event(f"repair-{i}") for i in range(100)],
                cipher,
            )
            # Prune marks keys of the rows it deletes.
            await mark_pruned(
                conn, [("github", f"bulk-{i}", "processed") for i in range(1, 500)], now
            )
            await conn.rollback()

        assert await analyze.stale(engine), "the bulk load left no table stale"
        plans = await explain_all(engine, captured.statements)
        receiver = await explain_receiver(url, cipher)
        # hookd's own maintenance: the stale tables are analyzed, and plans stay put.
        analyzed = await analyze.analyze_stale(engine)
        assert {"handler_runs", "event_keys", partition_catalog.name_of(now.date())} <= set(
            analyzed
        )
        assert await analyze.stale(engine) == []
        after = await explain_all(engine, captured.statements)
        pages = await table_pages(engine)
    finally:
        await engine.dispose()

    assert pages[partition_catalog.name_of(now.date())] > 1000
    for label, found in [*plans.items(), *receiver.items(), *after.items()]:
        assert not seq_scans(found, pages), (label[:300], found)
    ledger = [f for s, f in plans.items() if "handler_runs AS r" in s]
    assert ledger and all("handler_runs_pkey" in {i for _, _, i in x} for x in ledger)
    # Outcomes are fenced by the primary key alone, never ix_events_lease's entries.
    settles = [
        f for s, f in plans.items() if s.startswith("UPDATE events SET") and "lease_owner =" in s
    ]
    assert settles
    for found in settles:
        indexes = {i for _, _, i in found if i and i.startswith("events_")}
        assert indexes and all(i.endswith("_pkey") for i in indexes), found
    assert len(plans) >= 10, list(plans)


async def explain_all(
    engine: AsyncEngine, statements: dict[str, Any]
) -> dict[str, list[tuple[str, str, str | None]]]:

    def run(conn: sa.Connection) -> dict[str, list[tuple[str, str, str | None]]]:
        # As sent: the driver's own statement text and parameters, on its own cursor.
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        out = {}
        for statement, params in statements.items():
            cursor.execute("EXPLAIN (FORMAT JSON) " + statement, params)
            out[statement] = scans(cursor.fetchone()[0])
        cursor.close()
        return out

    async with engine.connect() as conn:
        return await conn.run_sync(run)


async def explain_receiver(
    url: str, cipher: BodyCipher
) -> dict[str, list[tuple[str, str, str | None]]]:
    """The receiver's one statement (and its follow-up lookup), as a custom plan and as
    the generic plan its pool may settle on after five runs."""
    batch = prepare([new_event(f"bulk-{i}") for i in range(1, 65)] + [new_event("fresh")], cipher)
    keys = [r["dedupe_key"] for r in batch.rows]
    conn = await asyncpg.connect(raw_dsn(url))
    out = {}
    try:
        payload, bodies = _pg_payload(batch.rows)
        for mode in ("force_custom_plan", "force_generic_plan"):
            await conn.execute(f"SET plan_cache_mode = {mode}")
            plan = await conn.fetchval(
                "EXPLAIN (FORMAT JSON) " + PG_INSERT,
                payload,
                batch.rows[0]["created_at"],
                bodies,
                WHOLE_SOURCE,
            )
            out[f"receiver insert ({mode})"] = scans(plan)
            plan = await conn.fetchval(
                "EXPLAIN (FORMAT JSON) " + PG_EXISTING, ["github"] * len(keys), keys
            )
            out[f"receiver lookup ({mode})"] = scans(plan)
    finally:
        await conn.close()
    return out
