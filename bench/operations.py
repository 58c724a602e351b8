"""Bulk operations at the issue's size: a replay of a time range of 10,000 events, with
its estimate, its progress and its end; a cancelled one; one request id twice; and what
the runner does to a receiver's inserts meanwhile.

    .venv/bin/python bench/operations.py --targets postgres,sqlite --events 10000

Each target gets a fresh database (PostgreSQL ``hookd_run_operations``, dropped at the
end; SQLite, a file in a temporary directory) holding ``--events`` processed events
received over the asked range and ``--outside`` more before and after it. Then, with
``hookd.ops.OperationOps`` as ``hookd serve`` and ``hookd worker`` run it (batches of
``--batch``, a wake-up after each that does nothing here):

1. ask: the estimate (counted before it starts) and how long asking took;
2. run, sampling ``GET``-shaped progress every 50 ms, while a writer inserts 10-event
   batches through ``store.intake.events.insert_events`` (as a group commit would): the
   operation's seconds and events/s, and the writer's commit latency (p50, p99, max)
   during the run against the same writer with nothing else running;
3. the same range again, cancelled once a third is done: seconds from the cancel to
   ``done``, and how far it got (its progress against the events it left pending);
4. one request id asked for twice at once: operations recorded.

Results go to ``bench/results/operations.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

import sqlalchemy as sa  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: E402

from hookd.ops import EventOps, OperationFilter, OperationOps, OperationRequest  # noqa: E402
from hookd.sources import Sources  # noqa: E402
from store import db, migrate  # noqa: E402
from store.crypto import BodyCipher  # noqa: E402
from store.intake.events import NewEvent, insert_events  # noqa: E402
from store.models import EVENTS, OPERATIONS  # noqa: E402
from store.status import OperationAction  # noqa: E402

PG_DB = "hookd_run_operations"
PG = "postgresql+asyncpg://postgres@127.0.0.1:5432"
SOURCE = "bench"


def psql(sql: str) -> None:
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc", sql], check=True, capture_output=True
    )


def event(key: str, received_at: datetime) -> NewEvent:
    return NewEvent(
        source=SOURCE,
        provider="standard",
        dedupe_key=key,
        type="invoice.paid",
        origin="webhook",
        received_at=received_at,
        occurred_at=None,
        verified_with="bench",
        headers={"content-type": "application/json"},
        body=b'{"type": "invoice.paid", "data": {"object": {"id": "in_1"}}}',
    )


async def seed(engine: AsyncEngine, count: int, start: datetime, prefix: str) -> None:
    """``count`` processed events received one millisecond apart from ``start``."""
    for first in range(0, count, 1000):
        batch = [
            event(f"{prefix}-{i}", start + timedelta(milliseconds=i))
            for i in range(first, min(first + 1000, count))
        ]
        async with engine.begin() as conn:
            await insert_events(conn, batch, BodyCipher(""))
    async with engine.begin() as conn:
        await conn.execute(sa.update(EVENTS).values(status="processed", attempts=1))


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {
        "n": len(values),
        "p50_ms": round(pick(0.5) * 1000, 2),
        "p99_ms": round(pick(0.99) * 1000, 2),
        "max_ms": round(max(values) * 1000, 2),
    }


async def writer(engine: AsyncEngine, stop: asyncio.Event, tag: str) -> list[float]:
    """10-event commits, one after another, until ``stop``: each one's seconds."""
    took: list[float] = []
    n = 0
    while not stop.is_set():
        batch = [event(f"{tag}-{n}-{i}", datetime.now(UTC)) for i in range(10)]
        n += 1
        started = time.perf_counter()
        async with engine.begin() as conn:
            await insert_events(conn, batch, BodyCipher(""))
        took.append(time.perf_counter() - started)
        await asyncio.sleep(0.005)
    return took


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    engine = db.create_engine(url)
    out: dict[str, Any] = {"events": args.events, "outside": args.outside, "batch": args.batch}
    try:
        start = datetime.now(UTC) - timedelta(hours=2)
        end = start + timedelta(milliseconds=args.events)
        await seed(engine, args.outside, start - timedelta(minutes=10), "before")
        await seed(engine, args.events, start, "in")
        await seed(engine, args.outside, end + timedelta(minutes=10), "after")

        async def wake() -> None:
            pass

        ops = OperationOps(
            engine, Sources(Path("bench.toml"), {}), EventOps(engine, wake), batch=args.batch
        )
        flt = OperationFilter.parse({"since": start.isoformat(), "until": end.isoformat()})

        # The writer alone first: the baseline of its commit latency.
        stop = asyncio.Event()
        alone = asyncio.create_task(writer(engine, stop, "alone"))
        await asyncio.sleep(2.0)
        stop.set()
        baseline = await alone

        # 1-2: ask, then run with progress sampled and the writer going.
        asked_at = time.perf_counter()
        asked = await ops.create(OperationRequest(OperationAction.REPLAY, flt), trigger="cli")
        ask_s = time.perf_counter() - asked_at
        operation_id = asked.operation["id"]
        samples: list[dict[str, Any]] = []
        stop = asyncio.Event()
        during = asyncio.create_task(writer(engine, stop, "during"))
        run_started = time.perf_counter()
        runner = asyncio.create_task(ops.run(operation_id))
        while not runner.done():
            op = await ops.get(operation_id)
            samples.append({"t_s": round(time.perf_counter() - run_started, 3), **op["progress"]})
            await asyncio.sleep(0.05)
        await runner
        run_s = time.perf_counter() - run_started
        stop.set()
        concurrent = await during
        final = await ops.get(operation_id)
        out["replay"] = {
            "estimate": asked.operation["progress"]["total"],
            "ask_s": round(ask_s, 3),
            "run_s": round(run_s, 3),
            "events_per_s": round(final["progress"]["done"] / run_s),
            "status": final["status"],
            "progress": final["progress"],
            "samples": len(samples),
            "first_samples": samples[:3],
            "monotonic": all(a["done"] <= b["done"] for a, b in itertools.pairwise(samples)),
        }
        out["writer_commit_alone"] = ms(baseline)
        out["writer_commit_during_replay"] = ms(concurrent)

        # 3: the same range again, cancelled a third of the way.
        async with engine.begin() as conn:
            await conn.execute(sa.update(EVENTS).values(status="processed", attempts=1))
        asked = await ops.create(OperationRequest(OperationAction.REPLAY, flt), trigger="cli")
        operation_id = asked.operation["id"]
        runner = asyncio.create_task(ops.run(operation_id))
        # Polls the database, as a client polls the API.
        while (await ops.get(operation_id))["progress"]["done"] < args.events // 3:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        cancel_at = time.perf_counter()
        cancelled = await ops.cancel(operation_id, wait_s=5.0)
        cancel_s = time.perf_counter() - cancel_at
        await runner
        async with engine.connect() as conn:
            left_pending = await conn.scalar(
                sa.select(sa.func.count()).where(EVENTS.c.status == "pending")
            )
        out["cancel"] = {
            "status": cancelled["status"],
            "stopped_within_s": round(cancel_s, 3),
            "progress": cancelled["progress"],
            "message": cancelled["error"]["message"] if cancelled["error"] else None,
            "events_left_pending": left_pending,
            "progress_matches_events": left_pending == cancelled["progress"]["changed"],
        }

        # 4: one request id, twice at once.
        request = OperationRequest(OperationAction.REPLAY, flt, request_id="bench-twice")
        both = await asyncio.gather(*(ops.create(request, trigger="api") for _ in range(2)))
        async with engine.connect() as conn:
            recorded = await conn.scalar(
                sa.select(sa.func.count()).where(OPERATIONS.c.request_id == "bench-twice")
            )
        out["same_request_id"] = {
            "asked": 2,
            "operations_recorded": recorded,
            "same_id": both[0].operation["id"] == both[1].operation["id"],
        }
        with contextlib.suppress(Exception):
            await ops.cancel(both[0].operation["id"], wait_s=0)
    finally:
        await engine.dispose()
    return out


