"""uvicorn's httptools protocol with a deadline and a size limit on the request head.

uvicorn bounds neither. A client may take as long as it likes over its request line
and headers: hookd's body deadline (``ingest.receiver.Deadlines``) never sees it, since
the application is only called once the head is complete, so a slow-loris that trickles
its headers holds a connection for ever. And httptools buffers a head of any size, so
one connection streaming header bytes grows the process without bound.

Here a connection's request head must arrive within ``HOOKD_BODY_TIMEOUT_S`` (from the
connection being accepted, or from the first byte of a later request on a kept-alive
connection): else ``408`` and close, or a plain close if not a byte came. A head past
``HEAD_MAX_BYTES`` gets ``431`` and close. As for bodies, one sweep per process checks
every connection's deadline (no timer per request).
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ingest import metrics
from ingest.config import Settings

HEAD_MAX_BYTES = 64 * 1024
TICK_S = 0.25
REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large"}


@functools.cache
def head_timeout_s() -> float:
    return Settings.from_env().body_timeout_s


class _Watch:
    """The connections whose head is pending, swept every ``TICK_S`` while there are any."""

    def __init__(self) -> None:
        self.protocols: set[GuardedHttpToolsProtocol] = set()
        self._task: asyncio.Task[None] | None = None

    def add(self, protocol: GuardedHttpToolsProtocol, loop: asyncio.AbstractEventLoop) -> None:
        self.protocols.add(protocol)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._sweep(loop), name="hookd-head-deadlines")

    async def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        while self.protocols:
            await asyncio.sleep(TICK_S)
            now = loop.time()
            for protocol in list(self.protocols):
                protocol.check_head(now)


_WATCH = _Watch()


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """``hookd serve``'s HTTP protocol: ``uvicorn.run(http="ingest.httpguard:…")``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_due: float | None = None
        self._head_bytes = 0
        self._head_seen = False
        self._began = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_due = self.loop.time() + head_timeout_s()
        _WATCH.add(self, self.loop)

    def connection_lost(self, exc: Exception | None) -> None:
        _WATCH.protocols.discard(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._began = False
        super().data_received(data)
        # Count the bytes of reads that end inside a head. A read in which a request
        # began is not counted (it may hold the previous body): at most one read more.
        if self._head_due is not None and not self._began:
            self._head_bytes += len(data)
            if self._head_bytes > HEAD_MAX_BYTES:
                if self._answering():
                    self.flow.pause_reading()  # resumed when that answer is sent
                else:
                    self._refuse(431, "headers_too_large")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._began = True
        self._head_seen = True
        if self._head_due is None:  # a later request on a kept-alive connection
            self._head_due = self.loop.time() + head_timeout_s()
            self._head_bytes = 0
            _WATCH.add(self, self.loop)

    def on_headers_complete(self) -> None:
        self._head_due = None
        self._head_bytes = 0
        _WATCH.protocols.discard(self)
        super().on_headers_complete()

    def check_head(self, now: float) -> None:
        if self._head_due is not None and self._head_due <= now and not self._answering():
            if self._head_seen:
                self._refuse(408, "header_timeout")
            else:
                self._head_due = None
                _WATCH.protocols.discard(self)
                self.transport.close()

    def _answering(self) -> bool:
        """A previous request on this connection is still being answered: a refusal of
        the next head waits for it (pipelining), rather than cutting that answer."""
        return self.cycle is not None and not self.cycle.response_complete

    def _refuse(self, status: int, reason: str) -> None:
        self._head_due = None
        _WATCH.protocols.discard(self)
        if self.transport.is_closing():
            return
        metrics.WEBHOOK_REJECTIONS.labels(metrics.UNKNOWN_SOURCE, reason).inc()
        body = json.dumps({"error": reason}, separators=(",", ":")).encode()
        head = (
            f"HTTP/1.1 {status} {REASONS[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()
