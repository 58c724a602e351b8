"""A simulated year of retention: events stored day after day at a scaled rate, and
after each simulated day the prune that ``hookd prune --as-of <that day's end>`` runs.

    .venv/bin/python bench/retention_year.py --targets postgres,sqlite --days 365 --scale 1000

Events arrive at ``--rate`` per second (default 100) divided by ``--scale`` (default
1000: 8,640 events per simulated day), their received times spread over each day of a
year that ends yesterday (UTC), their ids minted for that time (``store.ids``), so that
on PostgreSQL each day's rows land in that day's partition (made by ``ensure``'s own
``_create``, one simulated day at a time). Each day is one bulk insert with the statements of
``store.intake.events.insert_events`` (``event_keys`` first, ``ON CONFLICT DO NOTHING
RETURNING``, then the new ``events`` rows), already finished: 99% processed, 1% dead.
Then ``store.retention.prune.prune`` runs with ``now`` = the end of the day and the default
retention of ``hookd.sources`` (body 7, events 30, dead 90, keys 400 days).

Per day: database size (``pg_database_size``; the SQLite file, and its WAL apart), rows in
``events`` and ``event_keys``, the bytes of ``events`` with its indexes (every partition;
on SQLite every ``--events-bytes-every`` days, read from ``dbstat``), the prune's seconds
and the partitions it dropped and compacted. At the end, ``--check-keys`` keys of days
1..300 (all of them pruned rows by then, their keys kept) are delivered again through
``store.intake.events.insert_events``: each must answer duplicate with the original id and add
no row.

Each target gets its own database (PostgreSQL ``hookd_run_retention``, dropped at the
end; SQLite, a file in a temporary directory); results go to
``bench/results/retention_year.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

import sqlalchemy as sa  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine  # noqa: E402

from hookd.sources import RetentionConfig  # noqa: E402
from store import db, migrate  # noqa: E402
from store.crypto import BodyCipher  # noqa: E402
from store.intake.events import NewEvent, NewRow, _insert_keys, insert_events, key_row  # noqa: E402
from store.retention import partition_catalog, partition_create  # noqa: E402

Row = dict[str, Any]  # a NewRow with the columns processing sets (processed_at, last_error)
from store.ids import new_id  # noqa: E402
from store.models import EVENT_KEYS, EVENTS  # noqa: E402
from store.retention.prune import Policy, prune  # noqa: E402
from store.status import EventStatus  # noqa: E402

SOURCE = "bench"
PG_DB = "hookd_run_retention"
PG = "postgresql+asyncpg://postgres@127.0.0.1:5432"
DAY = timedelta(days=1)


def psql(sql: str) -> None:
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc", sql], check=True, capture_output=True
    )


def default_policy() -> Policy:
    r = RetentionConfig()
    return Policy(
        keep_body_days=r.keep_body_days,
        keep_events_days=r.keep_events_days,
        keep_dead_days=r.keep_dead_days,
        keep_keys_days=r.keep_keys_days,
    )


def body(seq: int, size: int) -> bytes:
    """A JSON body of about ``size`` bytes, partly random (real bodies barely compress)."""
    head = f'{{"id":"evt_{seq}","type":"invoice.paid","data":{{"pad":"'
    pad = secrets.token_hex(max(0, size - len(head) - 4) // 2)
    return (head + pad + '"}}').encode()


def day_rows(day: int, start: datetime, per_day: int, body_bytes: int) -> list[Row]:
    """One simulated day's events, finished, ids minted at their received times."""
    rows: list[Row] = []
    for i in range(per_day):
        received = start + timedelta(seconds=(i + 0.5) * 86_400 / per_day)
        ms = int(received.timestamp() * 1000)
        dead = i % 100 == 99
        # Already finished, as processing would have left them (set here, not by an
        # UPDATE after the insert: that would leave a dead version of every row).
        rows.append(
            {
                "id": new_id(ms),
                "source": SOURCE,
                "provider": "stripe",
                "dedupe_key": f"evt_d{day:03d}_{i:06d}",
                "type": "invoice.paid",
                "origin": "webhook",
                "received_at": received,
                "occurred_at": received,
                "verified_with": "v1 key 0",
                "headers": {"stripe-signature": "t=0,v1=" + "0" * 64},
                "body": body(day * per_day + i, body_bytes),
                "body_encrypted": False,
                "status": EventStatus.DEAD if dead else EventStatus.PROCESSED,
                "attempts": 1,
                "next_attempt_at": received,
                "last_error": "bench: handler failed" if dead else None,
                "processed_at": None if dead else received,
                "created_at": received,
                "updated_at": received,
            }
        )
    return rows


