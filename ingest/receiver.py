"""``POST /hooks/{source}``: verify on the raw bytes, store once, then answer.

Order matters: cheap checks first (source, declared length, signature headers
and timestamp) so that bad requests are refused before their body is read; the
body is read under a size limit and a deadline; the signature is checked on the
exact bytes; only an event committed to the database gets a 2xx.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from ingest import metrics
from ingest.batcher import GroupCommitter, StoreUnavailable
from ingest.config import Source, Sources
from ingest.errors import PayloadError, SignatureError
from ingest.providers import PROVIDERS
from ingest.providers.base import HeaderMap
from store.events import NewEvent

log = logging.getLogger("hookd.receiver")

RETRY_AFTER_S = "5"


class BodyTooLarge(Exception):
    pass


def header_map(request: Request) -> HeaderMap:
    headers: dict[str, list[str]] = {}
    for name, value in request.scope["headers"]:
        headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return headers


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing as soon as it passes ``limit`` (declared or actual)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def error(status: int, code: str, detail: str = "", **headers: str) -> JSONResponse:
    content = {"error": code}
    if detail:
        content["detail"] = detail
    return JSONResponse(content, status_code=status, headers=headers or None)


class Receiver:
    def __init__(
        self,
        sources: Sources,
        committer: GroupCommitter,
        *,
        body_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sources = sources
        self._committer = committer
        self._body_timeout_s = body_timeout_s
        self._clock = clock

    async def handle(self, request: Request) -> Response:
        started = time.perf_counter()
        name = request.path_params["source"]
        source = self._sources.get(name)
        if source is None:
            self._reject(metrics.UNKNOWN_SOURCE, "unknown_source")
            return error(404, "unknown_source")
        return await self._receive(request, source, started)

    def _reject(self, source: str, reason: str) -> None:
        metrics.WEBHOOKS_RECEIVED.labels(source, "rejected").inc()
        metrics.WEBHOOK_REJECTIONS.labels(source, reason).inc()

    async def _receive(  # noqa: PLR0911 - one return per documented HTTP outcome
        self, request: Request, source: Source, started: float
    ) -> Response:
        name = source.name
        provider = PROVIDERS[source.provider]
        limit = source.config.max_body_bytes
        now = self._clock()
        received_at = datetime.fromtimestamp(now, UTC)
        headers = header_map(request)
        try:
            signed = provider.check_headers(headers, int(now), source.config.tolerance_s)
        except SignatureError as exc:
            self._reject(name, exc.reason)
            log.info("rejected", extra={"source": name, "reason": exc.reason})
            return error(401, exc.reason, Connection="close")
        try:
            async with asyncio.timeout(self._body_timeout_s):
                body = await read_body(request, limit)
        except BodyTooLarge:
            self._reject(name, "body_too_large")
            return error(413, "body_too_large", Connection="close")
        except TimeoutError:
            self._reject(name, "body_timeout")
            return error(408, "body_timeout", Connection="close")
        except ClientDisconnect:
            self._reject(name, "client_disconnected")
            return Response(status_code=400)
        try:
            verified = provider.verify(signed, body, source.keys)
        except SignatureError as exc:
            self._reject(name, exc.reason)
            log.info("rejected", extra={"source": name, "reason": exc.reason})
            return error(401, exc.reason)
        try:
            env = provider.envelope(headers, body, verified)
        except PayloadError as exc:
            self._reject(name, exc.reason)
            log.info("rejected", extra={"source": name, "reason": exc.reason, "detail": exc.detail})
            return error(400, exc.reason, exc.detail)
        if env.reply is not None:
            return JSONResponse(env.reply)
        event = NewEvent(
            source=name,
            provider=source.provider,
            dedupe_key=env.dedupe_key,
            type=env.type,
            origin="webhook",
            received_at=received_at,
            occurred_at=env.occurred_at,
            verified_with=verified.describe(),
            headers=env.headers,
            body=body,
        )
        try:
            stored = await self._committer.submit(event)
        except StoreUnavailable as exc:
            self._reject(name, "unavailable")
            log.warning("store unavailable", extra={"source": name, "reason": exc.reason})
            return error(503, "unavailable", **{"Retry-After": RETRY_AFTER_S})
        outcome = "accepted" if stored.created else "duplicate"
        metrics.WEBHOOKS_RECEIVED.labels(name, outcome).inc()
        metrics.ACK_SECONDS.labels(name).observe(time.perf_counter() - started)
        if stored.created:
            log.info(
                "accepted",
                extra={"event_id": stored.event_id, "source": name, "dedupe_key": env.dedupe_key},
            )
            return JSONResponse(
                {"event_id": stored.event_id, "status": "accepted"}, status_code=202
            )
        return JSONResponse({"event_id": stored.event_id, "status": "duplicate"}, status_code=200)
