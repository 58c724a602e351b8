"""Workers killed mid-batch, again and again: wake-ups keep coming, because arq's jobs
last moments and their "in progress" marks in Redis seconds (the reconciliation
schedule, whose hour-long job timeout set how long those marks lived, is no arq job any
more); and the schedule runs with no Redis at all.

Real ``hookd serve`` and ``hookd worker`` processes, PostgreSQL and a private Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from hookd.providers.signing import sample_event
from processing.claiming import EXPIRED_CHECK_S
from tests.integration.test_pipeline import config, prepare
from tests.integration.test_reconcile import sources_toml
from tests.support.constants import SECRETS
from tests.support.data import scalar
from tests.support.emulators import StripeEmulator
from tests.support.http import serve_app
from tests.support.server import HookdServer, HookdWorker, RedisServer, free_port
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.redis]

# The issue asks for 20 kills in a row; HOOKD_TEST_WORKER_KILLS sets another count.
KILLS = int(os.environ.get("HOOKD_TEST_WORKER_KILLS", "20"))
WORKERS = 3
PER_BATCH = 12
LEASE_S = 3.0
# Long enough to be sure of killing a worker while its handlers run.
HANDLER_SLEEP_S = 0.4
# arq marks a running job in progress for its longest job timeout + 10 s: seconds now
# (it was 3,610 s while the reconciliation schedule was an arq job).
IN_PROGRESS_MS = 20_000
# A fresh batch sent right after a kill is processed within this (wake-up, claim, handler).
RESUME_S = 10.0
IN_PROGRESS = "arq:in-progress:"


@contextlib.asynccontextmanager
async def in_progress_marks(url: str) -> AsyncIterator[list[tuple[str, int]]]:
    """Every ``arq:in-progress:*`` key arq sets while this runs, with its time to live in
    ms, read off Redis's MONITOR: the mark of a running job, as Redis holds it."""
    marks: list[tuple[str, int]] = []
    client = Redis.from_url(url)

    async def watch() -> None:
        async with client.monitor() as monitor:
            while True:
                words = (await monitor.next_command())["command"].split()
                if (
                    len(words) >= 3
                    and words[0].upper() == "PSETEX"
                    and words[1].startswith(IN_PROGRESS)
                ):
                    marks.append((words[1], int(words[2])))

    task = asyncio.create_task(watch())
    try:
        yield marks
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await client.aclose()


async def post_batch(url: str, first: int, count: int) -> list[str]:
    """``count`` signed GitHub deliveries; their event ids, every one accepted."""
    ids: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for seq in range(first, first + count):
            headers, body = sample_event("github", SECRETS["github"], seq)
            response = await client.post("/hooks/github", content=body, headers=headers)
            assert response.status_code == 202, response.text
            ids.append(response.json()["event_id"])
    return ids


def id_list(ids: list[str]) -> str:
    return ", ".join(f"'{i}'" for i in ids)


async def holders(url: str, ids: list[str]) -> set[int]:
    """pids of the workers holding claims on ``ids`` with one of their handlers started."""
    from store import db

    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            result = await conn.exec_driver_sql(
                "SELECT DISTINCT e.lease_owner FROM events e JOIN calls c ON c.event_id = e.id "
                f"WHERE e.status = 'processing' AND e.id IN ({id_list(ids)})"
            )
            return {int(owner.split(":")[-2]) for (owner,) in result}
    finally:
        await engine.dispose()


async def processed(url: str, ids: list[str]) -> bool:
    done = f"SELECT count(*) FROM events WHERE status = 'processed' AND id IN ({id_list(ids)})"
    return await scalar(url, done) == len(ids)


