"""Per-object ordering ([sources.order]): what the claim costs, and the issue's scenario.

``claims``: the time of one claim of 64 events (median and 90th percentile of
``--claims`` claims, each settled before the next) with ``--backlog`` events of no
object pending: ``store.claims.claiming.claim_due`` as processing calls it, on a database
migrated to head, against the claim as it was before ordering (its statement, copied
below as ``CLAIM_BEFORE``) on a database migrated to 0011 (before ordering's columns
and indexes); the two alternate claim by claim, so that a busy machine slows both
alike. Then, on the head database, the same backlog again beside as many pending
events of 1,000 objects (those are not in ``ix_events_runnable``: the plain claim
should not notice them), and the object claim (``store.delivery.objects.claim``) over them.

``scenario``: ``tests.support.ordering`` with the issue's counts: 1,000 Stripe updates
over 50 objects, shuffled, posted over HTTP to ``hookd serve``, two ``hookd worker``
processes, Redis stopped halfway; checked (``ordering.check``) and timed.

    .venv/bin/python bench/ordering.py [claims|scenario|all] [--backlog 20000]
        [--claims 300] [--events 1000] [--objects 50] [--handler-s 0.002]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

import sqlalchemy as sa  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: E402

from store import db, migrate  # noqa: E402
from store.claims import claiming  # noqa: E402
from store.crypto import BodyCipher  # noqa: E402
from store.delivery import objects  # noqa: E402
from store.intake.events import NewEvent, insert_events  # noqa: E402
from store.models import EVENTS  # noqa: E402
from store.retention import partition_catalog  # noqa: E402
from store.rows import EVENT_COLUMNS  # noqa: E402
from store.status import RUNNABLE_STATUSES  # noqa: E402
from tests.support import ordering, services  # noqa: E402

BATCH = 64
OBJECTS = 1_000
# What the events table had before migration 0012, in the typed row's order.
BEFORE_COLUMNS = [
    c for c in EVENT_COLUMNS if c.key not in ("object_key", "object_version", "payload_hash")
]


def event(n: int, *, ordered: bool) -> NewEvent:
    """A Stripe-like event; of object ``cus_{n % 1000}`` at version ``n // 1000`` when
    ``ordered`` (stamped as ingest stamps it), of none otherwise."""
    return NewEvent(
        source="stripe" if ordered else "github",
        provider="stripe" if ordered else "github",
        dedupe_key=f"{'o' if ordered else 'u'}-{n}",
        type="customer.updated",
        origin="webhook",
        received_at=datetime.now(UTC),
        occurred_at=None,
        verified_with="bench",
        headers={},
        body=b"{}",
        object_key=f"cus_{n % OBJECTS}" if ordered else None,
        object_version=float(n // OBJECTS) if ordered else None,
        payload_hash="0" * 64 if ordered else None,
    )


async def fill(engine: AsyncEngine, count: int, *, ordered: bool) -> None:
    for start in range(0, count, 1_000):
        batch = [event(n, ordered=ordered) for n in range(start, min(count, start + 1_000))]
        async with engine.begin() as conn:
            await insert_events(conn, batch, BodyCipher(""))
    async with engine.begin() as conn:
        await conn.exec_driver_sql("ANALYZE events")


async def time_claims(engine: AsyncEngine, times: int, *, ordered: bool) -> dict[str, float]:
    """``times`` claims of up to BATCH, each settled (processed) before the next: ms."""
    took: list[float] = []
    claimed = 0
    for _ in range(times):
        now = datetime.now(UTC)
        started = time.perf_counter()
        async with engine.begin() as conn:
            if ordered:
                got = await objects.claim(conn, "bench", 60, BATCH, now, supersede={"stripe"})
                rows = got.rows
            else:
                rows = await claiming.claim_due(
                    conn, "bench", 60, BATCH, now, shares=claiming.alone(["github"], BATCH)
                )
        took.append((time.perf_counter() - started) * 1000)
        claimed += len(rows)
        async with engine.begin() as conn:
            await claiming.mark_processed(conn, [r.id for r in rows], "bench", now)
            await objects.record_processed(conn, rows, now)
    took.sort()
    return {
        "median_ms": round(statistics.median(took), 2),
        "p90_ms": round(took[int(len(took) * 0.9)], 2),
        "events_per_claim": round(claimed / times, 1),
    }


def plain_claim(now: datetime, *, unordered: bool) -> sa.Update:
    """store.claims.claiming.claim_due(expired=False) as it was before ordering and paused sources
    (``unordered``: with ordering's one change, ``object_key IS NULL``; returning its
    columns), to measure ordering's part of the claim's cost apart from the rest."""
    where = [EVENTS.c.status.in_(RUNNABLE_STATUSES), EVENTS.c.next_attempt_at <= now]
    if unordered:
        where.append(EVENTS.c.object_key.is_(None))
    runnable = (
        sa.select(EVENTS.c.id)
        .where(*where)
        .order_by(EVENTS.c.next_attempt_at)
        .limit(BATCH)
        .with_for_update(skip_locked=True)
        .cte("runnable")
    )
    return (
        sa.update(EVENTS)
        .where(EVENTS.c.id.in_(sa.select(runnable.c.id).scalar_subquery()))
        .values(
            status="processing",
            lease_owner="bench",
            lease_expires_at=now + timedelta(seconds=60),
            attempts=EVENTS.c.attempts + 1,
            updated_at=now,
        )
        .returning(*(EVENT_COLUMNS if unordered else BEFORE_COLUMNS))
    )


async def compare(before: AsyncEngine, after: AsyncEngine, times: int) -> dict[str, object]:
    """Claims of BATCH, each settled before the next, by turns: the claim as it was on
    ``before`` (0011), then on ``after`` (head) the same with ordering's change only, and
    ``claim_due`` as it is now: ms each."""
    took: dict[str, list[float]] = {"before": [], "ordering's change": [], "claim_due now": []}
    for _ in range(times):
        for which, engine in (
            ("before", before),
            ("ordering's change", after),
            ("claim_due now", after),
        ):
            now = datetime.now(UTC)
            started = time.perf_counter()
            async with engine.begin() as conn:
                if which == "claim_due now":
                    rows = await claiming.claim_due(
                        conn, "bench", 60, BATCH, now, shares=claiming.alone(["github"], BATCH)
                    )
                    ids = [r.id for r in rows]
                else:
                    statement = plain_claim(now, unordered=which != "before")
                    ids = [r[0] for r in map(tuple, await conn.execute(statement))]
            took[which].append((time.perf_counter() - started) * 1000)
            assert len(ids) == BATCH, "the backlog ran out"
            async with engine.begin() as conn:
                await conn.execute(
                    sa.update(EVENTS)
                    .where(EVENTS.c.id.in_(ids))
                    .values(status="processed", lease_owner=None, lease_expires_at=None)
                )
    out: dict[str, object] = {}
    for which, values in took.items():
        values.sort()
        out[which] = {
            "median_ms": round(statistics.median(values), 2),
            "p90_ms": round(values[int(len(values) * 0.9)], 2),
        }
    return out


async def bulk_unordered(engine: AsyncEngine, count: int) -> None:
    """``count`` pending events of no object, due now, in today's partition: the columns
    every schema since 0008 has, so before and after ordering get the same rows."""
    prefix = partition_catalog.bounds(datetime.now(UTC).date())[0][:10]
    async with engine.begin() as conn:
        await conn.execute(
            sa.text(
                "INSERT INTO events (id, source, provider, dedupe_key, type, origin, "
                "received_at, verified_with, headers, body, body_encrypted, status, attempts, "
                "next_attempt_at, created_at, updated_at) "
                "SELECT :prefix || lpad(g::text, 16, '0'), 'github', 'github', 'u-' || g, "
                "'push', 'webhook', now(), 'v', '{}', '{}', false, 'pending', 0, "
                "now() - interval '1 minute', now(), now() FROM generate_series(1, :n) AS g"
            ),
            {"prefix": prefix, "n": count},
        )
        await conn.exec_driver_sql("ANALYZE events")


async def bench_claims(url: str, url_before: str, backlog: int, times: int) -> dict[str, object]:
    engine, old = db.create_engine(url), db.create_engine(url_before)
    try:
        await bulk_unordered(engine, backlog + 2 * BATCH * times)
        await bulk_unordered(old, backlog + BATCH * times)
        alone = await compare(old, engine, times)
        await fill(engine, backlog, ordered=True)
        beside = await time_claims(engine, times, ordered=False)
        ordered = await time_claims(engine, times, ordered=True)
    finally:
        await engine.dispose()
        await old.dispose()
    return {
        "backlog": backlog,
        "claim_due before ordering (0011) and after (head), alternating": alone,
        f"claim_due, beside {backlog} events of objects": beside,
        f"objects.claim, {backlog} events of {OBJECTS} objects": ordered,
    }


async def bench_scenario(
    url: str, events: int, objects_: int, handler_s: float
) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        outcome = await ordering.run(Path(tmp), url, events, objects_, handler_s=handler_s)
    counts = ordering.check(outcome, events)
    return {
        "events": events,
        "objects": objects_,
        "handler_s": handler_s,
        **counts,
        **outcome.timings,
    }


def on_fresh_databases(
    run: Callable[..., Coroutine[Any, Any, dict[str, object]]], *revisions: str
) -> None:
    """``run`` with the URLs of new PostgreSQL databases migrated to ``revisions``,
    dropped afterwards; its figures, printed."""
    names = [services.create_database() for _ in revisions]
    urls = [services.sqlalchemy_url(name) for name in names]
    try:
        for url, revision in zip(urls, revisions, strict=True):
            migrate.upgrade(url, revision)
        print(json.dumps(asyncio.run(run(*urls)), indent=2))
    finally:
        for name in names:
            services.drop_database(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", default="all", choices=["claims", "scenario", "all"])
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--events", type=int, default=1_000)
    parser.add_argument("--objects", type=int, default=50)
    parser.add_argument("--handler-s", type=float, default=0.002, help="each handler run's time")
    args = parser.parse_args()
    if args.what in ("claims", "all"):
        on_fresh_databases(
            lambda url, before: bench_claims(url, before, args.backlog, args.claims),
            "head",
            "0011",
        )
    if args.what in ("scenario", "all"):
        on_fresh_databases(
            lambda url: bench_scenario(url, args.events, args.objects, args.handler_s), "head"
        )


if __name__ == "__main__":
    main()
