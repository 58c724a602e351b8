"""Destinations at the issue's sizes, with real processes on PostgreSQL and Redis and
destinations as real HTTP servers on loopback that verify every signature:

1. ``filters``: 3,000 mixed events, three destinations with different filters, two
   ``hookd worker``s; ``crm`` answers 503 until the other two have all theirs. Each
   must get exactly what its filter selects, once, signed.
2. ``rate``: one destination at ``rate_per_s = 50``, two workers: the most deliveries it
   received in any 1 s window (sliding), and how the work split between the workers.
3. ``pause``: ``hookd serve`` with a source paused, a burst of 1,000 signed webhooks:
   all acknowledged and stored, none processed; resumed: each processed once.
4. ``breaker``: a destination failing for a while: the breaker opens, probes, closes,
   and the deliveries it held back go out once; requests it spared the destination.

    .venv/bin/python bench/destinations.py                 # all four
    .venv/bin/python bench/destinations.py --only rate --events 500

Results go to ``bench/results/destinations.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from store import db, migrate  # noqa: E402
from store.crypto import BodyCipher  # noqa: E402
from store.intake.events import NewEvent, insert_events  # noqa: E402
from tests.support import services  # noqa: E402
from tests.support.constants import STRIPE_SECRET  # noqa: E402
from tests.support.destinations import Destination, app, max_in_window, whsec  # noqa: E402
from tests.support.http import serve_app  # noqa: E402
from tests.support.server import HookdServer, HookdWorker, RedisServer  # noqa: E402
from tests.support.signing import signed_request  # noqa: E402

TYPES = (
    "invoice.paid",
    "invoice.created",
    "invoice.deleted",
    "customer.created",
    "customer.updated",
    "charge.succeeded",
)
TOKEN = "bench-destinations-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def mixed(count: int, prefix: str) -> list[NewEvent]:
    now = datetime.now(UTC)
    out = []
    for i in range(count):
        obj: dict[str, Any] = {"id": f"obj_{i}", "livemode": i % 3 != 0}
        if i % 5:
            obj["email"] = f"user{i}@example.com"
        kind = TYPES[i % len(TYPES)]
        out.append(
            NewEvent(
                source="stripe",
                provider="stripe",
                dedupe_key=f"{prefix}_{i}",
                type=kind,
                origin="webhook",
                received_at=now + timedelta(microseconds=i),
                occurred_at=None,
                verified_with="stripe-v1;key=0",
                headers={"X-Tenant": "abc"[(i // 2) % 3]},
                body=json.dumps(
                    {"id": f"{prefix}_{i}", "type": kind, "data": {"object": obj}}
                ).encode(),
            )
        )
    return out


def selects(name: str, e: NewEvent) -> bool:
    obj = json.loads(e.body)["data"]["object"]
    kind = e.type or ""
    if name == "billing":
        return kind.startswith("invoice.") and kind != "invoice.deleted"
    if name == "live":
        return obj["livemode"] is True
    return kind.startswith("customer.") and "email" in obj and e.headers["X-Tenant"] in "ab"


def toml(base: str, body: str) -> str:
    return f"""
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]
max_attempts = 8
{body.format(base=base)}
"""


FILTERS = f"""
[[sources.destinations]]
name = "billing"
url = "{{base}}/billing"
allow_insecure = true
secret = "{whsec("billing")}"
types = ["invoice.*", "!invoice.deleted"]

[[sources.destinations]]
name = "live"
url = "{{base}}/live"
allow_insecure = true
secret = "{whsec("live")}"
where = {{{{ "data.object.livemode" = true }}}}

