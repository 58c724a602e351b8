"""Bytes per event on disk, as retention leaves them: with the body, without it
(``keep_body_days`` passed), and as a key alone (the row pruned, the key kept).

    python scripts/retention_sizes.py sqlite+aiosqlite:///sizes.db \
        postgresql+asyncpg://postgres@127.0.0.1/hookd_sizes

Each URL must name a database with no tables (a SQLite file that does not exist yet,
an empty PostgreSQL database): the script migrates it, stores ``--events`` signed
Stripe sample events through the receiver's insert path with one handler ledger row
each, and measures after each step, tables and indexes included, compacted first
(``VACUUM``; PostgreSQL ``VACUUM FULL``) so the figures are what live rows take.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import time
from datetime import UTC, datetime

import sqlalchemy as sa

from hookd.providers import PROVIDERS
from hookd.runtime import sqlite_writer
from store import db, migrate
from store.claims import claiming
from store.crypto import BodyCipher
from store.intake.events import NewEvent
from store.models import EVENT_KEYS, EVENTS

TABLES = ("events", "handler_runs", "event_keys")
SECRET = "whsec_sizes"  # noqa: S105 - a sample signing secret, signs nothing real


def sample_events(n: int, body_bytes: int) -> list[NewEvent]:
    """Stripe's sample events, verified and kept as the receiver keeps them; each body
    then grown to about ``body_bytes`` with a ``metadata`` object of random values (real
    Stripe events are larger than the sample, and barely compressible)."""
    stripe = PROVIDERS["stripe"]
    keys = [stripe.parse_secret(SECRET)]
    out = []
    now = int(time.time())
    for seq in range(n):
        headers, body = stripe.sample_event(SECRET, seq, now)
        request = {name.lower(): [value] for name, value in headers.items()}
        verified = stripe.verify_request(request, body, keys, now, 300)
        envelope = stripe.envelope(request, body, verified)
        out.append(
            NewEvent(
                source="stripe",
                provider="stripe",
                dedupe_key=envelope.dedupe_key,
                type=envelope.type,
                origin="webhook",
                received_at=datetime.now(UTC),
                occurred_at=envelope.occurred_at,
                verified_with=verified.describe(),
                headers=envelope.headers,
                body=_grown(body, body_bytes),
            )
        )
    return out


def _grown(body: bytes, size: int) -> bytes:
    payload = json.loads(body)
    metadata: dict[str, str] = {}
    while len(body) < size:
        metadata[f"k{len(metadata)}"] = secrets.token_hex(12)
        payload["data"]["object"]["metadata"] = metadata
        body = json.dumps(payload, separators=(",", ":")).encode()
    return body


async def sizes(url: str) -> dict[str, int]:
    """Bytes per table, indexes (and PostgreSQL's TOAST) included, once compacted."""
    engine = db.create_engine(url)
    try:
        if engine.dialect.name == "postgresql":
            async with engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.exec_driver_sql(f"VACUUM FULL ANALYZE {', '.join(TABLES)}")
                result = await conn.execute(
                    sa.text(
                        "SELECT relname, pg_total_relation_size(oid) FROM pg_class "
                        "WHERE relname = ANY(:names)"
                    ),
                    {"names": list(TABLES)},
                )
                return {r[0]: int(r[1]) for r in result}
        async with engine.connect() as conn:
            await conn.exec_driver_sql("VACUUM")
            result = await conn.execute(
                sa.text(
                    "SELECT m.tbl_name, sum(d.pgsize) FROM dbstat d "
                    "JOIN sqlite_master m ON m.name = d.name GROUP BY m.tbl_name"
                )
            )
            found = {r[0]: int(r[1]) for r in result}
            return {t: found.get(t, 0) for t in TABLES}
    finally:
        await engine.dispose()


async def measure(url: str, n: int, body_bytes: int) -> None:
    await asyncio.to_thread(migrate.upgrade, url)
    events = sample_events(n, body_bytes)
    body_bytes = sum(len(e.body) for e in events) / n
    inserter = sqlite_writer.inserter_for(url, BodyCipher(""), committers=1, timeout_s=30)
    try:
        for start in range(0, n, 256):
            await inserter.insert(events[start : start + 256])
    finally:
        await inserter.close()
    engine = db.create_engine(url)
    now = datetime.now(UTC)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.update(EVENTS).values(status="processed", processed_at=now))
            ids = [r[0] for r in await conn.execute(sa.select(EVENTS.c.id))]
            await claiming.record_handlers(conn, [(i, "app.handlers:on_payment") for i in ids], now)
        stored = await sizes(url)
        async with engine.begin() as conn:
            await conn.execute(sa.update(EVENTS).values(body=None, headers={}))
        stripped = await sizes(url)
        async with engine.begin() as conn:
            await conn.execute(sa.delete(EVENTS))
            await conn.execute(
                sa.update(EVENT_KEYS).values(final_status="processed", pruned_at=now)
            )
        tombstones = await sizes(url)
    finally:
        await engine.dispose()

    def per_event(measured: dict[str, int]) -> str:
        parts = ", ".join(f"{t} {measured[t] / n:.0f}" for t in TABLES)
        return f"{sum(measured.values()) / n:.0f} B/event ({parts})"

    print(f"{db.describe(url)}: {n} Stripe sample events, body {body_bytes:.0f} B on average")
    print(f"  stored, processed: {per_event(stored)}")
    print(f"  body stripped:     {per_event(stripped)}")
    print(f"  key only (pruned): {per_event(tombstones)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("urls", nargs="+", metavar="URL")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--body-bytes", type=int, default=0, help="grow each body to this")
    args = parser.parse_args()
    for url in args.urls:
        asyncio.run(measure(url, args.events, args.body_bytes))


if __name__ == "__main__":
    main()
