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
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any
from urllib.parse import parse_qs

from prometheus_client.metrics import Counter
from starlette.applications import Starlette
from starlette.types import Receive, Scope, Send

from hookd import tasks, tracing
from hookd.errors import HandshakeRefused, PayloadError, SignatureError
from hookd.providers.base import (
    Envelope,
    HeaderMap,
    Key,
    LearnsSecret,
    QueryMap,
    Reply,
    SignedHeaders,
    one_header,
)
from hookd.sources import Source, Sources
from ingest import metrics
from ingest.batcher import GroupCommitter, StoreUnavailable
from ingest.keyfetch import KeyFetcher, KeyUnavailable
from ingest.learned import LearnedKeys, LearnedUnavailable
from ingest.rejected import Refusal
from store.intake.events import NewEvent, Stored
from store.status import EventOrigin
from store.values import Unstorable, storable

log = logging.getLogger("hookd.receiver")

PREFIX = "/hooks/"
RETRY_AFTER_S = "5"
CONTENT_TYPE = b"content-type"
NO_CONTENT = 204
JSON_TYPE = (CONTENT_TYPE, b"application/json")
CLOSE = (b"connection", b"close")

# Why a second handshake through the same token is refused (``_learn``).
ALREADY_LEARNED = "this token opened a handshake before; configure a new token to register again"

RawHeaders = list[tuple[bytes, bytes]]
Answer = tuple[int, bytes, RawHeaders]
# Told (source, dedupe_key) of a webhook answered as a duplicate, for a reconciled
# source; must not block (it queues: ``reconcile.late``).
OnDuplicate = Callable[[str, str], None]
# Told of each refusal logged as "rejected", to be recorded; must not block (it
# queues: ``ingest.rejected``).
OnRejected = Callable[[Refusal], None]


# The connection's other end, as ASGI's ``scope["client"]`` has it.
Client = tuple[str, int] | list[Any] | None
# Asked for it only when a refusal is logged: behind a proxy, working it out means
# reading the forwarded headers, which a delivery that is accepted never needs.
ClientOf = Callable[[], Client]


@dataclass(slots=True)
class Admitted:
    """A delivery whose head passed: the source, its headers, what they sign."""

    source: Source
    headers: HeaderMap
    signed: SignedHeaders
    now: float
    started: float
    # The keys fetched for it (``Provider.key_fetch``), verified after the source's own.
    fetched: tuple[Key, ...] = ()
    # A URL to GET before the provider's reply is sent (``Envelope.visit``).
    visit: str | None = None


@dataclass(slots=True)
class Received:
    """A verified delivery: the event to commit, and the envelope it came from."""

    event: NewEvent
    envelope: Envelope


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


