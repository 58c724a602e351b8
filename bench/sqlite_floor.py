"""How long each write of an event holds SQLite's one write lock, and how much of that is
SQLite's own work: the bound of ``hookd serve`` alone on SQLite (S2, S6).

Under ``hookd serve`` alone every event is written three times, each inside the SQLite
turn (``store.intake.sqlite_write.turn_path``): the receiver's insert, the processor's claim,
and its outcome (ledger rows, the event processed, its attempt's history row). This
script makes those writes on a fresh database migrated by ``hookd db upgrade``, one
process, no HTTP, no contention:

1. **hookd's code**: the receiver's writer (``SqliteWriter.write``, batches of
   ``--insert-batch``) fills the table, then the processor's two transactions
   (``store.claims.claiming`` and ``store.claims.history`` through
   ``store.db.transaction``, batches of ``--batch``) claim and settle every event, as
   a drain with a no-op handler does.
   Every statement SQLAlchemy hands the driver, with its parameters, is recorded.
2. **SQLite alone**: the same statements with the same parameters, replayed through
   the standard library's ``sqlite3`` on a copy of the database as it was before
   step 1, in the same transactions.

It prints, per write, the lock held per transaction and per event for both, and the
share that is not SQLite's. With ``--bare-rps`` (the bare app's req/s in the same
run's S2), also the lock budget per event for a ratio of it (``--ratio``): what all
three writes of an event may hold together for ``hookd serve`` to reach that ratio.

    .venv/bin/python bench/sqlite_floor.py --bare-rps 27346 --ratio 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from store import db  # noqa: E402
from store.claims import claiming, history  # noqa: E402
from store.ids import new_ids  # noqa: E402
from store.intake.events import NewRow  # noqa: E402
from store.intake.sqlite_write import SQLITE_PRAGMAS, SqliteWriter  # noqa: E402
from store.status import EventStatus  # noqa: E402

BODY_BYTES = 1100  # about the mean of S1/S2's signed GitHub bodies (1,087 bytes)
HEADERS = {
    "content-type": "application/json",
    "user-agent": "GitHub-Hookshot/bench",
    "x-github-event": "issues",
    "x-github-hook-id": "1",
    "x-hub-signature-256": "sha256=" + "0" * 64,
}
OWNER = "bench:floor"


@dataclass
class Statement:
    sql: str
    params: Any
    many: bool


@dataclass
class Transaction:
    kind: str
    events: int
    held_s: float
    statements: list[Statement] = field(default_factory=list)


def new_rows(n: int, start: int, now: datetime) -> list[NewRow]:
    body = os.urandom(BODY_BYTES // 2).hex().encode()
    rows: list[NewRow] = []
    for i, event_id in enumerate(new_ids(n)):
        rows.append(
            {
                "id": event_id,
                "source": "github",
                "provider": "github",
                "dedupe_key": f"delivery-{start + i}",
                "type": "issues.opened",
                "origin": "webhook",
                "received_at": now,
                "occurred_at": None,
                "verified_with": "secret",
                "headers": HEADERS,
                "body": body,
                "body_encrypted": False,
                "status": EventStatus.PENDING,
                "attempts": 0,
                "next_attempt_at": now,
                "created_at": now,
                "updated_at": now,
                "object_key": None,
                "object_version": None,
                "payload_hash": None,
                "traceparent": None,
            }
        )
    return rows


def migrate(path: Path) -> None:
    env = {
        **os.environ,
        "HOOKD_DATABASE_URL": f"sqlite+aiosqlite:///{path}",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "hookd.cli", "db", "upgrade"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"hookd db upgrade failed: {done.stdout}{done.stderr}")


def fill(path: Path, events: int, batch: int) -> list[Transaction]:
    """The receiver's writer: its real code, its real transactions, timed whole."""
    writer = SqliteWriter(str(path))
    now = datetime.now(UTC) - timedelta(minutes=1)
    out = []
    try:
        for start in range(0, events, batch):
            rows = new_rows(min(batch, events - start), start, now)
            began = time.perf_counter()
            created, _ = writer.write(rows)
            out.append(Transaction("insert", len(created), time.perf_counter() - began))
    finally:
        writer.discard()
    return out


