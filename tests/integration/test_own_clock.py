"""Every event on its own clock, end to end: a slow handler delays only its own event, a
kill -9 repeats only what finished inside one outcome window, and a killed worker's
events are taken over within a lease.

Real ``hookd serve`` (the Quickstart default: SQLite, a processor process beside the
receiver) and real ``hookd worker`` processes on PostgreSQL with a private Redis.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from processing.claiming import EXPIRED_CHECK_S
from store import db
from store.models import EVENTS
from tests.integration.test_pipeline import config, prepare
from tests.integration.test_worker_kills import post_batch
from tests.support.data import scalar
from tests.support.server import HookdServer, HookdWorker, RedisServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio

QUICK = 100
SLOW_S = 20.0
# The bar: every quick event processed within this of being sent.
QUICK_WITHIN_S = 3.0


async def one(url: str, sql: str) -> object:
    """The first value a statement gives (committed: it may write), on a fresh engine."""
    engine = db.create_engine(url)
    try:
        async with engine.begin() as conn:
            result = await conn.execute(sa.text(sql))
            return result.scalar() if result.returns_rows else None
    finally:
        await engine.dispose()


def in_list(ids: list[str]) -> str:
    return ", ".join(f"'{i}'" for i in ids)


async def test_a_slow_handler_delays_only_its_own_event_on_the_quickstart_default(
    tmp_path: Path, sqlite_url: str
) -> None:
    """``hookd serve`` alone on SQLite (a processor process beside the receiver)."""
    await prepare(sqlite_url)
    env = {
        "HOOKD_CONFIG": str(config(tmp_path, "slow_once")),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_PROCESSORS": "auto",
        "HOOKD_HANDLER_TIMEOUT_S": str(SLOW_S + 10),
        "HOOKD_PRUNE_EVERY_S": "0",
        "TEST_SLOW_S": str(SLOW_S),
    }
    with HookdServer(env, tmp_path) as server:
        worst = await latest_quick(server.url, sqlite_url)
    print(f"serve alone, SQLite: slowest quick event processed {worst:.2f} s after receipt")
    assert worst <= QUICK_WITHIN_S, worst


async def latest_quick(url: str, db_url: str) -> float:
    """The slowest quick event's time from receipt to processed, in seconds."""
    await one(db_url, "INSERT INTO switches VALUES ('slow', 1)")
    [slow] = await post_batch(url, 0, 1)

    async def slow_started() -> bool:
        return bool(await scalar(db_url, "SELECT count(*) FROM calls WHERE handler = 'slow'"))

    await wait_for(slow_started, timeout_s=30, interval_s=0.05)
    started = time.monotonic()
    quick = await post_batch(url, 1, QUICK)

    async def all_processed() -> bool:
        done = await scalar(
            db_url,
            f"SELECT count(*) FROM events WHERE status = 'processed' AND id IN ({in_list(quick)})",
        )
        return done == len(quick)

    await wait_for(all_processed, timeout_s=SLOW_S, interval_s=0.05)
    assert time.monotonic() - started < SLOW_S
    status = await one(db_url, f"SELECT status FROM events WHERE id = '{slow}'")
    assert status == "processing", "the slow event runs on, on its own"
    return await worst_lag(db_url, quick)


async def worst_lag(db_url: str, ids: list[str]) -> float:
    """max(processed_at - received_at) of ``ids``, in seconds, as the database stored them."""
    engine = db.create_engine(db_url)
    try:
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(EVENTS.c.received_at, EVENTS.c.processed_at).where(
                        EVENTS.c.id.in_(ids)
                    )
                )
            ).all()
    finally:
        await engine.dispose()
    lags = [
        (processed - received).total_seconds()
        for received, processed in rows
        if isinstance(received, datetime) and isinstance(processed, datetime)
    ]
    assert len(lags) == len(ids)
    return max(lags)


