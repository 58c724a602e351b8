"""``POST /hooks/{source}``: verify on the raw bytes, store once, then answer.

Order matters: cheap checks first (source, declared length, signature headers
and timestamp) so that bad requests are refused before their body is read; the
body is read under a size limit and a deadline; the signature is checked on the
exact bytes; only an event committed to the database gets a 2xx.

This is the hot path of the service, so it is plain ASGI: no request or response
objects, no routing table, metric children looked up once per label set.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import Any
from urllib.parse import parse_qs

from prometheus_client.metrics import Counter
from starlette.applications import Starlette
from starlette.types import Receive, Scope, Send

from hookd import tracing
from hookd.errors import PayloadError, SignatureError
from hookd.providers.base import HeaderMap, QueryMap, Reply
from hookd.sources import Source, Sources
from ingest import metrics
from ingest.batcher import GroupCommitter, StoreUnavailable
from store.events import NewEvent, Stored
from store.status import EventOrigin

log = logging.getLogger("hookd.receiver")

PREFIX = "/hooks/"
RETRY_AFTER_S = "5"
CONTENT_TYPE = b"content-type"
NO_CONTENT = 204
JSON_TYPE = (CONTENT_TYPE, b"application/json")
CLOSE = (b"connection", b"close")

Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]
# Told (source, dedupe_key) of a webhook answered as a duplicate, for a reconciled
# source; must not block (it queues: ``reconcile.late``).
OnDuplicate = Callable[[str, str], None]


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    pass


@cache
def _received(source: str, outcome: str) -> Counter:
    return metrics.WEBHOOKS_RECEIVED.labels(source, outcome)


@cache
def _rejections(source: str, reason: str) -> Counter:
    return metrics.WEBHOOK_REJECTIONS.labels(source, reason)


def peer(client: tuple[str, int] | list[Any] | None) -> str | None:
    """``host:port`` of the connection's other end (ASGI ``scope["client"]``), for logs."""
    if not client:
        return None
    host, port = client[0], client[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def header_map(scope: Scope) -> HeaderMap:
    """Header names as the ASGI server gives them (lowercase, by the ASGI spec)."""
    headers: dict[str, list[str]] = {}
    for name, value in scope["headers"]:
        key = name.decode("latin-1")
        if key in headers:
            headers[key].append(value.decode("latin-1"))
        else:
            headers[key] = [value.decode("latin-1")]
    return headers


class Deadlines:
    """Body-read deadlines for many requests with one timer.

    ``asyncio.timeout`` per request costs a timer handle and a reschedule each;
    here a request registers its task, and one sweep every ``tick_s`` cancels
    the tasks still reading past their deadline (so a deadline fires up to
    ``tick_s`` late). uvicorn has no body-read timeout; this is the slow-loris guard.
    """

    def __init__(self, tick_s: float = 0.25) -> None:
        self._tick_s = tick_s
        self._due: dict[asyncio.Task[object], float] = {}
        self._expired: set[asyncio.Task[object]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="hookd-body-deadlines")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._tick_s)
            now = loop.time()
            for task, due in list(self._due.items()):
                if due <= now and task not in self._expired:
                    self._expired.add(task)
                    task.cancel()

    async def read(self, receive: Receive, limit: int, timeout_s: float) -> bytes:
        """``read_body`` under a deadline: ``TimeoutError`` once it passes."""
        task = asyncio.current_task()
        if task is None or self._sweeper is None:  # not started: a plain timeout
            async with asyncio.timeout(timeout_s):
                return await read_body(receive, limit)
        self._due[task] = asyncio.get_running_loop().time() + timeout_s
        try:
            return await read_body(receive, limit)
        except asyncio.CancelledError:
            if task in self._expired:
                task.uncancel()
                raise TimeoutError from None
            raise
        finally:
            self._due.pop(task, None)
            self._expired.discard(task)


