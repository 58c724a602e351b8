"""Receiver crash: ``kill -9`` of ``hookd serve`` in the middle of a burst, again and again.

Each cycle sends a burst of signed deliveries (all four providers, ``concurrency``
connections) to a running ``hookd serve``, kills its process group with SIGKILL at a
random moment while requests are in flight, starts it again on the same port and reads
the ``events`` table: every event id that was acknowledged (202, or 200 for a duplicate)
must be there. The requests that failed (in flight at the kill, or refused while the
receiver was down) are then sent again, as a provider retries: each must be acknowledged,
as new (202: it had not been committed) or as a duplicate (200: it had been committed but
the answer was lost with the process). At the end the table holds exactly one event per
delivery sent: none lost, none twice.

Processing is left to a worker that is not running (events wait in ``pending``): the
receiver is the only process under test. PostgreSQL and a private Redis stay up.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Collection
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from chaos import harness
from chaos.harness import Delivery, HookdServer, RedisServer, Result, config, pg_database
from store import db, dialect
from store.models import EVENTS

TITLE = "Receiver crash: kill -9 of hookd serve mid-burst"
QUICK: dict[str, Any] = {"cycles": 3}
FULL: dict[str, Any] = {"cycles": 100}

# A burst larger than the receiver can take before the kill: the kill always lands in it.
BURST = 4000
CONCURRENCY = 32
KILL_AFTER_S = (0.2, 1.0)


class Receiver(HookdServer):
    """``hookd serve`` on a given port, so a restart is where the clients expect it."""

    def __init__(self, env: dict[str, str], cwd: Path, port: int) -> None:
        super().__init__(env, cwd)
        self.port = port
        self.args = ["serve", "--port", str(port), "--workers", "1"]


@contextlib.asynccontextmanager
async def database() -> AsyncIterator[str]:
    """``harness.pg_database`` from a running loop (migrations call ``asyncio.run``)."""
    manager = pg_database()
    url = await asyncio.to_thread(manager.__enter__)
    try:
        yield url
    finally:
        await asyncio.to_thread(manager.__exit__, None, None, None)


def burst(cycle: int, count: int) -> list[Delivery]:
    """``count`` distinct deliveries, the providers interleaved."""
    per = -(-count // len(harness.PROVIDERS))
    lists = [harness.deliveries(p, per, cycle * per) for p in harness.PROVIDERS]
    return [lists[i % len(lists)][i // len(lists)] for i in range(count)]


async def stored(engine: AsyncEngine, ids: Collection[str]) -> set[str]:
    if not ids:
        return set()
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(EVENTS.c.id).where(dialect.one_of(conn, EVENTS.c.id, list(ids)))
        )
        return {row[0] for row in rows}


async def first_stored(
    engine: AsyncEngine, *, before: int, sending: asyncio.Task[Any], timeout_s: float = 30.0
) -> None:
    """Until the events table holds more than ``before`` rows (or the burst ended)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline and not sending.done():
        async with engine.connect() as conn:
            count = await conn.scalar(sa.select(sa.func.count()).select_from(EVENTS))
        if (count or 0) > before:
            return
        await asyncio.sleep(0.02)


def acked(results: Collection[Result]) -> set[str]:
    return {r.event_id for r in results if r.status in (200, 202) and r.event_id}


