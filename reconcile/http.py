"""Calls to provider APIs: timeouts, pacing, and waiting as the provider says.

Every call is counted. A 429 (or GitHub's 403 with ``X-RateLimit-Remaining:
0``) waits ``Retry-After`` or until ``X-RateLimit-Reset`` and tries again, up
to ``max_wait_s`` in one run; 5xx and transport errors retry a few times with
jittered backoff; 401/403 raise ``AuthFailure`` at once.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

from reconcile.errors import AuthFailure, RateLimited, ReconcileError

Sleep = Callable[[float], Awaitable[None]]
RETRIES = 4
TIMEOUT_S = 15.0


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
    ) -> None:
        self._client = client
        self._headers = headers
        self._min_interval_s = min_interval_s
        self._max_wait_s = max_wait_s
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        self._last_call = float("-inf")
        self._waited_s = 0.0
        self.calls = 0
        self.rate_limited = 0

    async def _pace(self) -> None:
        """Keep to a request budget (Slack: requests per minute) on our side."""
        gap = self._last_call + self._min_interval_s - time.monotonic()
        if gap > 0:
            await self._sleep(gap)
        self._last_call = time.monotonic()

    async def _wait(self, seconds: float) -> None:
        self.rate_limited += 1
        if self._waited_s + seconds > self._max_wait_s:
            raise RateLimited(seconds)
        self._waited_s += seconds
        await self._sleep(seconds)

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        failures = 0
        while True:
            await self._pace()
            self.calls += 1
            try:
                response = await self._client.request(
                    method, url, headers=dict(self._headers()), timeout=TIMEOUT_S, **kwargs
                )
            except httpx.TransportError as exc:
                failures += 1
                if failures > RETRIES:
                    raise ReconcileError("provider_unreachable", type(exc).__name__) from None
                await self._sleep(self._rng.uniform(0, min(30.0, 0.5 * 2**failures)))
                continue
            wait = rate_limit_wait(response)
            if wait is not None:
                await self._wait(wait)
                continue
            if response.status_code in (401, 403):
                raise AuthFailure("auth_failed", f"HTTP {response.status_code}")
            if response.status_code >= 500:
                failures += 1
                if failures > RETRIES:
                    raise ReconcileError("provider_error", f"HTTP {response.status_code}")
                await self._sleep(self._rng.uniform(0, min(30.0, 0.5 * 2**failures)))
                continue
            if response.status_code >= 400:
                raise ReconcileError("provider_refused", f"HTTP {response.status_code}")
            return response


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