async def read_body(receive: Receive, limit: int) -> bytes:
    """The body, refusing as soon as it passes ``limit``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def error(status: int, code: str, detail: str = "", *extra: tuple[bytes, bytes]) -> Answer:
    content = {"error": code, "detail": detail} if detail else {"error": code}
    return status, json.dumps(content, separators=(",", ":")).encode(), list(extra)


def reply_answer(reply: Reply) -> Answer:
    """A provider's own answer; its content type goes first, where ``__call__`` looks."""
    headers = [(CONTENT_TYPE, reply.content_type.encode("latin-1"))]
    headers.extend(
        (name.encode("latin-1"), value.encode("latin-1")) for name, value in reply.headers
    )
    return reply.status, reply.body, headers


def query_map(scope: Scope) -> QueryMap:
    raw: bytes = scope.get("query_string", b"")
    if not raw:
        return {}
    try:
        return parse_qs(raw.decode("latin-1"), keep_blank_values=True, max_num_fields=32)
    except ValueError:
        raise PayloadError("malformed_payload", "too many query parameters") from None


def stored_answer(event_id: str, status: str) -> bytes:
    # Event ids are ULIDs (Crockford base32): nothing to escape.
    return b'{"event_id":"' + event_id.encode() + b'","status":"' + status.encode() + b'"}'


