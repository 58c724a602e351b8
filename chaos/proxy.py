"""A fault-injecting TCP proxy for the path between hookd and PostgreSQL or Redis.

Faults, each chosen per chunk of bytes with its own probability:
- ``latency_s`` (+ up to ``jitter_s``): every chunk, both ways, waits this long;
- ``reset_p``: the connection is reset (RST to both sides, SO_LINGER 0);
- ``stall_p``: a client→server chunk is forwarded, then the server's answers are swallowed:
  the client sees a timeout after its write (the worst case for "did my COMMIT land?").
``down()`` resets every connection and refuses new ones until ``up()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from dataclasses import dataclass, field


@dataclass
class Faults:
    latency_s: float = 0.0
    jitter_s: float = 0.0
    reset_p: float = 0.0
    stall_p: float = 0.0


@dataclass
class Stats:
    connections: int = 0
    refused: int = 0
    resets: int = 0
    stalls: int = 0
    bytes_up: int = 0
    bytes_down: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def _rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(eq=False)
class _Pair:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    stalled: bool = False
    closed: bool = False

    def reset(self) -> None:
        if not self.closed:
            self.closed = True
            _rst(self.client)
            _rst(self.server)


@dataclass(eq=False)
class FaultProxy:
    """``async with FaultProxy("127.0.0.1", 5432) as proxy: proxy.port``."""

    upstream_host: str
    upstream_port: int
    faults: Faults = field(default_factory=Faults)
    seed: int | None = None
    stats: Stats = field(default_factory=Stats)
    port: int = 0
    _server: asyncio.base_events.Server | None = None
    _pairs: set[_Pair] = field(default_factory=set)
    _down: bool = False

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._pairs = set()

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for pair in list(self._pairs):
            pair.reset()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def down(self) -> None:
        """Reset every open connection and refuse new ones."""
        self._down = True
        for pair in list(self._pairs):
            pair.reset()
            self.stats.resets += 1

    def up(self) -> None:
        self._down = False

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            self.stats.refused += 1
            _rst(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(
                self.upstream_host, self.upstream_port
            )
        except OSError:
            self.stats.refused += 1
            _rst(writer)
            return
        self.stats.connections += 1
        pair = _Pair(writer, up_writer)
        self._pairs.add(pair)
        try:
            await asyncio.gather(
                self._pump(pair, reader, up_writer, upstream=True),
                self._pump(pair, up_reader, writer, upstream=False),
            )
        finally:
            self._pairs.discard(pair)
            if not pair.closed:
                pair.closed = True
                for w in (writer, up_writer):
                    with contextlib.suppress(Exception):
                        w.close()

    async def _pump(
        self,
        pair: _Pair,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        faults = self.faults
        try:
            while not pair.closed:
                chunk = await reader.read(65536)
                if not chunk:
                    if not pair.closed:
                        with contextlib.suppress(OSError, RuntimeError):
                            writer.write_eof()
                    return
                if faults.latency_s or faults.jitter_s:
                    await asyncio.sleep(faults.latency_s + self._random.random() * faults.jitter_s)
                if pair.closed:
                    return
                if faults.reset_p and self._random.random() < faults.reset_p:
                    self.stats.resets += 1
                    pair.reset()
                    return
                if pair.stalled and not upstream:
                    continue  # swallow the server's answers: the client times out
                writer.write(chunk)
                await writer.drain()
                if upstream:
                    self.stats.bytes_up += len(chunk)
                    if faults.stall_p and self._random.random() < faults.stall_p:
                        self.stats.stalls += 1
                        pair.stalled = True
                else:
                    self.stats.bytes_down += len(chunk)
        except (ConnectionError, OSError):
            pair.reset()