[[sources.destinations]]
name = "crm"
url = "{{base}}/crm"
allow_insecure = true
secret = "{whsec("crm")}"
types = ["customer.*"]
where = {{{{ "data.object.email" = {{{{ exists = true }}}} }}}}
where_headers = {{{{ "x-tenant" = ["a", "b"] }}}}
max_attempts = 100
retry_base_s = 0.05
retry_cap_s = 0.5
breaker = {{{{ failures = 5, cooldown_s = 1 }}}}
"""


def env(path: Path, url: str, **extra: str) -> dict[str, str]:
    return {
        "HOOKD_CONFIG": str(path),
        "HOOKD_DATABASE_URL": url,
        "HOOKD_ADMIN_TOKEN": TOKEN,
        "HOOKD_METRICS_TOKEN": "bench-metrics",
        "HOOKD_RECONCILE_SCHEDULE": "false",
        "HOOKD_PRUNE_EVERY_S": "0",
        "HOOKD_SWEEP_S": "0.2",
        "HOOKD_LOG_LEVEL": "ERROR",
        **extra,
    }


async def store(url: str, events: list[NewEvent]) -> None:
    engine = db.create_engine(url)
    try:
        for start in range(0, len(events), 500):
            async with engine.begin() as conn:
                await insert_events(conn, events[start : start + 500], BodyCipher(""))
    finally:
        await engine.dispose()


async def count(url: str, sql: str) -> int:
    import sqlalchemy as sa

    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            return int((await conn.execute(sa.text(sql))).scalar() or 0)
    finally:
        await engine.dispose()


async def until(check: Any, timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while True:
        if await check():
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"bench: {what} not done after {timeout_s:g} s")
        await asyncio.sleep(0.05)


async def delivered_by(worker: HookdWorker) -> int:
    async with httpx.AsyncClient(timeout=10) as client:
        text = (
            await client.get(worker.metrics_url, headers={"Authorization": "Bearer bench-metrics"})
        ).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "hookd_destination_deliveries":
            total += sum(
                s.value
                for s in family.samples
                if s.name.endswith("_total") and s.labels["outcome"] == "delivered"
            )
    return int(total)


def once(target: Destination, expected: set[str] | None = None) -> dict[str, Any]:
    ids = target.ids()
    out: dict[str, Any] = {
        "delivered": len(ids),
        "distinct": len(set(ids)),
        "refused_requests": len(target.refused),
        "unsigned": len(target.unsigned),
    }
    if expected is not None:
        out["exactly_selected"] = set(ids) == expected
    return out


async def filters(url: str, tmp: Path, events: int) -> dict[str, Any]:
    targets = {n: Destination(whsec(n)) for n in ("billing", "live", "crm")}
    targets["crm"].status = 503
    made = mixed(events, "evt_f")
    async with serve_app(app(targets)) as base:
        path = tmp / "filters.toml"
        path.write_text(toml(base, FILTERS))
        with RedisServer(tmp) as redis:
            settings = env(path, url, HOOKD_REDIS_URL=redis.url)
            with HookdWorker(settings, tmp) as one, HookdWorker(settings, tmp) as two:
                await asyncio.sleep(3)  # both up before the events are there
                started = time.monotonic()
                await store(url, made)
                ids = await _ids(url)
                expected = {n: {ids[e.dedupe_key] for e in made if selects(n, e)} for n in targets}

                async def healthy() -> bool:
                    return all(set(targets[n].ids()) >= expected[n] for n in ("billing", "live"))

                healthy_s = await until(healthy, 300, "billing and live")
                crm_failed_s = time.monotonic() - started
                targets["crm"].status = 200

                async def processed() -> bool:
                    return (
                        await count(url, "SELECT count(*) FROM events WHERE status='processed'")
                        == events
                    )

                await until(processed, 300, "every event processed")
                total_s = time.monotonic() - started
                split = [await delivered_by(w) for w in (one, two)]
    skipped = await count(url, "SELECT count(*) FROM handler_runs WHERE outcome = 'skipped'")
    return {
        "events": events,
        "selected": {n: len(v) for n, v in expected.items()},
        "billing_and_live_done_s": round(healthy_s, 2),
        "crm_failing_for_s": round(crm_failed_s, 2),
        "all_processed_s": round(total_s, 2),
        "per_destination": {n: once(t, expected[n]) for n, t in targets.items()},
        "skipped_in_ledger": skipped,
        "skipped_expected": sum(events - len(v) for v in expected.values()),
        "delivered_per_worker": split,
    }


async def _ids(url: str) -> dict[str, str]:
    """Each stored event's id by its dedupe key."""
    import sqlalchemy as sa

    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(sa.text("SELECT dedupe_key, id FROM events"))
            return {r[0]: r[1] for r in rows}
    finally:
        await engine.dispose()


async def rate(url: str, tmp: Path, events: int, per_s: int = 50) -> dict[str, Any]:
    sink = Destination(whsec("sink"))
    async with serve_app(app({"sink": sink})) as base:
        path = tmp / "rate.toml"
        path.write_text(
            toml(
                base,
                '[[sources.destinations]]\nname = "sink"\nurl = "{base}/sink"\n'
                "allow_insecure = true\n"
                f'secret = "{whsec("sink")}"\nrate_per_s = {per_s}\n',
            )
        )
        with RedisServer(tmp) as redis:
            settings = env(path, url, HOOKD_REDIS_URL=redis.url, HOOKD_PROCESS_BATCH="16")
            with HookdWorker(settings, tmp) as one, HookdWorker(settings, tmp) as two:
                await asyncio.sleep(3)
                await store(url, mixed(events, "evt_r"))

                async def done() -> bool:
                    return len(sink.accepted) >= events

                took = await until(done, 600, "rate-limited deliveries")
                split = [await delivered_by(w) for w in (one, two)]
    times = [d.at for d in sink.accepted]
    span = max(times) - min(times)
    return {
        "events": events,
        "rate_per_s": per_s,
        "max_in_any_1s_window": max_in_window(times, 1.0),
        "delivered_per_s": round((len(times) - 1) / span, 2) if span else None,
        "seconds": round(took, 2),
        "delivered_per_worker": split,
        **once(sink),
    }


