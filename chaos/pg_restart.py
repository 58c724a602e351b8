"""Item 8: PostgreSQL crashed (``pg_ctl stop -m immediate``) and restarted in the middle of
a burst, then stopped ``fast`` and restarted in a second burst, with the same ``hookd
serve`` and ``hookd worker`` running throughout. The sender retries 5xx and connection
errors as a provider would. While the database is down the receiver must answer 503 (never
2xx), every 2xx must name an event that is there after recovery, and hookd must take
events again as soon as PostgreSQL is back, without being restarted."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx

from chaos.harness import (
    Delivery,
    HookdServer,
    HookdWorker,
    RedisServer,
    config,
    count,
    main,
    prepare_handlers,
    wait_until,
    workdir,
)
from chaos.pgcluster import PgCluster
from chaos.redis_loss import TOLERANCE, Probe, dsn, mixed, stable_port
from store import migrate

TITLE = "PostgreSQL crashed and restarted during a burst"
QUICK: dict[str, Any] = {"events": 600, "modes": ["immediate"], "down_s": 2.0}
FULL: dict[str, Any] = {"events": 4000, "modes": ["immediate", "fast"], "down_s": 5.0}

# Short leases and retries, so that what the crash interrupted is taken up again in seconds.
FAST_RECOVERY = {
    "HOOKD_SWEEP_S": "1",
    "HOOKD_LEASE_S": "10",
    "HOOKD_HANDLER_TIMEOUT_S": "5",
    "HOOKD_RETRY_BASE_S": "0.2",
    "HOOKD_RETRY_CAP_S": "2",
}


@dataclass(frozen=True)
class Attempt:
    """One POST: when it started and ended (seconds since the sender started), its answer."""

    index: int
    started: float
    ended: float
    status: int  # 0: no answer (connection error or timeout)
    event_id: str | None = None
    error: str | None = None


@dataclass
class Sent:
    t0: float  # time.monotonic() when sending started
    attempts: list[Attempt]
    final: list[Attempt]  # the last attempt of each delivery, in delivery order

    def at(self, moment: float) -> float:
        """A ``time.monotonic()`` value on this sender's clock."""
        return moment - self.t0

    @property
    def acked_ids(self) -> set[str]:
        return {a.event_id for a in self.final if a.event_id}

    def statuses(
        self, start: float, end: float, *, sent_after: float = float("-inf")
    ) -> Counter[int]:
        """Statuses of the attempts answered within [start, end) and sent at or after
        ``sent_after`` (sender clock)."""
        return Counter(
            a.status for a in self.attempts if start <= a.ended < end and a.started >= sent_after
        )


async def send_recorded(
    base_url: str,
    items: Sequence[Delivery],
    *,
    concurrency: int = 32,
    timeout_s: float = 30.0,
    retry_until_s: float = 300.0,
    retry_delay_s: float = 0.2,
) -> Sent:
    """``harness.send`` with retries, keeping every attempt: POST each delivery, and again
    after a 5xx or a connection error (as a provider would) until the deadline."""
    t0 = time.monotonic()
    deadline = t0 + retry_until_s
    queue = list(reversed(range(len(items))))
    attempts: list[Attempt] = []
    final: dict[int, Attempt] = {}

    async def one(client: httpx.AsyncClient, index: int) -> Attempt:
        item = items[index]
        started = time.monotonic() - t0
        try:
            response = await client.post(
                f"/hooks/{item.source}", content=item.body, headers=item.headers
            )
        except httpx.HTTPError as exc:
            return Attempt(index, started, time.monotonic() - t0, 0, error=type(exc).__name__)
        event_id = None
        if response.status_code in (200, 202):
            event_id = str(response.json()["event_id"])
        return Attempt(index, started, time.monotonic() - t0, response.status_code, event_id)

    async def sender(client: httpx.AsyncClient) -> None:
        while queue:
            index = queue.pop()
            attempt = await one(client, index)
            attempts.append(attempt)
            while (attempt.status == 0 or attempt.status >= 500) and time.monotonic() < deadline:
                await asyncio.sleep(retry_delay_s)
                attempt = await one(client, index)
                attempts.append(attempt)
            final[index] = attempt

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout_s) as client:
        await asyncio.gather(*(sender(client) for _ in range(concurrency)))
    return Sent(t0, attempts, [final[i] for i in range(len(items))])


