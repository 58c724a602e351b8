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
import os
import sys
from collections.abc import Sequence
from typing import Any

from store.crypto import BodyCipher
from store.db import check_url
from store.intake import sqlite_write
from store.intake.events import Lease, NewEvent, NewRow, Stored, prepare
from store.intake.fastpath import Inserter, PgInserter, SqliteInserter, probe_event
from store.intake.writer_link import Link, WriterGone, WriterSocket

__all__ = ["SqliteProcessInserter", "SqliteSocketInserter", "WriterGone", "inserter_for"]

log = logging.getLogger("hookd.store")

# Set by ``hookd serve`` on a SQLite file: the socket of the box's one writer
# (``BoxWriter``). Its receivers and processor processes inherit it.
WRITER_SOCKET_ENV = "HOOKD_SQLITE_WRITER_SOCKET"

# How long a closing writer process may take to answer what it holds before it is killed.
CLOSE_TIMEOUT_S = 15.0


class _WriterProcess:
    """One writer process, and the link over its pipes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdout is not None
        assert proc.stdin is not None
        self.link = Link(proc.stdout, proc.stdin)
        self.closing = False
        self.reader = asyncio.create_task(self._read(), name="hookd-sqlite-writer")

    @property
    def alive(self) -> bool:
        return self.link.alive

    async def _read(self) -> None:
        self.link.start("hookd-sqlite-writer-link")
        assert self.link.task is not None
        await self.link.task
        code = await self.proc.wait()
        if not self.closing:
            log.warning("sqlite writer process exited", extra={"returncode": code})


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
                self._writer = _WriterProcess(proc)
                log.info("sqlite writer process started", extra={"pid": proc.pid})
            return self._writer

    async def _call(self, op: str, rows: list[NewRow]) -> tuple[Any, Any]:
        writer = await self._process()
        return await writer.link.call(op, rows)

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
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await writer.link.close()  # it answers what it has, then ends
                await writer.proc.wait()
        except TimeoutError:
            writer.proc.kill()
        with contextlib.suppress(asyncio.CancelledError):
            await writer.reader


class SqliteSocketInserter:
    """The receiver's inserts through the box's one writer (``hookd serve`` on a SQLite
    file starts it: ``BoxWriter``), which commits them with the other receivers' and the
    processors' outcomes, each request in a savepoint of its own. A writer that dies
    fails what it had not answered (no acknowledgement); the next insert connects to
    the one serve starts in its place."""

    def __init__(self, socket_path: str, cipher: BodyCipher) -> None:
        self._socket = WriterSocket(socket_path)
        self._cipher = cipher

    async def start(self) -> None:
        await self._socket.start()

    async def insert(self, events: Sequence[NewEvent], lease: Lease | None = None) -> list[Stored]:
        batch = prepare(events, self._cipher, lease)
        (created, unleased), existing = await self._socket.call(sqlite_write.INSERT, batch.rows)
        return batch.resolve(created, existing, unleased)

    async def probe(self) -> None:
        batch = prepare([probe_event()], self._cipher)
        await self._socket.call(sqlite_write.PROBE, batch.rows)

    async def close(self) -> None:
        await self._socket.close()


def box_database(url: str, process: bool) -> str | None:
    """The SQLite file whose writes ``hookd serve`` sends through one writer process of
    its own (``process``: ``HOOKD_SQLITE_WRITER`` is not ``thread``), or None (PostgreSQL,
    an in-memory database)."""
    parsed = check_url(url)
    path = parsed.database or ":memory:"
    if parsed.get_backend_name() != "sqlite" or path == ":memory:" or not process:
        return None
    return path


def writer_socket() -> str | None:
    """The socket of the box's one SQLite writer, when ``hookd serve`` runs one."""
    return os.environ.get(WRITER_SOCKET_ENV) or None


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
        box = writer_socket()
        if box is not None and path != ":memory:":
            return SqliteSocketInserter(box, cipher)
        if sqlite_process and path != ":memory:":
            return SqliteProcessInserter(path, cipher)
        return SqliteInserter(path, cipher)
    return PgInserter(parsed, cipher, size=committers, timeout_s=timeout_s)
