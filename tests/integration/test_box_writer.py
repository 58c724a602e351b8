"""The box's one SQLite writer: every receiver's inserts and every processor's outcomes in
one transaction per window, each request in a savepoint of its own.

- A window's requests live and fail on their own: a value SQLite cannot bind fails its
  request alone; the others of the window commit.
- A processor's window of successes (``settle``): ledger, status, history, fenced on the
  lease; one taken over meanwhile records ``lease_lost``; the same window written again
  (its answer lost with a killed writer) is recognised, not recorded twice.
- Over its socket, from two clients at once, in the writer process ``hookd serve`` runs;
  a killed writer fails what it had not answered.

A real ``hookd serve`` whose one writer is killed again and again while its processors
write through it: ``tests/chaos/test_sqlite_writer.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hookd.runtime.sqlite_writer import SqliteSocketInserter
from store.claims.history import AttemptOutcome, HistoryKind
from store.crypto import BodyCipher
from store.intake import sqlite_write
from store.intake.events import Lease, NewRow, prepare
from store.intake.writer_link import WriterGone, WriterSocket
from store.status import EventStatus
from tests.support.data import new_event

pytestmark = pytest.mark.anyio
PLAIN = BodyCipher("")
OWNER = "worker-a"


def path_of(url: str) -> str:
    return url.split("///", 1)[1]


def leased(keys: list[str], owner: str = OWNER) -> list[NewRow]:
    lease = Lease(owner, datetime.now(UTC) + timedelta(seconds=60))
    return prepare([new_event(k) for k in keys], PLAIN, lease).rows


def settlement(rows: list[NewRow], owner: str = OWNER) -> sqlite_write.Settlement:
    """A window where every event of ``rows`` succeeded, one handler each."""
    at = sqlite_write.sqlite_time(datetime.now(UTC))
    assert at is not None
    attempts: list[tuple[object, ...]] = [
        (r["id"], "attempt", at, at, 1, owner, None, "processed", None, None, 0.001) for r in rows
    ]
    return (owner, at, [(r["id"], "h") for r in rows], [r["id"] for r in rows], attempts)


def query(url: str, sql: str, *params: object) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(path_of(url))) as conn:
        return conn.execute(sql, params).fetchall()


def test_the_words_it_stores_are_the_stores_own() -> None:
    assert sqlite_write.PROCESSED == EventStatus.PROCESSED
    assert sqlite_write.PROCESSING == EventStatus.PROCESSING
    assert sqlite_write.LEASE_LOST == AttemptOutcome.LEASE_LOST
    assert sqlite_write.ATTEMPT == HistoryKind.ATTEMPT


def test_an_unbindable_value_fails_its_request_alone(sqlite_url: str) -> None:
    writer = sqlite_write.SqliteWriter(path_of(sqlite_url))
    good = prepare([new_event("good-1"), new_event("good-2")], PLAIN).rows
    bad = prepare([new_event("bad-1")], PLAIN).rows
    bad[0] = {**bad[0], "type": "lone \udc80 surrogate"}
    other = prepare([new_event("good-3")], PLAIN).rows
    try:
        replies = writer.window(
            [
                (sqlite_write.INSERT, good),
                (sqlite_write.INSERT, bad),
                (sqlite_write.INSERT, other),
                ("nonsense", []),
            ]
        )
    finally:
        writer.discard()
    assert [r[0] for r in replies] == ["ok", "error", "ok", "error"]
    assert replies[1][1] == "DataError"
    keys = {row[0] for row in query(sqlite_url, "SELECT dedupe_key FROM event_keys")}
    assert keys == {"good-1", "good-2", "good-3"}
    assert query(sqlite_url, "SELECT count(*) FROM events") == [(3,)]


def test_a_settlement_writes_ledger_status_and_history_fenced_on_the_lease(
    sqlite_url: str,
) -> None:
    writer = sqlite_write.SqliteWriter(path_of(sqlite_url))
    mine = leased(["m1", "m2", "m3"])
    theirs = leased(["t1"], owner="worker-b")
    try:
        [inserted] = writer.window([(sqlite_write.INSERT, mine + theirs)])
        assert inserted[0] == "ok"
        # "worker-a" settles all four: one of them is worker-b's (taken over, say).
        window = settlement(mine + theirs)
        [reply] = writer.window([(sqlite_write.SETTLE, window)])
        assert reply[0] == "ok"
        assert reply[1] == {r["id"] for r in mine}
        # The same window again (its first answer lost with a killed writer): what it
        # wrote is recognised as this owner's, and nothing is recorded twice.
        [again] = writer.window([(sqlite_write.SETTLE, window)])
        assert again[1] == {r["id"] for r in mine}
    finally:
        writer.discard()
    statuses = dict(query(sqlite_url, "SELECT dedupe_key, status FROM events"))
    assert statuses == {"m1": "processed", "m2": "processed", "m3": "processed", "t1": "processing"}
    history = query(
        sqlite_url,
        "SELECT k.dedupe_key, h.outcome FROM event_history h "
        "JOIN event_keys k ON k.event_id = h.event_id ORDER BY k.dedupe_key, h.id",
    )
    assert history == [
        ("m1", "processed"),
        ("m2", "processed"),
        ("m3", "processed"),
        ("t1", "lease_lost"),
        ("t1", "lease_lost"),
    ]
    assert query(sqlite_url, "SELECT count(*) FROM handler_runs") == [(4,)]


@contextlib.contextmanager
def writer_process(url: str, socket_path: str) -> Iterator[subprocess.Popen[bytes]]:
    root = str(Path(__file__).parents[2])
    proc = subprocess.Popen(
        [sys.executable, "-m", "store.intake.sqlite_write", "--listen", socket_path, path_of(url)],
        stdin=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": root},
        cwd=root,
    )
    try:
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # it answers what it holds, then ends
        proc.wait(timeout=10)


async def test_two_clients_over_the_socket_each_get_their_own_answers(
    sqlite_url: str, tmp_path: Path
) -> None:
    socket_path = str(tmp_path / "writer.sock")
    with writer_process(sqlite_url, socket_path) as proc:
        receiver = SqliteSocketInserter(socket_path, PLAIN)
        processor = WriterSocket(socket_path)
        try:
            rows = leased([f"k{i}" for i in range(20)])
            await processor.call(sqlite_write.INSERT, rows)
            # Inserts of one client and settlements of the other, interleaved.
            inserts = [receiver.insert([new_event(f"r{i}")]) for i in range(30)]
            settles = [processor.call(sqlite_write.SETTLE, settlement([row])) for row in rows]
            results = await asyncio.gather(*inserts, *settles)
            stored = results[:30]
            assert all(s[0].created for s in stored)
            owned = [r[0] for r in results[30:]]
            assert owned == [{row["id"]} for row in rows]
            # A writer killed: what it had not answered fails; serve would start another.
            proc.kill()
            proc.wait(timeout=10)
            with pytest.raises(WriterGone):
                await receiver.insert([new_event("after")])
        finally:
            await receiver.close()
            await processor.close()
    assert query(sqlite_url, "SELECT count(*) FROM events WHERE status = 'processed'") == [(20,)]
    assert query(sqlite_url, "SELECT count(*) FROM events") == [(50,)]
