"""Prune running while webhooks arrive and are processed (PostgreSQL, real uvicorn):
no 5xx, no event lost or stored twice, each processed once, and the old events it
works through each left as one row or one tombstone. Behaviour, not speed: the
timings are ``bench/prune_load.py``'s."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from hookd.ops import prune_sources
from hookd.sources import parse_sources
from store.retention import partition_compact, partition_create
from store.retention.prune import Pruned
from tests.support import handlers
from tests.support.asgi import running_app
from tests.support.data import engine_of, scalar
from tests.support.emulators import StripeEmulator
from tests.support.http import serve_app
from tests.support.partitions import noon, store_at
from tests.support.stripe_source import STRIPE_KEY, deliver, stripe_source
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]
SENDERS = 4


async def backlog(url: str) -> dict[str, str]:
    """Old Stripe events, key -> id: days past ``keep_events_days`` with dead events
    (compacted), one also holding an event of a source no longer configured (pruned
    row by row), one with only processed events (dropped whole), and a day past
    ``keep_body_days`` (bodies stripped)."""
    stored: dict[str, str] = {}
    for ago in (40, 38, 37, 12):
        async with engine_of(url) as engine:
            await partition_create.create_day(engine, noon(ago).date())  # that day's only
        keys = [f"evt_old_{ago}_{i}" for i in range(20)]
        ids = await store_at(url, noon(ago), keys, source="stripe", make_partitions=False)
        stored |= zip(keys, ids, strict=True)
        if ago != 37:
            dead = [f"evt_dead_{ago}_{i}" for i in range(2)]
            ids = await store_at(
                url, noon(ago), dead, source="stripe", status="dead", make_partitions=False
            )
            stored |= zip(dead, ids, strict=True)
        if ago == 38:
            await store_at(
                url, noon(ago), [f"retired_{ago}"], source="retired", make_partitions=False
            )
    return stored


async def count_of(url: str, sql: str, keys: list[str]) -> int:
    async with engine_of(url) as engine, engine.connect() as conn:
        found = await conn.execute(sa.text(sql), {"keys": keys})
        return int(found.scalar() or 0)


async def test_prune_while_webhooks_arrive_loses_doubles_and_fails_none(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOKD_DATABASE_URL", pg_url)
    monkeypatch.setattr(partition_compact, "COMPACT_MIN_GOING", 10)
    await handlers.prepare(pg_url)
    old = await backlog(pg_url)
    emulator = StripeEmulator(STRIPE_KEY)
    sources = parse_sources(stripe_source(), Path("hookd.toml"), env={})
    answers: list[tuple[str, httpx.Response]] = []
    new: list[str] = []
    pruning = asyncio.Event()
    results: list[Pruned] = []

    async def send(client: httpx.AsyncClient, order: int) -> None:
        """New events one after another, every fifth followed by an old one again,
        until five rounds after the prune ended."""
        n = after = 0
        while after < 5:
            n += 1
            [event_id] = emulator.add_events(1, start=time.time(), step_s=1.0)
            event = emulator.event(event_id)
            new.append(event_id)
            answers.append((event_id, await deliver(client, event)))
            if n % 5 == 0:
                key = list(old)[(order * 17 + n) % len(old)]
                answers.append((key, await deliver(client, {**event, "id": key})))
            if results:
                after += 1
            elif n >= 3:
                pruning.set()

    async def prune() -> None:
        await pruning.wait()
        async with engine_of(pg_url) as engine:
            results.append(await prune_sources(engine, sources, owner="load"))

    async with (
        running_app(sources, pg_url, sweep_s=0.05, prune_every_s=0) as (app, _),
        serve_app(app) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        await asyncio.wait_for(
            asyncio.gather(prune(), *(send(client, i) for i in range(SENDERS))), timeout=180
        )

        async def all_processed() -> bool:
            done = await count_of(
                pg_url,
                "SELECT count(*) FROM events WHERE source = 'stripe' "
                "AND dedupe_key = ANY(:keys) AND status = 'processed'",
                new,
            )
            return done == len(new)

        await wait_for(all_processed, timeout_s=60, interval_s=0.1)

    [done] = results
    # Every answer a 2xx: new events accepted, old ones duplicates of their originals.
    bad = [(k, a.status_code, a.text) for k, a in answers if a.status_code not in (200, 202)]
    assert bad == []
    for key, answer in answers:
        if key in old:
            assert answer.json() == {"event_id": old[key], "status": "duplicate"}
        else:
            assert answer.status_code == 202, answer.text
    assert len(new) >= SENDERS * 8
    # The prune did its work meanwhile: a day compacted, rows deleted, bodies stripped.
    assert done.partitions_compacted
    assert done.partitions_dropped
    assert done.counts["stripe"].event == 3 * 20
    assert done.counts["stripe"].body == 20
    # Each new event: one key, one row, one attempt, one effect.
    per_key = "FROM events WHERE source = 'stripe' AND dedupe_key = ANY(:keys)"
    assert await count_of(pg_url, f"SELECT count(*) {per_key}", new) == len(new)
    assert await count_of(pg_url, f"SELECT count(DISTINCT dedupe_key) {per_key}", new) == len(new)
    assert await count_of(pg_url, f"SELECT count(*) {per_key} AND attempts = 1", new) == len(new)
    assert await scalar(pg_url, "SELECT count(*) FROM effects") == len(new)
    assert await scalar(pg_url, "SELECT count(*) FROM event_keys") == len(new) + len(old) + 1
    # Every event, old or new: one row or one tombstone, never both, never neither.
    assert (
        await scalar(
            pg_url,
            "SELECT count(*) FROM event_keys k WHERE (k.pruned_at IS NULL) <> "
            "EXISTS (SELECT 1 FROM events e WHERE e.id = k.event_id)",
        )
        == 0
    )