def run_postgres(args: argparse.Namespace) -> dict[str, Any]:
    psql(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
    psql(f"CREATE DATABASE {PG_DB}")
    url = f"{PG}/{PG_DB}"
    try:
        migrate.upgrade(url)
        return asyncio.run(measure(url, args))
    finally:
        psql(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")


def run_sqlite(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookd_run_operations_") as tmp:
        url = f"sqlite+aiosqlite:///{os.path.join(tmp, 'operations.db')}"
        migrate.upgrade(url)
        return asyncio.run(measure(url, args))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--targets", default="postgres,sqlite")
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--outside", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for target in args.targets.split(","):
        runner = {"postgres": run_postgres, "sqlite": run_sqlite}[target]
        results[target] = runner(args)
        print(json.dumps({target: results[target]}, indent=2), flush=True)
    path = BENCH / "results" / "operations.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    summary = {
        t: {
            "replay_s": r["replay"]["run_s"],
            "events_per_s": r["replay"]["events_per_s"],
            "cancel_stopped_within_s": r["cancel"]["stopped_within_s"],
            "writer_p99_ms_alone_vs_during": (
                r["writer_commit_alone"]["p99_ms"],
                r["writer_commit_during_replay"]["p99_ms"],
            ),
        }
        for t, r in results.items()
    }
    print("summary:", json.dumps(summary), f"-> {path}")


if __name__ == "__main__":
    main()