async def process(path: Path, batch: int) -> list[Transaction]:
    """The processor's claim and outcome for every event, through hookd's own code."""
    engine = db.create_engine(f"sqlite+aiosqlite:///{path}")
    transaction = db.transaction(engine)
    current: list[Statement] = []
    first: list[float] = []

    def record(
        _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, many: bool
    ) -> None:
        if not first:
            first.append(time.perf_counter())  # the turn is taken at the first statement
        current.append(Statement(statement, parameters, many))

    # After hookd's own hook (``transaction`` adds it: it takes the turn), so the clock
    # starts with the lock held.
    sa.event.listen(engine.sync_engine, "before_cursor_execute", record)
    out: list[Transaction] = []
    try:
        while True:
            now = datetime.now(UTC)
            current, first = [], []
            async with transaction() as conn:
                rows = await claiming.claim_due(
                    conn, OWNER, 120.0, batch, now, shares=claiming.alone(["github"], batch)
                )
            ended = time.perf_counter()
            if not rows:
                break
            out.append(Transaction("claim", len(rows), ended - first[0], current))
            now = datetime.now(UTC)
            attempts = [
                history.Attempt(
                    event_id=r.id,
                    attempt=r.attempts,
                    worker=OWNER,
                    at=now,
                    finished_at=now,
                    duration_s=0.0001,
                    outcome=history.AttemptOutcome.PROCESSED,
                )
                for r in rows
            ]
            current, first = [], []
            async with transaction() as conn:
                await claiming.record_handlers(conn, [(r.id, "noop") for r in rows], now)
                owned = await claiming.mark_processed(conn, [r.id for r in rows], OWNER, now)
                await history.record_attempts(conn, attempts)
            ended = time.perf_counter()
            assert len(owned) == len(rows), "every claimed event is settled"
            out.append(Transaction("outcome", len(rows), ended - first[0], current))
    finally:
        await engine.dispose()
    return out


def replay(path: Path, done: list[Transaction]) -> list[Transaction]:
    """The same statements and parameters, straight into sqlite3, same transactions."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    for pragma in SQLITE_PRAGMAS:
        conn.execute(pragma)
    out = []
    try:
        for tx in done:
            began = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            for s in tx.statements:
                if s.many:
                    conn.executemany(s.sql, s.params)
                else:
                    conn.execute(s.sql, s.params).fetchall()
            conn.execute("COMMIT")
            out.append(Transaction(tx.kind, tx.events, time.perf_counter() - began))
    finally:
        conn.close()
    return out


def summary(txs: list[Transaction], kind: str) -> tuple[float, float, float]:
    """(ms per transaction, median; events per transaction, mean; µs per event)."""
    mine = [t for t in txs if t.kind == kind and t.events]
    held = sum(t.held_s for t in mine)
    events = sum(t.events for t in mine)
    return (
        1000 * statistics.median(t.held_s for t in mine),
        events / len(mine),
        1e6 * held / events,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=20_000, help="events written (default 20000)")
    p.add_argument("--batch", type=int, default=128, help="claim batch (HOOKD_PROCESS_BATCH)")
    p.add_argument("--insert-batch", type=int, default=25, help="rows per receiver commit")
    p.add_argument("--bare-rps", type=float, help="the bare app's req/s in the same S2 run")
    p.add_argument("--ratio", type=float, default=0.5, help="target ratio (default 0.5)")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hookd-floor-"))
    try:
        path = work / "hookd.db"
        migrate(path)
        inserted = fill(path, args.events, args.insert_batch)
        copy = work / "replay.db"
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        shutil.copyfile(path, copy)
        hookd = asyncio.run(process(path, args.batch))
        alone = replay(copy, hookd)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"{args.events:,} events of {BODY_BYTES} bytes; receiver commits of "
        f"{args.insert_batch}, claims of {args.batch}; one process, no contention\n"
    )
    print(
        "| write | per transaction | events per transaction | hookd's code µs/event "
        "| SQLite alone µs/event | not SQLite |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    total_hookd = 0.0
    total_alone = 0.0
    ins = summary(inserted, "insert")
    print(
        f"| insert (receiver's writer, raw sqlite3) | {ins[0]:.2f} ms | {ins[1]:.0f} | "
        f"{ins[2]:.1f} | (the same code) | - |"
    )
    total_hookd += ins[2]
    total_alone += ins[2]
    for kind in ("claim", "outcome"):
        h, a = summary(hookd, kind), summary(alone, kind)
        total_hookd += h[2]
        total_alone += a[2]
        print(
            f"| {kind} (processor, SQLAlchemy) | {h[0]:.2f} ms (alone {a[0]:.2f}) | "
            f"{h[1]:.0f} | {h[2]:.1f} | {a[2]:.1f} | {100 * (1 - a[2] / h[2]):.0f}% |"
        )
    print(
        f"| all three | | | {total_hookd:.1f} | {total_alone:.1f} | "
        f"{100 * (1 - total_alone / total_hookd):.0f}% |"
    )
    if args.bare_rps:
        rate = args.ratio * args.bare_rps
        budget = 1e6 / rate
        print(
            f"\n{args.ratio:.2f}x of {args.bare_rps:,.0f} req/s is {rate:,.0f} events/s: "
            f"{budget:.1f} µs of lock per event for all three writes, against "
            f"{total_alone:.1f} µs for SQLite alone ({total_hookd:.1f} with hookd's code)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
