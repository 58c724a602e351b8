"""The SQLite writer process: ``python -m store.intake.sqlite_write``, spawned and
supervised for the receiver, and the choice of the receiver's inserter.

``store.intake.sqlite_write`` holds the insert and the child's loop; this module starts
the child, feeds it over a pipe, reads its answers, and starts another when it dies.
The inserters that stay in the receiver's process (PostgreSQL's, SQLite's on a thread)
are ``store.intake.fastpath``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import sqlite3
import sys
from collections import deque
from collections.abc import Sequence
from typing import Any

from store.crypto import BodyCipher
from store.db import check_url
from store.intake import sqlite_write
from store.intake.events import Lease, NewEvent, NewRow, Stored, prepare
from store.intake.fastpath import Inserter, PgInserter, SqliteInserter, probe_event

log = logging.getLogger("hookd.store")

# How long a closing writer process may take to answer what it holds before it is killed.
CLOSE_TIMEOUT_S = 15.0


class WriterGone(ConnectionError):
    """The SQLite writer process ended before answering: the batch's outcome is unknown
    to the receiver, which must not acknowledge it (a committed row is a duplicate to
    the provider's retry)."""


class _WriterProcess:
    """One writer process, and the futures of the requests it has not answered, in order."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pending: deque[asyncio.Future[tuple[Any, Any]]] = deque()
        self.alive = True
        self.closing = False
        self.reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            while True:
                head = await stdout.readexactly(sqlite_write.FRAME.size)
                data = await stdout.readexactly(sqlite_write.FRAME.unpack(head)[0])
                status, first, second = pickle.loads(data)  # noqa: S301 - our own child's pipe
                future = self.pending.popleft()
                if future.done():
                    continue  # its commit timed out here; the writer finished it anyway
                if status == "ok":
                    future.set_result((first, second))
                else:
                    future.set_exception(_sqlite_error(first, second))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.fail("the SQLite writer process ended")
        code = await self.proc.wait()
        if not self.closing:
            log.warning("sqlite writer process exited", extra={"returncode": code})

    def fail(self, why: str) -> None:
        self.alive = False
        pending, self.pending = self.pending, deque()
        for future in pending:
            if not future.done():
                future.set_exception(WriterGone(why))


def _sqlite_error(name: str, message: str) -> Exception:
    """The writer's SQLite error, as the thread's would have raised it."""
    kind = getattr(sqlite3, name, None)
    if isinstance(kind, type) and issubclass(kind, sqlite3.Error):
        return kind(message)
    return sqlite3.Error(f"{name}: {message}")


class SqliteProcessInserter:
    """``SqliteWriter`` in a process of its own (``python -m store.intake.sqlite_write``).

    The insert's CPU (building the parameters, SQLite's own work, the GIL hand-offs of
    a thread) leaves the receiver's interpreter: the receiver pickles the prepared rows
    onto a pipe and reads the answer, sent after the commit. Requests are pipelined and
    answered in order. If the process dies, every request it had not answered fails
    (no acknowledgement; the provider's retry is deduplicated if the row did commit)
    and the next insert starts a new one. It ends when this closes its stdin, or when
    this process dies and the pipe with it.
    """

    def __init__(self, path: str, cipher: BodyCipher) -> None:
        self._path = path
        self._cipher = cipher
        self._writer: _WriterProcess | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        await self._process()

    async def _process(self) -> _WriterProcess:
        writer = self._writer
        if writer is not None and writer.alive:
            return writer
        async with self._lock:
            if self._writer is None or not self._writer.alive:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "store.intake.sqlite_write",
                    self._path,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
                writer = _WriterProcess(proc)
                writer.reader = asyncio.create_task(writer.read(), name="hookd-sqlite-writer")
                self._writer = writer
                log.info("sqlite writer process started", extra={"pid": proc.pid})
            return self._writer

    async def _call(self, op: str, rows: list[NewRow]) -> tuple[Any, Any]:
        writer = await self._process()
        if not writer.alive:
            raise WriterGone("the SQLite writer process ended")
        stdin = writer.proc.stdin
        assert stdin is not None
        data = pickle.dumps((op, rows), protocol=pickle.HIGHEST_PROTOCOL)
        future: asyncio.Future[tuple[Any, Any]] = asyncio.get_running_loop().create_future()
        writer.pending.append(future)
        stdin.write(sqlite_write.FRAME.pack(len(data)) + data)
        # A writer that died meanwhile fails the future; the pipe's error says no more.
        with contextlib.suppress(ConnectionError):
            await stdin.drain()
        return await future

    async def insert(self, events: Sequence[NewEvent], lease: Lease | None = None) -> list[Stored]:
        batch = prepare(events, self._cipher, lease)
        (created, unleased), existing = await self._call(sqlite_write.INSERT, batch.rows)
        return batch.resolve(created, existing, unleased)

    async def probe(self) -> None:
        batch = prepare([probe_event()], self._cipher)
        await self._call(sqlite_write.PROBE, batch.rows)

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        writer.closing = True
        stdin = writer.proc.stdin
        assert stdin is not None
        stdin.close()  # it answers what it has, then ends
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await writer.proc.wait()
        except TimeoutError:
            writer.proc.kill()
        if writer.reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await writer.reader


def inserter_for(
    url: str,
    cipher: BodyCipher,
    *,
    committers: int,
    timeout_s: float,
    sqlite_process: bool = False,
) -> Inserter:
    """The receiver's inserter for ``url``; on SQLite, in a writer process of its own when
    ``sqlite_process`` (an in-memory database stays on a thread: a process would not
    share it)."""
    parsed = check_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database or ":memory:"
        if sqlite_process and path != ":memory:":
            return SqliteProcessInserter(path, cipher)
        return SqliteInserter(path, cipher)
    return PgInserter(parsed, cipher, size=committers, timeout_s=timeout_s)
