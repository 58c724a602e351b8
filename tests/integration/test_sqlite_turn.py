"""The turn that orders hookd's busy SQLite writers (``sqlite_write.turn_path``).

The receiver's writer and the processor hold an exclusive ``flock`` on a file beside the
database around each transaction, so that a waiter is woken when the holder lets go
instead of sleeping in SQLite's busy handler. These tests hold the turn from another
process (real processes, real signals) and show who waits, and that no way of letting go,
``kill -9`` included, leaves it held.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd.runtime import sqlite_writer
from store import db
from store.crypto import BodyCipher
from store.intake import sqlite_write
from store.models import EVENTS
from tests.support.data import engine_of, new_event

pytestmark = pytest.mark.anyio

# Takes the turn, says so, and keeps it until its stdin closes (or it is killed).
HOLDER = """
import fcntl, sys
from store.intake import sqlite_write
fd = sqlite_write.open_turn(sys.argv[1])
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def db_path(url: str) -> str:
    path = db.sqlite_path(url)
    assert path is not None
    return path


@contextlib.contextmanager
def held_elsewhere(path: str) -> Iterator[subprocess.Popen[bytes]]:
    """Another process holding the turn of the database at ``path``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"held\n"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def turn_is_free(path: str) -> bool:
    fd = sqlite_write.open_turn(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    finally:
        os.close(fd)


@dataclass
class TurnDb:
    path: str
    engine: AsyncEngine
    transaction: Callable[[], contextlib.AbstractAsyncContextManager[AsyncConnection]]


@pytest.fixture
async def turn_db(sqlite_url: str) -> AsyncIterator[TurnDb]:
    """A migrated SQLite file, an engine on it, and its turn-taking transactions."""
    async with engine_of(sqlite_url) as engine:
        yield TurnDb(db_path(sqlite_url), engine, db.transaction(engine))


async def test_the_processor_side_waits_at_its_first_statement_and_goes_on_when_let_go(
    turn_db: TurnDb,
) -> None:
    """Its transaction starts without the turn (what it builds first keeps no one
    waiting); its first statement waits for it; its commit comes before it is let go."""
    path, engine, transaction = turn_db.path, turn_db.engine, turn_db.transaction
    with held_elsewhere(path) as holder:
        began, wrote = asyncio.Event(), asyncio.Event()

        async def write() -> None:
            async with transaction() as conn:
                began.set()
                await conn.execute(sa.text("CREATE TABLE scratch (x INTEGER)"))
                wrote.set()
                await conn.execute(sa.text("INSERT INTO scratch VALUES (1)"))
                assert not turn_is_free(path)  # held to the commit

        task = asyncio.create_task(write())
        await asyncio.wait_for(began.wait(), 10)
        await asyncio.sleep(0.3)
        assert not wrote.is_set(), "wrote while another process held the turn"
        assert holder.stdin is not None
        holder.stdin.close()  # lets go
        await asyncio.wait_for(task, 10)
    assert turn_is_free(path)
    async with engine.connect() as conn:
        assert await conn.scalar(sa.text("SELECT x FROM scratch")) == 1
    async with transaction() as conn:  # a transaction without a statement: no turn
        assert turn_is_free(path)


async def test_a_failed_transaction_lets_go_of_the_turn(turn_db: TurnDb) -> None:
    path, engine, transaction = turn_db.path, turn_db.engine, turn_db.transaction
    async with engine.begin() as conn:
        await conn.execute(sa.text("CREATE TABLE scratch (x INTEGER)"))

    async def fail() -> None:
        async with transaction() as conn:
            await conn.execute(sa.text("INSERT INTO scratch VALUES (1)"))
            await conn.execute(sa.text("INSERT INTO no_such_table VALUES (1)"))

    with pytest.raises(sa.exc.OperationalError):
        await fail()
    assert turn_is_free(path)
    async with engine.connect() as conn:  # rolled back
        assert await conn.scalar(sa.text("SELECT count(*) FROM scratch")) == 0


async def test_a_holder_killed_with_sigkill_frees_the_turn(turn_db: TurnDb) -> None:
    path, transaction = turn_db.path, turn_db.transaction
    with held_elsewhere(path) as holder:
        wrote, leave = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with transaction() as conn:
                await conn.execute(sa.text("CREATE TABLE scratch (x INTEGER)"))
                wrote.set()
                await leave.wait()

        task = asyncio.create_task(hold())
        await asyncio.sleep(0.3)
        assert not wrote.is_set()
        os.kill(holder.pid, signal.SIGKILL)
        await asyncio.wait_for(wrote.wait(), 10)
        assert not turn_is_free(path)  # ours now
        leave.set()
        await task
    assert turn_is_free(path)


async def test_a_cancelled_wait_does_not_keep_the_turn(turn_db: TurnDb) -> None:
    """Cancelled while its thread waits: the turn, once the thread has it, is let go."""
    path, transaction = turn_db.path, turn_db.transaction
    with held_elsewhere(path) as holder:

        async def write() -> None:
            async with transaction() as conn:
                await conn.execute(sa.text("CREATE TABLE scratch (x INTEGER)"))
                raise AssertionError("wrote while another process held the turn")

        task = asyncio.create_task(write())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    for _ in range(100):  # the waiting thread takes it, then its descriptor closes
        if turn_is_free(path):
            break
        await asyncio.sleep(0.05)
    assert turn_is_free(path)
    async with transaction() as conn:  # and it is ours to take again
        await conn.execute(sa.text("CREATE TABLE scratch (x INTEGER)"))


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
async def test_the_receivers_insert_waits_for_the_turn(sqlite_url: str, process: bool) -> None:
    path = db_path(sqlite_url)
    ins = sqlite_writer.inserter_for(
        sqlite_url, BodyCipher(""), committers=1, timeout_s=30, sqlite_process=process
    )
    await ins.start()
    engine = db.create_engine(sqlite_url)
    try:
        with held_elsewhere(path) as holder:
            insert = asyncio.create_task(ins.insert([new_event("waits")]))
            await asyncio.sleep(0.5)
            assert not insert.done(), "inserted while another process held the turn"
            assert holder.stdin is not None
            holder.stdin.close()
            [stored] = await asyncio.wait_for(insert, 10)
        assert stored.created
        async with engine.connect() as conn:
            count = await conn.scalar(sa.select(sa.func.count()).select_from(EVENTS))
        assert count == 1
    finally:
        await ins.close()
        await engine.dispose()


async def test_postgresql_has_no_turn(pg_url: str) -> None:
    async with engine_of(pg_url) as engine:
        assert db.transaction(engine) == engine.begin
        assert db.sqlite_path(pg_url) is None


def test_the_turn_file_sits_beside_the_database(tmp_path: Path) -> None:
    assert sqlite_write.turn_path(str(tmp_path / "hookd.db")) == str(tmp_path / "hookd.db-turn")


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
async def test_a_turn_file_that_cannot_be_opened_fails_the_batch_as_sqlite_would(
    sqlite_url: str, process: bool
) -> None:
    """A folder in its place: the batch fails with SQLite's error class, which the
    receiver answers 503 (nothing acknowledged); once it can be opened, inserts go on."""
    path = db_path(sqlite_url)
    os.mkdir(sqlite_write.turn_path(path))
    ins = sqlite_writer.inserter_for(
        sqlite_url, BodyCipher(""), committers=1, timeout_s=30, sqlite_process=process
    )
    await ins.start()
    try:
        with pytest.raises(sqlite3.OperationalError, match="-turn"):
            await ins.insert([new_event("refused")])
        os.rmdir(sqlite_write.turn_path(path))
        [stored] = await ins.insert([new_event("refused")])
        assert stored.created
    finally:
        await ins.close()