def statuses_text(counter: Counter[int] | dict[str, int]) -> str:
    items = sorted((int(k), v) for k, v in counter.items())
    return ", ".join(f"{'no answer' if k == 0 else k}: {v:,}" for k, v in items) or "none"


async def create_database(pg: PgCluster, name: str) -> str:
    conn = await asyncpg.connect(pg.dsn, timeout=10)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    url = pg.url(name)
    await asyncio.to_thread(migrate.upgrade, url)
    await prepare_handlers(url)
    return url


async def _round(
    pg: PgCluster,
    probe: Probe,
    server: HookdServer,
    items: list[Delivery],
    *,
    mode: str,
    down_s: float,
    crash_at: float,
    base: int,
) -> tuple[dict[str, Any], Sent]:
    """One burst; PostgreSQL is stopped with ``mode`` once ``crash_at`` of it is stored."""
    marks: dict[str, float] = {}

    async def crash() -> None:
        threshold = base + crash_at * len(items)
        await probe.reach("SELECT count(*) FROM events", threshold)
        marks["stored_before"] = await probe.value("SELECT count(*) FROM events") - base
        await probe.close()
        marks["stop"] = time.monotonic()
        await asyncio.to_thread(pg.stop, mode)
        marks["down"] = time.monotonic()
        await asyncio.sleep(down_s)
        marks["start"] = time.monotonic()
        await asyncio.to_thread(pg.start)
        marks["up"] = time.monotonic()

    crasher = asyncio.create_task(crash())
    sent = await send_recorded(server.url, items)
    await crasher
    # Down: sent after the server had stopped and answered before it was started again.
    # Around the stop: answered meanwhile, but sent before the server was gone (an insert
    # may have committed just before it went).
    stop, gone, start = (sent.at(marks[k]) for k in ("stop", "down", "start"))
    down = sent.statuses(gone, start, sent_after=gone)
    stopping = sent.statuses(stop, start) - down
    up = sent.at(marks["up"])
    first_2xx = min(
        (a.ended for a in sent.attempts if a.status in (200, 202) and a.ended >= up),
        default=None,
    )
    final = Counter(a.status for a in sent.final)
    figures = {
        "mode": mode,
        "deliveries": len(items),
        "stored_before_stop": int(marks["stored_before"]),
        "stop_s": round(marks["down"] - marks["stop"], 2),
        "down_s": round(marks["start"] - marks["down"], 2),
        "start_s": round(marks["up"] - marks["start"], 2),
        "statuses_around_stop": {str(k): v for k, v in sorted(stopping.items())},
        "statuses_while_down": {str(k): v for k, v in sorted(down.items())},
        "answers_while_down": sum(down.values()),
        "503_while_down": down.get(503, 0),
        "2xx_while_down": down.get(200, 0) + down.get(202, 0),
        "other_while_down": sum(v for k, v in down.items() if k != 503),
        "first_2xx_after_up_s": None if first_2xx is None else round(first_2xx - up, 3),
        "attempts": len(sent.attempts),
        "final_statuses": {str(k): v for k, v in sorted(final.items())},
        "acked": final.get(200, 0) + final.get(202, 0),
        "send_s": round(max((a.ended for a in sent.attempts), default=0.0), 2),
    }
    return figures, sent


