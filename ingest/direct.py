"""A delivery answered from the HTTP protocol itself: no ASGI task per request.

Under uvicorn every request is a task running the ASGI app, fed its body through
``receive`` and writing through ``send``: a task created and resumed, an event per
body chunk, a dict per message, headers validated one by one. For ``POST
/hooks/{source}``, the one route that carries the load, ``hookd serve``'s protocol
(``ingest.httpguard``) hands the request to a ``DirectCycle`` instead: the body is
gathered as the parser gives it, checked, verified and submitted to the group commit
with a callback, and the answer is written when the commit resolves it.

The stages are the receiver's own (``Receiver.admit``, ``event_of``, ``stored``), so
both paths answer alike: the same statuses, bodies, metrics and log lines. What the
ASGI task did for free is done here by hand, each against uvicorn's own behaviour:

- the order of answers on a kept-alive connection: a request pipelined behind one in
  flight waits, reading paused, until the first is answered (the protocol's queue);
- flow control: the protocol pauses reading past 64 KiB of unread body, and the
  receiver is what resumes it (here, at once: the source's limit bounds the body);
- the body deadline (``HOOKD_BODY_TIMEOUT_S``), swept with the head deadlines;
- a client gone before its body was whole (counted, nothing stored), or gone while
  its event commits (committed all the same: the sender retries, dedupe holds);
- a graceful stop: the connection closes after its answer, so uvicorn's wait for
  connections also waits for the commits in flight.

Everything else (another method, an unknown source, a provider with a challenge or
with keys to fetch (``Provider.key_fetch``),
``Expect: 100-continue``, tracing) takes the ASGI path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Protocol

from uvicorn.protocols.http.httptools_impl import HEADER_VALUE_RE, STATUS_LINE

from ingest.batcher import StoreUnavailable
from ingest.receiver import (
    CLOSE,
    Admitted,
    Answer,
    Client,
    Received,
    Receiver,
    error,
    framed,
    header_map,
)
from store.intake.events import Stored
from store.values import Unstorable

if TYPE_CHECKING:
    from uvicorn.protocols.http.flow_control import FlowControl
    from uvicorn.server import ServerState

    from hookd.sources import Source

log = logging.getLogger("hookd.receiver")

CONNECTION_CLOSE = b"connection: close\r\n"

# A cycle's states: queued behind another request on its connection, reading its
# body, waiting for its commit, answered.
QUEUED, READING, COMMITTING, DONE = range(4)


class Connection(Protocol):
    """What a cycle needs of its connection (``ingest.httpguard``'s protocol)."""

    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    flow: FlowControl
    client: tuple[str, int] | None
    server_state: ServerState

    def on_response_complete(self) -> None: ...

    def watch_body(self, cycle: DirectCycle) -> None: ...

    def peer_of(self, headers: list[tuple[bytes, bytes]]) -> Client: ...

    def unwatch_body(self, cycle: DirectCycle) -> None: ...


class DirectCycle:
    """One ``POST /hooks/{source}``, in the place of uvicorn's ``RequestResponseCycle``.

    It offers the attributes the protocol uses on a cycle (``body``, ``more_body``,
    ``message_event.set()``, ``response_complete``, ``keep_alive``, ``disconnected``),
    so the protocol's parser callbacks feed it unchanged.
    """

    __slots__ = (
        "_admitted",
        "_connection",
        "_received",
        "_receiver",
        "_source",
        "_started",
        "_state",
        "body",
        "disconnected",
        "due",
        "headers",
        "keep_alive",
        "more_body",
        "response_complete",
    )

    def __init__(
        self,
        connection: Connection,
        receiver: Receiver,
        source: Source,
        headers: list[tuple[bytes, bytes]],
        *,
        keep_alive: bool,
    ) -> None:
        self._connection = connection
        self._receiver = receiver
        self._source = source
        self._started = time.perf_counter()
        self._state = QUEUED
        self._admitted: Admitted | None = None
        self._received: Received | None = None
        self.headers = headers
        self.body = b""
        self.more_body = True
        self.response_complete = False
        self.keep_alive = keep_alive
        self.disconnected = False
        self.due = 0.0

    @property
    def message_event(self) -> DirectCycle:
        # The protocol calls ``cycle.message_event.set()`` after each body chunk, at
        # the message's end and when the connection is lost.
        return self

    def _client(self) -> Client:
        return self._connection.peer_of(self.headers)

    def start(self) -> None:
        """This request's turn on its connection: check its head, then read its body."""
        try:
            admitted = self._receiver.admit(
                self._source, header_map(self.headers), self._client, self._started
            )
        except Exception:
            self._failed()
            return
        if not isinstance(admitted, Admitted):
            self._answer(admitted)
            return
        self._admitted = admitted
        self._state = READING
        self.due = self._connection.loop.time() + self._receiver.body_timeout_s
        self._connection.watch_body(self)
        self.set()

    def set(self) -> None:
        """More of the body came, all of it did, or the connection was lost."""
        if self._state != READING:
            return
        if self.disconnected:
            self._finish_reading()
            self._receiver.disconnected(self._source)
            return
        if len(self.body) > self._source.config.max_body_bytes:
            self._finish_reading()
            self._answer(
                self._receiver.refuse_body(
                    self._source, "body_too_large", self._client, self._admitted
                )
            )
            return
        if self.more_body:
            # Past 64 KiB unread the protocol paused reading, for the application to
            # resume as it reads: the source's limit above is what bounds the body.
            self._connection.flow.resume_reading()
            return
        self._finish_reading()
        assert self._admitted is not None
        try:
            received = self._receiver.event_of(self._admitted, self.body, self._client)
        except Exception:
            self._failed()
            return
        if not isinstance(received, Received):
            self._answer(received)
            return
        self._received = received
        self._state = COMMITTING
        self._receiver.committer.enqueue(received.event).add_done_callback(self._committed)

    def expire(self, now: float) -> None:
        """The body deadline's sweep: 408 and close once it passed mid-body."""
        if self._state == READING and self.due <= now:
            self._finish_reading()
            self._answer(
                self._receiver.refuse_body(
                    self._source, "body_timeout", self._client, self._admitted
                )
            )

    def _finish_reading(self) -> None:
        self._state = DONE
        self._connection.unwatch_body(self)

    def _committed(self, future: asyncio.Future[Stored]) -> None:
        assert self._admitted is not None
        assert self._received is not None
        try:
            answer = self._receiver.stored(self._admitted, self._received, future.result())
        except StoreUnavailable as exc:
            answer = self._receiver.unavailable(self._source, exc)
        except Unstorable as exc:
            answer = self._receiver.unstorable(
                self._source, exc, self._client, self._admitted, self.body
            )
        except asyncio.CancelledError:
            answer = self._receiver.unavailable(self._source, StoreUnavailable("shutting_down"))
        except Exception:
            self._failed()
            return
        self._answer(answer)

    def _failed(self) -> None:
        """A stage raised what none of them should: logged with its traceback, 500."""
        log.exception("receiver failed", extra={"source": self._source.name})
        self._answer(error(500, "internal_error", "", CLOSE))

    def _answer(self, answer: Answer) -> None:
        """Write the whole answer at once, as uvicorn's ``send`` would have."""
        self._state = DONE
        self.response_complete = True
        transport = self._connection.transport
        if self.disconnected or transport.is_closing():
            return
        status, body, headers = answer
        if headers and any(HEADER_VALUE_RE.search(value) for _, value in headers):
            # A provider's reply must not split the response (uvicorn refuses it too).
            log.error("reply header refused", extra={"source": self._source.name})
            status, body, headers = error(500, "internal_error", "", CLOSE)
        content = [STATUS_LINE[status]]
        for name, value in (
            *self._connection.server_state.default_headers,
            *framed(status, body, headers),
        ):
            if name == b"connection" and value == b"close":
                self.keep_alive = False
            content.append(b"%s: %s\r\n" % (name, value))
        if not self.keep_alive and CONNECTION_CLOSE not in content:
            content.append(CONNECTION_CLOSE)
        content.append(b"\r\n")
        content.append(body)
        transport.write(b"".join(content))
        if not self.keep_alive:
            transport.close()
        self._connection.on_response_complete()
