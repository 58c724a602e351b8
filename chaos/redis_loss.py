"""Item 7: Redis lost while events arrive. A real ``hookd serve`` and ``hookd worker``s on
PostgreSQL with a private, non-persistent Redis; while deliveries of all four providers
arrive, Redis is flushed (``FLUSHALL``) twice, killed and started empty once, then killed
again and left down until the last delivery is acknowledged. Redis only carries wake-ups:
every event must still be acknowledged, processed, and its handler run exactly once
(``effect_strict`` fails on a second run)."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg

from chaos.harness import (
    PROVIDERS,
    SECRETS,
    Delivery,
    HookdServer,
    HookdWorker,
    RedisServer,
    config,
    count,
    main,
    pg_database,
    prepare_handlers,
    send,
    wait_until,
    workdir,
)
from hookd.providers.signing import sample_event
from tests.support.server import HookdProcess

TITLE = "Redis lost (FLUSHALL, restart without persistence) while events arrive"
QUICK: dict[str, Any] = {"events": 800, "workers": 2, "down_s": 1.0}
FULL: dict[str, Any] = {"events": 10_000, "workers": 2, "down_s": 5.0}

# (what, when: the share of deliveries stored). "stop" is undone after the last delivery.
FAULTS: tuple[tuple[str, float], ...] = (
    ("flush", 0.2),
    ("flush", 0.4),
    ("restart", 0.6),
    ("stop", 0.85),
)

# Signed timestamps of stripe/slack/standard must stay valid for a run of several minutes.
TOLERANCE = "tolerance_s = 3600\n"


def mixed(count: int, start: int = 0) -> list[Delivery]:
    """``count`` distinct deliveries, the four providers in turn.

    A Slack message's key is its channel and ``ts``, and the sample's ``ts`` repeats (1 in
    1,000) for sequence numbers 1,000 apart signed in the same second: such a twin is the
    same message to Slack and to hookd, so it is drawn again."""
    seen: set[str] = set()
    out: list[Delivery] = []
    for i in range(count):
        provider = PROVIDERS[i % len(PROVIDERS)]
        seq = start + i // len(PROVIDERS)
        while True:
            delivery = Delivery(provider, *sample_event(provider, SECRETS[provider], seq))
            key = _slack_key(delivery)
            if key is None or key not in seen:
                break
        if key is not None:
            seen.add(key)
        out.append(delivery)
    return out


def _slack_key(delivery: Delivery) -> str | None:
    if delivery.source != "slack":
        return None  # the other samples carry a fresh UUID in their key
    event = json.loads(delivery.body)["event"]
    return f"{event['channel']}:{event['ts']}"


def stable_port() -> int:
    """A free port below the kernel's ephemeral range, for a server restarted on the same
    port: while it is down, an ephemeral port can be taken as the local end of any client
    connection on the machine, and the restart would then fail to bind."""
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(20_000, 32_000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def dsn(url: str) -> str:
    """The asyncpg form of a ``postgresql+asyncpg://`` URL."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


class Probe:
    """One plain connection for polling counts while the scenario runs."""

    def __init__(self, url: str) -> None:
        self._dsn = dsn(url)
        self._conn: Any = None

    async def value(self, sql: str) -> int:
        if self._conn is None or self._conn.is_closed():
            self._conn = await asyncpg.connect(self._dsn, timeout=5)
        return int(await self._conn.fetchval(sql, timeout=10) or 0)

    async def reach(self, sql: str, target: float, poll_s: float = 0.02) -> None:
        """Return once ``sql`` counts at least ``target``."""
        while True:
            if await self.value(sql) >= target:
                return
            await asyncio.sleep(poll_s)

    async def close(self) -> None:
        if self._conn is not None and not self._conn.is_closed():
            await self._conn.close()


def log_count(processes: Sequence[HookdProcess], needle: str) -> int:
    total = 0
    for process in processes:
        path: Path = process.log_path
        if path.exists():
            total += path.read_text(errors="replace").count(needle)
    return total


def _int_reply(raw: bytes) -> int:
    text = raw.decode(errors="replace").strip()
    return int(text[1:]) if text.startswith(":") else -1