async def pause(url: str, tmp: Path, events: int) -> dict[str, Any]:
    sink = Destination(whsec("sink"))
    async with serve_app(app({"sink": sink})) as base:
        path = tmp / "pause.toml"
        path.write_text(
            toml(
                base,
                '[[sources.destinations]]\nname = "sink"\nurl = "{base}/sink"\n'
                "allow_insecure = true\n"
                f'secret = "{whsec("sink")}"\n',
            )
        )
        with HookdServer(env(path, url), tmp) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
                answer = await client.post("/api/sources/stripe/pause?reason=bench", headers=AUTH)
                assert answer.status_code == 200, answer.text
                gate = asyncio.Semaphore(32)

                async def send(i: int) -> int:
                    body = json.dumps({"id": f"evt_p_{i}", "type": "invoice.paid"}).encode()
                    headers, _ = signed_request(
                        "stripe", STRIPE_SECRET, body, ts=str(int(time.time()))
                    )
                    async with gate:
                        r = await client.post(
                            "/hooks/stripe",
                            content=body,
                            headers={k: v[0] for k, v in headers.items()},
                        )
                    return r.status_code

                started = time.monotonic()
                codes = await asyncio.gather(*(send(i) for i in range(events)))
                burst_s = time.monotonic() - started
                await asyncio.sleep(2)
                stored = await count(url, "SELECT count(*) FROM events")
                untouched = await count(
                    url, "SELECT count(*) FROM events WHERE status='pending' AND attempts=0"
                )
                delivered_while_paused = len(sink.accepted)
                resumed = time.monotonic()
                answer = await client.post("/api/sources/stripe/resume", headers=AUTH)
                assert answer.status_code == 200, answer.text

                async def processed() -> bool:
                    return (
                        await count(url, "SELECT count(*) FROM events WHERE status='processed'")
                        == events
                    )

                await until(processed, 300, "resumed events processed")
                drain_s = time.monotonic() - resumed
    return {
        "events": events,
        "acknowledged_202": codes.count(202),
        "burst_s": round(burst_s, 2),
        "stored": stored,
        "pending_untouched_while_paused": untouched,
        "delivered_while_paused": delivered_while_paused,
        "drained_after_resume_s": round(drain_s, 2),
        **once(sink),
    }


async def breaker(url: str, tmp: Path, events: int, failing_s: float = 5.0) -> dict[str, Any]:
    sink = Destination(whsec("sink"))
    sink.status = 503
    async with serve_app(app({"sink": sink})) as base:
        path = tmp / "breaker.toml"
        path.write_text(
            toml(
                base,
                '[[sources.destinations]]\nname = "sink"\nurl = "{base}/sink"\n'
                "allow_insecure = true\n"
                f'secret = "{whsec("sink")}"\nmax_attempts = 50\nretry_base_s = 0.1\n'
                "retry_cap_s = 1\nbreaker = {{ failures = 5, cooldown_s = 1 }}\n",
            )
        )
        with RedisServer(tmp) as redis:
            settings = env(path, url, HOOKD_REDIS_URL=redis.url)
            with HookdWorker(settings, tmp), HookdWorker(settings, tmp):
                await asyncio.sleep(3)
                await store(url, mixed(events, "evt_b"))
                await asyncio.sleep(failing_s)
                refused_while_failing = len(sink.refused)
                most_attempts = await count(url, "SELECT max(attempts) FROM events")
                sink.status = 200
                recovered = time.monotonic()

                async def processed() -> bool:
                    return (
                        await count(url, "SELECT count(*) FROM events WHERE status='processed'")
                        == events
                    )

                await until(processed, 300, "held deliveries")
                drain_s = time.monotonic() - recovered
    return {
        "events": events,
        "failing_for_s": failing_s,
        "requests_while_failing": refused_while_failing,
        "max_attempts_used_while_failing": most_attempts,
        "delivered_after_recovery_s": round(drain_s, 2),
        **once(sink),
    }


SCENARIOS = ("filters", "rate", "pause", "breaker")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--events", type=int, default=None, help="override each one's count")
    args = parser.parse_args()
    sizes = {"filters": 3000, "rate": 1000, "pause": 1000, "breaker": 500}
    results: dict[str, Any] = {}
    for name in args.only.split(","):
        database = services.create_database()
        url = services.sqlalchemy_url(database)
        try:
            migrate.upgrade(url)
            with tempfile.TemporaryDirectory() as tmp:
                run = {"filters": filters, "rate": rate, "pause": pause, "breaker": breaker}[name]
                results[name] = asyncio.run(run(url, Path(tmp), args.events or sizes[name]))
        finally:
            services.drop_database(database)
        print(json.dumps({name: results[name]}, indent=2), flush=True)
    out = BENCH / "results" / "destinations.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
