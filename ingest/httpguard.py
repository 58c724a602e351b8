"""uvicorn's httptools protocol with a deadline and a size limit on the request head.

uvicorn bounds neither. A client may take as long as it likes over its request line
and headers: hookd's body deadline (``ingest.receiver.Deadlines``) never sees it, since
the application is only called once the head is complete, so a slow-loris that trickles
its headers holds a connection for ever. And httptools buffers a head of any size, so
one connection streaming header bytes grows the process without bound.

Here a connection's request head must arrive within the receiver's body timeout
(``HOOKD_BODY_TIMEOUT_S``, as the settings gave it to ``ingest.receiver.Receiver``), from
the connection being accepted, or from the first byte of a later request on a kept-alive
connection: else ``408`` and close, or a plain close if not a byte came. A head past
``HEAD_MAX_BYTES`` gets ``431`` and close, whether it came in one read or many. As for
bodies, one sweep per process checks every connection's deadline (no timer per request).

A process that stalls (an overloaded machine, a paused VM, a long pause of the loop)
must not drop what arrived during the stall. Timers fire before the loop reads its
sockets, so on waking, a deadline checked against the clock alone would close a
connection whose request is already in its buffer, and the client, whose request was
sent in time, sees a reset: a delivery lost to a provider that does not retry. So a
sweep refuses only what was already past its deadline at the previous sweep (the loop
has read its sockets since), and uvicorn's keep-alive close waits one more turn of
the loop in the same way (``KEEP_ALIVE_GRACE_S``).
Both refusals answer ``{"error": reason}`` and log a "rejected" line, like the receiver's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from hookd import tracing
from hookd.settings import Settings
from ingest import metrics
from ingest.direct import DirectCycle
from ingest.receiver import Client, HookdApp, Receiver, peer

# The receiver's logger: every refused delivery is a "rejected" line there.
log = logging.getLogger("hookd.receiver")

HEAD_MAX_BYTES = 64 * 1024
TICK_S = 0.25
# After the keep-alive timeout fires, how long the close waits for a request that
# arrived meanwhile and is not read yet (see the module's docstring).
KEEP_ALIVE_GRACE_S = 0.1
PREFIX = b"/hooks/"
REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large"}
# What a header line holds besides its name and value: ": " and CRLF.
HEADER_FRAMING = 4
# The head's deadline under an app that is not hookd's (no receiver to say it): the
# default of HOOKD_BODY_TIMEOUT_S.
DEFAULT_HEAD_TIMEOUT_S: float = Settings.model_fields["body_timeout_s"].default


class _Watch:
    """The connections whose head is pending and the direct deliveries whose body is
    (``ingest.direct``), swept every ``TICK_S`` while there are any."""

    def __init__(self) -> None:
        self.protocols: set[GuardedHttpToolsProtocol] = set()
        self.bodies: set[DirectCycle] = set()
        self._task: asyncio.Task[None] | None = None

    def add(self, protocol: GuardedHttpToolsProtocol, loop: asyncio.AbstractEventLoop) -> None:
        self.protocols.add(protocol)
        self._sweeping(loop)

    def add_body(self, cycle: DirectCycle, loop: asyncio.AbstractEventLoop) -> None:
        self.bodies.add(cycle)
        self._sweeping(loop)

    def _sweeping(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._sweep(loop), name="hookd-head-deadlines")

    async def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        while self.protocols or self.bodies:
            await asyncio.sleep(TICK_S)
            # Deadlines that had passed at the previous sweep: the loop has read its
            # sockets since, so what is still pending did not come (a stall is no refusal).
            previous, now = now, loop.time()
            for protocol in list(self.protocols):
                protocol.check_head(previous)
            for cycle in list(self.bodies):
                cycle.expire(previous)


_WATCH = _Watch()


def _receiver_of(app: Any) -> tuple[Receiver | None, ProxyHeadersMiddleware | None]:
    """hookd's receiver under uvicorn's middleware, if the app is hookd's; and
    uvicorn's proxy-headers middleware, if it is among them."""
    proxy = None
    while not isinstance(app, HookdApp):
        if isinstance(app, ProxyHeadersMiddleware):
            proxy = app
        app = getattr(app, "app", None)
        if app is None:
            return None, proxy
    return getattr(app, "receiver", None), proxy