@pytest.mark.postgres
@pytest.mark.redis
async def test_a_slow_handler_delays_only_its_own_event_with_a_worker(
    tmp_path: Path, pg_url: str
) -> None:
    """PostgreSQL, Redis, ``hookd serve`` and one ``hookd worker``."""
    await prepare(pg_url)
    env = {
        "HOOKD_CONFIG": str(config(tmp_path, "slow_once")),
        "HOOKD_DATABASE_URL": pg_url,
        "HOOKD_HANDLER_TIMEOUT_S": str(SLOW_S + 10),
        "HOOKD_PRUNE_EVERY_S": "0",
        "TEST_SLOW_S": str(SLOW_S),
    }
    with RedisServer(tmp_path) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        with HookdServer(env, tmp_path) as server:
            worker = HookdWorker(env, tmp_path).start()
            try:
                await asyncio.to_thread(worker.wait_started)
                worst = await latest_quick(server.url, pg_url)
            finally:
                worker.stop()
    print(f"worker, PostgreSQL: slowest quick event processed {worst:.2f} s after receipt")
    assert worst <= QUICK_WITHIN_S, worst


# The deterministic wave: every 15th handler works 5 s, the others 0.05 s; one
# kill -9 of the worker 2.5 s after the first handler ran.
WAVE = 300
SLOW_EVERY = 15
WAVE_SLOW_S = 5.0
WAVE_QUICK_S = 0.05
KILL_AFTER_S = 2.5
WAVE_LEASE_S = 8.0
# Doubled effects the test tolerates: handlers that finished within one outcome window
# (5 ms) and its commit before the kill: a handful, as events end spread out by then
# (bench/kill_wave.py; the batches of 707a27a repeated 101 here).
DOUBLED_AT_MOST = 20


@pytest.mark.postgres
@pytest.mark.redis
async def test_kill_9_mid_wave_repeats_only_what_finished_inside_one_outcome_window(
    tmp_path: Path, pg_url: str
) -> None:
    """A killed worker's finished handlers are not run again (their outcome was written
    as each finished, not with its batch's slowest), and its events in flight are taken
    over within one lease."""
    await prepare(pg_url)
    env = {
        "HOOKD_CONFIG": str(config(tmp_path, "effect_at_end")),
        "HOOKD_DATABASE_URL": pg_url,
        "HOOKD_LEASE_S": str(WAVE_LEASE_S),
        "HOOKD_HANDLER_TIMEOUT_S": str(WAVE_SLOW_S + 2),
        "HOOKD_PRUNE_EVERY_S": "0",
        "TEST_SLOW_EVERY": str(SLOW_EVERY),
        "TEST_SLOW_S": str(WAVE_SLOW_S),
        "TEST_HANDLER_SLEEP_S": str(WAVE_QUICK_S),
    }
    with RedisServer(tmp_path) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        with HookdServer(env, tmp_path) as server:
            ids = await post_batch(server.url, 0, WAVE)
            worker = HookdWorker(env, tmp_path).start()
            replacement: HookdWorker | None = None
            try:

                async def first_effect() -> bool:
                    return bool(await scalar(pg_url, "SELECT count(*) FROM calls"))

                await wait_for(first_effect, timeout_s=60, interval_s=0.01)
                await asyncio.sleep(KILL_AFTER_S)
                worker.kill9()
                killed_at = time.monotonic()
                replacement = HookdWorker(env, tmp_path).start()

                async def all_processed() -> bool:
                    done = await scalar(
                        pg_url, "SELECT count(*) FROM events WHERE status = 'processed'"
                    )
                    return done == len(ids)

                await wait_for(all_processed, timeout_s=120, interval_s=0.1)
                # Its claims were taken over at most a lease (and one look for expired
                # leases, and the longest handler) after the kill.
                took = time.monotonic() - killed_at
            finally:
                worker.stop()
                if replacement is not None:
                    replacement.stop()
    doubled = await scalar(
        pg_url,
        "SELECT count(*) FROM (SELECT event_id FROM calls GROUP BY event_id "
        "HAVING count(*) > 1) AS twice",
    )
    assert await scalar(pg_url, "SELECT count(DISTINCT event_id) FROM calls") == WAVE
    print(f"kill -9 mid-wave: {doubled} effects doubled; all processed {took:.1f} s after")
    assert doubled <= DOUBLED_AT_MOST, doubled
    assert took <= WAVE_LEASE_S + EXPIRED_CHECK_S + WAVE_SLOW_S + 10, took