async def store_day(conn: AsyncConnection, rows: list[Row]) -> None:
    """``insert_events``' statements for rows whose ids are the simulated time's."""
    result = await conn.execute(
        _insert_keys(conn).returning(EVENT_KEYS.c.event_id),
        [key_row(cast(NewRow, r)) for r in rows],
    )
    new = {row[0] for row in result}
    assert len(new) == len(rows), "a simulated key was there already"
    await conn.execute(sa.insert(EVENTS), rows)


def file_sizes(path: str) -> dict[str, int]:
    wal = path + "-wal"
    return {
        "bytes": os.path.getsize(path),
        "wal_bytes": os.path.getsize(wal) if os.path.exists(wal) else 0,
    }


async def size_of(engine: AsyncEngine, path: str | None) -> dict[str, int]:
    if path is not None:
        return await asyncio.to_thread(file_sizes, path)
    async with engine.connect() as conn:
        n = (await conn.execute(sa.text("SELECT pg_database_size(current_database())"))).scalar()
    return {"bytes": int(n or 0)}


async def counts(engine: AsyncEngine) -> tuple[int, int, int]:
    async with engine.connect() as conn:
        ev = (await conn.execute(sa.select(sa.func.count()).select_from(EVENTS))).scalar()
        keys = (await conn.execute(sa.select(sa.func.count()).select_from(EVENT_KEYS))).scalar()
        bodies = (
            await conn.execute(
                sa.select(sa.func.count()).select_from(EVENTS).where(EVENTS.c.body.is_not(None))
            )
        ).scalar()
    return int(ev or 0), int(keys or 0), int(bodies or 0)


async def check_keys(
    engine: AsyncEngine, n: int, first_day: int, last_day: int, per_day: int
) -> dict[str, Any]:
    """Redeliver ``n`` old keys through the insert path: all duplicates, original ids."""
    rng = random.Random(7)
    picked = sorted(
        {
            f"evt_d{rng.randint(first_day, last_day):03d}_{rng.randrange(per_day):06d}"
            for _ in range(n * 2)
        }
    )[:n]
    async with engine.connect() as conn:
        found = await conn.execute(
            sa.select(EVENT_KEYS.c.dedupe_key, EVENT_KEYS.c.event_id, EVENT_KEYS.c.pruned_at).where(
                EVENT_KEYS.c.source == SOURCE, EVENT_KEYS.c.dedupe_key.in_(picked)
            )
        )
        original = {r.dedupe_key: (r.event_id, r.pruned_at) for r in found}
    before = await counts(engine)
    now = datetime.now(UTC)
    events = [
        NewEvent(
            source=SOURCE,
            provider="stripe",
            dedupe_key=k,
            type="invoice.paid",
            origin="webhook",
            received_at=now,
            occurred_at=now,
            verified_with="v1 key 0",
            headers={},
            body=b'{"redelivery":true}',
        )
        for k in picked
    ]
    started = time.perf_counter()
    async with engine.begin() as conn:
        stored = await insert_events(conn, events, BodyCipher(""))
    seconds = time.perf_counter() - started
    after = await counts(engine)
    duplicates = sum(not s.created for s in stored)
    same_id = sum(
        s.event_id == original.get(e.dedupe_key, ("", None))[0]
        for s, e in zip(stored, events, strict=True)
    )
    return {
        "keys": len(picked),
        "keys_found_before": len(original),
        "keys_of_pruned_rows": sum(p is not None for _, p in original.values()),
        "answered_duplicate": duplicates,
        "answered_original_id": same_id,
        "new_event_rows": after[0] - before[0],
        "new_key_rows": after[1] - before[1],
        "insert_seconds": round(seconds, 3),
        "ok": duplicates == same_id == len(picked) == len(original) and after[:2] == before[:2],
    }