async def test_kill_9_mid_batch_again_and_again_wake_ups_resume_within_seconds(
    tmp_path: Path, pg_url: str
) -> None:
    await prepare(pg_url)
    env = {
        "HOOKD_CONFIG": str(config(tmp_path, "effect_idempotent")),
        "HOOKD_DATABASE_URL": pg_url,
        "HOOKD_LEASE_S": str(LEASE_S),
        "HOOKD_HANDLER_TIMEOUT_S": "2",
        # Sweeps out of the way: what processes the fresh batches is their wake-ups.
        "HOOKD_SWEEP_S": "30",
        "HOOKD_PRUNE_EVERY_S": "0",
        "TEST_HANDLER_SLEEP_S": str(HANDLER_SLEEP_S),
    }
    resumed: list[float] = []
    sent: list[str] = []
    started = time.monotonic()
    with RedisServer(tmp_path) as redis:
        env["HOOKD_REDIS_URL"] = redis.url
        async with in_progress_marks(redis.url) as marks:
            with HookdServer(env, tmp_path) as server:
                workers = [HookdWorker(env, tmp_path).start() for _ in range(WORKERS)]
                try:
                    seq = 0
                    for cycle in range(KILLS):
                        batch = await post_batch(server.url, seq, PER_BATCH)
                        seq += PER_BATCH
                        sent += batch

                        async def held(batch: list[str] = batch) -> set[int]:
                            return await holders(pg_url, batch)

                        pids = await wait_for(held, timeout_s=30, interval_s=0.01)
                        victim = next(w for w in workers if w.proc and w.proc.pid in pids)
                        victim.kill9()
                        killed_at = time.monotonic()
                        # Replaced at once; the fresh batch is for the workers still up.
                        workers[workers.index(victim)] = HookdWorker(env, tmp_path).start()
                        fresh = await post_batch(server.url, seq, PER_BATCH)
                        seq += PER_BATCH
                        sent += fresh

                        async def done(fresh: list[str] = fresh) -> bool:
                            return await processed(pg_url, fresh)

                        await wait_for(
                            done,
                            timeout_s=RESUME_S,
                            interval_s=0.05,
                            message=lambda cycle=cycle: f"cycle {cycle}: {workers[0].log()}",
                        )
                        resumed.append(time.monotonic() - killed_at)
                    # The killed workers' claims: taken over once their lease ended, at the
                    # first claim after that (here one more delivery's wake-up).
                    await asyncio.sleep(LEASE_S + EXPIRED_CHECK_S)
                    sent += await post_batch(server.url, seq, 1)

                    async def all_done() -> bool:
                        return await processed(pg_url, sent)

                    await wait_for(all_done, timeout_s=30, interval_s=0.2)
                finally:
                    for worker in workers:
                        worker.stop()
    elapsed = time.monotonic() - started
    assert len(resumed) == KILLS
    assert max(resumed) < RESUME_S, resumed
    assert await scalar(pg_url, "SELECT count(*) FROM events WHERE status = 'dead'") == 0
    # One effect per event, although the killed batches' handlers ran twice.
    assert await scalar(pg_url, "SELECT count(DISTINCT event_id) FROM effects") == len(sent)
    assert await scalar(pg_url, "SELECT count(*) FROM effects") == len(sent)
    # arq's mark of every job it ran lives seconds, not the hour it used to.
    assert marks, "no arq job ran"
    assert max(ttl for _, ttl in marks) <= IN_PROGRESS_MS, sorted(set(marks))[-5:]
    assert any(key.startswith(IN_PROGRESS + "hookd_wake:") for key, _ in marks)
    print(
        f"{KILLS} kills in {elapsed:.1f} s; resumed after {max(resumed):.2f} s at most; "
        f"{len(marks)} in-progress marks, TTLs {sorted({ttl for _, ttl in marks})} ms"
    )


async def test_the_workers_reconciliation_schedule_runs_without_redis(
    tmp_path: Path, pg_url: str
) -> None:
    """The schedule is the worker's own loop, not an arq job: with Redis unreachable the
    worker still runs each source when it is due (and processes from the database)."""
    emulator = StripeEmulator("sk_test_hookd")
    emulator.add_events(3, start=time.time() - 600, step_s=1.0)
    async with serve_app(emulator.app) as api_url:
        path = tmp_path / "hookd.toml"
        path.write_text(sources_toml("stripe", api_url))
        env = {
            "HOOKD_CONFIG": str(path),
            "HOOKD_DATABASE_URL": pg_url,
            # Nothing listens there: arq never connects.
            "HOOKD_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
            "HOOKD_PRUNE_EVERY_S": "0",
        }
        await prepare(pg_url)
        with HookdWorker(env, tmp_path) as worker:

            async def ran() -> int:
                assert worker.alive(), worker.log()
                return await scalar(
                    pg_url,
                    "SELECT count(*) FROM reconcile_runs "
                    "WHERE trigger = 'schedule' AND status = 'succeeded'",
                )

            await wait_for(ran, timeout_s=30, interval_s=0.2, message=worker.log)
            # What the run stored is processed too, from the database alone.
            await wait_for(
                lambda: scalar(
                    pg_url,
                    "SELECT CASE WHEN count(*) = 3 THEN 1 ELSE 0 END FROM events "
                    "WHERE status = 'processed'",
                ),
                timeout_s=30,
                interval_s=0.2,
                message=worker.log,
            )
    assert await scalar(pg_url, "SELECT count(*) FROM events WHERE origin = 'reconcile'") == 3
