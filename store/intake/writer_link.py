"""The asking side of a SQLite writer process (``store.intake.sqlite_write``).

A ``Link`` is one stream to a writer: requests are written as they come, several may
be on their way at once, and the writer answers them in order, each after the commit of
the transaction it was part of. Over the pipes of a receiver's own writer process
(``hookd.runtime.sqlite_writer``), or over the Unix socket of the box's one writer that
``hookd serve`` starts (``WriterSocket``), which receivers and processors share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import sqlite3
from collections import deque
from typing import Any

from store.intake import sqlite_write

log = logging.getLogger("hookd.store")

# How long a request waits for the box's writer to accept a connection (``hookd serve``
# starts another within a fraction of a second when one dies) before it fails.
CONNECT_WAIT_S = 3.0
CONNECT_POLL_S = 0.05


class WriterGone(ConnectionError):
    """The SQLite writer process ended before answering: the request's outcome is
    unknown to the asker. A receiver does not acknowledge the batch (a committed row is
    a duplicate to the provider's retry); a processor writes the outcomes again."""


def sqlite_error(name: str, message: str) -> Exception:
    """The writer's SQLite error, as the thread's would have raised it."""
    kind = getattr(sqlite3, name, None)
    if isinstance(kind, type) and issubclass(kind, sqlite3.Error):
        return kind(message)
    return sqlite3.Error(f"{name}: {message}")


class Link:
    """One stream to a writer, and the futures of the requests it has not answered, in
    order. ``read`` runs for as long as the stream does; when it ends, every request
    unanswered fails with ``WriterGone``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self.pending: deque[asyncio.Future[tuple[Any, Any]]] = deque()
        self.alive = True
        self.task: asyncio.Task[None] | None = None

    def start(self, name: str) -> None:
        self.task = asyncio.create_task(self._read(), name=name)

    async def _read(self) -> None:
        try:
            while True:
                head = await self._reader.readexactly(sqlite_write.FRAME.size)
                data = await self._reader.readexactly(sqlite_write.FRAME.unpack(head)[0])
                status, first, second = pickle.loads(data)  # noqa: S301 - hookd's own writer
                future = self.pending.popleft()
                if future.done():
                    continue  # its wait was cancelled here; the writer finished it anyway
                if status == "ok":
                    future.set_result((first, second))
                else:
                    future.set_exception(sqlite_error(first, second))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.fail("the SQLite writer process ended")

    def fail(self, why: str) -> None:
        self.alive = False
        pending, self.pending = self.pending, deque()
        for future in pending:
            if not future.done():
                future.set_exception(WriterGone(why))

    async def call(self, op: str, payload: object) -> tuple[Any, Any]:
        """``payload`` sent as request ``op``; its answer (a SQLite error raised as such)."""
        if not self.alive:
            raise WriterGone("the SQLite writer process ended")
        future: asyncio.Future[tuple[Any, Any]] = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        self._writer.write(sqlite_write.frame((op, payload)))
        # A writer that died meanwhile fails the future; the stream's error says no more.
        with contextlib.suppress(ConnectionError):
            await self._writer.drain()
        return await future

    async def close(self) -> None:
        """No more requests: the writer answers what it holds (a process's stdin closed:
        it then ends); waits for those answers."""
        self._writer.close()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


class WriterSocket:
    """A connection to the box's one writer, at ``path`` (``hookd serve``'s), opened at
    the first request and again at the first one after it ended (the writer died and
    serve started another)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._link: Link | None = None
        self._lock = asyncio.Lock()

    async def _connected(self) -> Link:
        link = self._link
        if link is not None and link.alive:
            return link
        async with self._lock:
            if self._link is None or not self._link.alive:
                self._link = await self._connect()
            return self._link

    async def _connect(self) -> Link:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONNECT_WAIT_S
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(self.path, limit=1 << 20)
            except OSError as exc:
                if loop.time() >= deadline:
                    raise WriterGone(
                        f"the SQLite writer at {self.path} does not answer ({exc.strerror or exc})"
                    ) from None
                await asyncio.sleep(CONNECT_POLL_S)
                continue
            link = Link(reader, writer)
            link.start("hookd-sqlite-writer-link")
            return link

    async def start(self) -> None:
        await self._connected()

    async def call(self, op: str, payload: object) -> tuple[Any, Any]:
        link = await self._connected()
        return await link.call(op, payload)

    async def close(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            await link.close()
