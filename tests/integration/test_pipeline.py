"""End to end through real processes: ``hookd serve`` → PostgreSQL → Redis → ``hookd worker``
→ handlers; and the same without Redis on SQLite. Crashes are real ``kill -9``."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from hookd.providers.signing import sample_event
from tests.support.constants import SECRETS
from tests.support.data import scalar
from tests.support.deliveries import github_requests, send, wait_processed
from tests.support.handlers import prepared_env
from tests.support.server import HookdServer, HookdWorker, RedisServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio


async def test_thousand_events_with_duplicates_give_one_effect_each_with_two_workers(
    tmp_path: Path, pg_url: str
) -> None:
    env = await prepared_env(tmp_path, pg_url, "effect_strict")
    with RedisServer(tmp_path) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        with (
            HookdServer(env, tmp_path) as server,
            HookdWorker(env, tmp_path),
            HookdWorker(env, tmp_path),
        ):
            statuses = await send(server.url, github_requests(1000, 250))
            assert sorted(statuses) == [200] * 250 + [202] * 1000
            await wait_processed(pg_url, 1000)
    assert await scalar(pg_url, "SELECT count(*) FROM events") == 1000
    assert await scalar(pg_url, "SELECT count(*) FROM effects") == 1000
    assert await scalar(pg_url, "SELECT count(DISTINCT event_id) FROM effects") == 1000
    assert await scalar(pg_url, "SELECT count(*) FROM calls") == 1000, "a handler ran twice"
    assert await scalar(pg_url, "SELECT max(attempts) FROM events") == 1


async def test_two_receivers_and_two_workers_give_the_same_exactly_once_results(
    tmp_path: Path, pg_url: str
) -> None:
    """Scaled out (docs/scaling.md): each delivery is sent to both receivers at once,
    as a provider retry landing on another replica would be."""
    env = await prepared_env(tmp_path, pg_url, "effect_strict")
    unique = [sample_event("github", SECRETS["github"], i) for i in range(800)]
    with RedisServer(tmp_path) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        with (
            HookdServer(env, tmp_path) as first,
            HookdServer(env, tmp_path) as second,
            HookdWorker(env, tmp_path),
            HookdWorker(env, tmp_path),
        ):
            a, b = await asyncio.gather(send(first.url, unique), send(second.url, unique))
            statuses = a + b
            assert statuses.count(202) == 800, "each event accepted exactly once overall"
            assert statuses.count(200) == 800
            await wait_processed(pg_url, 800)
    assert await scalar(pg_url, "SELECT count(*) FROM events") == 800
    assert await scalar(pg_url, "SELECT count(*) FROM effects") == 800
    assert await scalar(pg_url, "SELECT count(*) FROM calls") == 800, "a handler ran twice"
    assert await scalar(pg_url, "SELECT max(attempts) FROM events") == 1


async def test_kill_9_of_workers_mid_handler_loses_nothing_and_doubles_no_effect(
    tmp_path: Path, pg_url: str
) -> None:
    env = await prepared_env(
        tmp_path,
        pg_url,
        "effect_idempotent",
        HOOKD_LEASE_S="2",
        HOOKD_HANDLER_TIMEOUT_S="1",
        HOOKD_RETRY_BASE_S="0.05",
        TEST_HANDLER_SLEEP_S="0.05",
    )
    stuck_at_kill = []
    with RedisServer(tmp_path) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        with HookdServer(env, tmp_path) as server:
            statuses = await send(server.url, github_requests(1500, 0))
            assert statuses.count(202) == 1500
            processed = "SELECT count(*) FROM events WHERE status = 'processed'"
            for _ in range(5):
                before = await scalar(pg_url, processed)
                worker = HookdWorker(env, tmp_path).start()

                async def twenty_more(before: int = before) -> bool:
                    return await scalar(pg_url, processed) >= before + 20

                await wait_for(twenty_more, timeout_s=30, message=worker.log)
                await asyncio.sleep(random.uniform(0, 0.3))
                worker.kill9()
                stuck_at_kill.append(
                    await scalar(pg_url, "SELECT count(*) FROM events WHERE status = 'processing'")
                )
            done_before = await scalar(
                pg_url, "SELECT count(*) FROM events WHERE status = 'processed'"
            )
            with HookdWorker(env, tmp_path):
                recovery_s = await wait_processed(pg_url, 1500)
    assert any(stuck_at_kill), "no kill landed while handlers were running"
    assert done_before < 1500, "the kills came after all the work"
    assert await scalar(pg_url, "SELECT count(*) FROM effects") == 1500
    assert await scalar(pg_url, "SELECT count(DISTINCT event_id) FROM effects") == 1500
    assert await scalar(pg_url, "SELECT count(*) FROM events WHERE status = 'dead'") == 0
    assert recovery_s < 60


async def test_redis_flushed_and_stopped_while_events_arrive_loses_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    env = await prepared_env(tmp_path, pg_url, "effect_strict", HOOKD_SWEEP_S="1")
    requests = github_requests(600, 0)
    with RedisServer(tmp_path) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        with HookdServer(env, tmp_path) as server, HookdWorker(env, tmp_path) as worker:
            assert (await send(server.url, requests[:200])).count(202) == 200
            assert redis.command("FLUSHALL").startswith(b"+OK")
            assert (await send(server.url, requests[200:400])).count(202) == 200
            redis.stop()
            statuses = await send(server.url, requests[400:])
            assert statuses.count(202) == 200, "the receiver must keep acknowledging"
            assert worker.alive(), worker.log()
            redis.start()
            await wait_processed(pg_url, 600)
    assert await scalar(pg_url, "SELECT count(*) FROM effects") == 600
    assert await scalar(pg_url, "SELECT count(*) FROM calls") == 600, "a handler ran twice"


async def test_without_redis_serve_processes_in_process_on_sqlite(
    tmp_path: Path, sqlite_url: str
) -> None:
    env = await prepared_env(tmp_path, sqlite_url, "effect_strict")
    with HookdServer(env, tmp_path) as server:
        statuses = await send(server.url, github_requests(300, 60), concurrency=16)
        assert sorted(statuses) == [200] * 60 + [202] * 300
        await wait_processed(sqlite_url, 300)
    assert await scalar(sqlite_url, "SELECT count(*) FROM effects") == 300
    assert await scalar(sqlite_url, "SELECT count(*) FROM calls") == 300