async def run(
    *,
    events: int,
    workers: int = 2,
    down_s: float = 3.0,
    concurrency: int = 32,
    drain_timeout_s: float = 300.0,
) -> dict[str, Any]:
    wall = time.monotonic()
    items = mixed(events)
    async with workdir() as path:
        with pg_database() as url:
            await prepare_handlers(url)
            redis = RedisServer(path)
            redis.port = stable_port()  # restarted on it
            redis.start()
            probe = Probe(url)
            env = {
                "HOOKD_CONFIG": str(config(path, handler="effect_strict", extra=TOLERANCE)),
                "HOOKD_DATABASE_URL": url,
                "HOOKD_REDIS_URL": redis.url,
                "HOOKD_SWEEP_S": "1",
            }
            server = HookdServer(env, path)
            pool = [HookdWorker(env, path) for _ in range(workers)]
            try:
                server.start()
                for worker in pool:
                    worker.start()
                pids = [p.proc.pid for p in (server, *pool) if p.proc is not None]
                faults: list[dict[str, Any]] = []

                async def inject() -> None:
                    unprocessed_sql = "SELECT count(*) FROM events WHERE status <> 'processed'"
                    for kind, share in FAULTS:
                        await probe.reach("SELECT count(*) FROM events", share * events)
                        record: dict[str, Any] = {
                            "fault": kind,
                            "stored": await probe.value("SELECT count(*) FROM events"),
                            "processed": await probe.value(
                                "SELECT count(*) FROM events WHERE status = 'processed'"
                            ),
                            "redis_keys": _int_reply(redis.command("DBSIZE")),
                        }
                        # The moment: one with events not yet processed (their wake-ups
                        # may be in Redis), if one comes within a few seconds. Counted
                        # last, right before the fault: the workers may catch up with
                        # the sender between two queries.
                        deadline = time.monotonic() + 5
                        unprocessed = await probe.value(unprocessed_sql)
                        while not unprocessed and time.monotonic() < deadline:
                            unprocessed = await probe.value(unprocessed_sql)
                        record["unprocessed"] = unprocessed
                        if kind == "flush":
                            reply = redis.command("FLUSHALL").decode().strip()
                            record["reply"] = reply.lstrip("+")
                        else:
                            await asyncio.to_thread(redis.stop)
                            if kind == "restart":
                                await asyncio.sleep(down_s)
                                await asyncio.to_thread(redis.start)
                                record["down_s"] = down_s
                        faults.append(record)

                send_started = time.monotonic()
                injector = asyncio.create_task(inject())
                results = await send(server.url, items, concurrency=concurrency)
                send_s = time.monotonic() - send_started
                await injector  # every fault point is reached once all are stored
                # Redis stayed down for the tail of the burst: bring it back, empty.
                await asyncio.sleep(down_s)
                unprocessed_at_return = await probe.value(
                    "SELECT count(*) FROM events WHERE status <> 'processed'"
                )
                processed_at_return = await probe.value(
                    "SELECT count(*) FROM events WHERE status = 'processed'"
                )
                await asyncio.to_thread(redis.start)
                back = time.monotonic()
                acked = sum(r.status in (200, 202) for r in results)
                stored = await probe.value("SELECT count(*) FROM events")
                drained = True
                try:
                    await wait_until(
                        url,
                        "SELECT count(*) FROM events WHERE status IN ('processed', 'dead')",
                        stored,
                        timeout_s=drain_timeout_s,
                    )
                except AssertionError:
                    drained = False
                drain_s = time.monotonic() - back
                alive = server.alive() and all(w.alive() for w in pool)
                same = pids == [p.proc.pid for p in (server, *pool) if p.proc is not None]
                losses = log_count(pool, "lost Redis")
            finally:
                for process in (server, *pool):
                    process.stop()
                redis.stop()
                await probe.close()
            figures = await _figures(url, results)
    statuses = Counter(r.status for r in results)
    figures |= {
        "events": events,
        "workers": workers,
        "down_s": down_s,
        "faults": faults,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "acked": acked,
        "send_s": round(send_s, 2),
        "unprocessed_when_redis_returned": unprocessed_at_return,
        "processed_while_redis_down": processed_at_return - faults[-1]["processed"],
        "stored_while_redis_down": events - faults[-1]["stored"],
        "drain_after_redis_back_s": round(drain_s, 2),
        "worker_redis_losses_logged": losses,
        "wall_s": round(time.monotonic() - wall, 1),
    }
    flushes = [f for f in faults if f["fault"] == "flush"]
    figures["checks"] = {
        "every delivery acknowledged on its first attempt (202)": statuses.get(202, 0) == events,
        "Redis was flushed while events were unprocessed": len(flushes) == 2
        and all(f["unprocessed"] > 0 and f["reply"] == "OK" for f in flushes),
        "Redis was killed and restarted empty while events were unprocessed": any(
            f["fault"] == "restart" and f["unprocessed"] > 0 for f in faults
        ),
        "stored events = deliveries": figures["stored"] == events,
        "all processed after Redis returned": drained and figures["processed"] == events,
        "effects = events (one per event)": figures["effects"] == events
        and figures["effect_events"] == events,
        "handler calls = events (none ran twice)": figures["calls"] == events,
        "no event dead": figures["dead"] == 0,
        "hookd processes never restarted": alive and same,
    }
    return figures


