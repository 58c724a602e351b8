"""Calls to provider APIs: timeouts, pacing, and waiting as the provider says.

Every call is counted. A 429 (or GitHub's 403 with ``X-RateLimit-Remaining:
0``) waits ``Retry-After`` or until ``X-RateLimit-Reset`` and tries again, up
to ``max_wait_s`` in one run; 5xx retry a few times with jittered backoff;
401/403 raise ``AuthFailure`` at once. A request that never reached the API
(connection refused, DNS, a timeout) retries on a short backoff of its own,
not the request budget's pacing: the budget counts answered requests, and an
API that is down should fail a run in seconds, not in minutes of pacing.

Two bounds hold for every call, whichever adapter makes it. A request goes only to
the API's origin (the scheme, host and port of the source's ``api_url``): a URL an
answer hands over (GitHub's ``Link: <…>; rel="next"``) that points elsewhere fails
the run before anything, the token least of all, is sent there; redirects are never
followed. And an answer is read as it streams, up to ``max_answer_bytes`` (decoded):
past it the run fails and the rest is never read, so a huge or endless page cannot
take the process's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import ssl
import time
import zlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping
from typing import TypedDict, Unpack

import httpx

from hookd.backoff import full_jitter
from hookd.errors import AuthFailure, RateLimited, ReconcileError
from hookd.sources import SourceConfig, api_url

log = logging.getLogger("hookd.reconcile")

Sleep = Callable[[float], Awaitable[None]]
RETRIES = 4
TIMEOUT_S = 15.0
CONNECT_TIMEOUT_S = 5.0
# Retries of requests that got no answer: each waits between half and all of
# its ceiling, so an unreachable API fails a run within about 3.5 s of backoff
# (plus the connect timeouts when the host does not answer at all).
TRANSPORT_BACKOFF_S = (0.5, 1.0, 2.0)
# Waits at least this long are logged, so a paced run does not look hung.
LOG_WAIT_S = 5.0
# The most one answer may hold, decoded: read as it streams, refused past it. The
# adapters' pages (100 GitHub deliveries or Stripe events, 20 GitLab hook events with
# their payloads) are a few MiB at most.
MAX_ANSWER_BYTES = 16 * 1024 * 1024
DEFAULT_PORTS = {"http": 80, "https": 443}


class Carried(TypedDict, total=False):
    """What a request carries besides its method and URL: a query, a form, a JSON body."""

    params: Mapping[str, str | int | float]
    data: Mapping[str, str | int | float]
    json: object


class Api:
    def __init__(
        self,
        client: httpx.AsyncClient,
        headers: Callable[[], Mapping[str, str]],
        *,
        min_interval_s: float = 0.0,
        max_wait_s: float = 300.0,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        source: str = "",
        origin: str | None = None,
        max_answer_bytes: int | None = None,
    ) -> None:
        """``origin``: the API's URL (the source's ``api_url``; only its scheme, host and
        port count), the one origin requests may go to; without it, the first request's
        origin is kept. ``max_answer_bytes``: the cap on one answer, ``MAX_ANSWER_BYTES``
        when not given."""
        self._client = client
        self._headers = headers
        self._min_interval_s = min_interval_s
        self._max_wait_s = max_wait_s
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        self._source = source
        self._origin: tuple[str, bytes, int] | None = None
        if origin is not None:
            with contextlib.suppress(ValueError):
                self._origin = url_origin(origin)
        self._max_answer_bytes = MAX_ANSWER_BYTES if max_answer_bytes is None else max_answer_bytes
        self._last_call = float("-inf")
        self._waited_s = 0.0
        self.calls = 0
        self.rate_limited = 0

    async def _pace(self) -> None:
        """Keep to a request budget (Slack: requests per minute) on our side."""
        gap = self._last_call + self._min_interval_s - time.monotonic()
        if gap > 0:
            if gap >= LOG_WAIT_S:
                log.info(
                    "pacing provider requests",
                    extra={"source": self._source, "wait_s": round(gap, 1)},
                )
            await self._sleep(gap)

    async def _wait(self, seconds: float) -> None:
        self.rate_limited += 1
        if self._waited_s + seconds > self._max_wait_s:
            raise RateLimited(seconds)
        self._waited_s += seconds
        if seconds >= LOG_WAIT_S:
            log.info(
                "rate limited by the provider, waiting",
                extra={"source": self._source, "wait_s": round(seconds, 1)},
            )
        await self._sleep(seconds)

    def _check_origin(self, method: str, url: str) -> None:
        """Refuse, before anything is sent, a URL off the API's origin."""
        try:
            origin = url_origin(url)
        except ValueError:
            origin = None
        if self._origin is None and origin is not None:
            self._origin = origin
        if origin is None or origin != self._origin:
            raise ReconcileError(
                "foreign_url",
                f"refused {method} {shown(url)}: not on the API's origin "
                f"{shown_origin(self._origin)} (the source's api_url); a URL from the "
                "provider's answer must stay there",
            )

    async def _exchange(self, method: str, url: str, **carried: Unpack[Carried]) -> httpx.Response:
        """One request; the body read (within the cap) only of a 2xx answer, the one
        answer whose body is used."""
        async with self._client.stream(
            method,
            url,
            headers={"Accept-Encoding": "gzip", **self._headers()},
            timeout=httpx.Timeout(TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            follow_redirects=False,
            **carried,
        ) as streamed:
            body = b""
            if 200 <= streamed.status_code < 300:
                body = await read_capped(streamed, self._max_answer_bytes, method, url)
            return answered(streamed, body)

    async def request(self, method: str, url: str, **carried: Unpack[Carried]) -> httpx.Response:
        self._check_origin(method, url)
        failures = 0
        unreachable = 0
        while True:
            await self._pace()
            self.calls += 1
            sent = time.monotonic()
            try:
                response = await self._exchange(method, url, **carried)
            except httpx.TransportError as exc:
                kind = failure_kind(exc)
                where = f"{method} {public_url(url)}"
                if unreachable >= len(TRANSPORT_BACKOFF_S):
                    raise ReconcileError(
                        "provider_unreachable",
                        f"{kind}: {where} (gave up after {unreachable + 1} attempts)",
                    ) from None
                ceiling = TRANSPORT_BACKOFF_S[unreachable]
                unreachable += 1
                delay = self._rng.uniform(ceiling / 2, ceiling)
                log.warning(
                    "provider unreachable, retrying",
                    extra={
                        "source": self._source,
                        "url": where,
                        "error": kind,
                        "retry_in_s": round(delay, 2),
                    },
                )
                await self._sleep(delay)
                continue
            # Only a request the API answered counts against its request budget.
            self._last_call = sent
            wait = rate_limit_wait(response)
            if wait is not None:
                await self._wait(wait)
                continue
            if response.status_code in (401, 403):
                raise AuthFailure("auth_failed", f"HTTP {response.status_code}")
            if response.status_code >= 500:
                failures += 1
                if failures > RETRIES:
                    raise ReconcileError(
                        "provider_error",
                        f"HTTP {response.status_code} from {method} {public_url(url)}",
                    )
                await self._sleep(full_jitter(self._rng, 0.5, failures, 30.0))
                continue
            if response.status_code >= 400:
                raise ReconcileError(
                    "provider_refused",
                    f"HTTP {response.status_code} from {method} {public_url(url)}",
                )
            if response.status_code >= 300:
                location = response.headers.get("location", "")
                raise ReconcileError(
                    "provider_redirect",
                    f"HTTP {response.status_code} from {method} {public_url(url)} to "
                    f"{shown(location)}: redirects are not followed; set the source's "
                    "api_url to where the API answers",
                )
            return response


def url_origin(url: str | httpx.URL) -> tuple[str, bytes, int] | None:
    """Scheme, host and port (the scheme's default when not written) of an absolute
    URL; None for a relative one. ``ValueError`` when it is not a URL."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ValueError(str(exc)) from None
    if not parsed.scheme or not parsed.raw_host:
        return None
    port = parsed.port if parsed.port is not None else DEFAULT_PORTS.get(parsed.scheme, 0)
    return parsed.scheme, parsed.raw_host, port


def shown_origin(origin: tuple[str, bytes, int] | None) -> str:
    if origin is None:
        return "(none)"
    scheme, host, port = origin
    return f"{scheme}://{host.decode('ascii', 'replace')}:{port}"


def shown(url: str | httpx.URL) -> str:
    """``public_url``, or what can be said of a URL that is relative or not one (never
    its query)."""
    try:
        if url_origin(url) is not None:
            return public_url(url)
        return f"{httpx.URL(url).path[:100]!r} (a relative URL)"
    except ValueError:
        return "(not a URL)"


def answer_limit(config: SourceConfig) -> int:
    """The cap on one answer of the source's API: its ``[sources.reconcile]
    max_answer_bytes``, else ``MAX_ANSWER_BYTES``."""
    reconcile = config.reconcile
    configured = None if reconcile is None else reconcile.max_answer_bytes
    return MAX_ANSWER_BYTES if configured is None else configured


def api_origin(config: SourceConfig) -> str | None:
    """The source's ``api_url``, the origin its API requests are kept to."""
    return api_url(config) or None


async def read_capped(streamed: httpx.Response, limit: int, method: str, url: str) -> bytes:
    """The (decoded) body of a streamed answer; ``ReconcileError`` as soon as it is
    over ``limit`` bytes (the rest unread: the connection is closed, not drained)."""
    declared = streamed.headers.get("content-length", "").strip()
    encoding = streamed.headers.get("content-encoding", "").strip().lower()
    identity = encoding in ("", "identity")
    too_big = identity and declared.isdigit() and int(declared) > limit
    body = bytearray()
    if not too_big:
        async with contextlib.aclosing(decoded(streamed, encoding, limit + 1)) as chunks:
            async for chunk in chunks:
                if len(body) + len(chunk) > limit:
                    too_big = True
                    break
                body += chunk
    if too_big:
        raise ReconcileError(
            "answer_too_large",
            f"answer from {method} {public_url(url)} over {limit} bytes; raise "
            "[sources.reconcile] max_answer_bytes if the API's pages are that large",
        )
    return bytes(body)


async def decoded(
    streamed: httpx.Response, encoding: str, most: int
) -> AsyncGenerator[bytes, None]:
    """The body's bytes as they arrive, decoded; gzip (the one encoding asked for) never
    more than ``most`` bytes in all, however little of it holds them (a 64 KiB chunk can
    inflate to 64 MiB). Any other encoding is left to httpx's decoders."""
    if encoding not in ("gzip", "x-gzip"):
        async for chunk in streamed.aiter_bytes():
            yield chunk
        return
    inflate = zlib.decompressobj(zlib.MAX_WBITS | 16)
    given = 0
    try:
        async for raw in streamed.aiter_raw():
            data = raw
            while data and given < most:
                chunk = inflate.decompress(data, most - given)
                given += len(chunk)
                yield chunk
                data = inflate.unconsumed_tail
        if given < most:
            yield inflate.flush()
    except zlib.error as exc:
        raise httpx.DecodingError(f"gzip: {exc}", request=streamed.request) from exc


def answered(streamed: httpx.Response, body: bytes) -> httpx.Response:
    """A complete response of what was read: status, headers and body, so callers keep
    ``.json()`` and ``.headers``. The body is decoded already: its encoding and length
    are dropped from the headers (the length is set again, the decoded one)."""
    dropped = ("content-encoding", "content-length")
    headers = [(k, v) for k, v in streamed.headers.multi_items() if k not in dropped]
    return httpx.Response(
        streamed.status_code,
        headers=headers,
        content=body,
        request=streamed.request,
        extensions={k: v for k, v in streamed.extensions.items() if k != "network_stream"},
    )


def public_url(url: str | httpx.URL) -> str:
    """Scheme, host, port and path: never the query (cursors, and tokens some APIs
    take there) nor any user:password."""
    parsed = httpx.URL(url)
    port = f":{parsed.port}" if parsed.port is not None else ""
    return f"{parsed.scheme}://{parsed.host}{port}{parsed.path}"


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception, what caused it, and the members of exception groups among them."""
    stack, seen = [exc], set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)


CAUSES: tuple[tuple[type[BaseException], str], ...] = (
    (ConnectionRefusedError, "connection refused"),
    (socket.gaierror, "DNS lookup failed"),
    (ssl.SSLError, "TLS handshake failed"),
    (ConnectionResetError, "connection reset"),
)


def failure_kind(exc: httpx.TransportError) -> str:
    """What went wrong in words an operator acts on; httpx's class name otherwise."""
    if isinstance(exc, httpx.ConnectTimeout):
        return f"connect timed out after {CONNECT_TIMEOUT_S:g}s"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {TIMEOUT_S:g}s ({type(exc).__name__})"
    for cause in _causes(exc):
        for kind, words in CAUSES:
            if isinstance(cause, kind):
                return words
    return type(exc).__name__


def rate_limit_wait(response: httpx.Response, now: float | None = None) -> float | None:
    """Seconds the provider asks us to wait, or None when this is no rate limit."""
    status = response.status_code
    remaining = response.headers.get("x-ratelimit-remaining")
    limited = status == 429 or (status == 403 and remaining == "0")
    if not limited:
        return None
    retry_after = response.headers.get("retry-after", "")
    if retry_after.strip().isdigit():
        return max(1.0, float(retry_after))
    reset = response.headers.get("x-ratelimit-reset", "")
    if reset.strip().isdigit():
        return max(1.0, float(reset) - (time.time() if now is None else now))
    return 60.0