async def events_bytes(engine: AsyncEngine, postgres: bool) -> int:
    """Bytes of ``events`` with its indexes: every partition on PostgreSQL."""
    async with engine.connect() as conn:
        if postgres:
            sql = (
                "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) "
                "FROM pg_partition_tree('events') WHERE isleaf"
            )
        else:
            sql = (
                "SELECT coalesce(sum(d.pgsize), 0) FROM dbstat d "
                "JOIN sqlite_master m ON m.name = d.name WHERE m.tbl_name = 'events'"
            )
        return int((await conn.execute(sa.text(sql))).scalar() or 0)


async def table_sizes(engine: AsyncEngine, postgres: bool) -> dict[str, int]:
    """Bytes of ``events`` (every partition) and ``event_keys``, indexes included, as
    they are at the end (not compacted)."""
    async with engine.connect() as conn:
        if postgres:
            result = await conn.execute(
                sa.text(
                    "SELECT CASE WHEN c.relname LIKE 'events%' THEN 'events' ELSE c.relname END, "
                    "sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                    "WHERE c.relkind IN ('r', 'p') AND (c.relname = 'event_keys' "
                    "OR c.relname = 'events' OR c.relname LIKE 'events_p%' "
                    "OR c.relname = 'events_default') GROUP BY 1"
                )
            )
        else:
            result = await conn.execute(
                sa.text(
                    "SELECT m.tbl_name, sum(d.pgsize) FROM dbstat d "
                    "JOIN sqlite_master m ON m.name = d.name "
                    "WHERE m.tbl_name IN ('events', 'event_keys') GROUP BY m.tbl_name"
                )
            )
        return {str(r[0]): int(r[1]) for r in result}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


async def simulate(url: str, path: str | None, args: argparse.Namespace) -> dict[str, Any]:
    per_day = max(1, round(args.rate * 86_400 / args.scale))
    policy = default_policy()
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first = today - args.days * DAY
    engine = db.create_engine(url)
    days: list[dict[str, Any]] = []
    dropped_total: list[str] = []
    compacted_total: list[str] = []
    started = time.perf_counter()
    try:
        for d in range(args.days):
            start = first + d * DAY
            end = start + DAY
            if path is None:
                # The simulated day's partition only: ``ensure`` would also make the days
                # ahead of it, which a prune judged against the real clock drops as empty.
                await partition_create.create_day(engine, start.date())
            rows = day_rows(d + 1, start, per_day, args.body_bytes)
            t0 = time.perf_counter()
            async with engine.begin() as conn:
                await store_day(conn, rows)
            insert_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            # Without the pause after each batch that leaves room for live traffic (there
            # is none here): the prune's work, not its idle time.
            done = await prune(
                engine, {SOURCE: policy}, now=end, owner="bench-retention", pause_ratio=0.0
            )
            prune_s = time.perf_counter() - t0
            assert not done.lease_held
            assert not done.stopped
            ev, keys, bodies = await counts(engine)
            c = done.counts.get(SOURCE)
            dropped_total += done.partitions_dropped
            compacted_total += done.partitions_compacted
            sized = path is None or (d + 1) % args.events_bytes_every == 0 or d + 1 == args.days
            days.append(
                {
                    "day": d + 1,
                    "events": ev,
                    "events_with_body": bodies,
                    "event_keys": keys,
                    **(await size_of(engine, path)),
                    "insert_s": round(insert_s, 4),
                    "prune_s": round(prune_s, 4),
                    "pruned_rows": c.event if c else 0,
                    "pruned_bodies": c.body if c else 0,
                    "partitions_dropped": len(done.partitions_dropped),
                    "partitions_compacted": len(done.partitions_compacted),
                    **({"events_bytes": await events_bytes(engine, path is None)} if sized else {}),
                }
            )
            if (d + 1) % 30 == 0 or d + 1 == args.days:
                last = days[-1]
                print(
                    f"  day {d + 1}: events {ev}, keys {keys}, {last['bytes'] / 1e6:.1f} MB, "
                    f"prune {prune_s:.3f} s ({time.perf_counter() - started:.0f} s so far)",
                    flush=True,
                )
        check = await check_keys(
            engine, args.check_keys, 1, min(300, max(1, args.days - 31)), per_day
        )
        tables = await table_sizes(engine, path is None)
        if path is None:
            async with engine.connect() as conn:
                part_left = len(await partition_catalog.list_partitions(conn))
        else:
            part_left = 0
    finally:
        await engine.dispose()
    out = summarize(
        days=days,
        dropped=dropped_total,
        compacted=compacted_total,
        partitions_left=part_left,
        check=check,
        per_day=per_day,
        args=args,
        seconds=time.perf_counter() - started,
    )
    out["table_bytes_at_end"] = tables
    return out


def summarize(
    *,
    days: list[dict[str, Any]],
    dropped: list[str],
    compacted: list[str],
    partitions_left: int,
    check: dict[str, Any],
    per_day: int,
    args: argparse.Namespace,
    seconds: float,
) -> dict[str, Any]:
    prune_s = [d["prune_s"] for d in days]
    plateau = [d for d in days if d["day"] > 90]
    out: dict[str, Any] = {
        "events_per_day": per_day,
        "days": args.days,
        "rate": args.rate,
        "scale": args.scale,
        "body_bytes": args.body_bytes,
        "wall_seconds": round(seconds, 1),
        "prune_seconds": {
            "median": round(statistics.median(prune_s), 4),
            "p95": round(pct(prune_s, 0.95), 4),
            "max": round(max(prune_s), 4),
        },
        "partitions_dropped": len(dropped),
        "partitions_compacted": len(compacted),
        "partitions_left": partitions_left,
        "dedupe_check": check,
        "per_day": days,
    }
    if plateau:
        kept = statistics.mean(d["events"] for d in plateau)
        size = statistics.mean(d["bytes"] for d in plateau)
        first, last = plateau[0], plateau[-1]
        span = last["day"] - first["day"] or 1
        out["plateau"] = {
            "from_day": 91,
            "events_mean": round(kept),
            "events_min": min(d["events"] for d in plateau),
            "events_max": max(d["events"] for d in plateau),
            "bytes_mean": round(size),
            "bytes_first": first["bytes"],
            "bytes_last": last["bytes"],
            "bytes_per_kept_event": round(size / kept) if kept else None,
            "keys_growth_per_day": round((last["event_keys"] - first["event_keys"]) / span),
            "bytes_growth_per_day": round((last["bytes"] - first["bytes"]) / span),
        }
        sized = [d for d in plateau if "events_bytes" in d]
        if sized:
            table = statistics.mean(d["events_bytes"] for d in sized)
            kept_sized = statistics.mean(d["events"] for d in sized)
            out["plateau"] |= {
                "events_bytes_mean": round(table),
                "events_bytes_min": min(d["events_bytes"] for d in sized),
                "events_bytes_max": max(d["events_bytes"] for d in sized),
                "events_bytes_per_kept_event": round(table / kept_sized) if kept_sized else None,
            }
    return out


def run_postgres(args: argparse.Namespace) -> dict[str, Any]:
    psql(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
    psql(f"CREATE DATABASE {PG_DB}")
    url = f"{PG}/{PG_DB}"
    try:
        migrate.upgrade(url)
        return asyncio.run(simulate(url, None, args))
    finally:
        psql(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")


def run_sqlite(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookd_run_retention_") as tmp:
        path = os.path.join(tmp, "retention.db")
        url = f"sqlite+aiosqlite:///{path}"
        migrate.upgrade(url)
        return asyncio.run(simulate(url, path, args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="postgres,sqlite")
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--rate", type=float, default=100.0, help="events per second, unscaled")
    parser.add_argument("--scale", type=float, default=1000.0, help="divide --rate by this")
    parser.add_argument("--body-bytes", type=int, default=1000)
    parser.add_argument("--check-keys", type=int, default=1000)
    parser.add_argument(
        "--events-bytes-every", type=int, default=10, help="days between dbstat reads (SQLite)"
    )
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "retention_year.json")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    if args.out.exists():
        results = json.loads(args.out.read_text(encoding="utf-8"))
    for target in args.targets.split(","):
        print(f"{target}: {args.days} days at {args.rate:g}/s ÷ {args.scale:g}", flush=True)
        runner = {"postgres": run_postgres, "sqlite": run_sqlite}[target]
        results[target] = runner(args)
        r = results[target]
        print(json.dumps({k: v for k, v in r.items() if k != "per_day"}, indent=2), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the finally blocks have dropped the databases
        print("interrupted", file=sys.stderr)
        sys.exit(130)