async def run(
    *,
    events: int,
    modes: Sequence[str] = ("immediate",),
    down_s: float = 3.0,
    crash_at: float = 0.3,
    workers: int = 1,
    drain_timeout_s: float = 300.0,
) -> dict[str, Any]:
    wall = time.monotonic()
    rounds: list[dict[str, Any]] = []
    acked_ids: set[str] = set()
    async with workdir() as path:
        pg = await asyncio.to_thread(PgCluster)
        pg.port = stable_port()  # restarted on it
        try:
            await asyncio.to_thread(pg.start)
            url = await create_database(pg, "hookd")
            redis = RedisServer(path).start()
            probe = Probe(url)
            env = {
                "HOOKD_CONFIG": str(config(path, handler="effect_idempotent", extra=TOLERANCE)),
                "HOOKD_DATABASE_URL": url,
                "HOOKD_REDIS_URL": redis.url,
                **FAST_RECOVERY,
            }
            server = HookdServer(env, path)
            pool = [HookdWorker(env, path) for _ in range(workers)]
            try:
                server.start()
                for worker in pool:
                    worker.start()
                # Past their start-up checks before the burst (and the crash) begins.
                for worker in pool:
                    await asyncio.to_thread(worker.wait_started)
                pids = [p.proc.pid for p in (server, *pool) if p.proc is not None]
                everything = mixed(events * len(modes))
                for n, mode in enumerate(modes):
                    items = everything[n * events : (n + 1) * events]
                    figures, sent = await _round(
                        pg,
                        probe,
                        server,
                        items,
                        mode=mode,
                        down_s=down_s,
                        crash_at=crash_at,
                        base=n * events,
                    )
                    ids = sent.acked_ids
                    acked_ids |= ids
                    figures["acked_present_after"] = await _present(url, ids)
                    rounds.append(figures)
                total = events * len(modes)
                drained = True
                drain_started = time.monotonic()
                try:
                    await wait_until(
                        url,
                        "SELECT count(*) FROM events WHERE status IN ('processed', 'dead')",
                        total,
                        timeout_s=drain_timeout_s,
                    )
                except AssertionError:
                    drained = False
                drain_s = time.monotonic() - drain_started
                alive = server.alive() and all(w.alive() for w in pool)
                same = pids == [p.proc.pid for p in (server, *pool) if p.proc is not None]
            finally:
                for process in (server, *pool):
                    process.stop()
                redis.stop()
                await probe.close()
            totals = await _totals(url)
        finally:
            await asyncio.to_thread(pg.close)
    figures = {
        "events": total,
        "workers": workers,
        "rounds": rounds,
        **totals,
        "acked_ids": len(acked_ids),
        "drain_after_last_burst_s": round(drain_s, 2),
        "handler_reruns": totals["calls"] - totals["effects"],
        "hookd_same_processes": alive and same,
        "wall_s": round(time.monotonic() - wall, 1),
    }
    checks: dict[str, bool] = {}
    for r in rounds:
        m = r["mode"]
        checks[f"{m}: 503s while PostgreSQL was down"] = r["503_while_down"] > 0
        checks[f"{m}: only 503s while down (no 2xx, no hang)"] = r["other_while_down"] == 0
        checks[f"{m}: every delivery acknowledged in the end"] = r["acked"] == r["deliveries"]
        checks[f"{m}: every 2xx's event is stored after recovery"] = (
            r["acked_present_after"] == r["acked"]
        )
        first = r["first_2xx_after_up_s"]
        checks[f"{m}: 2xx again within 10 s of PostgreSQL being back"] = (
            first is not None and first <= 10
        )
    checks |= {
        "stored events = deliveries (none lost, none twice)": totals["stored"] == total
        and totals["distinct_keys"] == total
        and len(acked_ids) == total,
        "all processed": drained and totals["processed"] == total,
        "no event dead": totals["dead"] == 0,
        "effects = events (one per event)": totals["effects"] == total
        and totals["effect_events"] == total,
        "hookd processes never restarted (same pids, alive)": alive and same,
    }
    figures["checks"] = checks
    return figures