async def _figures(url: str, results: Sequence[Any]) -> dict[str, Any]:
    ids = {r.event_id for r in results if r.event_id}
    return {
        "acked_ids": len(ids),
        "stored": await count(url, "SELECT count(*) FROM events"),
        "processed": await count(url, "SELECT count(*) FROM events WHERE status = 'processed'"),
        "dead": await count(url, "SELECT count(*) FROM events WHERE status = 'dead'"),
        "effects": await count(url, "SELECT count(*) FROM effects"),
        "effect_events": await count(url, "SELECT count(DISTINCT event_id) FROM effects"),
        "calls": await count(url, "SELECT count(*) FROM calls"),
        "max_attempts": await count(url, "SELECT max(attempts) FROM events"),
    }


def report(figures: dict[str, Any]) -> str:
    lines = [
        f"`hookd serve` and {figures['workers']} `hookd worker`s on PostgreSQL took "
        f"{figures['events']:,} deliveries (GitHub, Stripe, Slack and Standard Webhooks in "
        "turn, 32 at a time) through a private Redis started with no persistence. At set "
        "shares of the deliveries stored, Redis was flushed or killed, at a moment when "
        "events were still unprocessed (wake-up jobs queued for them went with it):",
        "",
        "| fault | events stored | of them unprocessed | keys in Redis before |",
        "|---|---|---|---|",
    ]
    names = {
        "flush": "`FLUSHALL`",
        "restart": f"kill -9, down {figures['down_s']:g} s, started empty",
        "stop": f"kill -9, down until {figures['down_s']:g} s after the last delivery",
    }
    for fault in figures["faults"]:
        lines.append(
            f"| {names[fault['fault']]} | {fault['stored']:,} | {fault['unprocessed']:,} | "
            f"{fault['redis_keys']:,} |"
        )
    statuses = ", ".join(f"{k}: {v:,}" for k, v in figures["statuses"].items())
    lines += [
        "",
        "| figure | value |",
        "|---|---|",
        f"| deliveries sent / acknowledged | {figures['events']:,} / {figures['acked']:,} "
        f"({statuses}) in {figures['send_s']:.1f} s |",
        f"| events stored / processed / dead | {figures['stored']:,} / "
        f"{figures['processed']:,} / {figures['dead']} |",
        f"| effects (distinct events) | {figures['effects']:,} ({figures['effect_events']:,}) |",
        f"| handler calls (`effect_strict`: a second run would fail) | {figures['calls']:,} |",
        f"| most attempts of any event | {figures['max_attempts']} |",
        f"| after the last kill: deliveries stored / events processed while Redis was down "
        f"(the workers' sweep of the database alone) | {figures['stored_while_redis_down']:,} / "
        f"{figures['processed_while_redis_down']:,} |",
        f"| unprocessed when Redis came back | {figures['unprocessed_when_redis_returned']:,} |",
        f"| time to drain after Redis came back | {figures['drain_after_redis_back_s']:.1f} s |",
        f"| worker losses of Redis logged (processing went on from the database) | "
        f"{figures['worker_redis_losses_logged']} |",
        f"| wall time | {figures['wall_s']:.0f} s |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main(__name__)
