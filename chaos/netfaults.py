"""Item 9: network faults between hookd and its PostgreSQL and Redis. ``hookd serve`` and
``hookd worker``s (and the handlers they run) reach both only through fault-injecting TCP
proxies running in this process; in phases, the proxies add latency, reset connections, and
stall them (a write is forwarded, the answers are swallowed: the client sees nothing
come back, the worst case for "did my COMMIT land?"). The sender retries 5xx and no answer
as a provider would. Every event must end up processed, with one effect each."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import asdict, replace
from typing import Any

from chaos.harness import (
    HookdServer,
    HookdWorker,
    RedisServer,
    config,
    count,
    main,
    pg_database,
    prepare_handlers,
    workdir,
)
from chaos.pg_restart import send_recorded, statuses_text
from chaos.proxy import FaultProxy, Faults, Stats
from chaos.redis_loss import TOLERANCE, Probe, log_count, mixed

TITLE = "Network faults between hookd and PostgreSQL / Redis"
# Probabilities are per chunk of bytes; Redis carries far fewer chunks than PostgreSQL
# (arq's polls against every statement of the receiver, the worker and the handlers), so
# it gets its own, to see a comparable number of faults.
QUICK: dict[str, Any] = {
    "events": 300,
    "phases": ["latency", "resets", "stalls"],
    "reset_p": 0.01,
    "stall_p": 0.003,
    "redis_reset_p": 0.03,
    "redis_stall_p": 0.05,
    "settle_s": 10.0,
}
FULL: dict[str, Any] = {
    "events": 10_000,
    "phases": ["latency", "resets", "stalls", "all"],
    "reset_p": 0.002,
    "stall_p": 0.001,
    "redis_reset_p": 0.005,
    "redis_stall_p": 0.005,
}

# hookd's side: leases and retries short enough that a stalled batch is taken over in
# seconds; a handler gets a few seconds.
SETTINGS = {
    "HOOKD_SWEEP_S": "1",
    "HOOKD_LEASE_S": "8",
    "HOOKD_HANDLER_TIMEOUT_S": "3",
    "HOOKD_RETRY_BASE_S": "0.2",
    "HOOKD_RETRY_CAP_S": "2",
    "HOOKD_COMMIT_TIMEOUT_S": "3",
}


def phase_faults(
    name: str, *, latency_s: float, jitter_s: float, reset_p: float, stall_p: float
) -> Faults:
    latency = Faults(latency_s=latency_s, jitter_s=jitter_s)
    return {
        "clean": Faults(),
        "latency": latency,
        "resets": Faults(reset_p=reset_p),
        "stalls": Faults(stall_p=stall_p),
        "all": replace(latency, reset_p=reset_p, stall_p=stall_p),
    }[name]


def _set(target: Faults, source: Faults) -> None:
    """Change the faults in place: open connections read the same object."""
    target.latency_s = source.latency_s
    target.jitter_s = source.jitter_s
    target.reset_p = source.reset_p
    target.stall_p = source.stall_p


def _delta(after: Stats, before: dict[str, int]) -> dict[str, int]:
    return {k: v - before[k] for k, v in after.as_dict().items() if not k.startswith("bytes")}


def _drawn(*sides: tuple[Faults, Stats, dict[str, int]]) -> bool:
    """Whether every fault kind enabled on a side was injected there since ``before``."""
    return all(
        _delta(stats, before)[kind] > 0
        for faults, stats, before in sides
        for kind, p in (("resets", faults.reset_p), ("stalls", faults.stall_p))
        if p > 0
    )


async def run(
    *,
    events: int,
    phases: list[str],
    reset_p: float,
    stall_p: float,
    redis_reset_p: float | None = None,
    redis_stall_p: float | None = None,
    latency_s: float = 0.002,
    jitter_s: float = 0.008,
    workers: int = 2,
    settle_s: float = 60.0,
    drain_timeout_s: float = 600.0,
    seed: int = 7,
) -> dict[str, Any]:
    wall = time.monotonic()
    share = -(-events // len(phases))
    items = mixed(events)
    done_sql = "SELECT count(*) FROM events WHERE status IN ('processed', 'dead')"
    records: list[dict[str, Any]] = []
    async with workdir() as path:
        with pg_database() as url:
            await prepare_handlers(url)
            redis = RedisServer(path).start()
            probe = Probe(url)  # straight to PostgreSQL, not through the proxy
            pg_faults, redis_faults = Faults(), Faults()
            host, _, rest = url.split("@", 1)[1].partition(":")
            pg_port = rest.partition("/")[0]
            pg_proxy = FaultProxy(host, int(pg_port), pg_faults, seed=seed)
            redis_proxy = FaultProxy("127.0.0.1", redis.port, redis_faults, seed=seed + 1)
            await pg_proxy.start()
            await redis_proxy.start()
            proxied = url.replace(f"{host}:{pg_port}", f"127.0.0.1:{pg_proxy.port}")
            env = {
                "HOOKD_CONFIG": str(config(path, handler="effect_idempotent", extra=TOLERANCE)),
                "HOOKD_DATABASE_URL": proxied,
                "HOOKD_REDIS_URL": f"redis://127.0.0.1:{redis_proxy.port}/0",
                **SETTINGS,
            }
            server = HookdServer(env, path)
            pool = [HookdWorker(env, path) for _ in range(workers)]
            try:
                # serve's start-up goes through the proxy: wait for it off this event loop.
                await asyncio.to_thread(server.start)
                for worker in pool:
                    worker.start()
                pids = [p.proc.pid for p in (server, *pool) if p.proc is not None]
                for n, name in enumerate(phases):
                    chosen = phase_faults(
                        name,
                        latency_s=latency_s,
                        jitter_s=jitter_s,
                        reset_p=reset_p,
                        stall_p=stall_p,
                    )
                    on_redis = phase_faults(
                        name,
                        latency_s=latency_s,
                        jitter_s=jitter_s,
                        reset_p=reset_p if redis_reset_p is None else redis_reset_p,
                        stall_p=stall_p if redis_stall_p is None else redis_stall_p,
                    )
                    _set(pg_faults, chosen)
                    _set(redis_faults, on_redis)
                    pg_before = pg_proxy.stats.as_dict()
                    redis_before = redis_proxy.stats.as_dict()
                    started = time.monotonic()
                    part = items[n * share : (n + 1) * share]
                    sent = await send_recorded(server.url, part, retry_until_s=600)
                    send_s = time.monotonic() - started
                    # Processing under the same faults, for up to settle_s.
                    stored = await probe.value("SELECT count(*) FROM events")
                    deadline = time.monotonic() + settle_s
                    while time.monotonic() < deadline:
                        if await probe.value(done_sql) >= stored:
                            break
                        await asyncio.sleep(0.2)
                    # Each fault is a draw per chunk: a phase whose traffic drew none of
                    # an enabled kind on one side (a few dozen Redis chunks at 5 % each,
                    # now and then) keeps its faults on, the workers polling through them,
                    # until it has, for up to settle_s: "faults were injected" then checks
                    # hookd, not the dice.
                    deadline = time.monotonic() + settle_s
                    while time.monotonic() < deadline:
                        if _drawn(
                            (chosen, pg_proxy.stats, pg_before),
                            (on_redis, redis_proxy.stats, redis_before),
                        ):
                            break
                        await asyncio.sleep(0.2)
                    final = Counter(a.status for a in sent.final)
                    records.append(
                        {
                            "phase": name,
                            "faults": asdict(chosen),
                            "redis_faults": asdict(on_redis),
                            "deliveries": len(part),
                            "statuses": {
                                str(k): v
                                for k, v in sorted(Counter(a.status for a in sent.attempts).items())
                            },
                            "acked": final.get(200, 0) + final.get(202, 0),
                            "acked_ids": len(sent.acked_ids),
                            "send_s": round(send_s, 1),
                            "phase_s": round(time.monotonic() - started, 1),
                            "done_at_end": await probe.value(done_sql),
                            "stored_at_end": await probe.value("SELECT count(*) FROM events"),
                            "pg": _delta(pg_proxy.stats, pg_before),
                            "redis": _delta(redis_proxy.stats, redis_before),
                        }
                    )
                _set(pg_faults, Faults())
                _set(redis_faults, Faults())
                drain_started = time.monotonic()
                drained = True
                try:
                    while await probe.value(done_sql) < events:
                        if time.monotonic() - drain_started > drain_timeout_s:
                            raise TimeoutError
                        await asyncio.sleep(0.2)
                except TimeoutError:
                    drained = False
                drain_s = time.monotonic() - drain_started
                alive = server.alive() and all(w.alive() for w in pool)
                same = pids == [p.proc.pid for p in (server, *pool) if p.proc is not None]
                logged = {
                    "receiver commit failures": log_count([server], "commit failed"),
                    "worker Redis losses": log_count(pool, "lost Redis"),
                    "handler failures": log_count(pool, "handler failed"),
                    "processing failures": log_count(pool, "processing failed"),
                    "leases lost": log_count(pool, "lease lost"),
                }
            finally:
                # A connection stalled in the last phase stays stalled: cut every one, so
                # that shutdown does not wait out hookd's timeouts on them.
                pg_proxy.down()
                redis_proxy.down()
                stopping = time.monotonic()
                await asyncio.gather(*(asyncio.to_thread(p.stop) for p in (server, *pool)))
                stop_s = time.monotonic() - stopping
                await pg_proxy.close()
                await redis_proxy.close()
                redis.stop()
                await probe.close()
            totals = {
                "stored": await count(url, "SELECT count(*) FROM events"),
                "processed": await count(
                    url, "SELECT count(DISTINCT id) FROM events WHERE status = 'processed'"
                ),
                "dead": await count(url, "SELECT count(*) FROM events WHERE status = 'dead'"),
                "effects": await count(url, "SELECT count(*) FROM effects"),
                "effect_events": await count(url, "SELECT count(DISTINCT event_id) FROM effects"),
                "calls": await count(url, "SELECT count(*) FROM calls"),
                "max_attempts": await count(url, "SELECT max(attempts) FROM events"),
            }
    acked = sum(r["acked"] for r in records)
    injected = {
        kind: sum(r["pg"][kind] + r["redis"][kind] for r in records)
        for kind in ("resets", "stalls")
    }
    figures: dict[str, Any] = {
        "events": events,
        "workers": workers,
        "phases": records,
        "acked": acked,
        **totals,
        "handler_reruns": totals["calls"] - totals["effects"],
        "injected": injected,
        "logged": logged,
        "settle_s": settle_s,
        "hookd_stop_s": round(stop_s, 1),
        "drain_after_faults_s": round(drain_s, 1),
        "wall_s": round(time.monotonic() - wall, 1),
    }
    figures["checks"] = {
        "faults were injected (resets and stalls, on PostgreSQL and Redis)": all(
            sum(r[side][kind] for r in records) > 0
            for side in ("pg", "redis")
            for kind, p in (("resets", "reset_p"), ("stalls", "stall_p"))
            if any(r["faults"][p] for r in records)
        ),
        "every delivery acknowledged (2xx) in the end": acked == events,
        "stored events = deliveries": totals["stored"] == events,
        "processed distinct = events": drained and totals["processed"] == events,
        "effects = events (one per event)": totals["effects"] == events
        and totals["effect_events"] == events,
        "no event dead": totals["dead"] == 0,
        "hookd processes never restarted (same pids, alive)": alive and same,
    }
    return figures


def report(figures: dict[str, Any]) -> str:
    phases = figures["phases"]
    lines = [
        f"`hookd serve` and {figures['workers']} `hookd worker`s (and their handlers' own "
        "database connections) reached PostgreSQL and Redis only through fault-injecting TCP "
        f"proxies. {figures['events']:,} deliveries (four providers in turn, 32 at a time, "
        "retried after a 5xx or no answer as a provider would) were split over the phases; "
        "after each phase's deliveries, processing went on under the same faults for up to "
        f"{figures['settle_s']:.0f} s; then the faults stopped and the rest drained. Resets and "
        "stalls are drawn per chunk of bytes (p below); latency is added to every chunk, both "
        "ways. A stall forwards a request and swallows every answer after it: hookd sees a "
        "connection that never answers, and has to give up on it by itself (the receiver's "
        "commit timeout, the 30 s statement timeout of the worker's database calls, the "
        "worker's 5 s Redis timeout). hookd ran with short leases (8 s) so that a batch stuck "
        "on a stalled connection is taken over by another worker within seconds: that is "
        'where handler calls exceed effects ("leases lost" below). A 200 is a retried '
        "delivery whose earlier attempt was committed but never acknowledged.",
        "",
        "| phase | faults (PostgreSQL / Redis) | injected on PostgreSQL | injected on Redis | "
        "answers | "
        "acknowledged | done at phase end | time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in phases:
        lines.append(
            f"| {r['phase']} | {_faults(r['faults'])} / {_faults(r['redis_faults'])} | "
            f"{_injected(r['pg'])} | {_injected(r['redis'])} | "
            f"{statuses_text(r['statuses'])} | {r['acked']:,} / {r['deliveries']:,} | "
            f"{r['done_at_end']:,} / {r['stored_at_end']:,} | {r['phase_s']:.0f} s |"
        )
    logged = "; ".join(f"{k}: {v:,}" for k, v in figures["logged"].items())
    lines += [
        "",
        "| after the faults | value |",
        "|---|---|",
        f"| acknowledged / stored | {figures['acked']:,} / {figures['stored']:,} |",
        f"| processed (distinct) / dead | {figures['processed']:,} / {figures['dead']} |",
        f"| effects (distinct events) | {figures['effects']:,} ({figures['effect_events']:,}) |",
        f"| handler calls (`effect_idempotent`) | {figures['calls']:,}: "
        f"{figures['handler_reruns']:,} more than effects (a handler cut off by a fault, or "
        "run again because its outcome never reached hookd; the idempotency key kept its "
        "effect single) |",
        f"| most attempts of any event | {figures['max_attempts']} |",
        f"| drain once the faults stopped | {figures['drain_after_faults_s']:.1f} s |",
        f"| hookd's logs | {logged} |",
        f"| wall time | {figures['wall_s']:.0f} s |",
    ]
    return "\n".join(lines)


def _faults(f: dict[str, float]) -> str:
    parts = []
    if f["latency_s"] or f["jitter_s"]:
        parts.append(f"latency {f['latency_s'] * 1000:g}+{f['jitter_s'] * 1000:g} ms")
    if f["reset_p"]:
        parts.append(f"reset p={f['reset_p']:g}")
    if f["stall_p"]:
        parts.append(f"stall p={f['stall_p']:g}")
    return ", ".join(parts) or "none"


def _injected(stats: dict[str, int]) -> str:
    return f"{stats['connections']:,} conns, {stats['resets']:,} resets, {stats['stalls']:,} stalls"


if __name__ == "__main__":
    main(__name__)
