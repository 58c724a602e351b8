"""Worker crash: ``kill -9`` of ``hookd worker`` while its handlers run, again and again.

A ``hookd serve`` (PostgreSQL, private Redis) takes a batch of signed deliveries each
cycle; a ``hookd worker`` runs ``effect_idempotent`` on them (each call sleeps
``TEST_HANDLER_SLEEP_S``, so handlers are mid-run for a while). Once some of the batch is
``processing``, the worker's process group gets SIGKILL at a random moment within one
handler's run, and a new worker is started at once. The events the dead worker had claimed
(``processing`` at the kill) keep its lease until ``lease_expires_at``; the new worker
takes them over after that (it looks for expired leases every ``EXPIRED_CHECK_S``, on its
sweep every ``HOOKD_SWEEP_S``) and runs them again. Recovery time is from the kill until
every one of them is ``processed``.

At the end: every event ``processed``, none ``dead``, exactly one ``effects`` row per event
although handlers ran more than once (``calls``): the handler's idempotency key (the same
for every attempt of an event) is what keeps a re-run from repeating its effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from chaos import harness
from chaos.harness import (
    Delivery,
    HookdServer,
    HookdWorker,
    RedisServer,
    config,
    pg_database,
    prepare_handlers,
)
from processing.claiming import EXPIRED_CHECK_S
from store import claims, db
from store.models import EVENTS

TITLE = "Worker crash: kill -9 of hookd worker mid-handler"
QUICK: dict[str, Any] = {"cycles": 3}
FULL: dict[str, Any] = {"cycles": 50}

LEASE_S = 3.0
HANDLER_TIMEOUT_S = 2.0
HANDLER_SLEEP_S = 0.3
SWEEP_S = 1.0
PER_CYCLE = 48
# Worker start-up on a loaded machine, the handler's own run and the settle transaction.
SLACK_S = 4.0

EFFECTS = sa.table("effects", sa.column("event_id", sa.String))
CALLS = sa.table("calls", sa.column("event_id", sa.String))


@contextlib.asynccontextmanager
async def database() -> AsyncIterator[str]:
    """``harness.pg_database`` from a running loop (migrations call ``asyncio.run``)."""
    manager = pg_database()
    url = await asyncio.to_thread(manager.__enter__)
    try:
        yield url
    finally:
        await asyncio.to_thread(manager.__exit__, None, None, None)


def batch(cycle: int, count: int) -> list[Delivery]:
    per = -(-count // len(harness.PROVIDERS))
    lists = [harness.deliveries(p, per, cycle * per) for p in harness.PROVIDERS]
    return [lists[i % len(lists)][i // len(lists)] for i in range(count)]


async def processing(engine: AsyncEngine) -> dict[str, datetime]:
    """Events claimed and not finished: id -> when the lease ends."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(EVENTS.c.id, EVENTS.c.lease_expires_at).where(EVENTS.c.status == "processing")
        )
        return {str(row[0]): row[1] for row in rows}


async def count_for(engine: AsyncEngine, table: sa.TableClause, ids: Sequence[str]) -> int:
    if not ids:
        return 0
    async with engine.connect() as conn:
        column = table.c.event_id
        query = sa.select(sa.func.count(sa.distinct(column))).where(
            claims.one_of(conn, column, ids)
        )
        return int((await conn.execute(query)).scalar() or 0)


async def processed_among(engine: AsyncEngine, ids: Sequence[str]) -> int:
    async with engine.connect() as conn:
        query = sa.select(sa.func.count()).where(
            claims.one_of(conn, EVENTS.c.id, ids), EVENTS.c.status == "processed"
        )
        return int((await conn.execute(query)).scalar() or 0)


async def seed_ghosts(arq: Redis, count: int) -> None:
    """``count`` arq jobs at the head of the queue, marked in progress for an hour: what
    ``count`` jobs running on workers that were then killed leave behind."""
    due = int(time.time() * 1000) - 60_000
    await arq.zadd("arq:queue", {f"ghost:{i}": due + i for i in range(count)})
    for i in range(count):
        await arq.set(f"arq:in-progress:ghost:{i}", b"1", px=3_600_000)