async def run(cycles: int = 100, seed: int | None = None) -> dict[str, Any]:
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    sent_total = 0
    acknowledged: set[str] = set()
    async with harness.workdir() as wd, database() as url:
        redis = RedisServer(wd).start()
        env = {
            "HOOKD_CONFIG": str(config(wd, handler=None)),
            "HOOKD_DATABASE_URL": url,
            "HOOKD_REDIS_URL": redis.url,
        }
        engine = db.create_engine(url)
        server = Receiver(env, wd, harness.free_port())
        try:
            await asyncio.to_thread(server.start)
            for cycle in range(cycles):
                stop = asyncio.Event()
                sending = asyncio.create_task(
                    harness.send(
                        server.url,
                        burst(cycle, BURST),
                        concurrency=CONCURRENCY,
                        timeout_s=10,
                        stop=stop,
                    )
                )
                delay = rng.uniform(*KILL_AFTER_S)
                # The delay counts from the burst's first stored event, not from its
                # start: on a slow or busy machine a kill 0.2 s after the start could
                # come before anything was acknowledged, which is not "mid-burst".
                await first_stored(engine, before=sent_total, sending=sending)
                await asyncio.sleep(delay)
                burst_over = sending.done()
                stop.set()
                killed_at = time.monotonic()
                server.kill9()
                results = await sending
                server = Receiver(env, wd, server.port)
                await asyncio.to_thread(server.start)
                restart_s = time.monotonic() - killed_at
                ok = acked(results)
                missing = ok - await stored(engine, ok)
                # Senders stop taking deliveries at the kill: every request without an
                # answer was issued before it (in flight: sent, or connecting).
                failed = [r for r in results if r.status == 0]
                # A provider retries what got no answer; now each must be acknowledged.
                retried = await harness.send(
                    server.url, [r.delivery for r in failed], concurrency=CONCURRENCY
                )
                acknowledged |= ok | acked(retried)
                sent_total += len(results)
                rows.append(
                    {
                        "cycle": cycle,
                        "kill_after_s": round(delay, 3),
                        "burst_over_before_kill": burst_over,
                        "sent": len(results),
                        "acked": len(ok),
                        "acked_missing": len(missing),
                        "in_flight": len(failed),
                        "cut_mid_request": sum(r.error != "ConnectError" for r in failed),
                        "other_status": sum(r.status not in (0, 200, 202) for r in results),
                        "errors": dict(Counter(str(r.error) for r in failed)),
                        "retried": len(retried),
                        "retry_duplicate": sum(r.status == 200 for r in retried),
                        "retry_new": sum(r.status == 202 for r in retried),
                        "retry_not_acked": sum(r.status not in (200, 202) for r in retried),
                        "restart_s": round(restart_s, 3),
                    }
                )
            events = await harness.count(url, "SELECT count(*) FROM events")
        finally:
            server.stop()
            redis.stop()
            await engine.dispose()
    restarts = [r["restart_s"] for r in rows]
    figures: dict[str, Any] = {
        "cycles": cycles,
        "burst": BURST,
        "concurrency": CONCURRENCY,
        "kill_after_s": list(KILL_AFTER_S),
        "sent": sent_total,
        "acked": sum(r["acked"] for r in rows),
        "acked_missing": sum(r["acked_missing"] for r in rows),
        "in_flight": sum(r["in_flight"] for r in rows),
        "cut_mid_request": sum(r["cut_mid_request"] for r in rows),
        "in_flight_errors": dict(sum((Counter(r["errors"]) for r in rows), Counter[str]())),
        "retry_duplicate": sum(r["retry_duplicate"] for r in rows),
        "retry_new": sum(r["retry_new"] for r in rows),
        "events_stored": events,
        "distinct_acked_ids": len(acknowledged),
        "restart_s": {
            "p50": round(harness.percentile(restarts, 50), 3),
            "p99": round(harness.percentile(restarts, 99), 3),
            "max": round(max(restarts, default=0.0), 3),
        },
        "per_cycle": rows,
    }
    figures["checks"] = {
        "no_acked_event_missing": figures["acked_missing"] == 0,
        "every_kill_mid_burst": all(
            not r["burst_over_before_kill"] and r["in_flight"] > 0 and r["acked"] > 0 for r in rows
        ),
        "only_2xx_or_connection_errors": all(r["other_status"] == 0 for r in rows),
        "every_retry_acknowledged": all(r["retry_not_acked"] == 0 for r in rows),
        "one_event_per_delivery": events == sent_total == len(acknowledged),
    }
    return figures


def report(figures: dict[str, Any]) -> str:
    restart = figures["restart_s"]
    errors = ", ".join(f"{k} {v}" for k, v in sorted(figures["in_flight_errors"].items()))
    lo, hi = figures["kill_after_s"]
    lines = [
        f"{figures['cycles']} cycles. Each: a burst of signed deliveries (the four "
        f"providers, {figures['concurrency']} connections) to `hookd serve` on PostgreSQL, "
        f"SIGKILL to its process group {lo:g} to {hi:g} s into the burst (uniformly at random), "
        "a restart on the same port, then the acknowledged ids are looked up in `events` and "
        "the requests that got no answer are sent again.",
        "",
        "| | |",
        "|---|---:|",
        f"| kills | {figures['cycles']} |",
        f"| requests sent | {figures['sent']} |",
        f"| acknowledged before the kill | {figures['acked']} |",
        f"| **acknowledged but missing after restart** | **{figures['acked_missing']}** |",
        f"| in flight at the kill: no answer ({errors}) | {figures['in_flight']} |",
        f"| resent after restart: duplicate (200, it had been committed) "
        f"| {figures['retry_duplicate']} |",
        f"| resent after restart: new (202, it had not) | {figures['retry_new']} |",
        f"| events stored / deliveries sent | {figures['events_stored']} / {figures['sent']} |",
        f"| restart time (kill → `/healthz` 200) p50 / p99 / max "
        f"| {restart['p50']:.2f} / {restart['p99']:.2f} / {restart['max']:.2f} s |",
        "",
        "In flight means issued before the kill and never answered: `ReadError` and "
        "`RemoteProtocolError` had been sent and were waiting on a connection the kill "
        "closed; `ConnectError` had been issued but not yet written (the sending process is "
        "CPU-bound, so requests wait in it) and found the connection closed and the port "
        "refusing. "
        "A 2xx is sent only after the event's row is committed, so a kill can only lose "
        "answers, never acknowledged events; a request in flight at the kill may or may not "
        "have been committed, and the provider's retry settles it without a second row "
        "(the dedupe key is unique).",
        "",
        "Checks: "
        + ", ".join(f"{name} {'✓' if ok else '✗'}" for name, ok in figures["checks"].items()),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    harness.main(__name__)