async def _present(url: str, ids: set[str]) -> int:
    conn = await asyncpg.connect(dsn(url), timeout=10)
    try:
        return int(
            await conn.fetchval("SELECT count(*) FROM events WHERE id = ANY($1::text[])", list(ids))
        )
    finally:
        await conn.close()


async def _totals(url: str) -> dict[str, int]:
    return {
        "stored": await count(url, "SELECT count(*) FROM events"),
        "distinct_keys": await count(
            url, "SELECT count(*) FROM (SELECT DISTINCT source, dedupe_key FROM events) k"
        ),
        "processed": await count(url, "SELECT count(*) FROM events WHERE status = 'processed'"),
        "dead": await count(url, "SELECT count(*) FROM events WHERE status = 'dead'"),
        "effects": await count(url, "SELECT count(*) FROM effects"),
        "effect_events": await count(url, "SELECT count(DISTINCT event_id) FROM effects"),
        "calls": await count(url, "SELECT count(*) FROM calls"),
        "max_attempts": await count(url, "SELECT max(attempts) FROM events"),
    }


def report(figures: dict[str, Any]) -> str:
    rounds = figures["rounds"]
    lines = [
        f"A private PostgreSQL server under `hookd serve` and {figures['workers']} `hookd "
        f"worker`; {len(rounds)} burst{'s' if len(rounds) > 1 else ''} of "
        f"{rounds[0]['deliveries']:,} deliveries (four "
        "providers in turn, 32 at a time, each retried after a 5xx or no answer every 0.2 s "
        "as a provider would). Once 30 % of a burst was stored, PostgreSQL was stopped, kept "
        "down, and started again; hookd was not touched.",
        "",
        "| | " + " | ".join(f"`pg_ctl stop -m {r['mode']}`" for r in rounds) + " |",
        "|---|" + "---|" * len(rounds),
    ]

    def row(label: str, cell: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(str(cell(r)) for r in rounds) + " |")

    row("stored before the stop", lambda r: f"{r['stored_before_stop']:,}")
    row("down for", lambda r: f"{r['down_s']:.1f} s (stop took {r['stop_s']:.2f} s)")
    row("answers to requests sent while down", lambda r: statuses_text(r["statuses_while_down"]))
    row("2xx while down", lambda r: f"**{r['2xx_while_down']}**")
    row(
        "answers to requests sent before the stop, received after",
        lambda r: statuses_text(r["statuses_around_stop"]),
    )
    row(
        "first 2xx after PostgreSQL accepted connections again",
        lambda r: (
            "never"
            if r["first_2xx_after_up_s"] is None
            else f"{r['first_2xx_after_up_s'] * 1000:.0f} ms"
        ),
    )
    row("requests (with retries)", lambda r: f"{r['attempts']:,} in {r['send_s']:.1f} s")
    row("acknowledged (2xx) in the end", lambda r: f"{r['acked']:,} / {r['deliveries']:,}")
    row("of them stored after recovery", lambda r: f"{r['acked_present_after']:,}")
    lines += [
        "",
        f"| after {'both bursts' if len(rounds) > 1 else 'the burst'} | value |",
        "|---|---|",
        f"| events stored (distinct keys) | {figures['stored']:,} ({figures['distinct_keys']:,}) |",
        f"| processed / dead | {figures['processed']:,} / {figures['dead']} |",
        f"| effects (distinct events) | {figures['effects']:,} ({figures['effect_events']:,}) |",
        f"| handler calls (`effect_idempotent`) | {figures['calls']:,}: "
        f"{figures['handler_reruns']} more than effects (runs the crash cut off before their "
        "effect, or after it and before hookd recorded it: run again, skipped by key) |",
        f"| most attempts of any event | {figures['max_attempts']} |",
        f"| drain after the last burst | {figures['drain_after_last_burst_s']:.1f} s |",
        "| hookd processes: the same pids at the end, all alive | "
        f"{'yes' if figures['hookd_same_processes'] else '**no**'} |",
        f"| wall time | {figures['wall_s']:.0f} s |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main(__name__)