async def run(cycles: int = 50, ghosts: int = 0, seed: int | None = None) -> dict[str, Any]:
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    acked = 0
    bound_s = LEASE_S + EXPIRED_CHECK_S + SWEEP_S + SLACK_S
    async with harness.workdir() as wd, database() as url:
        await prepare_handlers(url)
        redis = RedisServer(wd).start()
        arq = Redis.from_url(redis.url)
        if ghosts:
            await seed_ghosts(arq, ghosts)
        env = {
            "HOOKD_CONFIG": str(config(wd, handler="effect_idempotent")),
            "HOOKD_DATABASE_URL": url,
            "HOOKD_REDIS_URL": redis.url,
            "HOOKD_LEASE_S": str(LEASE_S),
            "HOOKD_HANDLER_TIMEOUT_S": str(HANDLER_TIMEOUT_S),
            "HOOKD_RETRY_BASE_S": "0.05",
            "HOOKD_SWEEP_S": str(SWEEP_S),
            "TEST_HANDLER_SLEEP_S": str(HANDLER_SLEEP_S),
        }
        engine = db.create_engine(url)
        server = HookdServer(env, Path(wd))
        worker = HookdWorker(env, Path(wd))
        try:
            await asyncio.to_thread(server.start)
            worker.start()
            for cycle in range(cycles):
                results = await harness.send(server.url, batch(cycle, PER_CYCLE), concurrency=16)
                acked += sum(r.status == 202 for r in results)
                waited = time.monotonic()
                # Handlers running: events claimed, and a handler has begun on one of them.
                while not await count_for(engine, CALLS, list(await processing(engine))):
                    if time.monotonic() - waited > 60:
                        raise AssertionError(f"no handler started in 60 s: {worker.log()}")
                    await asyncio.sleep(0.02)
                await asyncio.sleep(rng.uniform(0, HANDLER_SLEEP_S))
                killed_at = time.monotonic()
                worker.kill9()
                stuck = await processing(engine)
                now = datetime.now(UTC)
                ids = list(stuck)
                lease_left = max(
                    ((expires - now).total_seconds() for expires in stuck.values()), default=0.0
                )
                started = await count_for(engine, CALLS, ids)
                effected = await count_for(engine, EFFECTS, ids)
                worker = HookdWorker(env, Path(wd)).start()
                recovered = None
                while time.monotonic() - killed_at < 3 * bound_s:
                    if await processed_among(engine, ids) == len(ids):
                        recovered = time.monotonic() - killed_at
                        break
                    await asyncio.sleep(0.05)
                rows.append(
                    {
                        "cycle": cycle,
                        "acked": sum(r.status == 202 for r in results),
                        "processing_at_kill": len(ids),
                        "handlers_started": started,
                        "effect_done_outcome_not_recorded": effected,
                        "lease_left_s": round(lease_left, 3),
                        "recovery_s": None if recovered is None else round(recovered, 3),
                        "after_lease_end_s": None
                        if recovered is None
                        else round(recovered - lease_left, 3),
                    }
                )
            try:
                wait_s: float | None = await harness.wait_until(
                    url,
                    "SELECT count(*) FROM events WHERE status IN ('processed', 'dead')",
                    acked,
                )
            except AssertionError:  # the checks below say what is missing
                wait_s = None
            left_in_progress = len(await arq.keys("arq:in-progress:*"))
            figures_db = {
                "events": await harness.count(url, "SELECT count(*) FROM events"),
                "processed": await harness.count(
                    url, "SELECT count(*) FROM events WHERE status = 'processed'"
                ),
                "dead": await harness.count(
                    url, "SELECT count(*) FROM events WHERE status = 'dead'"
                ),
                "effects": await harness.count(url, "SELECT count(*) FROM effects"),
                "events_with_effect": await harness.count(
                    url, "SELECT count(DISTINCT event_id) FROM effects"
                ),
                "calls": await harness.count(url, "SELECT count(*) FROM calls"),
                "max_attempts": await harness.count(url, "SELECT max(attempts) FROM events"),
            }
        finally:
            worker.stop()
            server.stop()
            await arq.aclose()
            redis.stop()
            await engine.dispose()
    recoveries = [r["recovery_s"] for r in rows if r["recovery_s"] is not None]
    after = [r["after_lease_end_s"] for r in rows if r["after_lease_end_s"] is not None]
    figures: dict[str, Any] = {
        "cycles": cycles,
        "per_cycle": PER_CYCLE,
        "lease_s": LEASE_S,
        "handler_timeout_s": HANDLER_TIMEOUT_S,
        "handler_sleep_s": HANDLER_SLEEP_S,
        "sweep_s": SWEEP_S,
        "expired_check_s": EXPIRED_CHECK_S,
        "recovery_bound_s": bound_s,
        "acked": acked,
        **figures_db,
        "final_drain_s": None if wait_s is None else round(wait_s, 2),
        "ghosts_seeded": ghosts,
        "arq_jobs_left_in_progress": left_in_progress,
        "processing_at_kill": sum(r["processing_at_kill"] for r in rows),
        "handlers_started_at_kill": sum(r["handlers_started"] for r in rows),
        "effect_done_outcome_not_recorded": sum(
            r["effect_done_outcome_not_recorded"] for r in rows
        ),
        "recovery_s": {
            "min": round(min(recoveries, default=0.0), 3),
            "p50": round(harness.percentile(recoveries, 50), 3),
            "p99": round(harness.percentile(recoveries, 99), 3),
            "max": round(max(recoveries, default=0.0), 3),
        },
        "after_lease_end_s": {
            "p50": round(harness.percentile(after, 50), 3),
            "max": round(max(after, default=0.0), 3),
        },
        "lease_left_at_kill_s": {
            "min": round(min((r["lease_left_s"] for r in rows), default=0.0), 3),
            "max": round(max((r["lease_left_s"] for r in rows), default=0.0), 3),
        },
        "cycles_detail": rows,
    }
    events = figures["events"]
    figures["checks"] = {
        "every_delivery_acknowledged": acked == cycles * PER_CYCLE,
        "none_lost": events == acked and figures["processed"] == acked,
        "none_dead": figures["dead"] == 0,
        "one_effect_per_event": figures["effects"] == events == figures["events_with_effect"],
        "every_kill_mid_handler": all(
            r["processing_at_kill"] > 0 and r["handlers_started"] > 0 for r in rows
        ),
        "every_takeover_recovered": len(recoveries) == len(rows),
        "recovery_within_lease_bound": max(recoveries, default=0.0) <= bound_s,
    }
    return figures


