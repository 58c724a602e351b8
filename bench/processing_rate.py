"""Processing rate of one ``Processor`` in this process: claim, no-op handler, outcome.

No receiver, no Redis, no worker process: ``--events`` events are stored first (in
batches, as the receiver's group commit would), then one ``Processor`` (the worker's
defaults: batch 128, concurrency 32) drains them and the rate is events / drain time.
``--fail`` runs a handler that always raises with ``max_attempts = 1``, so every event
takes the failure path (``mark_failed``) instead. What it isolates is the cost of the
database work per attempt (claim, ledger, outcome, history), which the end-to-end
``bench/pipeline.py`` measures together with the receiver and arq.

``--compare`` measures the cost of the event history: each repeat runs twice, in
turn, once as shipped and once with the history's inserts left out (``store.claims.history.
record_attempts`` made a no-op), so both see the same machine at nearly the same time.

    .venv/bin/python bench/processing_rate.py                      # PostgreSQL and SQLite
    .venv/bin/python bench/processing_rate.py --events 5000 --repeat 3 --only sqlite
    .venv/bin/python bench/processing_rate.py --compare --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hookd.event import Event  # noqa: E402
from hookd.sources import parse_sources  # noqa: E402
from processing.attempt import RetryPolicy  # noqa: E402
from processing.processor import Processor  # noqa: E402
from store import db, migrate  # noqa: E402
from store.claims import history  # noqa: E402
from store.crypto import BodyCipher  # noqa: E402
from store.intake.events import NewEvent, insert_events  # noqa: E402
from tests.support import services  # noqa: E402

SOURCES = """
[[sources]]
name = "bench"
provider = "standard"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
max_attempts = 1
"""
STORE_BATCH = 500


async def noop(event: Event) -> None:
    return None


async def failing(event: Event) -> None:
    raise RuntimeError("bench failure")


def new_events(count: int, start: int) -> list[NewEvent]:
    now = datetime.now(UTC)
    return [
        NewEvent(
            source="bench",
            provider="standard",
            dedupe_key=f"msg_{start + i}",
            type="bench.event",
            origin="webhook",
            received_at=now,
            occurred_at=now,
            verified_with="v1;key=0",
            headers={"content-type": "application/json"},
            body=b'{"type": "bench.event", "data": {"n": %d}}' % (start + i),
        )
        for i in range(count)
    ]


async def one_run(url: str, events: int, fail: bool) -> float:
    """Store ``events``, drain them with one processor: events per second."""
    engine = db.create_engine(url)
    try:
        cipher = BodyCipher("")
        for start in range(0, events, STORE_BATCH):
            async with engine.begin() as conn:
                await insert_events(
                    conn, new_events(min(STORE_BATCH, events - start), start), cipher
                )
        sources = parse_sources(SOURCES, Path("bench.toml"), env={})
        handler = failing if fail else noop
        proc = Processor(
            engine,
            sources,
            {"bench": [("bench.handler", handler)]},
            cipher,
            retry=RetryPolicy(base_s=60, cap_s=60),
            batch_size=128,
            concurrency=32,
        )
        started = time.perf_counter()
        done = 0
        while done < events:
            n = await proc.drain(max_s=600)
            if n == 0:
                break
            done += n
        elapsed = time.perf_counter() - started
        if done != events:
            raise SystemExit(f"processed {done} of {events}")
        return events / elapsed
    finally:
        await engine.dispose()


def run_postgres(events: int, fail: bool) -> float:
    name = services.create_database()
    try:
        url = services.sqlalchemy_url(name)
        migrate.upgrade(url)
        return asyncio.run(one_run(url, events, fail))
    finally:
        services.drop_database(name)


def run_sqlite(events: int, fail: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / f'bench-{uuid.uuid4().hex[:8]}.db'}"
        migrate.upgrade(url)
        return asyncio.run(one_run(url, events, fail))


async def _no_history(conn: object, attempts: object) -> None:
    return None


def measured(run: object, events: int, fail: bool, with_history: bool) -> float:
    real = history.record_attempts
    if not with_history:
        history.record_attempts = _no_history  # type: ignore[assignment]
    try:
        return run(events, fail)  # type: ignore[operator, no-any-return]
    finally:
        history.record_attempts = real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=["postgres", "sqlite"])
    parser.add_argument("--fail", action="store_true", help="every attempt fails (dead at once)")
    parser.add_argument(
        "--compare", action="store_true", help="also without the history's inserts, in turn"
    )
    args = parser.parse_args()
    # A log line per failed attempt would be most of what --fail measures.
    logging.disable(logging.WARNING)
    out: dict[str, dict[str, float | list[float]]] = {}
    for name, run in (("postgres", run_postgres), ("sqlite", run_sqlite)):
        if args.only and args.only != name:
            continue
        variants = (True, False) if args.compare else (True,)
        rates: dict[bool, list[float]] = {v: [] for v in variants}
        for _ in range(args.repeat):
            for with_history in variants:
                rates[with_history].append(measured(run, args.events, args.fail, with_history))
        for with_history, got in rates.items():
            label = name if with_history else f"{name} (no history)"
            out[label] = {"median_per_s": round(statistics.median(got), 1), "runs": got}
            print(
                f"{label}: {statistics.median(got):,.0f} events/s (runs: "
                + ", ".join(f"{r:,.0f}" for r in got)
                + ")",
                file=sys.stderr,
            )
    print(json.dumps({"events": args.events, "fail": args.fail, "rates": out}))


if __name__ == "__main__":
    main()