# Set to True in a request's ASGI scope by a response that never ends on its own (the
# event stream of ``hookd listen``): at shutdown its connection is closed rather than
# waited for, which uvicorn would do for ever.
ENDLESS = "hookd.endless"


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """``hookd serve``'s HTTP protocol: ``uvicorn.run(http="ingest.httpguard:…")``.

    A head's size is measured two ways, and either one past ``HEAD_MAX_BYTES`` refuses
    it; both count only head bytes, so a head under the limit is never refused:

    - what the parser has handed over (the URL, every complete header): this catches a
      head that arrives in one read, however large that read;
    - the bytes of every further read while the head is still incomplete: this catches
      a header line that never ends, which the parser buffers without handing over.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_due: float | None = None
        self._head_bytes = 0
        self._parsed_bytes = 0
        self._head_seen = False
        self._began = False
        # Set once this connection is to be refused: from then on nothing it sends is
        # parsed or handed to the application.
        self._refusal: tuple[int, str] | None = None
        self._receiver, self._proxy = _receiver_of(self.app)
        receiver = self._receiver
        self._head_timeout_s = (
            DEFAULT_HEAD_TIMEOUT_S if receiver is None else receiver.body_timeout_s
        )
        self._keep_alive_graced = False
        # The client half-closed: what it sent is answered, then the connection closes.
        self._client_done = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_due = self.loop.time() + self._head_timeout_s
        _WATCH.add(self, self.loop)

    def connection_lost(self, exc: Exception | None) -> None:
        _WATCH.protocols.discard(self)
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """uvicorn's graceful stop waits for every response in progress to end; an
        endless one is cut instead (its client resumes elsewhere or later: the event
        stream's ``Last-Event-ID``). Losing the connection tells the application the
        client went away, so its response task ends and the stop goes on."""
        scope = getattr(self.cycle, "scope", None)
        if isinstance(scope, dict) and scope.get(ENDLESS) and not self.transport.is_closing():
            self.transport.close()
            return
        super().shutdown()

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return  # waiting to refuse (a previous answer is still going out)
        self._began = False
        super().data_received(data)
        # Count the bytes of reads that end inside a head. A read in which a request
        # began is not counted (it may hold the previous body); the parser's count
        # covers that read.
        if self._refusal is None and self._head_due is not None and not self._began:
            self._head_bytes += len(data)
            if self._head_bytes > HEAD_MAX_BYTES:
                self._refusal = (431, "headers_too_large")
        if self._refusal is not None:
            self._refuse_when_free()

    # Parser callbacks. Once a refusal is due, the rest of the read is parsed (httptools
    # cannot stop half-way without reporting a malformed request) but ignored.

    def on_message_begin(self) -> None:
        if self._refusal is not None:
            return
        super().on_message_begin()
        self._began = True
        self._head_seen = True
        self._parsed_bytes = 0
        if self._head_due is None:  # a later request on a kept-alive connection
            self._head_due = self.loop.time() + self._head_timeout_s
            self._head_bytes = 0
            _WATCH.add(self, self.loop)

    def on_url(self, url: bytes) -> None:
        if self._refusal is None and self._count(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refusal is None and self._count(len(name) + len(value) + HEADER_FRAMING):
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refusal is not None:
            return  # the application never sees an oversized head
        self._head_due = None
        self._head_bytes = 0
        _WATCH.protocols.discard(self)
        cycle = self._direct()
        if cycle is None:
            super().on_headers_complete()
            return
        existing = self.cycle
        self.cycle = cycle  # type: ignore[assignment] # it stands in for uvicorn's cycle
        if existing is None or existing.response_complete:
            cycle.start()
        else:  # pipelined: answered in order, as uvicorn queues its own cycles
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, self.app))  # type: ignore[arg-type]

    def _direct(self) -> DirectCycle | None:
        """A ``DirectCycle`` for a delivery the receiver can answer without the ASGI
        app (``ingest.direct``), or None for the ASGI path."""
        receiver = self._receiver
        if receiver is None or self.expect_100_continue or tracing.enabled():
            return None
        url = self.url
        if not url.startswith(PREFIX) or b"%" in url or self.parser.get_method() != b"POST":
            return None
        try:
            name = url.partition(b"?")[0][len(PREFIX) :].decode("ascii")
        except UnicodeDecodeError:
            return None
        source = receiver.sources.get(name)
        if (
            source is None
            or source.adapter.handshakes
            or source.adapter.key_fetch is not None
            or self.limit_concurrency is not None
            or self.parser.should_upgrade()
        ):
            return None
        keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
        return DirectCycle(self, receiver, source, self.headers, keep_alive=keep_alive)

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if isinstance(cycle, DirectCycle):
            cycle.start()  # its turn, after the requests pipelined before it
        else:
            super()._start_asgi_task(cycle, app)

    def peer_of(self, headers: list[tuple[bytes, bytes]]) -> Client:
        """The client as the ASGI path's scope would say it: behind a trusted proxy,
        the address its ``X-Forwarded-For`` gives (uvicorn's proxy headers). Asked only
        for a refusal's log line, so deliveries do not pay for it."""
        proxy = self._proxy
        if proxy is None or self.client is None or self.client[0] not in proxy.trusted_hosts:
            return self.client
        forwarded = [value for name, value in headers if name == b"x-forwarded-for"]
        if not forwarded:
            return self.client
        host, port = proxy.trusted_hosts.get_trusted_client_address(
            b", ".join(forwarded).decode("latin-1")
        )
        return (host, port) if host else self.client

    def watch_body(self, cycle: DirectCycle) -> None:
        _WATCH.add_body(cycle, self.loop)

    def unwatch_body(self, cycle: DirectCycle) -> None:
        _WATCH.bodies.discard(cycle)

    def on_body(self, body: bytes) -> None:
        if self._refusal is None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refusal is None:
            super().on_message_complete()

    def on_response_complete(self) -> None:
        self._keep_alive_graced = False  # uvicorn arms the keep-alive timeout anew
        super().on_response_complete()
        if self._refusal is not None:
            self._refuse_when_free()
        elif self._client_done and not self._busy():
            self.transport.close()  # the last answer the half-closed client waits for

    def eof_received(self) -> bool | None:  # type: ignore[override] # uvicorn says None
        """The client shut its side after its requests (``printf … | nc`` does, as may a
        client whose last request says ``Connection: close``). uvicorn defines no
        ``eof_received``, so the transport closed at once and every request still being
        answered, pipelined ones included, lost its answer. Here each is answered, in
        order, and the connection closes after the last; with nothing to answer, or a
        request whose body the EOF cut short (a client gone), it closes now, as before."""
        cycle = self.cycle
        cut_short = cycle is not None and cycle.more_body and not cycle.response_complete
        if cut_short or not self._busy():
            return None  # asyncio closes the transport
        self._client_done = True
        return True  # keep it open for the answers

    def timeout_keep_alive_handler(self) -> None:
        """uvicorn's close of an idle kept-alive connection, one turn of the loop
        later: a request that came during a stall is read first (``data_received``
        cancels the timer), and answered instead of reset."""
        if self._keep_alive_graced:
            super().timeout_keep_alive_handler()
            return
        self._keep_alive_graced = True
        self.timeout_keep_alive_task = self.loop.call_later(
            KEEP_ALIVE_GRACE_S, self.timeout_keep_alive_handler
        )

    def _count(self, size: int) -> bool:
        """Add parsed head bytes; False (and a refusal due) once past the limit."""
        self._parsed_bytes += size
        if self._parsed_bytes > HEAD_MAX_BYTES:
            self._refusal = (431, "headers_too_large")
            return False
        return True

    def check_head(self, now: float) -> None:
        if self._refusal is not None:
            return
        if self._head_due is not None and self._head_due <= now and not self._busy():
            if self._head_seen:
                self._refusal = (408, "header_timeout")
                self._refuse_when_free()
            else:
                self._head_due = None
                _WATCH.protocols.discard(self)
                self.transport.close()

    def _busy(self) -> bool:
        """A previous request on this connection is still being answered (or queued): a
        refusal of the next head waits for it (pipelining), rather than cutting it."""
        return bool(self.pipeline) or (self.cycle is not None and not self.cycle.response_complete)

    def _refuse_when_free(self) -> None:
        if self._busy():
            self.flow.pause_reading()  # nothing more is read; refused once answered
            return
        assert self._refusal is not None
        self._refuse(*self._refusal)

    def _refuse(self, status: int, reason: str) -> None:
        self._head_due = None
        _WATCH.protocols.discard(self)
        if self.transport.is_closing():
            return
        # No source yet: the head never completed, so nothing in it was read as a source.
        metrics.WEBHOOK_REJECTIONS.labels(metrics.UNKNOWN_SOURCE, reason).inc()
        log.info("rejected", extra={"reason": reason, "peer": peer(self.client)})
        body = json.dumps({"error": reason}, separators=(",", ":")).encode()
        head = (
            f"HTTP/1.1 {status} {REASONS[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()
