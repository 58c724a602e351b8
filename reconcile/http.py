"""Calls to provider APIs: timeouts, pacing, and waiting as the provider says.

Every call is counted. A 429 (or GitHub's 403 with ``X-RateLimit-Remaining:
0``) waits ``Retry-After`` or until ``X-RateLimit-Reset`` and tries again, up
to ``max_wait_s`` in one run; 5xx retry a few times with jittered backoff;
401/403 raise ``AuthFailure`` at once. A request that never reached the API
(connection refused, DNS, a timeout) retries on a short backoff of its own,
not the request budget's pacing: the budget counts answered requests, and an
API that is down should fail a run in seconds, not in minutes of pacing.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import httpx

from hookd.backoff import full_jitter
from hookd.errors import AuthFailure, RateLimited, ReconcileError

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
    ) -> None:
        self._client = client
        self._headers = headers
        self._min_interval_s = min_interval_s
        self._max_wait_s = max_wait_s
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        self._source = source
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

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        failures = 0
        unreachable = 0
        timeout = httpx.Timeout(TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        while True:
            await self._pace()
            self.calls += 1
            sent = time.monotonic()
            try:
                response = await self._client.request(
                    method, url, headers=dict(self._headers()), timeout=timeout, **kwargs
                )
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
            return response


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