def report(figures: dict[str, Any]) -> str:
    rec = figures["recovery_s"]
    left = figures["lease_left_at_kill_s"]
    late = figures["after_lease_end_s"]
    window = (
        " (arq's window is full: no arq job started after that)"
        if figures["arq_jobs_left_in_progress"] >= 100
        else ""
    )
    lines = [
        f"{figures['cycles']} cycles. Each: {figures['per_cycle']} signed deliveries to "
        "`hookd serve`, a `hookd worker` runs `effect_idempotent` on them (each call sleeps "
        f"{figures['handler_sleep_s']:g} s), SIGKILL to the worker's process group at a random "
        "moment once events are `processing`, a new worker started at once. "
        f"`HOOKD_LEASE_S` = {figures['lease_s']:g}, `HOOKD_HANDLER_TIMEOUT_S` = "
        f"{figures['handler_timeout_s']:g}, `HOOKD_SWEEP_S` = {figures['sweep_s']:g}.",
        "",
        "| | |",
        "|---|---:|",
        f"| kills | {figures['cycles']} |",
        f"| events acknowledged | {figures['acked']} |",
        f"| `processing` at the kills (claimed by the dead worker) "
        f"| {figures['processing_at_kill']} |",
        f"| … of which a handler had started | {figures['handlers_started_at_kill']} |",
        f"| … of which the effect was written but the outcome not "
        f"| {figures['effect_done_outcome_not_recorded']} |",
        f"| handler calls in all (`calls`) | {figures['calls']} |",
        f"| **events `processed` / lost / `dead`** "
        f"| **{figures['processed']} / {figures['acked'] - figures['processed']} / "
        f"{figures['dead']}** |",
        f"| **`effects` rows / events with an effect** "
        f"| **{figures['effects']} / {figures['events_with_effect']}** |",
        f"| most attempts of one event | {figures['max_attempts']} |",
        f"| arq jobs left 'in progress' by dead workers at the end{window} "
        f"| {figures['arq_jobs_left_in_progress'] - figures['ghosts_seeded']} |",
        f"| lease left at the kill (min / max) | {left['min']:.2f} / {left['max']:.2f} s |",
        f"| recovery: kill → all its claimed events `processed` (min / p50 / p99 / max) "
        f"| {rec['min']:.2f} / {rec['p50']:.2f} / {rec['p99']:.2f} / {rec['max']:.2f} s |",
        f"| … of it after the lease ended (p50 / max) | {late['p50']:.2f} / {late['max']:.2f} s |",
        "",
        "A dead worker's claims are not taken over before their lease ends: recovery is the "
        "lease left at the kill (at most `HOOKD_LEASE_S`, which must exceed "
        "`HOOKD_HANDLER_TIMEOUT_S`), plus up to "
        f"{figures['expired_check_s']:g} s until the next worker looks for expired leases "
        "(it does so every `EXPIRED_CHECK_S`, on a sweep every `HOOKD_SWEEP_S`), plus the "
        "handler's run. Bound checked here: lease + expired-lease check + sweep + "
        f"{SLACK_S:g} s (worker start-up, handler, commit) = {figures['recovery_bound_s']:g} s. "
        "With the default lease (120 s) a crash delays its claimed events by up to about "
        "two minutes; events nobody had claimed are taken at once by the next worker.",
        "",
        "A kill can also leave an arq job that was running (a wake-up, the sweep) in "
        "Redis, marked in progress for the longest job timeout + 10 s: 15 s, since a job "
        "only starts a drain the worker owns and the reconciliation schedule is the worker's "
        "own loop, not an arq job. While the schedule was one, that was 3,610 s, and arq "
        "only looks at the first 100 jobs of its queue: about 40 kills within the hour "
        "filled that window and every worker stopped processing, wake-ups and sweeps alike, "
        "until the ghosts expired. The backstop sweep (`hookd/runtime/worker.py`) still "
        "drains from the database whenever arq has run nothing in the process for two "
        "sweep periods.",
        "",
        "Checks: "
        + ", ".join(f"{name} {'✓' if ok else '✗'}" for name, ok in figures["checks"].items()),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    harness.main(__name__)
