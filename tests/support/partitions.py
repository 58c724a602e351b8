"""PostgreSQL's day partitions of ``events`` as the partition, prune and compaction tests
see them: events stored as if received on a chosen day, where each row lives, which
partitions and indexes exist, and a prune run as of a chosen moment."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd.ops import policies as retention_policies
from hookd.sources import Sources
from store.claims import claiming
from store.crypto import BodyCipher
from store.ids import new_ids
from store.intake import events as store_events
from store.intake.events import NewEvent, insert_events
from store.models import EVENTS
from store.retention import partition_catalog, partition_create
from store.retention import prune as store_prune
from tests.support.data import engine_of, scalar

PLAIN = BodyCipher("")


def noon(days_ago: int) -> datetime:
    return datetime.combine(datetime.now(UTC).date() - timedelta(days=days_ago), time(12), UTC)


async def store_at(
    url: str,
    moment: datetime,
    keys: list[str],
    *,
    source: str = "github",
    status: str = "processed",
    make_partitions: bool = True,
) -> list[str]:
    """Events stored through the real insert path as if received at ``moment`` (their
    ids minted then), after hookd made that day's partitions as it would have then;
    set to ``status`` (processed ones with two ledger rows)."""
    ms = int(moment.timestamp() * 1000)
    async with engine_of(url) as engine:
        if make_partitions:
            await partition_create.ensure(engine, moment)
        events = [
            NewEvent(source, "github", k, "push", "webhook", moment, None, "v", {}, b"{}")
            for k in keys
        ]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(store_events, "new_ids", lambda n: new_ids(n, ms))
            async with engine.begin() as conn:
                ids = [s.event_id for s in await insert_events(conn, events, PLAIN)]
                if status != "pending":
                    await conn.execute(
                        sa.update(EVENTS).where(EVENTS.c.id.in_(ids)).values(status=status)
                    )
                if status == "processed":
                    await claiming.record_handlers(
                        conn, [(i, h) for i in ids for h in ("a", "b")], moment
                    )
    return ids


async def homes(url: str, ids: list[str]) -> dict[str, str]:
    """Event id -> the partition its row is in."""
    async with engine_of(url) as engine, engine.connect() as conn:
        result = await conn.execute(
            sa.text("SELECT id, tableoid::regclass::text FROM events WHERE id = ANY(:ids)"),
            {"ids": ids},
        )
        return {r[0]: r[1] for r in result}


async def names(url: str) -> list[str]:
    async with engine_of(url) as engine, engine.connect() as conn:
        return [p.name for p in await partition_catalog.list_partitions(conn)]


async def exists(url: str, table: str) -> bool:
    async with engine_of(url) as engine, engine.connect() as conn:
        found = await conn.execute(sa.text("SELECT to_regclass(:t)::text"), {"t": table})
        return found.scalar() is not None


async def prune_as_of(
    url: str, sources: Sources, now: datetime, *, only: str | None = None, **options: Any
) -> store_prune.Pruned:
    async with engine_of(url) as engine:
        return await store_prune.prune(
            engine, retention_policies(sources, only), now=now, owner="test", **options
        )


def day_name(moment: datetime) -> str:
    return partition_catalog.name_of(moment.date())


async def index_layout(url: str) -> dict[str, tuple[int, list[str]]]:
    """Partition -> (indexes attached to an index of events, its storage settings)."""
    async with engine_of(url) as engine, engine.connect() as conn:
        result = await conn.execute(
            sa.text(
                "SELECT c.relname, (SELECT count(*) FROM pg_index x JOIN pg_inherits ii "
                "ON ii.inhrelid = x.indexrelid WHERE x.indrelid = c.oid), "
                "coalesce(c.reloptions, '{}') FROM pg_inherits i JOIN pg_class c "
                "ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass('events')"
            )
        )
        return {r[0]: (r[1], sorted(o.split("=")[0] for o in r[2])) for r in result}


async def parent_indexes(url: str) -> int:
    """How many indexes ``events`` has (each partition carries one of each)."""
    return await scalar(url, "SELECT count(*) FROM pg_index WHERE indrelid = 'events'::regclass")


async def key_statuses(url: str) -> dict[str, str | None]:
    async with engine_of(url) as engine, engine.connect() as conn:
        result = await conn.execute(sa.text("SELECT event_id, final_status FROM event_keys"))
        return {r[0]: r[1] for r in result}


@contextlib.asynccontextmanager
async def plain_tx(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    async with engine.begin() as conn:
        yield conn