class Receiver:
    def __init__(
        self,
        sources: Sources,
        committer: GroupCommitter,
        *,
        body_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        on_duplicate: OnDuplicate | None = None,
    ) -> None:
        self._sources = sources
        self._committer = committer
        self._body_timeout_s = body_timeout_s
        self._clock = clock
        self._on_duplicate = on_duplicate
        self.deadlines = Deadlines()
        self._tally = metrics.AckTally()
        # Every series of the receive-side families at 0 from the first scrape.
        metrics.initialise(s.name for s in sources)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        name = scope["path"][len(PREFIX) :]
        source = self._sources.get(name)
        method = scope["method"]
        challenged = source is not None and source.adapter.challenge is not None
        if method != "POST" and not challenged:
            status, body, headers = error(405, "method_not_allowed", "", (b"allow", b"POST"))
        elif source is None:
            self._reject(metrics.UNKNOWN_SOURCE, "unknown_source")
            status, body, headers = error(404, "unknown_source")
        else:
            attributes = {"hookd.source": source.name, "hookd.provider": source.provider}
            with tracing.span("hookd.receive", attributes) as current:
                status, body, headers = await self._receive(scope, receive, source, started)
                tracing.annotate(current, {"http.response.status_code": status})
        if status == NO_CONTENT:
            # A 204 carries neither a body nor its length (RFC 9110, 8.6).
            headers = [h for h in headers if h[0] != CONTENT_TYPE]
        elif headers and headers[0][0] == CONTENT_TYPE:
            headers = [headers[0], (b"content-length", str(len(body)).encode()), *headers[1:]]
        else:
            headers = [JSON_TYPE, (b"content-length", str(len(body)).encode()), *headers]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _stored(self, source: Source, stored: Stored, dedupe_key: str) -> None:
        """Log a new event; hand a duplicate of a reconciled source's key on (a late
        delivery when a reconcile run stored it first), without waiting."""
        outcome = "accepted" if stored.created else "duplicate"
        tracing.annotate(
            tracing.here(), {"hookd.event_id": stored.event_id, "hookd.outcome": outcome}
        )
        if stored.created:
            log.info(
                "accepted",
                extra={
                    "event_id": stored.event_id,
                    "source": source.name,
                    "dedupe_key": dedupe_key,
                },
            )
        elif self._on_duplicate is not None and source.config.reconcile is not None:
            self._on_duplicate(source.name, dedupe_key)

    def _reject(self, source: str, reason: str) -> None:
        _received(source, "rejected").inc()
        _rejections(source, reason).inc()

    def _refused(self, scope: Scope, source: str, reason: str, detail: str = "") -> None:
        """Count a refused delivery and log it: one "rejected" line per refusal."""
        self._reject(source, reason)
        extra = {"source": source, "reason": reason, "peer": peer(scope.get("client"))}
        if detail:
            extra["detail"] = detail
        log.info("rejected", extra=extra)

    def _challenge(self, scope: Scope, source: Source) -> Answer | None:
        """The answer to a registration challenge, or None for a delivery to verify."""
        assert source.adapter.challenge is not None
        try:
            query = query_map(scope)
            reply = source.adapter.challenge(scope["method"], query, source.keys)
        except SignatureError as exc:
            self._refused(scope, source.name, exc.reason)
            return error(401, exc.reason)
        except PayloadError as exc:
            self._refused(scope, source.name, exc.reason, exc.detail)
            return error(400, exc.reason, exc.detail)
        if reply is not None:
            log.info("handshake answered", extra={"source": source.name})
            return reply_answer(reply)
        if scope["method"] != "POST":
            return error(405, "method_not_allowed", "", (b"allow", b"POST"))
        return None

    async def _receive(  # noqa: PLR0911, PLR0912 - one return per documented HTTP outcome
        self, scope: Scope, receive: Receive, source: Source, started: float
    ) -> Answer:
        name = source.name
        provider = source.adapter
        if provider.challenge is not None:
            answered = self._challenge(scope, source)
            if answered is not None:
                return answered
        limit = source.config.max_body_bytes
        now = self._clock()
        headers = header_map(scope)
        declared = headers.get("content-length")
        if declared and declared[0].isdigit() and int(declared[0]) > limit:
            self._refused(scope, name, "body_too_large")
            return error(413, "body_too_large", "", CLOSE)
        try:
            signed = provider.check_headers(headers, now, source.config.tolerance_s)
        except SignatureError as exc:
            self._refused(scope, name, exc.reason)
            return error(401, exc.reason, "", CLOSE)
        try:
            body = await self.deadlines.read(receive, limit, self._body_timeout_s)
        except BodyTooLarge:
            self._refused(scope, name, "body_too_large")
            return error(413, "body_too_large", "", CLOSE)
        except TimeoutError:
            self._refused(scope, name, "body_timeout")
            return error(408, "body_timeout", "", CLOSE)
        except ClientGone:
            self._reject(name, "client_disconnected")
            return 400, b"", []
        try:
            with tracing.span("hookd.verify"):
                verified = provider.verify(signed, body, source.keys)
        except SignatureError as exc:
            self._refused(scope, name, exc.reason)
            return error(401, exc.reason)
        try:
            env = provider.envelope(headers, body, verified)
        except PayloadError as exc:
            self._refused(scope, name, exc.reason, exc.detail)
            return error(400, exc.reason, exc.detail)
        if env.reply is not None:
            return reply_answer(env.reply)
        event = NewEvent(
            source=name,
            provider=source.provider,
            dedupe_key=env.dedupe_key,
            type=env.type,
            origin=EventOrigin.WEBHOOK,
            received_at=datetime.fromtimestamp(now, UTC),
            occurred_at=env.occurred_at,
            verified_with=verified.describe(),
            headers=env.headers,
            body=body,
            traceparent=tracing.traceparent(),  # None unless tracing is on
        )
        order = source.config.order
        if order is not None:  # the object it is about, and its version ([sources.order])
            event = order.stamp(event)
        try:
            with tracing.span("hookd.commit"):  # the wait for the group commit
                stored = await self._committer.submit(event)
        except StoreUnavailable as exc:
            self._reject(name, "unavailable")
            log.warning("store unavailable", extra={"source": name, "reason": exc.reason})
            return error(503, "unavailable", "", (b"retry-after", RETRY_AFTER_S.encode()))
        outcome = "accepted" if stored.created else "duplicate"
        self._tally.record(name, outcome, time.perf_counter() - started)
        self._stored(source, stored, env.dedupe_key)
        if env.ack is not None:
            return reply_answer(env.ack)
        if stored.created:
            return provider.accepted_status, stored_answer(stored.event_id, "accepted"), []
        return 200, stored_answer(stored.event_id, "duplicate"), []


class HookdApp(Starlette):
    """``/hooks/…`` goes straight to the receiver; everything else through Starlette.

    The webhook path skips Starlette's middleware stack and router: it is the one
    route that carries the load, and it answers for itself.
    """

    receiver: Receiver

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(PREFIX):
            await self.receiver(scope, receive, send)
            return
        await super().__call__(scope, receive, send)