def peer(client: Client) -> str | None:
    """``host:port`` of the connection's other end (ASGI ``scope["client"]``), for logs."""
    if not client:
        return None
    host, port = client[0], client[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def header_map(raw: Iterable[tuple[bytes, bytes]]) -> HeaderMap:
    """Header names as the ASGI server gives them (lowercase, by the ASGI spec)."""
    headers: dict[str, list[str]] = {}
    for name, value in raw:
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

    A deadline counts as passed once it had passed at the previous sweep, so the
    loop has read its sockets in between: after a stall of the process (an overloaded
    machine, a paused VM) the sweep may run before the loop reads the body that came
    meanwhile, and would refuse a body that is there. It costs one tick more.
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
            await tasks.cancel(self._sweeper)
            self._sweeper = None

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        while True:
            await asyncio.sleep(self._tick_s)
            previous, now = now, loop.time()
            for task, due in list(self._due.items()):
                if due <= previous and task not in self._expired:
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


def unauthorized(source: Source) -> tuple[tuple[bytes, bytes], ...]:
    """The headers a 401 carries for ``source`` (HTTP Basic's ``WWW-Authenticate``)."""
    return tuple(
        (name.encode("latin-1"), value.encode("latin-1"))
        for name, value in source.adapter.unauthorized_headers
    )


def query_map(scope: Scope) -> QueryMap:
    raw: bytes = scope.get("query_string", b"")
    if not raw:
        return {}
    try:
        return parse_qs(raw.decode("latin-1"), keep_blank_values=True, max_num_fields=32)
    except ValueError:
        raise PayloadError("malformed_payload", "too many query parameters") from None


def framed(status: int, body: bytes, headers: RawHeaders) -> RawHeaders:
    """An answer's headers with its content type and length (the type first)."""
    if status == NO_CONTENT:
        # A 204 carries neither a body nor its length (RFC 9110, 8.6).
        return [h for h in headers if h[0] != CONTENT_TYPE]
    if headers and headers[0][0] == CONTENT_TYPE:
        return [headers[0], (b"content-length", str(len(body)).encode()), *headers[1:]]
    return [JSON_TYPE, (b"content-length", str(len(body)).encode()), *headers]


def stored_answer(event_id: str, status: str) -> bytes:
    # Event ids are ULIDs (Crockford base32): nothing to escape.
    return b'{"event_id":"' + event_id.encode() + b'","status":"' + status.encode() + b'"}'


@dataclass(eq=False)
class Receiver:
    sources: Sources
    committer: GroupCommitter
    _: KW_ONLY
    body_timeout_s: float = 10.0
    clock: Callable[[], float] = time.time
    on_duplicate: OnDuplicate | None = None
    on_rejected: OnRejected | None = None
    # Secrets learned in handshakes (Asana's), for the sources whose provider learns one.
    learned: LearnedKeys | None = None
    # Keys senders publish at a URL (``Provider.key_fetch``): fetched, bounded, cached.
    key_fetcher: KeyFetcher = field(default_factory=KeyFetcher)
    deadlines: Deadlines = field(init=False, default_factory=Deadlines)
    _tally: metrics.AckTally = field(init=False, default_factory=metrics.AckTally)

    def __post_init__(self) -> None:
        # Every series of the receive-side families at 0 from the first scrape.
        metrics.initialise(s.name for s in self.sources)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        name = scope["path"][len(PREFIX) :]
        source = self.sources.get(name)
        method = scope["method"]
        challenged = source is not None and source.adapter.handshakes
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
        headers = framed(status, body, headers)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    # The stages of a delivery, shared by the ASGI path (``_receive``) and the direct
    # one (``ingest.direct``): each returns an ``Answer`` when the request ends there.

    def admit(
        self, source: Source, headers: HeaderMap, client: ClientOf, started: float
    ) -> Admitted | Answer:
        """Before the body: the declared length and the signature headers (timestamp)."""
        now = self.clock()
        declared = headers.get("content-length")
        if declared and declared[0].isdigit() and int(declared[0]) > source.config.max_body_bytes:
            self._refused(client, source, "body_too_large", 413, headers=headers)
            return error(413, "body_too_large", "", CLOSE)
        try:
            signed = source.adapter.check_headers(headers, now, source.config.tolerance_s)
        except SignatureError as exc:
            self._refused(client, source, exc.reason, 401, headers=headers)
            return error(401, exc.reason, "", CLOSE, *unauthorized(source))
        return Admitted(source, headers, signed, now, started)

    def event_of(self, admitted: Admitted, body: bytes, client: ClientOf) -> Received | Answer:
        """The whole body: verified on its bytes, read into the event to store."""
        source = admitted.source
        provider = source.adapter
        keys = (*source.keys, *admitted.fetched) if admitted.fetched else source.keys
        try:
            with tracing.span("hookd.verify"):
                verified = provider.verify(admitted.signed, body, keys)
        except SignatureError as exc:
            self._refused(client, source, exc.reason, 401, admitted=admitted, body=body)
            return error(401, exc.reason, "", *unauthorized(source))
        try:
            env = provider.envelope(admitted.headers, body, verified)
        except PayloadError as exc:
            self._refused(client, source, exc.reason, 400, exc.detail, admitted=admitted, body=body)
            return error(400, exc.reason, exc.detail)
        if env.reply is not None:
            admitted.visit = env.visit
            return reply_answer(env.reply)
        event = NewEvent(
            source=source.name,
            provider=source.provider,
            dedupe_key=env.dedupe_key,
            type=env.type,
            origin=EventOrigin.WEBHOOK,
            received_at=datetime.fromtimestamp(admitted.now, UTC),
            occurred_at=env.occurred_at,
            verified_with=verified.describe(),
            headers=env.headers,
            body=body,
            traceparent=tracing.traceparent(),  # None unless tracing is on
        )
        order = source.config.order
        if order is not None:  # the object it is about, and its version ([sources.order])
            event = order.stamp(event)
        try:  # alone, so that it never fails the batch it would join (store.values)
            event = storable(event)
        except Unstorable as exc:
            return self.unstorable(source, exc, client, admitted, body)
        return Received(event, env)

    def stored(self, admitted: Admitted, received: Received, stored: Stored) -> Answer:
        """The answer to a committed event (new or a duplicate), counted and logged."""
        source = admitted.source
        created = stored.created
        outcome = "accepted" if created else "duplicate"
        self._tally.record(source.name, outcome, time.perf_counter() - admitted.started)
        dedupe_key = received.envelope.dedupe_key
        if tracing.enabled():
            tracing.annotate(
                tracing.here(), {"hookd.event_id": stored.event_id, "hookd.outcome": outcome}
            )
        if created:
            log.info(
                "accepted",
                extra={
                    "event_id": stored.event_id,
                    "source": source.name,
                    "dedupe_key": dedupe_key,
                },
            )
        elif self.on_duplicate is not None and source.config.reconcile is not None:
            # A late delivery when a reconcile run stored it first; queued, not awaited.
            self.on_duplicate(source.name, dedupe_key)
        ack = received.envelope.ack
        if ack is not None:
            return reply_answer(ack)
        if created:
            return source.adapter.accepted_status, stored_answer(stored.event_id, outcome), []
        return 200, stored_answer(stored.event_id, outcome), []

    def unstorable(
        self,
        source: Source,
        exc: Unstorable,
        client: ClientOf,
        admitted: Admitted | None = None,
        body: bytes | None = None,
    ) -> Answer:
        """An authentic request with a value no row can hold: refused alone (400)."""
        self._refused(client, source, exc.reason, 400, exc.detail, admitted=admitted, body=body)
        return error(400, exc.reason, exc.detail)

    def unavailable(self, source: Source, exc: StoreUnavailable) -> Answer:
        """Not committed: not acknowledged, and the sender is told to come back."""
        self._reject(source.name, "unavailable")
        log.warning("store unavailable", extra={"source": source.name, "reason": exc.reason})
        return error(503, "unavailable", "", (b"retry-after", RETRY_AFTER_S.encode()))

    def disconnected(self, source: Source) -> None:
        """The client went away before its body was whole: nothing stored, nothing said."""
        self._reject(source.name, "client_disconnected")

    def _reject(self, source: str, reason: str) -> None:
        _received(source, "rejected").inc()
        _rejections(source, reason).inc()

    def _refused(
        self,
        client: ClientOf,
        source: Source,
        reason: str,
        status: int,
        detail: str = "",
        *,
        headers: HeaderMap | None = None,
        admitted: Admitted | None = None,
        body: bytes | None = None,
    ) -> None:
        """Count a refused delivery and log it: one "rejected" line per refusal; and
        hand it to be recorded (``on_rejected``), which only queues it."""
        self._reject(source.name, reason)
        where = peer(client())
        extra = {"source": source.name, "reason": reason, "peer": where}
        if detail:
            extra["detail"] = detail
        log.info("rejected", extra=extra)
        if self.on_rejected is not None:
            self.on_rejected(
                Refusal(
                    source,
                    reason,
                    status,
                    where,
                    admitted.now if admitted is not None else self.clock(),
                    headers=admitted.headers if admitted is not None else headers,
                    signed=admitted.signed if admitted is not None else None,
                    body=body,
                )
            )

    def refuse_body(
        self, source: Source, reason: str, client: ClientOf, admitted: Admitted | None = None
    ) -> Answer:
        """The body passed the source's limit (413) or its deadline (408)."""
        status = 413 if reason == "body_too_large" else 408
        self._refused(client, source, reason, status, admitted=admitted)
        return error(status, reason, "", CLOSE)

    async def fetch_keys(self, admitted: Admitted, body: bytes, client: ClientOf) -> Answer | None:
        """For a provider that publishes its keys (``Provider.key_fetch``): the keys of
        the URL this request names, fetched or cached, into ``admitted.fetched``; or the
        answer when the URL is refused (401/400, nothing fetched) or cannot be had now
        (503: the sender retries, as it would were the store away). Keys that lack the
        one the request names (``KeyFetch.missing``) are fetched again first, as the
        fetcher allows (``KeyFetcher.refresh``)."""
        source = admitted.source
        fetch = source.adapter.key_fetch
        if fetch is None:
            return None
        try:
            url = fetch.locate(admitted.signed, body, source.keys)
        except SignatureError as exc:
            self._refused(client, source, exc.reason, 401, exc.detail, admitted=admitted, body=body)
            return error(401, exc.reason)
        except PayloadError as exc:
            self._refused(client, source, exc.reason, 400, exc.detail, admitted=admitted, body=body)
            return error(400, exc.reason, exc.detail)
        try:
            with tracing.span("hookd.keys"):
                fetched = await self.key_fetcher.keys(url, fetch.parse, fetch.ttl_s)
                if fetch.missing is not None and fetch.missing(admitted.signed, body, fetched):
                    # Perhaps a rotation the kept keys predate: fetched again, at most
                    # once a minute per URL; a key still missing is verify's refusal.
                    fresh = await self.key_fetcher.refresh(url, fetch.parse, fetch.ttl_s)
                    log.info(
                        "sender key not in the kept keys",
                        extra={"source": source.name, "refetched": fresh is not None},
                    )
                    fetched = fetched if fresh is None else fresh
        except KeyUnavailable as exc:
            return self.keys_unavailable(source, exc.reason)
        admitted.fetched = fetched
        return None

    def keys_unavailable(self, source: Source, reason: str) -> Answer:
        """A key (or a handshake's URL) could not be fetched: not acknowledged."""
        self._reject(source.name, "unavailable")
        log.warning("sender keys unavailable", extra={"source": source.name, "reason": reason})
        return error(503, "unavailable", "", (b"retry-after", RETRY_AFTER_S.encode()))

    async def visited(self, admitted: Admitted, answer: Answer) -> Answer:
        """The provider's reply, once the URL it asked for (``Envelope.visit``) answered."""
        if admitted.visit is None:
            return answer
        try:
            await self.key_fetcher.get(admitted.visit)
        except KeyUnavailable as exc:
            return self.keys_unavailable(admitted.source, exc.reason)
        log.info("handshake confirmed", extra={"source": admitted.source.name})
        return answer

    def _challenge(self, scope: Scope, source: Source) -> Answer | None:
        """The answer to a registration challenge, or None for a delivery to verify."""
        provider = source.adapter

        def client() -> Client:
            return scope.get("client")

        try:
            query = query_map(scope)
            if provider.header_challenge is not None:
                headers = header_map(scope["headers"])
                reply = provider.header_challenge(scope["method"], query, headers, source.keys)
            else:
                assert provider.challenge is not None
                reply = provider.challenge(scope["method"], query, source.keys)
        except HandshakeRefused as exc:
            headers = header_map(scope["headers"])
            self._refused(client, source, exc.reason, 403, exc.detail, headers=headers)
            return error(403, exc.reason, exc.detail)
        except SignatureError as exc:
            self._refused(client, source, exc.reason, 401, headers=header_map(scope["headers"]))
            return error(401, exc.reason, "", *unauthorized(source))
        except PayloadError as exc:
            headers = header_map(scope["headers"])
            self._refused(client, source, exc.reason, 400, exc.detail, headers=headers)
            return error(400, exc.reason, exc.detail)
        if reply is not None:
            log.info("handshake answered", extra={"source": source.name})
            return reply_answer(reply)
        if scope["method"] != "POST":
            return error(405, "method_not_allowed", "", (b"allow", b"POST"))
        return None

    async def _learn(  # noqa: PLR0911 - one return per documented HTTP outcome
        self, scope: Scope, source: Source, learns: LearnsSecret
    ) -> Answer:
        """A handshake that hands a secret over: kept when a configured token opens it
        and that token opened none before (403 otherwise, nothing kept), then answered
        as the sender expects."""

        def client() -> Client:
            return scope.get("client")

        headers = header_map(scope["headers"])
        try:
            index = learns.opened_by(query_map(scope), source.keys)
            secret = one_header(headers, learns.header)
            learns.parse(secret)
        except HandshakeRefused as exc:
            self._refused(client, source, exc.reason, 403, exc.detail, headers=headers)
            return error(403, exc.reason, exc.detail)
        except SignatureError as exc:
            self._refused(client, source, exc.reason, 401, headers=headers)
            return error(401, exc.reason)
        except PayloadError as exc:
            self._refused(client, source, exc.reason, 400, exc.detail, headers=headers)
            return error(400, exc.reason, exc.detail)
        if self.learned is None:
            return error(503, "unavailable", "", (b"retry-after", RETRY_AFTER_S.encode()))
        try:
            kept = await self.learned.learn(source, index, secret)
        except LearnedUnavailable:
            self._reject(source.name, "unavailable")
            return error(503, "unavailable", "", (b"retry-after", RETRY_AFTER_S.encode()))
        if not kept:
            refused = HandshakeRefused(ALREADY_LEARNED)
            self._refused(client, source, refused.reason, 403, refused.detail, headers=headers)
            return error(403, refused.reason, refused.detail)
        log.info("handshake answered", extra={"source": source.name})
        return reply_answer(learns.answer(secret))

    async def _with_learned(self, scope: Scope, source: Source) -> Source | Answer:
        """``source`` with the secrets it learned as its keys, or a handshake's answer."""
        learns = source.adapter.learns_secret
        assert learns is not None
        if scope["method"] != "POST":
            return error(405, "method_not_allowed", "", (b"allow", b"POST"))
        if learns.header in header_map(scope["headers"]):
            return await self._learn(scope, source, learns)
        if self.learned is None:
            return error(503, "unavailable", "", (b"retry-after", RETRY_AFTER_S.encode()))
        try:
            keys = await self.learned.keys(source)
        except LearnedUnavailable:
            self._reject(source.name, "unavailable")
            return error(503, "unavailable", "", (b"retry-after", RETRY_AFTER_S.encode()))
        return dataclasses.replace(source, keys=keys)

    async def _before_body(self, scope: Scope, source: Source) -> Source | Answer:
        """The source with the keys it verifies with (learned ones swapped in), or the
        answer given before any body is read: a handshake's, or 405."""
        if source.adapter.learns_secret is not None:
            learned = await self._with_learned(scope, source)
            if not isinstance(learned, Source):
                return learned
            source = learned
        if source.adapter.challenge is not None or source.adapter.header_challenge is not None:
            answered = self._challenge(scope, source)
            if answered is not None:
                return answered
        elif scope["method"] != "POST":
            return error(405, "method_not_allowed", "", (b"allow", b"POST"))
        return source

    async def _receive(  # noqa: PLR0911 - one return per documented HTTP outcome
        self, scope: Scope, receive: Receive, source: Source, started: float
    ) -> Answer:
        ready = await self._before_body(scope, source)
        if not isinstance(ready, Source):
            return ready
        source = ready

        def client() -> Client:
            return scope.get("client")

        admitted = self.admit(source, header_map(scope["headers"]), client, started)
        if not isinstance(admitted, Admitted):
            return admitted
        try:
            body = await self.deadlines.read(
                receive, source.config.max_body_bytes, self.body_timeout_s
            )
        except BodyTooLarge:
            return self.refuse_body(source, "body_too_large", client, admitted)
        except TimeoutError:
            return self.refuse_body(source, "body_timeout", client, admitted)
        except ClientGone:
            self.disconnected(source)
            return 400, b"", []
        if source.adapter.key_fetch is not None:
            refused = await self.fetch_keys(admitted, body, client)
            if refused is not None:
                return refused
        received = self.event_of(admitted, body, client)
        if not isinstance(received, Received):
            return await self.visited(admitted, received)
        try:
            with tracing.span("hookd.commit"):  # the wait for the group commit
                stored = await self.committer.submit(received.event)
        except StoreUnavailable as exc:
            return self.unavailable(source, exc)
        except Unstorable as exc:
            return self.unstorable(source, exc, client, admitted, body)
        return self.stored(admitted, received, stored)


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
